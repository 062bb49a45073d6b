#pragma once
// From a recording to a report: group allocation stacks by site, build each site's series of
// live bytes, give it a verdict, explain why its blocks are alive, score the whole. Pure C++
// (no torch, no Python): the bindings supply what only Python knows through the three
// interfaces of report_inputs.h.

#include "torchleak/recorder.h"
#include "torchleak/report_inputs.h"
#include "torchleak/retention.h"
#include "torchleak/settled_sites.h"

namespace torchleak {

// Builds the report of a recording: one finding per site group, biggest leaks first. With an
// explainer, every finding also gets its retaining path, holder and a specific suggestion.
// A look (ReportInputs::verdicts_only, no explainer) given `settled` leaves out the last look's
// settled sites that did not change since, and leaves it this look's (settled_sites.h).
Report buildReport(const AllocationRecorder& recorder,
                   const ReportInputs& inputs,
                   StackSymbolizer& symbolizer,
                   BlockDescriber& describer,
                   RetentionExplainer* explainer = nullptr,
                   SettledSites* settled = nullptr);

} // namespace torchleak
