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
// It also knows which thread holds it: the CPU allocator tap holds this lock around each event
// (cpu_allocator_tap.h) and asks heldByCaller() first, so an allocation made while its own
// thread holds the lock (inside the hook, or in a recorder call) is dropped instead of waiting
// for itself. The owner is written by the holder after taking the lock and cleared before
// giving it back: only the holding thread ever sees its own id there.
//
// Concurrency: lock()/unlock() from any thread, no GIL, no allocation, never throws; not
// recursive (an event never re-enters the recorder: the hook drops events raised inside it).

#include <atomic>
#include <cstdint>
#include <thread>

#if defined(__has_builtin)
#    if __has_builtin(__builtin_thread_pointer) && (defined(__x86_64__) || defined(__aarch64__))
#        define TORCHLEAK_HAS_THREAD_POINTER 1
#    endif
#endif

namespace torchleak {

class RecorderLock {
  public:
    void lock() noexcept {
        const uintptr_t self = callerThread();
        while (d_held.exchange(true, std::memory_order_acquire)) {
            for (int spins = 0; d_held.load(std::memory_order_relaxed); ++spins) {
                if (spins >= kSpinsBeforeYield) {
                    std::this_thread::yield();
                }
            }
        }
        d_owner.store(self, std::memory_order_relaxed);
    }
    void unlock() noexcept {
        d_owner.store(0, std::memory_order_relaxed);
        d_held.store(false, std::memory_order_release);
    }
    bool heldByCaller() const noexcept {
        return d_owner.load(std::memory_order_relaxed) == callerThread();
    }

  private:
    static constexpr int kSpinsBeforeYield = 100;
    std::atomic<bool> d_held{false};
    std::atomic<uintptr_t> d_owner{0};

    // Tells the calling thread from every other live one. The thread pointer where the
    // compiler reads it in one instruction; std::this_thread::get_id() was a call into libc on
    // every event, twice.
    static uintptr_t callerThread() noexcept {
#ifdef TORCHLEAK_HAS_THREAD_POINTER
        return reinterpret_cast<uintptr_t>(__builtin_thread_pointer());
#else
        static thread_local char marker;
        return reinterpret_cast<uintptr_t>(&marker);
#endif
    }
};

} // namespace torchleak
