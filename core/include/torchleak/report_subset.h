#pragma once
// A report cut down to some of its findings: what a rank sends rank 0 when its whole report is
// too big to send (kernel_ext's _job.py). Every section that names findings by index (causes,
// recommendations, the out-of-memory section) is renumbered with them, so the part reads back
// like any report; an entry that named only dropped findings goes with them.

#include "torchleak/model.h"

#include <string>
#include <vector>

namespace torchleak {

// `report` with only the findings at `keep` (indices into report.findings, in the order given),
// and `warning` added to its warnings when not empty. Throws InvalidArgument for an index the
// report does not have or one named twice.
Report keepFindings(Report report, const std::vector<int>& keep, const std::string& warning);

// A live update (ReportInputs::live_findings) sends each site's stack once: the findings a site
// was split into by holder share it, and fifty stores filled by one line repeated the same 32
// frames fifty times in every update (150 KB of 270). Later findings of a site have no stack;
// the finished report keeps every one.
void shareStacksBySite(Report& report);

} // namespace torchleak
