#pragma once
// AllocationSampler: which allocations a long run records (run watch's sampling).
//
// Every block of at least `threshold` bytes is recorded whole; a smaller one is recorded with
// probability size / threshold and then stands for `threshold` bytes. Each recorded block's
// weight is therefore an unbiased estimate of the bytes it represents (E[weight] = size), big
// blocks (activations, the leaks that end jobs) are exact, and the many small allocations of a
// step cost one random draw each instead of a stack capture and a table entry. The draw is
// random, not every n-th byte: a training step repeats its allocations in the same order, and a
// fixed stride would pick the same sites every step.
//
// Concurrency: weigh() runs inside the allocator hook on any thread: noexcept, no lock, no
// allocation; each thread draws from its own generator. The threshold is set before the hook
// is installed and only read afterwards.

#include <cstdint>

namespace torchleak {

class AllocationSampler {
  public:
    // 0: every allocation is recorded whole.
    explicit AllocationSampler(uint64_t threshold = 0) noexcept : d_threshold(threshold) {}

    // The bytes the allocation stands for: its size when recorded whole, the threshold when a
    // small block is sampled, 0 when it is skipped.
    uint64_t weigh(uint64_t size) const noexcept {
        if (size >= d_threshold) {
            return size;
        }
        return draw() % d_threshold < size ? d_threshold : 0;
    }
    uint64_t threshold() const noexcept { return d_threshold; }

  private:
    static uint64_t draw() noexcept; // the calling thread's generator (splitmix64)
    uint64_t d_threshold;
};

} // namespace torchleak
