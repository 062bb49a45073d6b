#pragma once
// TrackingSession: one torchleak.track() or check() run. It owns the recorder, installs and
// removes the allocator hook on the tracking thread, marks iteration boundaries and builds the
// report. At most one session is active per process: two hooks would see the same events and
// the second push would shadow the first.

#include "hook/allocator_hook.h"
#include "hook/cpu_allocator_tap.h"
#include "inspect/frame_capture.h"
#include "inspect/heap_walker.h"
#include "torchleak/recorder.h"
#include "torchleak/report_builder.h"

#include <memory>
#include <optional>
#include <span>
#include <string>

namespace torchleak::python {

// The process's one active session: claimed for as long as this object lives. Two hooks would
// see the same events, and the second push would shadow the first.
class ActiveSessionClaim {
  public:
    // Throws StateError when another session holds the claim.
    explicit ActiveSessionClaim(const void* session);
    ~ActiveSessionClaim();
    // Moved into the session once its hook is installed; never reassigned.
    ActiveSessionClaim(ActiveSessionClaim&& other) noexcept;
    ActiveSessionClaim& operator=(ActiveSessionClaim&&) = delete;
    ActiveSessionClaim(const ActiveSessionClaim&) = delete;
    ActiveSessionClaim& operator=(const ActiveSessionClaim&) = delete;

  private:
    const void* d_session;
};

class TrackingSession {
  public:
    // sampleBytes > 0: blocks smaller than that are sampled (allocation_sampler.h).
    explicit TrackingSession(bool captureStacks, uint64_t sampleBytes = 0);
    ~TrackingSession();
    TrackingSession(const TrackingSession&) = delete;
    TrackingSession& operator=(const TrackingSession&) = delete;

    void start();       // throws StateError if a session is active or a profiler is on
    bool startPaused(); // active but not recording: resume() once the profiler stops
    // Ends an iteration; returns the tracked bytes alive at its boundary (sampled blocks at
    // their weight): watch's cue, at no cost, that memory is rising.
    int64_t step();
    // Steps aside for another profiler on this thread (torch.profiler refuses to start while
    // anything sits in PROFILER_STATE) and comes back after it. Events in between are lost;
    // the iterations concerned are marked in the report.
    std::string pause(); // "paused", "deferred" or "not-active"
    void resume();
    bool paused() const noexcept { return d_paused; }
    std::string stop(); // "removed", "deferred" or "not-started"/"already-stopped"
    bool active() const noexcept;
    bool hookOnTop() const noexcept;
    // Whether the running hook sits in PROFILER_STATE (a device could report there); with a
    // CPU-only torch the CPU tap carries every event and the slot stays empty.
    bool hookInProfilerSlot() const noexcept;
    // The iteration (counted from 1) at whose end the hook joined the PROFILER_STATE slot for a
    // device allocator registered after the start; 0 when it did not. That device's blocks
    // made before were not recorded.
    uint32_t profilerSlotJoinedAt() const noexcept { return d_slotJoinedAt; }
    uint32_t iterations() const noexcept { return d_recorder->iteration(); }
    uint64_t events() const noexcept { return d_recorder->eventCount(); }
    uint64_t allocations() const noexcept { return d_recorder->allocationCount(); }
    uint64_t skippedEvents() const noexcept { return d_recorder->skippedEvents(); }
    uint32_t newlySteadyGroups() const noexcept { return d_recorder->newlySteadyGroups(); }
    uint32_t steppedGroups() const noexcept { return d_recorder->steppedGroups(); }
    size_t liveBlocks() const { return d_recorder->liveBlockCount(); }
    size_t stacks() const { return d_recorder->stackCount(); }
    // (address, sequence) of every live device block the hook recorded without a stack (CUDA:
    // its stack comes from PyTorch's history); the sequence tells a reused address apart.
    std::vector<std::pair<uintptr_t, uint64_t>> stacklessDeviceBlocks() const;
    // The kept boundaries, oldest first (recorder.h).
    const std::vector<BoundarySnapshot>& boundaries() const noexcept {
        return d_recorder->boundaries();
    }
    IterationTotals lastIteration() const {
        const auto& b = d_recorder->boundaries();
        return b.empty() ? IterationTotals{} : iterationTotals(b, b.size() - 1);
    }
    void setCaptureStacks(bool on) noexcept;
    // Around the autograd engine's run (torch.autograd's _engine_run_backward): blocks made by
    // its nodes on threads without a Python stack are attributed to the calling line. begin
    // captures the calling thread's stack (needs the GIL) and returns the token it replaced,
    // which end puts back.
    StackToken beginBackward();
    void endBackward(StackToken previous) noexcept;
    // Around an optimizer's step (torch.optim's global pre- and post-step hooks): the blocks
    // made in between are born in BirthPhase::OptimizerStep (birth_phase.h). A boundary ends
    // the phase too, in case a step raised before its post hooks.
    void beginOptimizerStep() noexcept { d_recorder->setPhase(BirthPhase::OptimizerStep); }
    void endOptimizerStep() noexcept { d_recorder->setPhase(BirthPhase::Forward); }
    // The registry's word before a boundary, for everything these torch.optim optimizers hold
    // (optimizer_tensors.h): their parameters, the parameters' gradients, their state (see
    // nameHeldTensors). Throws InvalidArgument for an optimizer shaped otherwise, before
    // anything is named.
    void nameOptimizerBlocks(std::span<PyObject* const> optimizers);
    // An out-of-memory seen outside the hook (PyTorch's CUDA OOM observer runs on the failing
    // thread, which may not carry the hook); the allocator's own report of the same failure,
    // through the hook, is kept when there is one. requested < 0: unknown.
    void noteOutOfMemory(DeviceKey device, int64_t requested, int64_t allocated, int64_t reserved);
    // The device whose allocator just refused a request (nothing allocated on it since), when
    // an allocator said so itself: an exception raised now is that failure, whatever its type.
    std::optional<DeviceKey> allocationFailedNow() const;

    // Needs the GIL.
    // With roots, findings get retaining paths; without, the walk is skipped.
    std::string reportJson(const ReportInputs& inputs,
                           const FrameFilter& filter,
                           std::vector<NamedRoot> roots,
                           bool explain,
                           int indent,
                           ParameterOwners owners = {},
                           bool describeTensors = true);
    const WalkStats& lastWalk() const noexcept { return d_lastWalk; }

  private:
    // Throws StateError when this session was already started.
    void checkNotStarted() const;
    // The blocks of `tensors` are held as `held` (recorder.h's markHeldAs), and a block that is
    // no tracked block (made before tracking) counts its storage's bytes as memory held so that
    // no tracked block holds, by device (noteUntrackedHeld).
    void nameHeldTensors(std::span<const at::Tensor> tensors, HeldAs held);

    std::optional<ActiveSessionClaim> d_claim;
    std::shared_ptr<AllocationRecorder> d_recorder;
    std::shared_ptr<AllocatorHook> d_hook;
    // CPU blocks freed after stop(): a report built later leaves them out of the walk.
    std::unique_ptr<LateFreeLog> d_lateFrees;
    bool d_captureStacks;
    bool d_stopped = false;
    bool d_paused = false;
    uint32_t d_slotJoinedAt = 0;
    bool d_codeReleased = false;
    WalkStats d_lastWalk;
    // What watch's last look settled, for the next look to keep (settled_sites.h), and the
    // frame filter's identity it was named under.
    SettledSites d_settled;
    std::string d_settledNaming;
};

} // namespace torchleak::python
