#pragma once
// YoungBlocks: the newest few allocations, counted but not yet filed under their site.
//
// Most blocks of a loop of small ops die a few allocations after their birth: `(a + b) * 0.5`
// frees `a + b` two allocations later. Filing each one in the live table and its site group,
// then taking it out again, was about a third of the recorder's cost per event (perf of `make
// bench`'s (b)). AllocationRecorder keeps its newest kSlots blocks here instead: a free that
// finds its block here takes it back with no table touched, and the block that would overflow
// the holder, the oldest, is filed then. Their bytes are in the device totals from birth, so
// what is filed late is only which site holds them, and everything that reads sites or live
// blocks files every young block first (or reads them here).
//
// Not synchronised: its owner's lock serialises every call.

#include "torchleak/live_block_table.h"

#include <array>
#include <cstddef>
#include <cstdint>

namespace torchleak {

class YoungBlocks {
  public:
    // Enough for the temporaries of an expression or two. A free scans every slot's pointer
    // (one cache line), so more slots cost every free that does not find its block.
    static constexpr size_t kSlots = 8;
    static constexpr size_t kNone = kSlots;

    size_t size() const noexcept { return d_count; }
    bool empty() const noexcept { return d_count == 0; }
    bool full() const noexcept { return d_count == kSlots; }

    // The slot holding `ptr`, or kNone.
    size_t find(uintptr_t ptr) const noexcept {
        if (ptr == 0 || d_count == 0) {
            return kNone;
        }
        size_t at = kNone;
        for (size_t i = 0; i < kSlots; ++i) {
            at = d_ptrs[i] == ptr ? i : at;
        }
        return at;
    }

    // The slot of the block born first; the holder must not be empty.
    size_t oldest() const noexcept {
        size_t at = kNone;
        for (size_t i = 0; i < kSlots; ++i) {
            if (d_ptrs[i] != 0 && (at == kNone || d_recs[i].sequence < d_recs[at].sequence)) {
                at = i;
            }
        }
        return at;
    }

    // Keeps a block at `ptr` and returns its record for the caller to fill; the holder must
    // not be full, and `ptr` must not be in it.
    BlockRecord& put(uintptr_t ptr) noexcept {
        size_t i = 0;
        while (d_ptrs[i] != 0) {
            ++i;
        }
        d_ptrs[i] = ptr;
        ++d_count;
        return d_recs[i];
    }

    uintptr_t pointer(size_t slot) const noexcept { return d_ptrs[slot]; }
    const BlockRecord& record(size_t slot) const noexcept { return d_recs[slot]; }

    // Empties a slot and returns what it held.
    BlockRecord take(size_t slot) noexcept {
        d_ptrs[slot] = 0;
        --d_count;
        return d_recs[slot];
    }

    // fn(ptr, record) for every young block.
    template <typename Fn> void forEach(Fn&& fn) const {
        for (size_t i = 0; i < kSlots; ++i) {
            if (d_ptrs[i] != 0) {
                fn(d_ptrs[i], d_recs[i]);
            }
        }
    }

  private:
    std::array<uintptr_t, kSlots> d_ptrs{}; // 0: a free slot (no block lives at address 0)
    std::array<BlockRecord, kSlots> d_recs{};
    size_t d_count = 0;
};

} // namespace torchleak
