#pragma once
// AllocatorHook: connects an AllocationRecorder to c10's memory-reporting slot.
//
// This header names no torch type, so the bindings include it without pulling in the profiler
// headers; the torch side lives in allocator_hook.cpp.

#include "torchleak/recorder.h"

#include <cstddef>
#include <memory>
#include <thread>

namespace torchleak {

// Fills `out` with the allocating thread's Python stack, innermost first, and returns how many
// frames it wrote (0 when the thread holds no GIL or has no Python frames). It runs inside the
// allocator hook: it must be noexcept, must not allocate tensors and must not take the GIL.
using FrameCaptureFn = size_t (*)(RawFrame* out, size_t capacity) noexcept;
// The innermost frames a captured stack keeps.
inline constexpr size_t kMaxStackFrames = 48;

class AllocatorHook {
  public:
    enum class Removal { Removed, Deferred, AlreadyRemoved };

    // Puts the CPU allocator tap in, and pushes a reporter under PROFILER_STATE on the calling
    // thread when a device allocator could report there (or the tap could not go in). Throws
    // StateError when a profiler state (torch.profiler) is already active on this thread: torch
    // casts whatever sits in that slot to its own state type, so nothing may be pushed on top
    // of it (refused with or without a push, so that a session behaves alike on every build).
    static std::shared_ptr<AllocatorHook> install(std::shared_ptr<AllocationRecorder> recorder,
                                                  FrameCaptureFn capture);
    ~AllocatorHook();
    AllocatorHook(const AllocatorHook&) = delete;
    AllocatorHook& operator=(const AllocatorHook&) = delete;

    // Stops recording at once. Pops the reporter if it is on top of the thread's debug-info
    // stack; otherwise (torch.profiler was started inside and is still running) the pop is
    // deferred until it is on top again, because c10's pop removes whatever is on top.
    // Must run on the installing thread.
    Removal remove() noexcept;
    bool active() const noexcept;
    // Whether CPU events came through the CPU allocator tap (cpu_allocator_tap.h).
    bool tapsCpu() const noexcept;
    // True while our reporter is the nearest PROFILER_STATE on this thread (not shadowed), or
    // when none was pushed (the tap carries every event: nothing can shadow it).
    bool onTop() const noexcept;
    // Whether the reporter went into the PROFILER_STATE slot.
    bool inProfilerSlot() const noexcept { return d_pushed; }
    // A device allocator registered after install() (an out-of-tree backend the tracked script
    // imported): pushes the reporter now, when called on the installing thread with the slot
    // empty. Returns true when it did; that device's events before now were not seen.
    bool joinProfilerSlotForNewDevice() noexcept;
    void setCaptureStacks(bool on) noexcept;
    bool captureStacks() const noexcept;
    // The stack that blocks made inside autograd nodes take when their thread has none of its
    // own (a device's autograd thread: no Python frames; CUDA: no capture under the allocator's
    // mutex): the backward() call that runs those nodes. Returns the previous token, to put back
    // when that call returns (backward() inside a hook of another backward()). One process-wide
    // token: two threads in backward() at once share the later one's.
    StackToken exchangeBackwardStack(StackToken token) noexcept;
    std::thread::id thread() const noexcept { return d_thread; }

    // Pops deferred reporters of the calling thread that are on top again; returns how many
    // are still waiting.
    static size_t retryDeferredRemovals() noexcept;
    static size_t pendingRemovals() noexcept;

    struct Impl;

  private:
    explicit AllocatorHook(std::shared_ptr<Impl> impl);
    void pushReporter();
    std::shared_ptr<Impl> d_impl;
    std::thread::id d_thread;
    bool d_removed = false;
    bool d_pushed = false;
};

} // namespace torchleak
