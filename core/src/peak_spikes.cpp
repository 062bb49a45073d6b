#include "torchleak/peak_spikes.h"

#include "torchleak/trend.h"

#include <algorithm>

namespace torchleak {

namespace {
// Bytes are exact in a double below 8 PiB.
int64_t median(const std::vector<int64_t>& values) {
    return static_cast<int64_t>(upperMedian(std::vector<double>(values.begin(), values.end())));
}
} // namespace

std::vector<SpikePoint> findPeakSpikes(const std::vector<int64_t>& peaks,
                                       const std::vector<RoleBytes>& rolesAtPeak) {
    std::vector<SpikePoint> spikes;
    const size_t n = peaks.size();
    if (n < 4) {
        return spikes;
    }
    const int64_t typical = median(peaks);
    const bool withRoles = rolesAtPeak.size() == n;
    RoleBytes typicalRoles{};
    if (withRoles) {
        for (size_t r = 0; r < kMemoryRoles; ++r) {
            std::vector<int64_t> bytes;
            for (const RoleBytes& point : rolesAtPeak) {
                bytes.push_back(point[r]);
            }
            typicalRoles[r] = median(bytes);
        }
    }
    for (size_t i = 1; i + 1 < n; ++i) {
        const int64_t rise = peaks[i] - typical;
        // One iteration above both neighbours: the last point of a level that lasted, then fell,
        // is that level's end, not a spike.
        if (rise < std::max(kSpikeMinBytes, typical / 2) || peaks[i + 1] >= typical + rise / 2 ||
            peaks[i - 1] >= typical + rise / 2) {
            continue;
        }
        SpikePoint spike{i, typical, MemoryRole::Activations, 0};
        if (withRoles) {
            for (size_t r = 0; r < kMemoryRoles; ++r) {
                const int64_t roleRise = rolesAtPeak[i][r] - typicalRoles[r];
                if (static_cast<MemoryRole>(r) != MemoryRole::Reserve &&
                    roleRise > spike.roleRise) {
                    spike.role = static_cast<MemoryRole>(r);
                    spike.roleRise = roleRise;
                }
            }
        }
        spikes.push_back(spike);
    }
    std::stable_sort(spikes.begin(), spikes.end(), [&](const SpikePoint& a, const SpikePoint& b) {
        return peaks[a.point] > peaks[b.point];
    });
    if (spikes.size() > kSpikesListed) {
        spikes.resize(kSpikesListed);
    }
    return spikes;
}

} // namespace torchleak
