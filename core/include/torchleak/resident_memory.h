#pragma once
// The process's resident memory beside what torchleak tracks. Tensors are not all a process
// holds: Python objects, a native library's buffers or an allocator's cache can grow while no
// tracked tensor does, and then a report that finds no leak must not read as "nothing grows".
// The bindings sample the resident set at each boundary; this finds growth that the tracked
// CPU memory does not account for.

#include "torchleak/model.h"

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace torchleak {

struct ResidentSample {
    int64_t iteration = 0; // the boundary's point, as series_iterations counts them
    int64_t bytes = 0;
};

struct UntrackedGrowth {
    int64_t from_iteration = 0;
    int64_t to_iteration = 0;
    int64_t resident_growth = 0; // the resident set's, over the judged iterations
    int64_t tracked_growth = 0;  // the tracked CPU memory's over the same iterations
};

// Growth outside tracked memory worth saying: at least this much and 5% of the resident set.
inline constexpr int64_t kUntrackedGrowthMin = int64_t{64} << 20;

// The judged samples (from the boundary ending warm-up on) that rose at most boundaries, still
// rose in their second half (by a quarter of the whole: an allocator's warm-up that stopped is
// not news), and by kUntrackedGrowthMin more than `cpu`'s tracked bytes did over the same points
// (`at`: each point's iteration, empty when every boundary was kept); nothing with fewer than four.
std::optional<UntrackedGrowth> findUntrackedGrowth(std::span<const ResidentSample> samples,
                                                   const DeviceTimeline* cpu,
                                                   const std::vector<int64_t>& at,
                                                   int warmup);

} // namespace torchleak
