#include "torchleak/report_diff.h"

#include "torchleak/display_text.h"
#include "torchleak/errors.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

namespace torchleak {

std::string_view toString(LeakChangeKind k) noexcept {
    switch (k) {
    case LeakChangeKind::Fixed:
        return "fixed";
    case LeakChangeKind::New:
        return "new";
    case LeakChangeKind::Worse:
        return "worse";
    case LeakChangeKind::Better:
        return "better";
    case LeakChangeKind::Same:
        return "same";
    }
    return "same";
}

namespace {

std::string basename(const std::string& path) {
    size_t slash = path.find_last_of("/\\");
    return slash == std::string::npos ? path : path.substr(slash + 1);
}

// A notebook cell's file name changes with every kernel (ipykernel names it by process and
// hash): a cell site is its code, not its file.
std::string siteKey(const Finding& f) {
    if (f.site.cell && (!f.site.source || f.site.source->empty())) {
        return ""; // a cell's code unknown: nothing to recognise it by
    }
    std::string file = f.site.cell ? "<cell>" : f.site.file;
    std::string line = f.site.cell ? f.site.source.value_or("") : std::to_string(f.site.line);
    return file + '\n' + line + '\n' + f.site.function + '\n' + f.device + '\n' +
           f.autograd_node.value_or("");
}

std::string sourceKey(const Finding& f) {
    if (!f.site.source || f.site.source->empty()) {
        return "";
    }
    std::string file = f.site.cell ? "<cell>" : basename(f.site.file);
    return file + '\n' + f.site.function + '\n' + *f.site.source + '\n' + f.device;
}

// A site split by holder (one finding per holder) is matched holder by holder first.
std::string siteAndHolderKey(const Finding& f) {
    std::string site = siteKey(f);
    return site.empty() || !f.holder ? "" : site + '\n' + f.holder->path_text;
}

std::string holderKey(const Finding& f) {
    return f.holder && !f.holder->path_text.empty() ? f.holder->path_text + '\n' + f.device : "";
}

std::vector<int> leakIndices(const Report& r) {
    std::vector<int> out;
    for (size_t i = 0; i < r.findings.size(); ++i) {
        if (r.findings[i].verdict == Verdict::Leak) {
            out.push_back(static_cast<int>(i));
        }
    }
    return out;
}

// One pass of matching: pairs the still unmatched findings whose keys are equal and non-empty.
// A key shared by several findings on one side pairs them in order (biggest first).
void matchBy(const Report& before,
             const Report& after,
             std::vector<int>& beforeLeft,
             std::vector<int>& afterLeft,
             const std::function<std::string(const Finding&)>& key,
             const char* how,
             std::vector<LeakChange>& out) {
    std::multimap<std::string, int> afterByKey;
    for (int a : afterLeft) {
        std::string k = key(after.findings[static_cast<size_t>(a)]);
        if (!k.empty()) {
            afterByKey.emplace(std::move(k), a);
        }
    }
    std::vector<int> stillBefore;
    std::vector<bool> taken(after.findings.size(), false);
    for (int b : beforeLeft) {
        std::string k = key(before.findings[static_cast<size_t>(b)]);
        auto it = k.empty() ? afterByKey.end() : afterByKey.find(k);
        if (it == afterByKey.end()) {
            stillBefore.push_back(b);
            continue;
        }
        LeakChange c;
        c.before = b;
        c.after = it->second;
        c.matched_by = how;
        out.push_back(c);
        taken[static_cast<size_t>(it->second)] = true;
        afterByKey.erase(it);
    }
    beforeLeft = std::move(stillBefore);
    std::erase_if(afterLeft, [&](int a) { return taken[static_cast<size_t>(a)]; });
}

void describe(LeakChange& c, const Report& before, const Report& after) {
    const Finding* b = c.before ? &before.findings[static_cast<size_t>(*c.before)] : nullptr;
    const Finding* a = c.after ? &after.findings[static_cast<size_t>(*c.after)] : nullptr;
    const Finding& shown = a != nullptr ? *a : *b;
    c.site = siteText(shown.site);
    // A fixed leak's site may have no holder any more: the old one says what held it.
    const Finding* held = a != nullptr && a->holder ? a : b != nullptr && b->holder ? b : nullptr;
    c.holder = held != nullptr ? held->holder->path_text : "";
    c.before_bytes_per_iteration = b != nullptr ? b->bytes_per_iteration : 0;
    c.after_bytes_per_iteration =
        a != nullptr && a->verdict == Verdict::Leak ? a->bytes_per_iteration : 0;
}

int order(LeakChangeKind k) {
    switch (k) {
    case LeakChangeKind::New:
        return 0;
    case LeakChangeKind::Worse:
        return 1;
    case LeakChangeKind::Fixed:
        return 2;
    case LeakChangeKind::Better:
        return 3;
    case LeakChangeKind::Same:
        return 4;
    }
    return 5;
}

} // namespace

ReportDiff diffReports(const Report& before, const Report& after, double tolerance) {
    if (!std::isfinite(tolerance) || tolerance < 0) {
        throw InvalidArgument("tolerance must be a number >= 0");
    }
    ReportDiff d;
    d.tolerance = tolerance;
    d.before_iterations = before.iterations;
    d.after_iterations = after.iterations;
    if (before.boundary != after.boundary) {
        d.warnings.push_back(std::string("the runs end iterations differently (") +
                             std::string(toString(before.boundary)) + " vs " +
                             std::string(toString(after.boundary)) +
                             "): rates per iteration may not compare");
    }
    std::vector<int> beforeLeft = leakIndices(before);
    // The second run's sites that no longer leak are candidates too: a fixed leak whose site
    // now plateaus is reported as fixed, with what it became.
    std::vector<int> afterLeft(after.findings.size());
    for (size_t i = 0; i < afterLeft.size(); ++i) {
        afterLeft[i] = static_cast<int>(i);
    }
    std::vector<LeakChange> matched;
    matchBy(before, after, beforeLeft, afterLeft, siteAndHolderKey, "site", matched);
    matchBy(before, after, beforeLeft, afterLeft, siteKey, "site", matched);
    matchBy(before, after, beforeLeft, afterLeft, sourceKey, "source", matched);
    matchBy(before, after, beforeLeft, afterLeft, holderKey, "holder", matched);
    for (LeakChange& c : matched) {
        const Finding& a = after.findings[static_cast<size_t>(*c.after)];
        describe(c, before, after);
        if (a.verdict != Verdict::Leak) {
            c.kind = LeakChangeKind::Fixed;
            c.after_verdict = std::string(toString(a.verdict));
        } else {
            const double was = static_cast<double>(c.before_bytes_per_iteration);
            const double now = static_cast<double>(c.after_bytes_per_iteration);
            c.kind = now > was * (1.0 + tolerance)   ? LeakChangeKind::Worse
                     : now < was * (1.0 - tolerance) ? LeakChangeKind::Better
                                                     : LeakChangeKind::Same;
        }
        d.changes.push_back(c);
    }
    for (int b : beforeLeft) {
        LeakChange c;
        c.kind = LeakChangeKind::Fixed;
        c.before = b;
        describe(c, before, after);
        d.changes.push_back(c);
    }
    for (int a : afterLeft) {
        if (after.findings[static_cast<size_t>(a)].verdict != Verdict::Leak) {
            continue;
        }
        LeakChange c;
        c.kind = LeakChangeKind::New;
        c.after = a;
        describe(c, before, after);
        d.changes.push_back(c);
    }
    std::stable_sort(
        d.changes.begin(), d.changes.end(), [](const LeakChange& x, const LeakChange& y) {
            if (order(x.kind) != order(y.kind)) {
                return order(x.kind) < order(y.kind);
            }
            return std::max(x.before_bytes_per_iteration, x.after_bytes_per_iteration) >
                   std::max(y.before_bytes_per_iteration, y.after_bytes_per_iteration);
        });
    for (const LeakChange& c : d.changes) {
        d.before_bytes_per_iteration += c.before_bytes_per_iteration;
        d.after_bytes_per_iteration += c.after_bytes_per_iteration;
        d.regressed =
            d.regressed || c.kind == LeakChangeKind::New || c.kind == LeakChangeKind::Worse;
    }
    return d;
}

namespace {

int count(const ReportDiff& d, LeakChangeKind k) {
    return static_cast<int>(std::count_if(d.changes.begin(), d.changes.end(),
                                          [k](const LeakChange& c) { return c.kind == k; }));
}

std::string rate(int64_t bytes) {
    return bytes > 0 ? formatBytes(static_cast<double>(bytes)) + " per iteration" : "none";
}

std::string changeLine(const LeakChange& c) {
    std::string kind(toString(c.kind));
    std::transform(kind.begin(), kind.end(), kind.begin(),
                   [](unsigned char ch) { return static_cast<char>(std::toupper(ch)); });
    kind.resize(6, ' ');
    std::string line = kind + "  " + c.site + "  ";
    if (c.kind == LeakChangeKind::New) {
        line += rate(c.after_bytes_per_iteration);
    } else {
        line += rate(c.before_bytes_per_iteration) + " -> " + rate(c.after_bytes_per_iteration);
    }
    if (!c.holder.empty()) {
        line += "  (held by " + c.holder + ")";
    }
    if (!c.after_verdict.empty()) {
        line += "  now " + c.after_verdict;
    }
    if (c.matched_by == "source" || c.matched_by == "holder") {
        line += "  [matched by " + c.matched_by + "]";
    }
    return line;
}

} // namespace

std::string diffText(const ReportDiff& d) {
    std::ostringstream out;
    const int leaksBefore = static_cast<int>(d.changes.size()) - count(d, LeakChangeKind::New);
    const int leaksAfter = static_cast<int>(d.changes.size()) - count(d, LeakChangeKind::Fixed);
    out << "torchleak diff: " << leaksBefore << " leak(s) -> " << leaksAfter << " leak(s); "
        << rate(d.before_bytes_per_iteration) << " -> " << rate(d.after_bytes_per_iteration) << " ("
        << groupThousands(d.before_iterations) << " and " << groupThousands(d.after_iterations)
        << " iterations)\n";
    for (const std::string& w : d.warnings) {
        out << "  warning: " << w << "\n";
    }
    for (const LeakChange& c : d.changes) {
        out << "  " << changeLine(c) << "\n";
    }
    out << (d.regressed ? "result: regression: " : "result: no regression: ")
        << count(d, LeakChangeKind::New) << " new, " << count(d, LeakChangeKind::Worse)
        << " worse, " << count(d, LeakChangeKind::Fixed) << " fixed, "
        << count(d, LeakChangeKind::Better) << " better, " << count(d, LeakChangeKind::Same)
        << " unchanged (a rate within " << static_cast<int>(std::lround(d.tolerance * 100))
        << "% is unchanged)";
    return out.str();
}

std::string diffJson(const ReportDiff& d, int indent) {
    using nlohmann::json;
    json j = {{"schema_version", kDiffSchema},
              {"before_iterations", d.before_iterations},
              {"after_iterations", d.after_iterations},
              {"before_bytes_per_iteration", d.before_bytes_per_iteration},
              {"after_bytes_per_iteration", d.after_bytes_per_iteration},
              {"tolerance", d.tolerance},
              {"regressed", d.regressed},
              {"warnings", d.warnings},
              {"changes", json::array()},
              {"text", diffText(d)}};
    for (const LeakChange& c : d.changes) {
        j["changes"].push_back({{"kind", toString(c.kind)},
                                {"before", c.before ? json(*c.before) : json(nullptr)},
                                {"after", c.after ? json(*c.after) : json(nullptr)},
                                {"matched_by", c.matched_by},
                                {"site", c.site},
                                {"holder", c.holder},
                                {"before_bytes_per_iteration", c.before_bytes_per_iteration},
                                {"after_bytes_per_iteration", c.after_bytes_per_iteration},
                                {"after_verdict", c.after_verdict},
                                {"text", changeLine(c)}});
    }
    return j.dump(indent, ' ', false, json::error_handler_t::replace);
}

} // namespace torchleak
