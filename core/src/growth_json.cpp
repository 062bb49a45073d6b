#include "growth_json.h"

#include "json_numbers.h"
#include "torchleak/display_text.h"

namespace torchleak {

using json_numbers::optionalJson;
using nlohmann::json;

json growthSinceJson(const Finding& f, BoundaryKind boundary) {
    const GrowthSince& g = *f.growth_since;
    json j = {{"iteration", g.iteration},
              {"bytes_per_iteration", g.bytes_per_iteration},
              {"stopped_at", optionalJson(g.stopped_at)},
              {"grown_bytes", g.grown_bytes},
              {"text", growthText(f, boundary)}};
    if (g.stopped_at) {
        j["flat_iterations"] = g.flat_iterations;
    }
    if (g.settles_at) {
        j["settles_at"] = *g.settles_at;
    }
    if (g.step_bytes && g.step_every) {
        j["step_bytes"] = *g.step_bytes;
        j["step_every"] = *g.step_every;
    }
    if (g.earlier) {
        j["earlier"] = {{"iteration", g.earlier->iteration},
                        {"stopped_at", g.earlier->stopped_at},
                        {"grown_bytes", g.earlier->grown_bytes}};
    }
    if (g.bounded) {
        j["bounded"] = {{"capacity", g.bounded->capacity}, {"entries", g.bounded->entries}};
    }
    return j;
}

GrowthSince growthSinceFrom(const json& g) {
    GrowthSince since;
    since.iteration = g.at("iteration").get<int64_t>();
    since.bytes_per_iteration = g.value("bytes_per_iteration", int64_t{0});
    if (auto stop = g.find("stopped_at"); stop != g.end() && !stop->is_null()) {
        since.stopped_at = stop->get<int64_t>();
    }
    since.grown_bytes = g.value("grown_bytes", int64_t{0});
    since.flat_iterations = g.value("flat_iterations", int64_t{0});
    if (auto settles = g.find("settles_at"); settles != g.end() && !settles->is_null()) {
        since.settles_at = settles->get<int64_t>();
    }
    if (g.contains("step_bytes") && g.contains("step_every")) {
        since.step_bytes = g.at("step_bytes").get<int64_t>();
        since.step_every = g.at("step_every").get<int64_t>();
    }
    if (auto e = g.find("earlier"); e != g.end() && e->is_object()) {
        since.earlier = GrowthSince::Earlier{e->at("iteration").get<int64_t>(),
                                             e->at("stopped_at").get<int64_t>(),
                                             e->at("grown_bytes").get<int64_t>()};
    }
    if (auto b = g.find("bounded"); b != g.end() && b->is_object()) {
        since.bounded =
            GrowthSince::Bounded{b->at("capacity").get<int64_t>(), b->at("entries").get<int64_t>()};
    }
    return since;
}

} // namespace torchleak
