#include "torchleak/scoring.h"

#include "torchleak/display_text.h"

#include <algorithm>
#include <sstream>

namespace torchleak {

Severity severityOf(const Finding& f, int iterations, const AnalysisConfig& t) {
    if (f.verdict != Verdict::Leak) {
        return Severity::Info;
    }
    double projected = static_cast<double>(f.bytes_per_iteration) * std::max(iterations, 1);
    projected = std::max(projected, static_cast<double>(f.total_bytes));
    if (projected >= static_cast<double>(t.critical_bytes)) {
        return Severity::Critical;
    }
    if (projected >= static_cast<double>(t.warning_bytes)) {
        return Severity::Warning;
    }
    return Severity::Info;
}

void escalateByProjection(Report& report) {
    const auto n = static_cast<int64_t>(report.iterations);
    for (const DeviceTimeline& d : report.devices) {
        if (!d.projected_oom_iteration || n <= 0 || *d.projected_oom_iteration > 10 * n) {
            continue;
        }
        for (Finding& f : report.findings) {
            if (f.verdict == Verdict::Leak && f.device == d.device) {
                f.severity = Severity::Critical;
            }
        }
    }
}

Summary summarize(const Report& report) {
    Summary s;
    int penalty = 0;
    for (size_t i = 0; i < report.findings.size(); ++i) {
        const Finding& f = report.findings[i];
        if (f.verdict != Verdict::Leak) {
            continue;
        }
        std::string what = formatBytes(static_cast<double>(f.bytes_per_iteration)) +
                           " per iteration leaks from " + siteText(f.site) +
                           (f.site.function.empty() ? "" : " (" + f.site.function + ")");
        switch (f.severity) {
        case Severity::Critical:
            penalty += 40;
            s.critical_issues.push_back(what);
            s.recommendations.push_back({"high", f.suggestion, {static_cast<int>(i)}});
            break;
        case Severity::Warning:
            penalty += 20;
            s.recommendations.push_back({"high", f.suggestion, {static_cast<int>(i)}});
            break;
        case Severity::Info:
            penalty += 10;
            s.recommendations.push_back({"medium", f.suggestion, {static_cast<int>(i)}});
            break;
        }
    }
    for (const DeviceTimeline& d : report.devices) {
        if (d.verdict == "fragmentation") {
            std::ostringstream text;
            text.precision(0);
            text << std::fixed << d.device << ": the allocator reserves "
                 << d.fragmentation_ratio * 100.0
                 << "% more than is allocated while allocated memory is flat (fragmentation or "
                    "an oversized cache): not a leak; try expandable segments "
                    "(PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True) or "
                    "torch.cuda.empty_cache() between phases";
            s.recommendations.push_back({"medium", text.str(), {}});
            penalty += 5;
        }
    }
    if (!report.warnings.empty()) {
        s.recommendations.push_back(
            {"low",
             "re-run without torch.profiler active: some allocation events were missed",
             {}});
    }
    s.score = std::max(0, 100 - penalty);
    s.grade = s.score >= 90   ? "A"
              : s.score >= 80 ? "B"
              : s.score >= 70 ? "C"
              : s.score >= 60 ? "D"
                              : "F";
    return s;
}

} // namespace torchleak
