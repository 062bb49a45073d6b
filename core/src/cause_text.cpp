// The sentences about causes (display_text.h): the report's headline, what a cause's keeper
// does, a cause group's line. Beside display_text.cpp, which words findings, frames and bytes.

#include "torchleak/display_text.h"

#include "torchleak/retention.h"
#include "torchleak/verdict.h"

#include <algorithm>
#include <limits>
#include <set>
#include <string>

namespace torchleak {

std::string headline(const Report& report) {
    size_t leakFindings = 0;
    std::set<std::string> leakSites; // one line's entries in several containers: one site
    for (const Finding& f : report.findings) {
        if (f.verdict == Verdict::Leak) {
            ++leakFindings;
            leakSites.insert(siteText(f.site) + '\x1f' + f.device);
        }
    }
    std::string others =
        std::to_string(report.findings.size() - leakFindings) + " other finding(s)";
    // Reports built before causes existed (or loaded from such a file) count findings.
    if (report.causes.empty() || report.causes.size() == leakFindings) {
        return std::to_string(leakFindings) + " leak(s), " + others;
    }
    return std::to_string(report.causes.size()) +
           (report.causes.size() == 1 ? " leak (" : " leaks (") + std::to_string(leakSites.size()) +
           (leakSites.size() == 1 ? " allocation site), " : " allocation sites), ") + others;
}

namespace {
// What the cause's keeper does, from the path of its biggest site.
std::string mechanism(const Cause& c, const Finding& f) {
    const std::string root = f.path.empty() ? "" : f.path.front().label;
    // A holder's path in a sentence is its short form (a 26-level chain made a 2,581-character
    // cause); the whole path is the finding's own.
    const std::string keeper = c.holder ? shortPath(c.keeper) : c.keeper;
    if (f.retention == Retention::Cycle) {
        std::string entry = c.keeper; // "<cycle: Attention>"
        if (entry.rfind("<cycle: ", 0) == 0 && entry.back() == '>') {
            entry = entry.substr(8, entry.size() - 9);
        }
        return "a reference cycle of " + entry + " objects that only gc.collect() frees";
    }
    if (f.retention == Retention::CppOnly) {
        switch (torchOwnerOf(f)) {
        case TorchOwner::HookOnGraph:
            return "the hook " + keeper +
                   " keeps tensors whose autograd graph keeps it: a cycle through C++";
        case TorchOwner::AutocastCache:
        case TorchOwner::CompileCaches:
        case TorchOwner::TorchScriptUnit:
            return keeper + " keeps it in C++";
        default:
            return keeper + " is held only from C++";
        }
    }
    if (!f.path.empty() && isOutputCacheRoot(f.path.front())) {
        return "the notebook's output cache (" + root + ") keeps results";
    }
    if (isLastExceptionRoot(root)) {
        return "the last exception keeps the failed frame's locals";
    }
    if (stepStarting(f.path, ".__traceback__")) {
        return keeper + " keeps exceptions with their tracebacks' frames";
    }
    if (stepStarting(f.path, ".gi_frame") || stepStarting(f.path, ".cr_frame") ||
        stepStarting(f.path, ".ag_frame")) {
        return keeper + " keeps suspended generators with their frames";
    }
    if (c.holders.size() >= 2) {
        return "one line adds an entry under a new key to " + std::to_string(c.holders.size()) +
               " containers every iteration (" + shortPath(c.holders.front()) + " and " +
               std::to_string(c.holders.size() - 1) + " more)";
    }
    if (c.holder && c.holder->hooks) {
        return "hooks accumulate in " + keeper + ", one more every iteration";
    }
    if (keepsAutogradGraph(f.path)) {
        return keeper + (c.holder ? " keeps every iteration's autograd graph"
                                  : " keeps the autograd graph of every iteration");
    }
    if (c.holder) {
        // A staircase (a copy kept at each evaluation) grows at its steps, not every iteration.
        const auto& since = f.growth_since;
        if (since && since->step_every && *since->step_every >= 2) {
            return keeper + " grows every " + std::to_string(*since->step_every) + " iterations";
        }
        return keeper + " grows every iteration";
    }
    if (f.path.empty()) {
        return "tensors allocated at " + keeper + " stay alive";
    }
    return keeper + " keeps tensors alive";
}
} // namespace

std::string causeText(const Cause& c, const Report& report) {
    if (c.findings.empty()) {
        return c.keeper;
    }
    const Finding& biggest = report.findings[static_cast<size_t>(c.findings.front())];
    std::string text = c.bytes_per_iteration > 0
                           ? formatBytes(static_cast<double>(c.bytes_per_iteration)) + " per " +
                                 iterationNoun(report.boundary) + ": "
                           : formatBytes(static_cast<double>(c.total_bytes)) + " held: ";
    const std::string how = mechanism(c, biggest);
    text += how;
    std::set<std::string> sites;
    for (int i : c.findings) {
        sites.insert(siteText(report.findings[static_cast<size_t>(i)].site));
    }
    if (sites.size() > 1) {
        return text + ", across " + std::to_string(sites.size()) + " allocation sites";
    }
    // A site with no path is its own keeper ("tensors allocated at In [1], line 14 stay
    // alive"): the live view said the place twice.
    if (biggest.path.empty() && c.keeper == siteText(biggest.site) &&
        how.find(c.keeper) != std::string::npos) {
        return text;
    }
    return text + ", at " + siteText(biggest.site);
}

namespace {
// "lists" for fifty lists; "holders" when their kinds differ or are a class's.
std::string pluralKind(const CauseGroup& g, const Report& report) {
    std::string type;
    for (int i : g.causes) {
        const Cause& c = report.causes[static_cast<size_t>(i)];
        const std::string t = c.holder ? c.holder->type : "";
        if (i != g.causes.front() && t != type) {
            return "holders";
        }
        type = t;
    }
    for (const char* builtin :
         {"list", "dict", "set", "deque", "tuple", "OrderedDict", "defaultdict", "Tensor"}) {
        if (type == builtin) {
            return type + "s";
        }
    }
    return "holders";
}
} // namespace

std::string causeGroupText(const CauseGroup& g, const Report& report) {
    if (g.causes.empty()) {
        return "";
    }
    const Cause& first = report.causes[static_cast<size_t>(g.causes.front())];
    if (g.causes.size() == 1) {
        return causeText(first, report);
    }
    const std::string noun = iterationNoun(report.boundary);
    const bool grows = g.bytes_per_iteration > 0;
    std::string text =
        grows ? formatBytes(static_cast<double>(g.bytes_per_iteration)) + " per " + noun + ": "
              : formatBytes(static_cast<double>(g.total_bytes)) + " held: ";
    text += std::to_string(g.causes.size()) + " " + pluralKind(g, report);
    if (!g.container.empty()) {
        text += " in " + shortPath(g.container);
    }
    text += grows ? " grow every " + noun : " keep tensors alive";
    constexpr size_t kNamed = 3;
    text += " (";
    for (size_t k = 0; k < std::min(kNamed, g.causes.size()); ++k) {
        text += k ? ", " : "";
        text += shortPath(report.causes[static_cast<size_t>(g.causes[k])].keeper);
    }
    if (g.causes.size() > kNamed) {
        text += " and " + std::to_string(g.causes.size() - kNamed) + " more";
    }
    text += ")";
    int64_t least = std::numeric_limits<int64_t>::max(), most = 0;
    std::set<std::string> sites;
    for (int i : g.causes) {
        const Cause& c = report.causes[static_cast<size_t>(i)];
        const int64_t each = grows ? c.bytes_per_iteration : static_cast<int64_t>(c.total_bytes);
        least = std::min(least, each);
        most = std::max(most, each);
        for (int f : c.findings) {
            sites.insert(siteText(report.findings[static_cast<size_t>(f)].site));
        }
    }
    const std::string from = formatBytes(static_cast<double>(least));
    const std::string to = formatBytes(static_cast<double>(most));
    text += ", " + from + (to != from ? " to " + to : "");
    text += " each";
    if (sites.size() > 1) {
        return text + ", across " + std::to_string(sites.size()) + " allocation sites";
    }
    return text + ", at " + *sites.begin();
}

std::string emptyReportText(const Report& report) {
    return report.findings.empty()
               ? "No tensor allocated during the run survived an iteration boundary."
               : "";
}

} // namespace torchleak
