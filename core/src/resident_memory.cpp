#include "torchleak/resident_memory.h"

#include <algorithm>

namespace torchleak {

namespace {

// The tracked bytes at the last kept point taken at or before `iteration`.
int64_t trackedAt(const DeviceTimeline& cpu, const std::vector<int64_t>& at, int64_t iteration) {
    if (cpu.allocated.empty()) {
        return 0;
    }
    size_t point = 0;
    for (size_t k = 0; k < cpu.allocated.size(); ++k) {
        if (pointIteration(at, cpu.allocated.size(), k) > iteration) {
            break;
        }
        point = k;
    }
    return cpu.allocated[point];
}

} // namespace

std::optional<UntrackedGrowth> findUntrackedGrowth(std::span<const ResidentSample> samples,
                                                   const DeviceTimeline* cpu,
                                                   const std::vector<int64_t>& at,
                                                   int warmup) {
    // The point ending the last warm-up iteration is the judged part's baseline, as for sites.
    const int64_t baseline = std::max(warmup, 1) - 1;
    std::vector<ResidentSample> judged;
    for (const ResidentSample& s : samples) {
        if (s.iteration >= baseline && s.bytes > 0) {
            judged.push_back(s);
        }
    }
    if (judged.size() < 4) {
        return std::nullopt;
    }
    size_t rises = 0;
    for (size_t k = 1; k < judged.size(); ++k) {
        rises += judged[k].bytes > judged[k - 1].bytes ? 1 : 0;
    }
    UntrackedGrowth g;
    g.from_iteration = judged.front().iteration;
    g.to_iteration = judged.back().iteration;
    g.resident_growth = judged.back().bytes - judged.front().bytes;
    if (cpu != nullptr) {
        g.tracked_growth =
            trackedAt(*cpu, at, g.to_iteration) - trackedAt(*cpu, at, g.from_iteration);
    }
    const int64_t untracked = g.resident_growth - std::max<int64_t>(g.tracked_growth, 0);
    const bool risesMostly =
        static_cast<double>(rises) >= 0.6 * static_cast<double>(judged.size() - 1);
    // An allocator's or a library's warm-up grows early and stops: not news. Growth worth a
    // warning goes on, in the judged part's second half too, at a quarter of its whole.
    const ResidentSample& middle = judged[judged.size() / 2];
    const bool stillGrowing =
        4 * (judged.back().bytes - middle.bytes) >= g.resident_growth && g.resident_growth > 0;
    if (!risesMostly || !stillGrowing ||
        untracked < std::max(kUntrackedGrowthMin, judged.front().bytes / 20)) {
        return std::nullopt;
    }
    return g;
}

} // namespace torchleak
