#pragma once
// RecorderLock: the lock every allocation event takes in AllocationRecorder.
//
// An event holds it for a few table operations, and nearly always nobody waits: Python code
// allocates one thread at a time, and autograd's workers seldom meet it. std::mutex there was
// a call into libc and a locked instruction on each side, 1.5% of the cycles of a tracked loop
// of small tensor ops (perf, `make bench`'s (b)); this is one exchange to take it and a plain store
// to give it back. A waiter spins briefly, then yields its core: a boundary or a report that holds
// the lock for milliseconds does not starve the thread that holds it on a two-core machine.
//
// Concurrency: lock()/unlock() from any thread, no GIL, no allocation, never throws; not
// recursive (an event never re-enters the recorder: the hook drops events raised inside it).

#include <atomic>
#include <thread>

namespace torchleak {

class RecorderLock {
  public:
    void lock() noexcept {
        while (d_held.exchange(true, std::memory_order_acquire)) {
            for (int spins = 0; d_held.load(std::memory_order_relaxed); ++spins) {
                if (spins >= kSpinsBeforeYield) {
                    std::this_thread::yield();
                }
            }
        }
    }
    void unlock() noexcept { d_held.store(false, std::memory_order_release); }

  private:
    static constexpr int kSpinsBeforeYield = 100;
    std::atomic<bool> d_held{false};
};

} // namespace torchleak
