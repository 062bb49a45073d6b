#include "torchleak/causes.h"

#include "torchleak/display_text.h"
#include "torchleak/retention.h"
#include "torchleak/scoring.h"

#include <algorithm>
#include <map>

namespace torchleak {

std::string causeKey(const Finding& f) {
    if (f.retention == Retention::Cycle && !f.path.empty()) {
        return "cycle:" + f.path.front().label; // one cycle, by its entry: <cycle: Attention>
    }
    if (f.holder) {
        return "holder:" + f.holder->path_text;
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

std::vector<Cause> groupCauses(Report& report, const AnalysisConfig& config) {
    std::map<std::string, size_t> byKey;
    std::vector<Cause> causes;
    for (size_t i = 0; i < report.findings.size(); ++i) {
        const Finding& f = report.findings[i];
        if (f.verdict != Verdict::Leak) {
            continue;
        }
        std::string key = causeKey(f);
        auto [it, fresh] = byKey.emplace(key, causes.size());
        if (fresh) {
            Cause c;
            c.verdict = f.verdict;
            c.keeper = key.substr(key.find(':') + 1);
            if (key.rfind("site:", 0) == 0) {
                c.keeper = siteText(f.site);
            }
            c.holder = f.holder;
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

std::string keeperContainer(const Cause& c, const Report& report) {
    if (c.findings.empty()) {
        return "";
    }
    const std::vector<PathStep>& path =
        report.findings[static_cast<size_t>(c.findings.front())].path;
    // The keeper is a prefix of its biggest finding's path; its container is one step shorter.
    for (size_t k = 2; k <= path.size(); ++k) {
        if (pathText(path, k) == c.keeper) {
            return pathText(path, k - 1);
        }
    }
    return "";
}

std::vector<CauseGroup> groupRelatedCauses(const Report& report) {
    std::map<std::string, std::vector<int>> byKey;
    std::vector<std::string> keyOf(report.causes.size());
    for (size_t i = 0; i < report.causes.size(); ++i) {
        const Cause& c = report.causes[i];
        std::string container = keeperContainer(c, report);
        // (Keys built with +=: GCC 12 warns of an overlap in `"in:" + s` that cannot happen.)
        if (!container.empty()) {
            keyOf[i] = "in:";
            keyOf[i] += container;
        } else if (!c.findings.empty() && c.holder) {
            keyOf[i] = "site:";
            keyOf[i] += siteText(report.findings[static_cast<size_t>(c.findings.front())].site);
        }
        if (!keyOf[i].empty()) {
            byKey[keyOf[i]].push_back(static_cast<int>(i));
        }
    }
    std::vector<CauseGroup> groups;
    std::map<std::string, size_t> groupOf;
    for (size_t i = 0; i < report.causes.size(); ++i) {
        const Cause& c = report.causes[i];
        auto members = byKey.find(keyOf[i]);
        const bool together = members != byKey.end() && members->second.size() >= kCauseGroupMin;
        std::string alone = "#";
        alone += std::to_string(i);
        auto [it, fresh] = groupOf.emplace(together ? keyOf[i] : alone, groups.size());
        if (fresh) {
            CauseGroup g;
            g.severity = c.severity;
            if (together && keyOf[i].rfind("in:", 0) == 0) {
                g.container = keyOf[i].substr(3);
            }
            groups.push_back(std::move(g));
        }
        CauseGroup& g = groups[it->second];
        g.causes.push_back(static_cast<int>(i)); // causes are biggest first: so are members
        g.bytes_per_iteration += std::max<int64_t>(c.bytes_per_iteration, 0);
        g.total_bytes += c.total_bytes;
        g.severity = std::min(g.severity, c.severity); // Critical is the smallest
    }
    std::stable_sort(groups.begin(), groups.end(), [](const CauseGroup& a, const CauseGroup& b) {
        if (a.bytes_per_iteration != b.bytes_per_iteration) {
            return a.bytes_per_iteration > b.bytes_per_iteration;
        }
        return a.total_bytes > b.total_bytes;
    });
    return groups;
}

} // namespace torchleak
