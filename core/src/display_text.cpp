#include "torchleak/display_text.h"

#include "torchleak/retention.h"

#include <algorithm>
#include <cmath>
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
    return f.file + ":" + std::to_string(f.line);
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

std::string projectionText(const DeviceTimeline& d, int iterations, BoundaryKind boundary) {
    if (d.leak_bytes_per_iteration <= 0 || !d.projected_oom_iteration) {
        return "";
    }
    const std::string noun = iterationNoun(boundary);
    int64_t remaining = std::max<int64_t>(*d.projected_oom_iteration - iterations, 0);
    std::string rate = "at " + formatBytes(static_cast<double>(d.leak_bytes_per_iteration)) +
                       " per " + noun + ", " + d.device;
    // Past this, the exact count is noise: no run lasts that long.
    constexpr int64_t kNegligible = 100'000'000;
    if (remaining > kNegligible) {
        return rate + " would take over " + groupThousands(kNegligible) + " " + noun +
               "s to fill: negligible";
    }
    if (remaining == 0) {
        return rate + " is full";
    }
    return rate + " is full in ~" + groupThousands(remaining) + " " + noun +
           (remaining == 1 ? "" : "s");
}

std::string headline(const Report& report) {
    size_t leakSites = std::count_if(report.findings.begin(), report.findings.end(),
                                     [](const Finding& f) { return f.verdict == Verdict::Leak; });
    std::string others = std::to_string(report.findings.size() - leakSites) + " other finding(s)";
    // Reports built before causes existed (or loaded from such a file) count sites.
    if (report.causes.empty() || report.causes.size() == leakSites) {
        return std::to_string(leakSites) + " leak(s), " + others;
    }
    return std::to_string(report.causes.size()) +
           (report.causes.size() == 1 ? " leak (" : " leaks (") + std::to_string(leakSites) +
           " allocation sites), " + others;
}

namespace {
// What the cause's keeper does, from the path of its biggest site.
std::string mechanism(const Cause& c, const Finding& f) {
    const std::string root = f.path.empty() ? "" : f.path.front().label;
    if (f.retention == Retention::Cycle) {
        std::string entry = c.keeper; // "<cycle: Attention>"
        if (entry.rfind("<cycle: ", 0) == 0 && entry.back() == '>') {
            entry = entry.substr(8, entry.size() - 9);
        }
        return "a reference cycle of " + entry + " objects that only gc.collect() frees";
    }
    if (f.retention == Retention::CppOnly) {
        return c.keeper + " is held only from C++";
    }
    if (isOutputCacheRoot(root)) {
        return "the notebook's output cache (" + root + ") keeps results";
    }
    if (isLastExceptionRoot(root)) {
        return "the last exception keeps the failed frame's locals";
    }
    if (stepStarting(f.path, ".__traceback__")) {
        return c.keeper + " keeps exceptions with their tracebacks' frames";
    }
    if (stepStarting(f.path, ".gi_frame") || stepStarting(f.path, ".cr_frame") ||
        stepStarting(f.path, ".ag_frame")) {
        return c.keeper + " keeps suspended generators with their frames";
    }
    if (keepsAutogradGraph(f.path)) {
        return c.keeper + (c.holder ? " keeps every iteration's autograd graph"
                                    : " keeps the autograd graph of every iteration");
    }
    if (c.holder) {
        return c.keeper + " grows every iteration";
    }
    if (f.path.empty()) {
        return "tensors allocated at " + c.keeper + " stay alive";
    }
    return c.keeper + " keeps tensors alive";
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
    text += mechanism(c, biggest);
    if (c.findings.size() > 1) {
        return text + ", across " + std::to_string(c.findings.size()) + " allocation sites";
    }
    return text + ", at " + siteText(biggest.site);
}

std::string emptyReportText(const Report& report) {
    return report.findings.empty()
               ? "No tensor allocated during the run survived an iteration boundary."
               : "";
}

} // namespace torchleak

namespace torchleak {

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
            text << ", held by " << f.holder->path_text;
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
