#pragma once
// One leak, one entry: leak findings that share a root cause become one Cause. A cause is the
// holder the fix goes into; without one, the tensor that keeps an autograd graph, then the
// object that keeps the tensor, then the user's line.

#include "torchleak/config.h"
#include "torchleak/model.h"

#include <string>
#include <vector>

namespace torchleak {

// The causes of the report's leak findings, biggest first, with their severity (scoring.h)
// from their bytes and their device's projected time to OOM. Every member finding takes its
// cause's severity. Needs the findings final and the devices built.
std::vector<Cause> groupCauses(Report& report, const AnalysisConfig& config);

// Causes that are one pattern: kCauseGroupMin or more kept side by side in one container
// (`obj.l0` ... `obj.l49`, a list per key of `stores`) or, kept by no container, allocated
// at one site. Every cause is in exactly one group, most alone; biggest group first. A view
// says "50 lists in obj grow" once and shows the fifty behind it.
struct CauseGroup {
    std::string container;   // "obj"; empty for a group by site and for a cause alone
    std::vector<int> causes; // indices into Report::causes, biggest first
    int64_t bytes_per_iteration = 0;
    uint64_t total_bytes = 0;
    Severity severity = Severity::Info; // the gravest of its causes'
};
inline constexpr size_t kCauseGroupMin = 4;
std::vector<CauseGroup> groupRelatedCauses(const Report& report);

// The container a cause's keeper is an element or attribute of ("obj" for `obj.l7`), or "".
std::string keeperContainer(const Cause& cause, const Report& report);

// The grouping key of a leak finding: "holder:losses", "graph:state['hidden']",
// "object:<reference cycle>.ctx", "site:train.py:42".
std::string causeKey(const Finding& f);

} // namespace torchleak
