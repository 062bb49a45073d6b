#pragma once
// CpuAllocatorTap: every CPU allocation and free of the process, whichever thread makes it.
//
// c10 reports memory events only to the PROFILER_STATE of the allocating thread (a thread-local
// slot: c10/core/Allocator.cpp's reportMemoryUsageToProfiler reads ThreadLocalDebugInfo's
// PROFILER_STATE, c10/util/ThreadLocalDebugInfo.cpp). Autograd workers inherit the tracking
// thread's slot, but threads the tracked code starts (DataLoader pin-memory threads, prefetchers,
// thread pools, a backward() called on a worker) never do: their tensors were missed, and a tensor
// allocated on the tracking thread and freed on another stayed "live" forever. PyTorch has no
// process-wide reporter yet (a global one is proposed upstream, not merged). So for the CPU,
// torchleak puts a thin allocator in front of c10's CPU allocator while a session runs: it
// calls the original, swaps the DataPtr's deleter for one that reports the free and then calls
// the original deleter, and reports both events from the thread that makes them. Device
// allocators keep the thread-local path (the CUDA caching allocator reports under its own lock
// and propagates through autograd's thread-local state).
//
// This header names no torch type.

#include "torchleak/recorder_lock.h"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace torchleak {

// The lock the tap holds around every event it routes (process lifetime). The sink's recorder
// takes it as its own (AllocationRecorder(RecorderLock&)), so a CPU event costs one lock: the
// tap needs it anyway to know the sink is still attached while it calls it.
RecorderLock& cpuTapLock() noexcept;

// Where the tap sends events. Called on any thread, noexcept, without the GIL, with
// cpuTapLock() held: a sink must not allocate through c10, nor wait on anything a thread that
// waits for that lock may hold.
class CpuEventSink {
  public:
    virtual ~CpuEventSink() = default;
    virtual void cpuAllocated(void* ptr, size_t size) noexcept = 0;
    virtual void cpuFreed(void* ptr) noexcept = 0;
    // The CPU allocator refused `size` bytes (it throws: c10 raises a plain RuntimeError, so
    // this is how the run's report knows the exception is an out-of-memory error).
    virtual void cpuAllocationFailed(size_t size) noexcept = 0;
};

// Puts the tap in front of the CPU allocator and routes its events to `sink`. Returns false
// (and changes nothing) when the current CPU allocator is not one the tap can wrap (another
// library replaced it with a higher priority, or its blocks are not plain pointers): the
// thread-local path then stays the only one. One sink at a time.
bool attachCpuTap(CpuEventSink* sink) noexcept;

// Stops routing to `sink`, waits for the event in flight (its lock), and puts the original
// allocator back. Blocks allocated meanwhile keep the tap's deleter, which from then on only
// forwards to the original one.
void detachCpuTap(CpuEventSink* sink) noexcept;

// Frees of tapped blocks after the tap was detached. A session's report may be built after the
// session stopped, and a block freed since then must not be looked for as if still alive: the
// holder that let it go is gone, so the walk would call it "held only from C++", and its address
// may hold another tensor by then. Fixed capacity: written from any thread, without a lock or
// an allocation; frees past the capacity are counted, not kept.
class LateFreeLog {
  public:
    explicit LateFreeLog(size_t capacity);
    void note(void* ptr) noexcept;
    // The frees noted so far (one still being written may be missed).
    std::vector<uintptr_t> freed() const;
    bool overflowed() const noexcept { return d_next.load() > d_capacity; }

  private:
    std::unique_ptr<std::atomic<uintptr_t>[]> d_slots;
    size_t d_capacity;
    std::atomic<size_t> d_next{0};
};

// From now on, frees through the tap's deleter that no sink receives are noted in `log`, until
// detachLateFrees(log) or another log is attached. Attach it before detaching the sink, so no
// free falls between the two.
void attachLateFrees(LateFreeLog* log) noexcept;

// Stops noting into `log` and waits for notes in flight: `log` may be destroyed afterwards.
void detachLateFrees(LateFreeLog* log) noexcept;

// Whether the tap is the process's CPU allocator now (tests: hooks are always restored).
bool cpuTapInstalled() noexcept;

} // namespace torchleak
