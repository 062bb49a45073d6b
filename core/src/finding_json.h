#pragma once
// One finding in the report's JSON (report_json.cpp writes the rest), and the holder member a
// finding shares with its cause.

#include "torchleak/model.h"

#include <nlohmann/json.hpp>

#include <optional>
#include <string>

namespace torchleak {

// The finding as compact JSON text: what nlohmann would write for the same members (keys in
// order, its escapes and number format), built without a tree of them.
std::string findingText(const Finding& finding, const Report& report);

// {"path_text", "path_short", "type", "growth_per_iteration", "growth_text", ...}, or null.
nlohmann::json holderJson(const std::optional<Holder>& holder, BoundaryKind boundary);

} // namespace torchleak
