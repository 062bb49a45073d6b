#pragma once
// A device in the report's JSON (report_json.cpp): its name checked as c10 spells one, its
// timeline with the core's sentences, and a merged job's `ranks`, whose entries are devices.

#include "torchleak/model.h"

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace torchleak {

// The `device` member of `owner`: a type ("cpu", "cuda", a renamed PrivateUse1 backend's name)
// and an index from 0 to 127, or a SchemaError naming `field`. `optional`: absent or "" is "".
std::string deviceAt(const nlohmann::json& owner, const char* field, bool optional = false);

// One entry of `devices`; `at` is the iteration of each point (for the roles' sentence).
nlohmann::json deviceJson(const DeviceTimeline& device,
                          int iterations,
                          BoundaryKind boundary,
                          const std::vector<int64_t>& at);
DeviceTimeline deviceFrom(const nlohmann::json& deviceJson);

// The `ranks` section of a merged job report, its display lines beside the data, and back.
nlohmann::json ranksJson(const JobRanks& job, BoundaryKind boundary);
JobRanks ranksFrom(const nlohmann::json& ranksJson);

} // namespace torchleak
