#include "device_json.h"

#include "json_numbers.h"
#include "roles_json.h"
#include "torchleak/devices.h"
#include "torchleak/display_text.h"
#include "torchleak/errors.h"
#include "torchleak/trend.h"

#include <cctype>
#include <cmath>

namespace torchleak {

using nlohmann::json;
using namespace json_numbers;

// A device as c10 spells one: a type ("cpu", "cuda", a renamed PrivateUse1 backend's name) and
// an index from 0 to 127 (c10::DeviceIndex is an int8_t). The views and the memory-snapshot
// export build per-index structures, so "cuda:2000000000" in a received report is refused
// here, with the field named, instead of exhausting memory there.
std::string deviceAt(const json& owner, const char* field, bool optional) {
    if (optional && !owner.contains("device")) {
        return "";
    }
    std::string name = owner.at("device").get<std::string>();
    if (optional && name.empty()) {
        return name;
    }
    size_t colon = name.find(':');
    std::string_view type = std::string_view(name).substr(0, colon);
    bool good =
        !type.empty() && type.size() <= 64 && !std::isdigit(static_cast<unsigned char>(type[0]));
    for (char c : type) {
        good = good && (std::isalnum(static_cast<unsigned char>(c)) || c == '_') &&
               static_cast<unsigned char>(c) < 128;
    }
    if (good && colon != std::string::npos) {
        std::string_view digits = std::string_view(name).substr(colon + 1);
        good = parseDeviceIndex(digits) && digits.size() <= 3;
    }
    if (!good) {
        std::string shown = name.size() > 40 ? name.substr(0, 40) + "..." : name;
        throw SchemaError(std::string(field) + " '" + shown +
                          "' is not a device (a type and an index from 0 to 127: cpu, cuda:0)");
    }
    return name;
}

json deviceJson(const DeviceTimeline& d,
                int iterations,
                BoundaryKind boundary,
                const std::vector<int64_t>& at) {
    json j = {{"device", d.device},
              {"capacity_bytes", d.capacity_bytes},
              {"allocated", d.allocated},
              {"reserved", d.reserved},
              {"peak", d.peak},
              {"leak_bytes_per_iteration", d.leak_bytes_per_iteration},
              {"projected_oom_iteration", optionalJson(d.projected_oom_iteration)},
              {"verdict", d.verdict},
              {"fragmentation_ratio", d.fragmentation_ratio},
              {"projection_text", projectionText(d, iterations, boundary)},
              {"text", deviceText(d, iterations, boundary)}};
    // In cell watch a point is a run of any cell while the leak's rate is per run of its own
    // cell: the chart's trend line takes the curve's least-squares slope (bytes per iteration
    // of `at`), written here so that no view fits a line itself.
    if (boundary == BoundaryKind::Cell && d.allocated.size() > 1) {
        std::vector<double> x, y;
        for (size_t i = 0; i < d.allocated.size(); ++i) {
            x.push_back(static_cast<double>(pointIteration(at, d.allocated.size(), i)));
            y.push_back(static_cast<double>(d.allocated[i]));
        }
        const double slope = fitLine(x, y).slope;
        j["allocated_trend_per_iteration"] = std::isfinite(slope) ? slope : 0.0;
    }
    if (!d.roles_at_boundary.empty()) {
        j["roles"] = rolesJson(d);
        j["roles_text"] = rolesText(d, at, boundary);
    }
    // [] when roles were measured and no peak jumped; absent in a report from before spikes.
    if (!d.roles_at_boundary.empty() || !d.spikes.empty()) {
        j["spikes"] = spikesJson(d, boundary);
    }
    return j;
}

DeviceTimeline deviceFrom(const json& d) {
    DeviceTimeline t;
    t.device = deviceAt(d, "devices[].device");
    t.capacity_bytes = integerOr<uint64_t>(d, "capacity_bytes", 0);
    t.allocated = integersAt<int64_t>(d, "allocated");
    t.reserved = integersAt<int64_t>(d, "reserved");
    t.peak = integersOr<int64_t>(d, "peak");
    t.leak_bytes_per_iteration = integerOr<int64_t>(d, "leak_bytes_per_iteration", 0);
    if (d.contains("projected_oom_iteration") && !d["projected_oom_iteration"].is_null()) {
        t.projected_oom_iteration = integerAt<int64_t>(d, "projected_oom_iteration");
    }
    t.verdict = d.value("verdict", "ok");
    t.fragmentation_ratio = realOr(d, "fragmentation_ratio", 0.0);
    rolesFrom(d, t);
    t.spikes = spikesFrom(d);
    return t;
}

// The `ranks` section of a merged job report, its display lines beside the data.
json ranksJson(const JobRanks& job, BoundaryKind boundary) {
    json ranks = json::array();
    for (const RankSummary& rank : job.ranks) {
        json devices = json::array();
        for (const DeviceTimeline& d : rank.devices) {
            devices.push_back(deviceJson(d, rank.iterations, boundary, rank.series_iterations));
        }
        json rj = {{"rank", rank.rank},
                   {"status", rank.status},
                   {"note", rank.note},
                   {"iterations", rank.iterations},
                   {"leaks", rank.leaks},
                   {"leak_bytes_per_iteration", rank.leak_bytes_per_iteration},
                   {"peak_bytes", rank.peak_bytes},
                   {"devices", std::move(devices)},
                   {"text", rankText(rank, boundary)}};
        if (!rank.series_iterations.empty()) {
            rj["series_iterations"] = rank.series_iterations;
        }
        ranks.push_back(std::move(rj));
    }
    return {{"world_size", job.world_size},
            {"ranks", std::move(ranks)},
            {"skew_text", rankSkewText(job, boundary)}};
}

JobRanks ranksFrom(const json& j) {
    JobRanks job;
    job.world_size = integerAt<int>(j, "world_size");
    if (job.world_size < 1) {
        throw SchemaError("ranks.world_size must be at least 1");
    }
    for (const json& rj : j.at("ranks")) {
        RankSummary rank;
        rank.rank = integerAt<int>(rj, "rank");
        if (rank.rank < 0 || rank.rank >= job.world_size) {
            throw SchemaError("rank " + std::to_string(rank.rank) + " is outside the job");
        }
        rank.status = rj.at("status").get<std::string>();
        if (rank.status != "ok" && rank.status != "failed" && rank.status != "missing") {
            throw SchemaError("a rank's status is ok, failed or missing, got '" + rank.status +
                              "'");
        }
        rank.note = rj.value("note", "");
        rank.iterations = integerOr<int>(rj, "iterations", 0);
        rank.leaks = integerOr<int>(rj, "leaks", 0);
        rank.leak_bytes_per_iteration = integerOr<int64_t>(rj, "leak_bytes_per_iteration", 0);
        rank.peak_bytes = integerOr<int64_t>(rj, "peak_bytes", 0);
        for (const json& d : rj.value("devices", json::array())) {
            rank.devices.push_back(deviceFrom(d));
        }
        rank.series_iterations = integersOr<int64_t>(rj, "series_iterations");
        job.ranks.push_back(std::move(rank));
    }
    return job;
}

} // namespace torchleak
