#include "torchleak/report_subset.h"

#include "torchleak/display_text.h"
#include "torchleak/errors.h"

#include <algorithm>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>

namespace torchleak {

namespace {

using Renumbering = std::unordered_map<int, int>;

// The indices that survive, in their new numbers, in the order they were named.
std::vector<int> renumbered(const std::vector<int>& indices, const Renumbering& to) {
    std::vector<int> out;
    for (int i : indices) {
        if (auto it = to.find(i); it != to.end()) {
            out.push_back(it->second);
        }
    }
    return out;
}

// Renumbers each entry's `findings`; an entry that named findings and keeps none is dropped
// (one that named none, a recommendation about the whole run, stays).
template <typename Entry> void renumberEach(std::vector<Entry>& entries, const Renumbering& to) {
    std::vector<Entry> kept;
    for (Entry& e : entries) {
        bool named = !e.findings.empty();
        e.findings = renumbered(e.findings, to);
        if (!named || !e.findings.empty()) {
            kept.push_back(std::move(e));
        }
    }
    entries = std::move(kept);
}

} // namespace

Report keepFindings(Report report, const std::vector<int>& keep, const std::string& warning) {
    Renumbering to;
    std::vector<Finding> findings;
    for (int i : keep) {
        if (i < 0 || static_cast<size_t>(i) >= report.findings.size()) {
            throw InvalidArgument("finding " + std::to_string(i) +
                                  " is not in the report (it has " +
                                  std::to_string(report.findings.size()) + ")");
        }
        if (!to.emplace(i, static_cast<int>(findings.size())).second) {
            throw InvalidArgument("finding " + std::to_string(i) + " is named twice");
        }
        findings.push_back(report.findings[static_cast<size_t>(i)]);
    }
    report.findings = std::move(findings);
    renumberEach(report.causes, to);
    renumberEach(report.summary.recommendations, to);
    if (report.oom) {
        OutOfMemoryReport& oom = *report.oom;
        oom.findings = renumbered(oom.findings, to);
        std::vector<OutOfMemorySite> sites;
        for (OutOfMemorySite& s : oom.by_site) {
            if (auto it = to.find(s.finding); it != to.end()) {
                s.finding = it->second;
                sites.push_back(std::move(s));
            }
        }
        oom.by_site = std::move(sites);
        renumberEach(oom.by_holder, to);
    }
    if (!warning.empty()) {
        report.warnings.push_back(warning);
    }
    return report;
}

void shareStacksBySite(Report& report) {
    std::unordered_set<std::string> sent;
    for (Finding& f : report.findings) {
        if (!sent.insert(siteText(f.site) + '\x1f' + f.device).second) {
            f.stack.clear();
        }
    }
}

} // namespace torchleak
