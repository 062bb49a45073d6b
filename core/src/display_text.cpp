#include "torchleak/display_text.h"

#include "torchleak/retention.h"
#include "torchleak/verdict.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <set>
#include <sstream>

namespace torchleak {

std::string formatBytes(double bytes) {
    const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    double v = std::fabs(bytes);
    while (v >= 1024.0 && u < 4) {
        v /= 1024.0;
        ++u;
    }
    std::ostringstream out;
    out.precision(u == 0 ? 0 : 1);
    out << std::fixed << (bytes < 0 ? -v : v) << ' ' << units[u];
    return out.str();
}

std::string siteText(const Frame& f) {
    if (f.cell && f.runs.size() > 1) {
        // Every run, so the user finds the one still on screen; a long list keeps its ends.
        constexpr size_t kShown = 6;
        std::ostringstream text;
        text << "In ";
        for (size_t i = 0; i < f.runs.size(); ++i) {
            if (f.runs.size() > kShown && i == kShown - 2) {
                text << "…, ";
                i = f.runs.size() - 1;
            }
            text << '[' << f.runs[i] << ']' << (i + 1 < f.runs.size() ? ", " : "");
        }
        if (f.runs.size() > kShown) {
            text << " (" << f.runs.size() << " runs)";
        }
        text << ", line " << f.line;
        return text.str();
    }
    if (f.cell) {
        return "In [" + std::to_string(*f.cell) + "], line " + std::to_string(f.line);
    }
    if (f.file == "<backward>") {
        return "backward (" + f.function + ")";
    }
    if (f.file == kNoStackFile) {
        return kNoStackSiteText;
    }
    return f.file + ":" + std::to_string(f.line);
}

namespace {
// Where each step of a path's text begins (after the root): a '.' or '[' outside brackets and
// quotes, so that a key such as ["a.b"] stays one step.
std::vector<size_t> stepStarts(const std::string& path) {
    std::vector<size_t> starts;
    int depth = 0;
    char quote = 0;
    for (size_t i = 0; i < path.size(); ++i) {
        const char c = path[i];
        if (quote != 0) {
            if (c == '\\') {
                ++i;
            } else if (c == quote) {
                quote = 0;
            }
            continue;
        }
        if (depth > 0 && (c == '\'' || c == '"')) {
            quote = c;
        } else if (c == '[') {
            if (depth == 0 && i > 0) {
                starts.push_back(i);
            }
            ++depth;
        } else if (c == ']') {
            depth = depth > 0 ? depth - 1 : 0;
        } else if (c == '.' && depth == 0 && i > 0) {
            starts.push_back(i);
        }
    }
    return starts;
}

} // namespace

std::string shortPath(const std::string& path, size_t most) {
    if (path.size() <= most) {
        return path;
    }
    static const std::string kEllipsis = "\u2026";
    // Step i spans [bounds[i], bounds[i + 1]); step 0 is the root.
    std::vector<size_t> bounds = stepStarts(path);
    bounds.insert(bounds.begin(), 0);
    bounds.push_back(path.size());
    const size_t steps = bounds.size() - 1;
    // The head: the root and the steps after it that fit in a third (`test_inner.kept`, where a
    // module's name is the root, keeps the name the user wrote).
    size_t head = 1;
    while (head < steps && bounds[head + 1] <= most / 3) {
        ++head;
    }
    // The tail: the last whole steps that fit in what is left. No step is ever cut: a withheld
    // string key must appear whole or not at all, so that redaction finds every occurrence.
    const size_t room = most > bounds[head] + 1 ? most - bounds[head] - 1 : 0;
    size_t tail = steps;
    while (tail > head && path.size() - bounds[tail - 1] <= room) {
        --tail;
    }
    const std::string front = path.substr(0, bounds[head]);
    if (tail == head) {
        return path;
    }
    if (tail == steps) {
        // Not even the last step fits: its kind stays ("[…]" for a key, ".…" for a name).
        const char last = path[bounds[steps - 1]];
        return front + (steps - 1 > head ? kEllipsis : "") + last + kEllipsis +
               (last == '[' ? "]" : "");
    }
    return front + kEllipsis + path.substr(bounds[tail]);
}

std::string listWords(const std::vector<std::string>& items, const char* last) {
    std::string out;
    for (size_t i = 0; i < items.size(); ++i) {
        if (i > 0) {
            out += i + 1 == items.size() ? std::string(" ") + last + " " : ", ";
        }
        out += items[i];
    }
    return out;
}

std::string listFirst(const std::vector<std::string>& items, size_t most, const std::string& more) {
    if (items.size() <= most) {
        return listWords(items);
    }
    std::vector<std::string> said(items.begin(), items.begin() + static_cast<std::ptrdiff_t>(most));
    said.push_back(std::to_string(items.size() - most) + " " + more);
    return listWords(said);
}

std::string methodCalls(const std::vector<std::string>& methods) {
    std::vector<std::string> calls;
    for (const std::string& m : methods) {
        calls.push_back(m + "()");
    }
    return listWords(calls, "or");
}

std::string groupThousands(int64_t value) {
    std::string digits =
        std::to_string(value < 0 ? -static_cast<uint64_t>(value) : static_cast<uint64_t>(value));
    std::string out;
    for (size_t i = 0; i < digits.size(); ++i) {
        if (i > 0 && (digits.size() - i) % 3 == 0) {
            out += ',';
        }
        out += digits[i];
    }
    return value < 0 ? "-" + out : out;
}

const char* iterationNoun(BoundaryKind boundary) {
    return boundary == BoundaryKind::Cell ? "cell run" : "iteration";
}

namespace {
// A count per iteration as a person says it: "192", "1,024", "1.1", "3".
std::string countText(double value) {
    if (value >= 9.95) {
        return groupThousands(static_cast<int64_t>(value + 0.5));
    }
    char buffer[16];
    std::snprintf(buffer, sizeof buffer, "%.1f", value);
    std::string text = buffer;
    if (text.size() > 2 && text.substr(text.size() - 2) == ".0") {
        text.resize(text.size() - 2);
    }
    return text;
}
} // namespace

std::string holderGrowthText(const Holder& holder, BoundaryKind boundary) {
    // Piece by piece: GCC 12's -Wrestrict misreads a chain of temporaries here at -O3.
    std::string text = "+";
    if (holder.entries_per_iteration <= 0) {
        text += countText(holder.growth_per_iteration);
    } else {
        text += countText(holder.entries_per_iteration);
        text += " entries";
    }
    text += " per ";
    text += iterationNoun(boundary);
    if (holder.entries_per_iteration > 0) {
        const double storages = std::max(1.0, std::round(holder.growth_per_iteration));
        text += ", sharing ";
        text += countText(storages);
        text += storages == 1.0 ? " storage" : " storages";
    }
    return text;
}

std::string liveViewText(size_t shown, size_t total) {
    return "while the cell runs: the first " + std::to_string(shown) + " of " +
           std::to_string(total) + " findings; the finished report lists every one";
}

std::string untrackedGrowthText(const UntrackedGrowth& g, BoundaryKind boundary) {
    const std::string noun = iterationNoun(boundary);
    const int64_t tracked = std::max<int64_t>(g.tracked_growth, 0);
    return "the process's resident memory grew " +
           formatBytes(static_cast<double>(g.resident_growth)) + " from " + noun + " " +
           groupThousands(g.from_iteration + 1) + " to " + groupThousands(g.to_iteration + 1) +
           " while the CPU memory torchleak tracks grew " +
           formatBytes(static_cast<double>(tracked)) + ": " +
           formatBytes(static_cast<double>(g.resident_growth - tracked)) +
           " grew outside tensors (Python objects, a native library's buffers, an allocator's "
           "cache), which no finding covers";
}

std::string projectionText(const DeviceTimeline& d, int iterations, BoundaryKind boundary) {
    if (d.leak_bytes_per_iteration <= 0 || !d.projected_oom_iteration) {
        return "";
    }
    const std::string noun = iterationNoun(boundary);
    int64_t remaining = std::max<int64_t>(*d.projected_oom_iteration - iterations, 0);
    std::string rate = "at " + formatBytes(static_cast<double>(d.leak_bytes_per_iteration)) +
                       " per " + noun + ", " + d.device;
    // Past this, the exact count is noise: no run lasts that long.
    if (remaining > kNegligibleIterations) {
        return rate + " would take over " + groupThousands(kNegligibleIterations) + " " + noun +
               "s to fill: negligible";
    }
    if (remaining == 0) {
        return rate + " is full";
    }
    return rate + " is full in ~" + groupThousands(remaining) + " " + noun +
           (remaining == 1 ? "" : "s");
}

std::string deviceText(const DeviceTimeline& d, int iterations, BoundaryKind boundary) {
    std::string line =
        d.device + ": " +
        formatBytes(d.allocated.empty() ? 0.0 : static_cast<double>(d.allocated.back())) +
        " tracked live at the end";
    if (d.leak_bytes_per_iteration > 0) {
        line += ", leaking ";
        line += formatBytes(static_cast<double>(d.leak_bytes_per_iteration));
        line += " per ";
        line += iterationNoun(boundary);
        if (std::string projection = projectionText(d, iterations, boundary); !projection.empty()) {
            line += "; " + projection;
        }
    }
    if (d.verdict == "fragmentation") {
        line += "; fragmentation (" +
                std::to_string(static_cast<int>(std::lround(d.fragmentation_ratio * 100.0))) +
                "% reserved but unused)";
    }
    return line;
}

std::string roleBreakdownText(const RoleBytes& roles) {
    constexpr size_t kNamed = 4;
    std::vector<MemoryRole> order;
    int64_t total = 0;
    for (size_t r = 0; r < kMemoryRoles; ++r) {
        auto role = static_cast<MemoryRole>(r);
        if (role != MemoryRole::Reserve && roles[r] > 0) {
            order.push_back(role);
            total += roles[r];
        }
    }
    std::stable_sort(order.begin(), order.end(), [&](MemoryRole a, MemoryRole b) {
        return bytesOf(roles, a) > bytesOf(roles, b);
    });
    std::string text = formatBytes(static_cast<double>(total));
    for (size_t i = 0; i < order.size() && i < kNamed; ++i) {
        const int64_t bytes = bytesOf(roles, order[i]);
        text += i == 0 ? ": " : ", ";
        text += roleLabel(order[i]);
        text += ' ';
        text += formatBytes(static_cast<double>(bytes));
        text += " (";
        text += std::to_string(static_cast<int>(
            std::lround(100.0 * static_cast<double>(bytes) / static_cast<double>(total))));
        text += "%)";
    }
    if (order.size() > kNamed) {
        int64_t rest = 0;
        for (size_t i = kNamed; i < order.size(); ++i) {
            rest += bytesOf(roles, order[i]);
        }
        text += ", ";
        text += std::to_string(order.size() - kNamed);
        text += " more ";
        text += formatBytes(static_cast<double>(rest));
    }
    return text;
}

std::string
rolesText(const DeviceTimeline& d, const std::vector<int64_t>& at, BoundaryKind boundary) {
    if (d.roles_at_peak.empty() || d.roles_at_peak.size() != d.peak.size() ||
        d.roles_at_boundary.empty()) {
        return "";
    }
    size_t highest = 0;
    for (size_t i = 1; i < d.peak.size(); ++i) {
        if (d.peak[i] > d.peak[highest]) {
            highest = i;
        }
    }
    const int64_t iteration = pointIteration(at, d.peak.size(), highest);
    std::string text = "at its highest peak (";
    text += iterationNoun(boundary);
    text += " ";
    text += groupThousands(iteration + 1);
    text += "), ";
    text += roleBreakdownText(d.roles_at_peak[highest]);
    text += "; at the end, ";
    const RoleBytes& end = d.roles_at_boundary.back();
    text += roleBreakdownText(end);
    if (int64_t reserve = bytesOf(end, MemoryRole::Reserve); reserve > 0) {
        text += "; ";
        text += formatBytes(static_cast<double>(reserve));
        text += " reserved but unused";
    }
    return text;
}

std::string spikeText(const PeakSpike& s, BoundaryKind boundary) {
    std::string text = "the peak of ";
    text += iterationNoun(boundary);
    text += ' ';
    text += groupThousands(s.iteration + 1);
    text += ", ";
    text += formatBytes(static_cast<double>(s.peak_bytes));
    text += ", against ";
    text += formatBytes(static_cast<double>(s.typical_peak_bytes));
    text += " typically";
    if (s.role && s.role_rise_bytes > 0) {
        text += ": ";
        text += roleLabel(*s.role);
        text += " +";
        text += formatBytes(static_cast<double>(s.role_rise_bytes));
    }
    if (s.site && s.block_bytes > 0) {
        text += "; its biggest block, ";
        text += formatBytes(static_cast<double>(s.block_bytes));
        text += ", allocated at ";
        text += siteText(*s.site);
    }
    return text;
}

std::string blockLabel(const Finding& f) {
    std::string label = "torchleak: ";
    std::string what(toString(f.verdict));
    if (f.role) {
        what += ", ";
        what += roleLabel(*f.role);
    }
    if (f.holder && !f.holder->path_text.empty()) {
        label += "held by ";
        label += shortPath(f.holder->path_text);
        label += " (";
        label += what;
        label += ')';
    } else {
        label += what;
    }
    return label;
}

std::string rateText(const Finding& f) {
    if (f.verdict == Verdict::Leak && f.bytes_per_iteration <= 0) {
        return "held";
    }
    return formatBytes(static_cast<double>(f.bytes_per_iteration));
}

std::string tensorText(const std::string& dtype, const std::vector<int64_t>& shape) {
    std::string text = dtype + " [";
    for (size_t i = 0; i < shape.size(); ++i) {
        if (i > 0) {
            text += ", ";
        }
        text += std::to_string(shape[i]);
    }
    return text + "]";
}

std::string growthText(const Finding& f, BoundaryKind boundary) {
    if (!f.growth_since) {
        return "";
    }
    const GrowthSince& g = *f.growth_since;
    const std::string noun = iterationNoun(boundary);
    if (f.verdict == Verdict::Growth) {
        return "growing " + formatBytes(static_cast<double>(g.bytes_per_iteration)) + " per " +
               noun + " since " + noun + " " + groupThousands(g.iteration + 1) + ": at this rate " +
               f.device + " would take over " + groupThousands(kNegligibleIterations) + " " + noun +
               "s to fill";
    }
    if (g.bounded && f.verdict == Verdict::Undecided) {
        return "held by a deque of at most " + groupThousands(g.bounded->capacity) + " entries, " +
               groupThousands(g.bounded->entries) + " of them now: it stops growing when full";
    }
    if (g.stopped_at && f.verdict == Verdict::Undecided) {
        const int64_t flat = g.flat_iterations;
        return "grew " + formatBytes(static_cast<double>(g.grown_bytes)) + " until " + noun + " " +
               groupThousands(*g.stopped_at + 1) + ", flat for the last " + groupThousands(flat) +
               ": too soon to tell a filled cache from a pause";
    }
    if (g.stopped_at) {
        return "grew " + formatBytes(static_cast<double>(g.grown_bytes)) + " until " + noun + " " +
               groupThousands(*g.stopped_at + 1) + ", flat since";
    }
    std::string text;
    if (g.step_bytes && g.step_every) {
        // Piece by piece: GCC 12's -Wrestrict misreads a chain of temporaries here at -O3.
        text = formatBytes(static_cast<double>(*g.step_bytes));
        text += " every ";
        text += groupThousands(*g.step_every);
        text += " ";
        text += noun;
        text += "s since ";
        text += noun;
        text += " ";
        text += groupThousands(g.iteration + 1);
    } else {
        text = "leaking since " + noun + " " + groupThousands(g.iteration + 1) + ", " +
               formatBytes(static_cast<double>(g.bytes_per_iteration)) + " per " + noun;
    }
    if (g.earlier) {
        text += "; before, it grew ";
        text += formatBytes(static_cast<double>(g.earlier->grown_bytes));
        text += " from ";
        text += noun;
        text += " ";
        text += groupThousands(g.earlier->iteration + 1);
        text += " to ";
        text += groupThousands(g.earlier->stopped_at + 1);
        text += " and paused";
    }
    return text;
}

std::string pathTensorText(const TensorInfo& tensor) {
    std::string text = tensorText(tensor.dtype, tensor.shape);
    text += " ";
    text += formatBytes(static_cast<double>(tensor.nbytes));
    if (tensor.site) {
        text += ", allocated at " + siteText(*tensor.site);
    }
    return text;
}

} // namespace torchleak

namespace torchleak {

std::string outOfMemoryRolesText(const OutOfMemoryReport& oom) {
    if (!oom.roles) {
        return "";
    }
    std::string text = "What filled " + oom.device + " at the failure, ";
    text += roleBreakdownText(*oom.roles);
    if (const int64_t reserve = bytesOf(*oom.roles, MemoryRole::Reserve); reserve > 0) {
        text += "; ";
        text += formatBytes(static_cast<double>(reserve));
        text += " reserved but unused";
    }
    return text + ".";
}

std::string outOfMemoryText(const OutOfMemoryReport& oom, const Report& report) {
    const std::string noun = iterationNoun(report.boundary);
    std::ostringstream text;
    text << "Out of memory on " << oom.device << " in " << noun << ' '
         << groupThousands(oom.iteration + 1) << " (" << groupThousands(oom.iteration)
         << " complete before it)";
    if (oom.requested_bytes) {
        text << ": asked for " << formatBytes(static_cast<double>(*oom.requested_bytes))
             << " with ";
    } else {
        text << ": ";
    }
    text << formatBytes(static_cast<double>(oom.allocated_bytes)) << " allocated";
    if (oom.reserved_bytes != oom.allocated_bytes) {
        text << ", " << formatBytes(static_cast<double>(oom.reserved_bytes)) << " reserved";
    }
    if (oom.capacity_bytes > 0) {
        text << " of " << formatBytes(static_cast<double>(oom.capacity_bytes));
    }
    text << '.';
    if (!oom.findings.empty()) {
        const Finding& f = report.findings[static_cast<size_t>(oom.findings.front())];
        text << " Likely culprit: " << siteText(f.site) << ", +"
             << formatBytes(static_cast<double>(f.bytes_per_iteration)) << " per " << noun << " ("
             << toString(f.verdict);
        if (f.holder && !f.holder->path_text.empty()) {
            text << ", held by " << shortPath(f.holder->path_text);
        }
        text << ").";
        if (oom.findings.size() > 1) {
            text << ' ' << oom.findings.size() - 1 << " other site(s) grew too.";
        }
    } else {
        text << " No site grew before it: the " << noun << "'s own working set did not fit ("
             << formatBytes(static_cast<double>(oom.live_bytes))
             << " tracked alive on the device at the failure).";
    }
    return text.str();
}

} // namespace torchleak

namespace torchleak {

namespace {

// "0", "0 and 2", "0, 2 and 5".
std::string listRanks(const std::vector<int>& ranks) {
    std::vector<std::string> words;
    for (int rank : ranks) {
        words.push_back(std::to_string(rank));
    }
    return listWords(words);
}

std::string plural(int64_t n, const char* noun) {
    return groupThousands(n) + " " + noun + (n == 1 ? "" : "s");
}

} // namespace

std::string samplingText(uint64_t sampleBytes) {
    const std::string size = formatBytes(static_cast<double>(sampleBytes));
    return "blocks of " + size + " and more were recorded whole, smaller ones sampled (each " +
           "kept one standing for " + size + "): their bytes are estimates and counts are of " +
           "the blocks kept";
}

std::string rankScopeText(const Finding& f, const Report& report) {
    if (f.ranks.empty() || !report.ranks) {
        return "";
    }
    const int world = report.ranks->world_size;
    std::string verb = f.verdict == Verdict::Leak ? "leaks on " : "on ";
    if (static_cast<int>(f.ranks.size()) >= world && world > 1) {
        return verb + "every rank (" + std::to_string(world) + ")";
    }
    if (f.ranks.size() == 1) {
        return verb + "rank " + std::to_string(f.ranks.front()) + " only";
    }
    return verb + "ranks " + listRanks(f.ranks) + " of " + std::to_string(world);
}

std::string rankText(const RankSummary& rank, BoundaryKind boundary) {
    std::string head = "rank " + std::to_string(rank.rank) + ": ";
    if (rank.status == "missing") {
        return head + "no report (" + rank.note + ")";
    }
    std::string text = head + plural(rank.iterations, iterationNoun(boundary)) + ", ";
    if (rank.leaks == 0) {
        text += "no leak";
    } else {
        text += plural(rank.leaks, "leak") + " at " +
                formatBytes(static_cast<double>(rank.leak_bytes_per_iteration)) + " per " +
                iterationNoun(boundary);
    }
    text += ", peak " + formatBytes(static_cast<double>(rank.peak_bytes));
    if (rank.status == "failed") {
        text += "; the run failed: " + rank.note;
    } else if (!rank.note.empty()) {
        text += "; " + rank.note;
    }
    return text;
}

std::vector<std::string> rankSkewText(const JobRanks& job, BoundaryKind boundary) {
    std::vector<const RankSummary*> seen;
    for (const RankSummary& r : job.ranks) {
        if (r.status != "missing") {
            seen.push_back(&r);
        }
    }
    std::vector<std::string> lines;
    if (seen.size() < 2) {
        return lines;
    }
    auto extremes = [&](auto measure) {
        auto [lo, hi] = std::minmax_element(
            seen.begin(), seen.end(), [&](auto* a, auto* b) { return measure(*a) < measure(*b); });
        return std::pair<const RankSummary*, const RankSummary*>{*lo, *hi};
    };
    const std::string per = std::string(" per ") + iterationNoun(boundary);
    auto [slow, fast] = extremes([](const RankSummary& r) { return r.leak_bytes_per_iteration; });
    if (fast->leak_bytes_per_iteration > slow->leak_bytes_per_iteration) {
        lines.push_back("leak skew: rank " + std::to_string(fast->rank) + " grows " +
                        formatBytes(static_cast<double>(fast->leak_bytes_per_iteration -
                                                        slow->leak_bytes_per_iteration)) +
                        per + " more than rank " + std::to_string(slow->rank));
    }
    auto [low, high] = extremes([](const RankSummary& r) { return r.peak_bytes; });
    // Ranks of one job hold the same model: a tenth apart is already worth a look.
    if (high->peak_bytes > low->peak_bytes + low->peak_bytes / 10) {
        std::ostringstream ratio;
        ratio.precision(1);
        ratio << std::fixed
              << (low->peak_bytes > 0
                      ? static_cast<double>(high->peak_bytes) / static_cast<double>(low->peak_bytes)
                      : 0.0);
        lines.push_back("peak skew: rank " + std::to_string(high->rank) + " reached " +
                        formatBytes(static_cast<double>(high->peak_bytes)) + ", rank " +
                        std::to_string(low->rank) + " " +
                        formatBytes(static_cast<double>(low->peak_bytes)) +
                        (low->peak_bytes > 0 ? " (" + ratio.str() + "×)" : std::string()));
    }
    auto [shortest, longest] = extremes([](const RankSummary& r) { return r.iterations; });
    if (longest->iterations != shortest->iterations) {
        lines.push_back("iteration skew: rank " + std::to_string(shortest->rank) + " ran " +
                        plural(shortest->iterations, iterationNoun(boundary)) + ", rank " +
                        std::to_string(longest->rank) + " " + groupThousands(longest->iterations));
    }
    return lines;
}

} // namespace torchleak
