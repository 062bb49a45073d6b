#include "torchleak/cause_groups.h"

#include "torchleak/display_text.h"
#include "torchleak/retention.h"

#include <algorithm>
#include <map>

namespace torchleak {

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

std::string causeGroupFixCode(const CauseGroup& group, const Report& report) {
    if (group.causes.size() < 2) {
        return "";
    }
    std::vector<std::string> lines;
    for (int i : group.causes) {
        bool fixed = false;
        for (int f : report.causes[static_cast<size_t>(i)].findings) {
            const std::string& code = report.findings[static_cast<size_t>(f)].fix_code;
            if (code.empty()) {
                continue;
            }
            fixed = true;
            if (std::find(lines.begin(), lines.end(), code) == lines.end()) {
                lines.push_back(code);
            }
        }
        if (!fixed) {
            return "";
        }
    }
    std::string code;
    for (const std::string& line : lines) {
        code += code.empty() ? "" : "\n";
        code += line;
    }
    return code;
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
