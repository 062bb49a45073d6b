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

// The grouping key of a leak finding: "holder:losses", "graph:state['hidden']",
// "object:<reference cycle>.ctx", "site:train.py:42".
std::string causeKey(const Finding& f);

} // namespace torchleak
