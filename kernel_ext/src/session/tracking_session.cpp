#include "session/tracking_session.h"

#include "inspect/gc_pause.h"
#include "inspect/optimizer_tensors.h"
#include "inspect/tensor_blocks.h"
#include "inspect/tensor_index.h"
#include "torchleak/errors.h"
#include "torchleak/report_json.h"

#include <algorithm>
#include <atomic>
#include <new>
#include <optional>
#include <utility>

namespace torchleak::python {

namespace {
std::atomic<const void*> g_active{nullptr};
}

ActiveSessionClaim::ActiveSessionClaim(const void* session) : d_session(session) {
    const void* expected = nullptr;
    if (!g_active.compare_exchange_strong(expected, session)) {
        throw StateError("torchleak is already tracking in this process: nested or concurrent "
                         "track()/check() is not supported; finish the active one first");
    }
}

ActiveSessionClaim::~ActiveSessionClaim() {
    if (d_session != nullptr) {
        const void* self = d_session;
        g_active.compare_exchange_strong(self, nullptr);
    }
}

ActiveSessionClaim::ActiveSessionClaim(ActiveSessionClaim&& other) noexcept
    : d_session(std::exchange(other.d_session, nullptr)) {}

TrackingSession::TrackingSession(bool captureStacks, uint64_t sampleBytes)
    : d_recorder(std::make_shared<AllocationRecorder>(cpuTapLock())),
      d_captureStacks(captureStacks) {
    d_recorder->setStackRetainer(&retainCodeObjects);
    d_recorder->setSampler(AllocationSampler(sampleBytes));
}

TrackingSession::~TrackingSession() {
    stop();
    if (d_lateFrees) {
        detachLateFrees(d_lateFrees.get());
    }
    if (!d_codeReleased && Py_IsInitialized()) {
        drainPendingRetains();
        // The recorder may outlive us in a reporter that a torch thread still holds; it keeps
        // the raw pointers but never dereferences them after the hook is disabled.
        releaseCodeObjects(d_recorder->allInternedFrames());
        d_codeReleased = true;
    }
}

void TrackingSession::checkNotStarted() const {
    if (d_hook || d_stopped || d_paused) {
        throw StateError("this tracking session was already started; start a new one");
    }
}

void TrackingSession::start() {
    checkNotStarted();
    ActiveSessionClaim claim(this); // given back if the hook cannot be installed
    d_hook = AllocatorHook::install(d_recorder, &capturePythonStack);
    d_hook->setCaptureStacks(d_captureStacks);
    d_claim.emplace(std::move(claim));
}

bool TrackingSession::startPaused() {
    checkNotStarted();
    d_claim.emplace(this);
    d_paused = true;
    d_recorder->noteShadowed();
    return true;
}

int64_t TrackingSession::step() {
    if (!active()) {
        throw StateError("step() outside an active tracking session");
    }
    if (d_paused || !d_hook->onTop()) {
        d_recorder->noteShadowed();
    }
    if (!d_paused && d_slotJoinedAt == 0 && d_hook->joinProfilerSlotForNewDevice()) {
        d_slotJoinedAt = d_recorder->iteration() + 1;
    }
    drainPendingRetains();
    const auto live = static_cast<int64_t>(d_recorder->markBoundary().liveBytes);
    // torch runs an optimizer's post-step hooks only when its step returned: a step that
    // raised would leave every later block born in it.
    d_recorder->setPhase(BirthPhase::Forward);
    return live;
}

std::string TrackingSession::pause() {
    if (!active() || d_paused) {
        return "not-active";
    }
    d_paused = true;
    d_recorder->noteShadowed();
    drainPendingRetains();
    auto removal = d_hook->remove();
    return removal == AllocatorHook::Removal::Deferred ? "deferred" : "paused";
}

void TrackingSession::resume() {
    if (!d_paused || d_stopped) {
        return;
    }
    d_hook = AllocatorHook::install(d_recorder, &capturePythonStack);
    d_hook->setCaptureStacks(d_captureStacks);
    d_paused = false;
    d_recorder->noteShadowed();
}

std::string TrackingSession::stop() {
    if (d_stopped) {
        return "already-stopped";
    }
    if (!d_hook) {
        if (!d_paused) {
            return "not-started";
        }
        d_stopped = true; // started paused and never resumed
        d_claim.reset();
        return "removed";
    }
    d_stopped = true;
    drainPendingRetains();
    if (!d_paused && !d_hook->onTop()) {
        d_recorder->noteShadowed();
    }
    if (!d_paused && d_hook->tapsCpu()) {
        // Room for a free of every block alive now (at most a million: 8 MiB).
        constexpr size_t kMostLateFrees = size_t{1} << 20;
        try {
            d_lateFrees = std::make_unique<LateFreeLog>(
                std::clamp<size_t>(d_recorder->liveBlockCount(), 1, kMostLateFrees));
            attachLateFrees(d_lateFrees.get());
        } catch (const std::bad_alloc&) {
            d_lateFrees.reset(); // the report then reads as before: stopping must not fail
        }
    }
    auto removal = d_hook->remove();
    d_claim.reset();
    if (d_paused) {
        return "removed"; // the hook was already taken out by pause()
    }
    return removal == AllocatorHook::Removal::Deferred ? "deferred" : "removed";
}

bool TrackingSession::active() const noexcept {
    return (d_hook || d_paused) && !d_stopped;
}

bool TrackingSession::hookOnTop() const noexcept {
    return d_hook && d_hook->onTop();
}

bool TrackingSession::hookInProfilerSlot() const noexcept {
    return d_hook && d_hook->active() && d_hook->inProfilerSlot();
}

void TrackingSession::nameHeldTensors(std::span<const at::Tensor> tensors, HeldAs held) {
    const std::vector<TensorBlock> named = distinctBlocks(tensors);
    std::vector<uintptr_t> blocks(named.size());
    std::transform(named.begin(), named.end(), blocks.begin(),
                   [](const TensorBlock& b) { return b.block; });
    std::vector<uint8_t> found(blocks.size());
    d_recorder->markHeldAs(blocks, held, found);
    std::vector<std::pair<DeviceKey, int64_t>> untracked; // by device: one or two
    for (size_t i = 0; i < named.size(); ++i) {
        if (found[i]) {
            continue;
        }
        auto device = std::find_if(untracked.begin(), untracked.end(),
                                   [&](const auto& d) { return d.first == named[i].device; });
        if (device == untracked.end()) {
            untracked.emplace_back(named[i].device, 0);
            device = untracked.end() - 1;
        }
        device->second += static_cast<int64_t>(named[i].bytes);
    }
    for (const auto& [device, bytes] : untracked) {
        d_recorder->noteUntrackedHeld(device, held, bytes);
    }
}

void TrackingSession::nameOptimizerBlocks(std::span<PyObject* const> optimizers) {
    OptimizerTensors held;
    for (PyObject* optimizer : optimizers) {
        addOptimizerTensors(optimizer, held);
    }
    nameHeldTensors(held.parameters, HeldAs::Parameter);
    nameHeldTensors(held.gradients, HeldAs::Gradient);
    nameHeldTensors(held.state, HeldAs::OptimizerState);
}

void TrackingSession::noteOutOfMemory(DeviceKey device,
                                      int64_t requested,
                                      int64_t allocated,
                                      int64_t reserved) {
    // PyTorch's CUDA observer runs right after the allocator reported the same failure through
    // the hook, whose request and totals are exact: that event stays. The observer's own
    // counts (its segment size, the device's capacity) are never the request or the totals.
    auto current = d_recorder->currentOutOfMemory();
    if (current && current->fromAllocator && current->device == device) {
        return;
    }
    d_recorder->recordOutOfMemory(device, requested, allocated, reserved, false);
}

std::optional<DeviceKey> TrackingSession::allocationFailedNow() const {
    auto current = d_recorder->currentOutOfMemory();
    if (current && current->fromAllocator) {
        return current->device;
    }
    return std::nullopt;
}

std::vector<std::pair<uintptr_t, uint64_t>> TrackingSession::stacklessDeviceBlocks() const {
    std::vector<std::pair<uintptr_t, uint64_t>> out;
    d_recorder->forEachLiveBlock([&](uintptr_t ptr, const BlockRecord& rec) {
        if (rec.device.type != 0 && rec.stack == 0) {
            out.emplace_back(ptr, rec.sequence);
        }
    });
    return out;
}

StackToken TrackingSession::beginBackward() {
    if (!d_hook || d_stopped || !d_captureStacks) {
        return 0;
    }
    RawFrame frames[kMaxStackFrames];
    size_t depth = capturePythonStack(frames, kMaxStackFrames);
    StackToken token = depth > 0 ? d_recorder->internStack({frames, depth}) : 0;
    return d_hook->exchangeBackwardStack(token);
}

void TrackingSession::endBackward(StackToken previous) noexcept {
    if (d_hook) {
        d_hook->exchangeBackwardStack(previous);
    }
}

void TrackingSession::setCaptureStacks(bool on) noexcept {
    d_captureStacks = on;
    if (d_hook) {
        d_hook->setCaptureStacks(on);
    }
}

std::string TrackingSession::reportJson(const ReportInputs& inputs,
                                        const FrameFilter& filter,
                                        std::vector<NamedRoot> roots,
                                        bool explain,
                                        int indent,
                                        ParameterOwners owners,
                                        bool describeTensors) {
    GcPause noCollector;
    drainPendingRetains();
    PythonStackSymbolizer symbolizer(filter);
    LiveTensorIndex tensors = LiveTensorIndex::onFirstUse();
    NoBlockDescriptions none;
    RetainingPathFinder finder(std::move(roots), std::move(owners), inputs.first_hook_id, &filter);
    std::optional<ReportInputs> late;
    if (d_lateFrees) {
        std::vector<uintptr_t> freed = d_lateFrees->freed();
        if (!freed.empty() || d_lateFrees->overflowed()) {
            late = inputs;
            late->freed_after_stop.insert(freed.begin(), freed.end());
            late->freed_after_stop_incomplete = d_lateFrees->overflowed();
        }
    }
    // Only watch's looks without paths keep settled sites between them; any other look or report
    // leaves them be. A site is named through the filter: under another, a kept group may belong
    // elsewhere.
    const bool keeping = inputs.verdicts_only && inputs.leave_out_settled && !explain;
    if (keeping) {
        if (std::string naming = filter.identity(); naming != d_settledNaming) {
            d_settled.clear();
            d_settledNaming = std::move(naming);
        }
    }
    Report report = buildReport(*d_recorder, late ? *late : inputs, symbolizer,
                                describeTensors ? static_cast<BlockDescriber&>(tensors) : none,
                                explain ? &finder : nullptr, keeping ? &d_settled : nullptr);
    d_lastWalk = finder.stats();
    return inputs.verdicts_only ? verdictsJson(report) : toJson(report, indent);
}

} // namespace torchleak::python
