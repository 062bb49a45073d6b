#include "torchleak/causes.h"

#include "torchleak/display_text.h"
#include "torchleak/retention.h"
#include "torchleak/scoring.h"
#include "torchleak/suggestion.h"

#include <algorithm>
#include <map>
#include <set>

namespace torchleak {

std::string causeKey(const Finding& f) {
    // One exception, one fix (sys.last_exc = None ...), whichever of its frames' locals holds
    // each site: %leakreport listed one exception as two leaks, each with that fix.
    if (!f.path.empty() && isLastExceptionRoot(f.path.front().label)) {
        return "object:<last exception>";
    }
    if (f.retention == Retention::Cycle && !f.path.empty()) {
        return "cycle:" + f.path.front().label; // one cycle, by its entry: <cycle: Attention>
    }
    if (f.holder) {
        return "holder:" + f.holder->path_text;
    }
    if (f.retention == Retention::CppOnly && !f.path.empty() && !f.path.front().graph.empty()) {
        return "graph:" + f.path.front().graph; // several tensors of one graph C++ keeps
    }
    // One owner in torch's C++: its constants and what it allocated while running are one leak.
    switch (torchOwnerOf(f)) {
    case TorchOwner::TorchScriptUnit:
        return std::string("object:") + kTorchScriptUnitRoot;
    case TorchOwner::CompileCaches:
    case TorchOwner::AutocastCache:
    case TorchOwner::HookOnGraph:
        return "object:" + f.path.front().label; // the cache, or the hook, is the one keeper
    case TorchOwner::Checkpoint:
    case TorchOwner::SavedTensorsHooks:
    case TorchOwner::None:
        break;
    }
    auto graph = std::find_if(f.path.begin(), f.path.end(),
                              [](const PathStep& s) { return isAutogradStep(s.kind); });
    if (graph != f.path.end() && graph != f.path.begin()) {
        // The tensor whose .grad_fn keeps the graph: every allocation of that graph is one
        // leak (an RNN state that is never detached).
        return "graph:" + pathText(f.path, static_cast<size_t>(graph - f.path.begin()));
    }
    if (f.path.size() >= 2) {
        return "object:" + pathText(f.path, f.path.size() - 1);
    }
    return "site:" + siteText(f.site) + "\x1f" + f.device;
}

namespace {
// The dict entry a holder's newest sampled path goes into (`['task7']`), with the line that
// allocated it and its device: findings of one line whose holders differ but gain the same new
// entry are one call filling several containers. Empty without a holder.
std::string newEntryKey(const Finding& f) {
    const auto end = holderEnd(f);
    if (!end || f.retention != Retention::Reachable) {
        return "";
    }
    const PathStep& entry = f.path[*end + 1];
    // A dict's key: lists that one line appends to in turn gain the same index without being
    // one container's entries (cause groups show them together).
    if (entry.kind != StepKind::Key) {
        return "";
    }
    std::string key = siteText(f.site);
    key += '\x1f';
    key += f.device;
    key += '\x1f';
    key += entry.label;
    return key;
}
} // namespace

std::vector<Cause> groupCauses(Report& report, const AnalysisConfig& config) {
    // Entries under one new key in several containers: which holders gain each.
    std::vector<std::string> entryOf(report.findings.size());
    std::map<std::string, std::set<std::string>> holdersOfEntry;
    for (size_t i = 0; i < report.findings.size(); ++i) {
        const Finding& f = report.findings[i];
        if (f.verdict == Verdict::Leak) {
            entryOf[i] = newEntryKey(f);
            if (!entryOf[i].empty()) {
                holdersOfEntry[entryOf[i]].insert(f.holder->path_text);
            }
        }
    }
    std::map<std::string, size_t> byKey;
    std::vector<Cause> causes;
    for (size_t i = 0; i < report.findings.size(); ++i) {
        const Finding& f = report.findings[i];
        if (f.verdict != Verdict::Leak) {
            continue;
        }
        std::string key = causeKey(f);
        const std::string& entry = entryOf[i];
        const bool shared = !entry.empty() && holdersOfEntry[entry].size() >= 2;
        if (shared) {
            key = "entry:" + entry;
        }
        auto [it, fresh] = byKey.emplace(key, causes.size());
        if (fresh) {
            Cause c;
            c.verdict = f.verdict;
            c.keeper = key.substr(key.find(':') + 1);
            if (key.rfind("site:", 0) == 0) {
                c.keeper = siteText(f.site);
            }
            c.holder = f.holder;
            if (shared) {
                c.new_key = entry.substr(entry.rfind('\x1f') + 1);
            }
            causes.push_back(std::move(c));
        }
        Cause& c = causes[it->second];
        c.findings.push_back(static_cast<int>(i));
        c.bytes_per_iteration += std::max<int64_t>(f.bytes_per_iteration, 0);
        c.total_bytes += f.total_bytes;
    }
    for (Cause& c : causes) {
        std::stable_sort(c.findings.begin(), c.findings.end(), [&](int a, int b) {
            return report.findings[a].total_bytes > report.findings[b].total_bytes;
        });
        if (!c.new_key.empty()) {
            // One fix for every container: each finding's own (`.clear()` one of them) frees
            // only its share.
            const Finding& biggest = report.findings[c.findings.front()];
            c.keeper = biggest.holder->path_text;
            c.holder = biggest.holder;
            for (int i : c.findings) {
                c.holders.push_back(report.findings[i].holder->path_text);
            }
            const std::string fix = suggestForSharedNewKey(c.holders, c.new_key);
            for (int i : c.findings) {
                report.findings[i].suggestion = fix;
                report.findings[i].fix_rule = "shared-new-key";
                report.findings[i].fix_code.clear();
            }
        }
        // The biggest site's fix: its path is the one every view shows for the cause.
        c.suggestion = report.findings[c.findings.front()].suggestion;
        c.projected_oom_iteration = projectedOomIteration(c, report);
        c.severity = severityOfCause(c, report, config);
        for (int i : c.findings) {
            report.findings[i].severity = c.severity;
        }
    }
    std::stable_sort(causes.begin(), causes.end(), [](const Cause& a, const Cause& b) {
        if (a.bytes_per_iteration != b.bytes_per_iteration) {
            return a.bytes_per_iteration > b.bytes_per_iteration;
        }
        return a.total_bytes > b.total_bytes;
    });
    return causes;
}

} // namespace torchleak
