#pragma once
// An iteration whose peak jumps: the "memory spike" of allocation-timeline analysers
// (gpumemprof's), found over a device's per-iteration peaks and explained by the role that
// rose and the biggest block alive at that peak. A spike is no leak (it comes back down); it is
// what decides whether a run fits on its device.

#include "torchleak/memory_roles.h"

#include <cstddef>
#include <cstdint>
#include <vector>

namespace torchleak {

// A peak is a spike when it rises over the device's typical (median) peak by at least half the
// typical peak and by kSpikeMinBytes, and the peaks before and after it are below halfway (a
// level that lasted is no spike where it ends). The first
// point (lazy state, the optimizer's first step) and the last (nothing after it says whether it
// came back down) are never spikes; at most kSpikesListed, the biggest rises first.
inline constexpr int64_t kSpikeMinBytes = int64_t{1} << 20;
inline constexpr size_t kSpikesListed = 5;

struct SpikePoint {
    size_t point = 0;                          // index into the device's series
    int64_t typical = 0;                       // the median of the device's peaks
    MemoryRole role = MemoryRole::Activations; // the role that rose most over its median
    int64_t roleRise = 0;
};

// `rolesAtPeak` may be empty (a report without roles): the spikes then name no role's rise.
std::vector<SpikePoint> findPeakSpikes(const std::vector<int64_t>& peaks,
                                       const std::vector<RoleBytes>& rolesAtPeak);

} // namespace torchleak
