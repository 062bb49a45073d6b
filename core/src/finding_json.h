#pragma once
// One finding in the report's JSON (report_json.cpp writes the rest), the holder member a
// finding shares with its cause, and the text every member is dumped as.

#include "torchleak/model.h"

#include <nlohmann/json.hpp>

#include <optional>
#include <string>

namespace torchleak {

// `value` as the report writes it, `indent` as nlohmann's dump takes it: invalid UTF-8 (a file
// name from a foreign file system) replaced rather than thrown.
std::string dumped(const nlohmann::json& value, int indent);

// The finding as compact JSON text: what nlohmann would write for the same members (keys in
// order, its escapes and number format), built without a tree of them.
std::string findingText(const Finding& finding, const Report& report);

// The finding's member of a look (torchleak.verdicts/1): its verdict, site, device, bytes and
// growth, and its path and holder when it was explained; written as findingText writes.
std::string verdictText(const Finding& finding, BoundaryKind boundary);

// {"path_text", "path_short", "type", "growth_per_iteration", "growth_text", ...}, or null.
nlohmann::json holderJson(const std::optional<Holder>& holder, BoundaryKind boundary);

} // namespace torchleak
