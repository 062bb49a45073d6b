#include "torchleak/scoring.h"

#include "torchleak/cause_groups.h"
#include "torchleak/display_text.h"

#include <algorithm>
#include <sstream>

namespace torchleak {

namespace {

// How many iterations a training run has: a leak that fills its device within a short run is
// critical, within a long one a warning, whatever share of memory this run's few iterations
// saw.
constexpr int64_t kShortRunIterations = 10'000;
constexpr int64_t kLongRunIterations = 1'000'000;

const DeviceTimeline* deviceOf(const Cause& c, const Report& report) {
    const std::string& device = report.findings[c.findings.front()].device;
    for (const DeviceTimeline& d : report.devices) {
        if (d.device == device) {
            return &d;
        }
    }
    return nullptr;
}

} // namespace

std::optional<int64_t> projectedOomIteration(const Cause& c, const Report& report) {
    const DeviceTimeline* d = deviceOf(c, report);
    if (d == nullptr || d->capacity_bytes == 0 || c.bytes_per_iteration <= 0) {
        return std::nullopt;
    }
    int64_t used = d->allocated.empty() ? 0 : d->allocated.back();
    int64_t room = std::max<int64_t>(static_cast<int64_t>(d->capacity_bytes) - used, 0);
    return static_cast<int64_t>(report.iterations) +
           (room + c.bytes_per_iteration - 1) / c.bytes_per_iteration;
}

Severity severityOfCause(const Cause& c, const Report& report, const AnalysisConfig& config) {
    const int64_t n = std::max(report.iterations, 1);
    double overRun = std::max(static_cast<double>(c.bytes_per_iteration) * static_cast<double>(n),
                              static_cast<double>(c.total_bytes));
    std::optional<int64_t> left;
    if (c.projected_oom_iteration) {
        left = *c.projected_oom_iteration - report.iterations;
    }
    if (overRun >= static_cast<double>(config.critical_bytes) ||
        (left && *left <= std::max(10 * n, kShortRunIterations))) {
        return Severity::Critical;
    }
    if (overRun >= static_cast<double>(config.warning_bytes) ||
        (left && *left <= kLongRunIterations)) {
        return Severity::Warning;
    }
    return Severity::Info;
}

Summary summarize(const Report& report) {
    Summary s;
    int penalty = 0;
    // One entry per group of causes (causes.h): dozens of small sites of one leak, or fifty
    // lists in one object filled from one line, weigh as one leak.
    for (const CauseGroup& g : groupRelatedCauses(report)) {
        const Cause& first = report.causes[static_cast<size_t>(g.causes.front())];
        std::vector<int> findings;
        for (int i : g.causes) {
            const auto& mine = report.causes[static_cast<size_t>(i)].findings;
            findings.insert(findings.end(), mine.begin(), mine.end());
        }
        switch (g.severity) {
        case Severity::Critical:
            penalty += 50;
            s.critical_issues.push_back(causeGroupText(g, report));
            s.recommendations.push_back({"high", first.suggestion, std::move(findings)});
            break;
        case Severity::Warning:
            penalty += 30;
            s.recommendations.push_back({"high", first.suggestion, std::move(findings)});
            break;
        case Severity::Info:
            penalty += 15;
            s.recommendations.push_back({"medium", first.suggestion, std::move(findings)});
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
    // Only where a profiler hid events: a warning about a stopped run, a missing stack or
    // memory outside tensors is no reason to re-run without one.
    const bool profilerHidEvents =
        std::any_of(report.warnings.begin(), report.warnings.end(), [](const std::string& w) {
            return w.find("torch.profiler") != std::string::npos;
        });
    if (profilerHidEvents) {
        s.recommendations.push_back(
            {"low",
             "re-run without torch.profiler active: some allocation events were missed",
             {}});
    }
    s.score = std::max(0, 100 - penalty);
    char grade = s.score >= 90   ? 'A'
                 : s.score >= 80 ? 'B'
                 : s.score >= 70 ? 'C'
                 : s.score >= 60 ? 'D'
                                 : 'F';
    // Built, then moved in: assigning the literal trips GCC 12's -Wrestrict false positive
    // (GCC bug 105329) once summarize() is inlined at -O3.
    s.grade = std::string(1, grade);
    return s;
}

} // namespace torchleak
