#pragma once
// How bad is it: each leak's severity, and the report's score, grade, critical issues and
// prioritised recommendations.

#include "torchleak/config.h"
#include "torchleak/model.h"

#include <optional>

namespace torchleak {

// When the cause's device is full at its rate alone, or nothing when the capacity is unknown.
std::optional<int64_t> projectedOomIteration(const Cause& c, const Report& report);

// A cause's severity from its bytes over the run and its device's projected time to OOM: full
// within a short training run (10,000 iterations, or 10 runs of this length) is critical,
// within a long one (10^6) a warning; critical_bytes and warning_bytes over the run count too.
Severity severityOfCause(const Cause& c, const Report& report, const AnalysisConfig& config);

// Score, grade, critical issues and recommendations, one entry per cause.
Summary summarize(const Report& report);

} // namespace torchleak
