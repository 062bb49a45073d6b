#pragma once
// From a recording to a report: group allocation stacks by site, build each site's series of
// live bytes, give it a verdict, explain why its blocks are alive, score the whole. Pure C++
// (no torch, no Python): the bindings supply what only Python knows through the three
// interfaces of report_inputs.h.

#include "torchleak/recorder.h"
#include "torchleak/report_inputs.h"
#include "torchleak/retention.h"

namespace torchleak {

// Builds the report of a recording: one finding per site group, biggest leaks first. With an
// explainer, every finding also gets its retaining path, holder and a specific suggestion.
Report buildReport(const AllocationRecorder& recorder,
                   const ReportInputs& inputs,
                   StackSymbolizer& symbolizer,
                   BlockDescriber& describer,
                   RetentionExplainer* explainer = nullptr);

} // namespace torchleak
