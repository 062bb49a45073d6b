#pragma once
// CpuAllocatorTap: every CPU allocation and free of the process, whichever thread makes it.
//
// c10 reports memory events only to the PROFILER_STATE of the allocating thread (a thread-local
// slot; research/torch-hooks.md 1.2-1.4). Autograd workers inherit the tracking thread's slot,
// but threads the tracked code starts (DataLoader pin-memory threads, prefetchers, thread
// pools, a backward() called on a worker) never do: their tensors were missed, and a tensor
// allocated on the tracking thread and freed on another stayed "live" forever. PyTorch has no
// process-wide reporter yet (a global one is proposed upstream, not merged). So for the CPU,
// torchleak puts a thin allocator in front of c10's CPU allocator while a session runs: it
// calls the original, swaps the DataPtr's deleter for one that reports the free and then calls
// the original deleter, and reports both events from the thread that makes them. Device
// allocators keep the thread-local path (the CUDA caching allocator reports under its own lock
// and propagates through autograd's thread-local state).
//
// This header names no torch type.

#include <cstddef>

namespace torchleak {

// Where the tap sends events. Called on any thread, noexcept, without the GIL.
class CpuEventSink {
  public:
    virtual ~CpuEventSink() = default;
    virtual void cpuAllocated(void* ptr, size_t size) noexcept = 0;
    virtual void cpuFreed(void* ptr) noexcept = 0;
};

// Puts the tap in front of the CPU allocator and routes its events to `sink`. Returns false
// (and changes nothing) when the current CPU allocator is not one the tap can wrap (another
// library replaced it with a higher priority, or its blocks are not plain pointers): the
// thread-local path then stays the only one. One sink at a time.
bool attachCpuTap(CpuEventSink* sink) noexcept;

// Stops routing to `sink`, waits for events in flight on other threads, and puts the original
// allocator back. Blocks allocated meanwhile keep the tap's deleter, which from then on only
// forwards to the original one.
void detachCpuTap(CpuEventSink* sink) noexcept;

// Whether the tap is the process's CPU allocator now (tests: hooks are always restored).
bool cpuTapInstalled() noexcept;

} // namespace torchleak
