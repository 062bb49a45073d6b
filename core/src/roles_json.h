#pragma once
// The JSON of memory by role (memory_roles.h), for report_json.cpp: a device's `roles` series
// and the out-of-memory section's `roles`.

#include "torchleak/model.h"

#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

namespace torchleak {

// [{"role", "label", "at_boundary": [...], "at_peak": [...]}] in stacking order; the reserve
// has no `at_peak`.
nlohmann::json rolesJson(const DeviceTimeline& device);
// A device's roles read back into `device` (its points already read): a role this version does
// not know is skipped, a missing one is zero, series that do not match the points are dropped
// whole.
void rolesFrom(const nlohmann::json& deviceJson, DeviceTimeline& device);

// A device's `spikes` ([] when none), with the core's sentence for each, and back.
nlohmann::json spikesJson(const DeviceTimeline& device, BoundaryKind boundary);
std::vector<PeakSpike> spikesFrom(const nlohmann::json& deviceJson);

// [{"role", "label", "bytes"}] for one moment, and back (absent: none).
nlohmann::json roleBytesJson(const RoleBytes& roles);
std::optional<RoleBytes> roleBytesFrom(const nlohmann::json& owner);

} // namespace torchleak
