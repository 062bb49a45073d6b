#pragma once
// A finding's `growth_since` in the report's JSON (report_json.cpp): when its growth began, its
// rate, where it stopped, a staircase's step and period, an earlier stretch that paused, and
// the core's sentence for it; and back.

#include "torchleak/model.h"

#include <nlohmann/json.hpp>

namespace torchleak {

nlohmann::json growthSinceJson(const Finding& finding, BoundaryKind boundary);
GrowthSince growthSinceFrom(const nlohmann::json& growthSince);

} // namespace torchleak
