#include "torchleak/live_block_table.h"

#include <bit>

namespace torchleak {

LiveBlockTable::LiveBlockTable(size_t initialCapacity) {
    size_t cap = std::bit_ceil(initialCapacity < 16 ? size_t{16} : initialCapacity);
    d_slots.resize(cap);
    d_mask = cap - 1;
}

size_t LiveBlockTable::indexFor(uintptr_t ptr) const noexcept {
    // Allocator pointers are aligned and clustered; a multiplicative hash spreads the high bits
    // of the product over the mask.
    uint64_t h = static_cast<uint64_t>(ptr) * 0x9E3779B97F4A7C15ull;
    return static_cast<size_t>(h >> 17) & d_mask;
}

bool LiveBlockTable::insert(uintptr_t ptr, const BlockRecord& record) {
    if ((d_size + 1) * 2 > d_slots.size()) {
        grow();
    }
    size_t i = indexFor(ptr);
    while (d_slots[i].ptr != 0) {
        if (d_slots[i].ptr == ptr) {
            d_slots[i].record = record;
            return false;
        }
        i = (i + 1) & d_mask;
    }
    d_slots[i].ptr = ptr;
    d_slots[i].record = record;
    ++d_size;
    return true;
}

const BlockRecord* LiveBlockTable::find(uintptr_t ptr) const noexcept {
    size_t i = indexFor(ptr);
    while (d_slots[i].ptr != 0) {
        if (d_slots[i].ptr == ptr) {
            return &d_slots[i].record;
        }
        i = (i + 1) & d_mask;
    }
    return nullptr;
}

std::optional<BlockRecord> LiveBlockTable::erase(uintptr_t ptr) noexcept {
    size_t i = indexFor(ptr);
    while (d_slots[i].ptr != ptr) {
        if (d_slots[i].ptr == 0) {
            return std::nullopt; // a block allocated before tracking started
        }
        i = (i + 1) & d_mask;
    }
    BlockRecord removed = d_slots[i].record;
    // Backward-shift deletion: pull later members of the probe run into the hole so that no
    // tombstones accumulate over millions of alloc/free pairs.
    size_t hole = i;
    size_t j = (i + 1) & d_mask;
    while (d_slots[j].ptr != 0) {
        size_t home = indexFor(d_slots[j].ptr);
        bool movable = ((j - home) & d_mask) >= ((j - hole) & d_mask);
        if (movable) {
            d_slots[hole] = d_slots[j];
            hole = j;
        }
        j = (j + 1) & d_mask;
    }
    d_slots[hole].ptr = 0;
    --d_size;
    return removed;
}

void LiveBlockTable::clear() noexcept {
    for (Slot& slot : d_slots) {
        slot.ptr = 0;
    }
    d_size = 0;
}

void LiveBlockTable::grow() {
    std::vector<Slot> old;
    old.swap(d_slots);
    d_slots.resize(old.size() * 2);
    d_mask = d_slots.size() - 1;
    d_size = 0;
    for (const Slot& slot : old) {
        if (slot.ptr != 0) {
            insert(slot.ptr, slot.record);
        }
    }
}

} // namespace torchleak
