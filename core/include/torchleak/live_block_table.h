#pragma once
// The blocks the recorder knows: what one allocation event leaves behind until its free.

#include "torchleak/birth_phase.h"
#include "torchleak/pointer_table.h"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

namespace torchleak {

using StackToken = uint32_t; // 0: no Python stack was captured
using NodeToken = uint16_t;  // 0: not inside backward

// A device as the allocator names it: c10::DeviceType and index, without including c10.
struct DeviceKey {
    int8_t type = 0; // c10::DeviceType: 0 = CPU, 1 = CUDA, ...
    int8_t index = -1;
    bool operator==(const DeviceKey&) const = default;
};

struct BlockRecord {
    uint64_t size = 0;
    uint64_t weight = 0;    // the bytes it stands for in every total: its size, unless sampled
                            // (allocation_sampler.h)
    uint64_t sequence = 0;  // position of the allocation event in the run
    uint32_t iteration = 0; // the iteration (0-based) during which it was allocated
    StackToken stack = 0;
    NodeToken node = 0;
    DeviceKey device;
    BirthPhase phase = BirthPhase::Forward;
    HeldAs heldAs = HeldAs::Unknown;
};

// Every block that was allocated while tracking and has not been freed yet, keyed by the
// pointer the allocator reported. Its owner (AllocationRecorder) serialises access.
using LiveBlockTable = PointerTable<BlockRecord>;

} // namespace torchleak
