#include "torchleak/allocation_sampler.h"

#include <atomic>
#include <chrono>

namespace torchleak {

uint64_t AllocationSampler::draw() noexcept {
    // Seeded per thread from a process-wide counter and the clock, so two threads (or two
    // ranks started together) do not sample in step.
    static std::atomic<uint64_t> s_threads{0};
    thread_local uint64_t t_state =
        (s_threads.fetch_add(1, std::memory_order_relaxed) + 1) * 0x9E3779B97F4A7C15ull ^
        static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
    uint64_t z = (t_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

} // namespace torchleak
