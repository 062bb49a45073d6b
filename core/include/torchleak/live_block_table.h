#pragma once
// Every block that was allocated while tracking and has not been freed yet, keyed by the
// pointer the allocator reported.
//
// Open addressing with linear probing and backward-shift deletion: an insert or erase touches
// one or two cache lines and allocates nothing unless the table has to grow (load above 1/2),
// which keeps the allocator hook allocation-light. The table is not synchronised; its owner
// (AllocationRecorder) serialises access.

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
    uint64_t sequence = 0;  // position of the allocation event in the run
    uint32_t iteration = 0; // the iteration (0-based) during which it was allocated
    StackToken stack = 0;
    NodeToken node = 0;
    DeviceKey device;
};

class LiveBlockTable {
  public:
    explicit LiveBlockTable(size_t initialCapacity = 1024);

    // Returns false when the pointer is already present (its record is replaced: the allocator
    // reused an address whose free we never saw).
    bool insert(uintptr_t ptr, const BlockRecord& record);
    std::optional<BlockRecord> erase(uintptr_t ptr) noexcept;
    const BlockRecord* find(uintptr_t ptr) const noexcept;
    size_t size() const noexcept { return d_size; }
    size_t capacity() const noexcept { return d_slots.size(); }
    void clear() noexcept;

    template <typename Fn> void forEach(Fn&& fn) const {
        for (const Slot& slot : d_slots) {
            if (slot.ptr != 0) {
                fn(slot.ptr, slot.record);
            }
        }
    }

  private:
    struct Slot {
        uintptr_t ptr = 0; // 0 marks an empty slot; allocators never hand out null
        BlockRecord record;
    };

    size_t indexFor(uintptr_t ptr) const noexcept;
    void grow();

    std::vector<Slot> d_slots;
    size_t d_mask = 0;
    size_t d_size = 0;
};

} // namespace torchleak
