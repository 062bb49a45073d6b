#include "roles_json.h"

#include "frame_json.h"
#include "json_numbers.h"
#include "torchleak/display_text.h"

namespace torchleak {

using nlohmann::json;
using namespace json_numbers;

json rolesJson(const DeviceTimeline& d) {
    json roles = json::array();
    for (size_t r = 0; r < kMemoryRoles; ++r) {
        const auto role = static_cast<MemoryRole>(r);
        json entry = {{"role", toString(role)}, {"label", roleLabel(role)}};
        std::vector<int64_t> series;
        for (const RoleBytes& point : d.roles_at_boundary) {
            series.push_back(point[r]);
        }
        entry["at_boundary"] = std::move(series);
        if (role != MemoryRole::Reserve) {
            series.clear();
            for (const RoleBytes& point : d.roles_at_peak) {
                series.push_back(point[r]);
            }
            entry["at_peak"] = std::move(series);
        }
        roles.push_back(std::move(entry));
    }
    return roles;
}

void rolesFrom(const json& d, DeviceTimeline& t) {
    if (!d.contains("roles") || !d["roles"].is_array()) {
        return;
    }
    std::vector<RoleBytes> atBoundary(t.allocated.size(), RoleBytes{});
    std::vector<RoleBytes> atPeak(t.peak.size(), RoleBytes{});
    for (const json& entry : d["roles"]) {
        if (const auto role = memoryRoleFromString(entry.value("role", ""))) {
            const auto r = static_cast<size_t>(*role);
            const auto boundarySeries = integersOr<int64_t>(entry, "at_boundary");
            const auto peakSeries = integersOr<int64_t>(entry, "at_peak");
            if (boundarySeries.size() != atBoundary.size() ||
                (!peakSeries.empty() && peakSeries.size() != atPeak.size())) {
                return;
            }
            for (size_t i = 0; i < boundarySeries.size(); ++i) {
                atBoundary[i][r] = boundarySeries[i];
            }
            for (size_t i = 0; i < peakSeries.size(); ++i) {
                atPeak[i][r] = peakSeries[i];
            }
        }
    }
    t.roles_at_boundary = std::move(atBoundary);
    t.roles_at_peak = std::move(atPeak);
}

json spikesJson(const DeviceTimeline& d, BoundaryKind boundary) {
    json spikes = json::array();
    for (const PeakSpike& s : d.spikes) {
        spikes.push_back({{"iteration", s.iteration},
                          {"peak_bytes", s.peak_bytes},
                          {"typical_peak_bytes", s.typical_peak_bytes},
                          {"role", s.role ? json(toString(*s.role)) : json(nullptr)},
                          {"role_rise_bytes", s.role_rise_bytes},
                          {"block_bytes", s.block_bytes},
                          {"site", s.site ? frameJson(*s.site, true) : json(nullptr)},
                          {"text", spikeText(s, boundary)}});
    }
    return spikes;
}

std::vector<PeakSpike> spikesFrom(const json& d) {
    std::vector<PeakSpike> spikes;
    if (!d.contains("spikes") || !d["spikes"].is_array()) {
        return spikes;
    }
    for (const json& s : d["spikes"]) {
        PeakSpike spike;
        spike.iteration = integerAt<int64_t>(s, "iteration");
        spike.peak_bytes = integerAt<int64_t>(s, "peak_bytes");
        spike.typical_peak_bytes = integerOr<int64_t>(s, "typical_peak_bytes", 0);
        if (s.contains("role") && s["role"].is_string()) {
            spike.role = memoryRoleFromString(s["role"].get<std::string>());
        }
        spike.role_rise_bytes = integerOr<int64_t>(s, "role_rise_bytes", 0);
        spike.block_bytes = integerOr<uint64_t>(s, "block_bytes", 0);
        if (s.contains("site") && s["site"].is_object()) {
            spike.site = frameFrom(s["site"]);
        }
        spikes.push_back(std::move(spike));
    }
    return spikes;
}

json roleBytesJson(const RoleBytes& roles) {
    json out = json::array();
    for (size_t r = 0; r < kMemoryRoles; ++r) {
        const auto role = static_cast<MemoryRole>(r);
        out.push_back({{"role", toString(role)}, {"label", roleLabel(role)}, {"bytes", roles[r]}});
    }
    return out;
}

std::optional<RoleBytes> roleBytesFrom(const json& owner) {
    if (!owner.contains("roles") || !owner["roles"].is_array()) {
        return std::nullopt;
    }
    RoleBytes roles{};
    for (const json& entry : owner["roles"]) {
        if (const auto role = memoryRoleFromString(entry.value("role", ""))) {
            bytesOf(roles, *role) = integerAt<int64_t>(entry, "bytes");
        }
    }
    return roles;
}

} // namespace torchleak
