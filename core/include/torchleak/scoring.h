#pragma once
// How bad is it: each leak's severity, and the report's score, grade, critical issues and
// prioritised recommendations.

#include "torchleak/config.h"
#include "torchleak/model.h"

namespace torchleak {

// From the bytes a leak would hold over the run (rate x iterations, at least what is live).
Severity severityOf(const Finding& f, int iterations, const AnalysisConfig& config);

// A leak that fills its device within ten runs of this length is critical whatever its size.
void escalateByProjection(Report& report);

// Score, grade, critical issues and recommendations, from the final findings and devices.
Summary summarize(const Report& report);

} // namespace torchleak
