#include "hook/allocator_hook.h"

#include "hook/cpu_allocator_tap.h"
#include "hook/device_key.h"
#include "torch_autograd_node.h"
#include "torchleak/errors.h"

#include <algorithm>
#include <atomic>
#include <c10/core/Allocator.h>
#include <c10/util/ThreadLocalDebugInfo.h>
#include <mutex>
#include <torch/csrc/profiler/orchestration/observer.h>
#include <typeinfo>
#include <vector>

namespace torchleak {

namespace {

using torch::profiler::impl::ActiveProfilerType;
using torch::profiler::impl::ProfilerConfig;
using torch::profiler::impl::ProfilerState;
using torch::profiler::impl::ProfilerStateBase;

// True while this thread is inside our reportMemoryUsage: anything that allocates through c10
// from inside the hook (it should not happen) is dropped instead of recursing. (The CPU tap
// tells the same by its lock's owner.)
thread_local bool t_inHook = false;

// Holds t_inHook for one event, cleared on every way out of it (a return added to record()
// later cannot leave the thread's hook switched off for good).
class InHook {
  public:
    InHook() noexcept { t_inHook = true; }
    ~InHook() { t_inHook = false; }
    InHook(const InHook&) = delete;
    InHook& operator=(const InHook&) = delete;
};

} // namespace

// The object that sits in c10's PROFILER_STATE slot.
//
// It must be a ProfilerStateBase: torch reads `config()` of whatever is in that slot on hot
// paths (every autograd.Function.apply asks profilerEnabled()), so a bare
// MemoryReportingInfoBase there would be undefined behaviour. With a Disabled config,
// profilerEnabled() is false and torch.profiler may still start on top of it.
//
// Concurrency: reportMemoryUsage runs on every thread that inherited this reporter through
// at::ThreadLocalState (the tracking thread, autograd engine workers, at::launch tasks), for
// CUDA while the caching allocator holds its per-device mutex, for CPU after c10's reporter
// released its mutex. So it is noexcept, takes no GIL, calls no torch API that can allocate
// or lock (get_current_node() reads a thread_local), and serialises only on the recorder's
// own short lock (RecorderLock). Stack capture reads the Python frames of the calling thread only
// when that thread holds the GIL (the capture function checks).
//
// CPU events arrive instead through the CPU allocator tap (cpu_allocator_tap.h), from every
// thread of the process, with the same rules: cpuAllocated/cpuFreed run on any thread, without
// the GIL, and with the tap's lock held, which is the recorder's own (the session made its
// recorder with cpuTapLock()): they call the recorder's *Held entry points. While the tap
// carries them, CPU reports through the thread-local slot are ignored (c10's default CPU
// allocator sends both).
struct AllocatorHook::Impl final : public ProfilerStateBase, public CpuEventSink {
    Impl(std::shared_ptr<AllocationRecorder> recorder, FrameCaptureFn capture)
        : ProfilerStateBase(ProfilerConfig(ProfilerState::Disabled)),
          d_recorder(std::move(recorder)), d_capture(capture) {}

    // Only c10's CPU reporter asks this before its bookkeeping (a global mutex and a size
    // table on every CPU allocation and free); CUDA's caching allocator reports without asking
    // (libc10_cuda imports reportMemoryUsageToProfiler, never memoryProfilingEnabled: checked
    // in torch 2.15's wheel), and so do HIP, XPU and MPS. With the CPU tap carrying CPU events,
    // the answer is no, unless an out-of-tree PrivateUse1 allocator might ask before reporting.
    bool memoryProfilingEnabled() const override {
        return d_enabled.load(std::memory_order_relaxed) &&
               (d_gatedDeviceReports || !d_cpuByTap.load(std::memory_order_relaxed));
    }
    ActiveProfilerType profilerType() override { return ActiveProfilerType::NONE; }

    void reportMemoryUsage(void* ptr,
                           int64_t allocSize,
                           size_t totalAllocated,
                           size_t totalReserved,
                           c10::Device device) noexcept override {
        // A thread that holds the recorder's lock (the tap's, in a recorder call) would wait for
        // itself.
        if ((device.is_cpu() && d_cpuByTap.load(std::memory_order_relaxed)) || t_inHook ||
            d_recorder->lock().heldByCaller()) {
            return;
        }
        InHook inside;
        // CPU reports count only blocks c10 saw while profiling and no reserve; the device
        // allocators report their real totals. CUDA (and ROCm, XPU, MPS, whose allocators
        // are built like it) report under the allocator's device mutex, where walking
        // Python frames is off limits: their stacks come from PyTorch's own history
        // recording, looked up at report time. Any other backend (PrivateUse1: an
        // out-of-tree accelerator) has no such recording, so its stack is taken here, as for
        // CPU; the capture only reads the calling thread's frames, takes no lock and no GIL.
        // Inside an autograd node on a thread with no stack of its own (a device's autograd
        // thread), the block inherits the stack of the backward() call (one atomic load).
        record(ptr, allocSize, deviceKeyOf(device), static_cast<int64_t>(totalAllocated),
               static_cast<int64_t>(totalReserved), !device.is_cpu(),
               device.is_cpu() || device.is_privateuseone(), false);
    }

    void cpuAllocated(void* ptr, size_t size) noexcept override {
        record(ptr, static_cast<int64_t>(size), kCpu, 0, 0, false, true, true);
    }

    void cpuFreed(void* ptr) noexcept override { record(ptr, -1, kCpu, 0, 0, false, false, true); }

    // No totals: the CPU has no allocator statistics (the report counts tracked bytes).
    void cpuAllocationFailed(size_t size) noexcept override {
        if (d_enabled.load(std::memory_order_relaxed)) {
            d_recorder->recordOutOfMemoryHeld(kCpu, static_cast<int64_t>(size), -1, -1);
        }
    }

    // The recorder's lock for one call, unless the caller (the CPU tap) holds it already.
    std::unique_lock<RecorderLock> lockUnless(bool held) noexcept {
        return held ? std::unique_lock<RecorderLock>()
                    : std::unique_lock<RecorderLock>(d_recorder->lock());
    }

    // One event, from either path: an allocation when size >= 0, else a free. `held`: the
    // caller (the CPU tap) holds the recorder's lock; otherwise it is taken for the recorder
    // call only (not around the capture).
    void record(void* ptr,
                int64_t size,
                DeviceKey key,
                int64_t allocated,
                int64_t reserved,
                bool totals,
                bool withStack,
                bool held) noexcept {
        if (!d_enabled.load(std::memory_order_relaxed)) {
            return;
        }
        if (size >= 0) {
            // Sampling decides first: a skipped allocation costs no stack capture at all.
            const uint64_t weight = d_recorder->sampler().weigh(static_cast<uint64_t>(size));
            if (weight == 0) {
                // The tap's events have no totals: this takes no lock then.
                d_recorder->recordSkipped(key, allocated, reserved, totals);
                return;
            }
            RawFrame frames[kMaxStackFrames];
            size_t depth = 0;
            if (withStack && d_captureStacks.load(std::memory_order_relaxed) &&
                d_capture != nullptr) {
                depth = d_capture(frames, kMaxStackFrames);
            }
            const char* nodeType = nullptr;
            StackToken inherited = 0;
            if (auto node = torch::autograd::get_current_node()) {
                nodeType = typeid(*node).name();
                inherited = d_backwardStack.load(std::memory_order_relaxed);
            }
            std::unique_lock<RecorderLock> lock = lockUnless(held);
            d_recorder->recordAllocHeld(reinterpret_cast<uintptr_t>(ptr),
                                        static_cast<uint64_t>(size), key,
                                        std::span<const RawFrame>(frames, depth), nodeType,
                                        allocated, reserved, totals, weight, inherited);
        } else {
            std::unique_lock<RecorderLock> lock = lockUnless(held);
            d_recorder->recordFreeHeld(reinterpret_cast<uintptr_t>(ptr), key, allocated, reserved,
                                       totals);
        }
    }

    // The allocator is about to raise its out-of-memory error; the report built when it
    // reaches torchleak reads this event for the device and its totals at the failure.
    // Same rules as reportMemoryUsage (CUDA calls it under the device mutex).
    void reportOutOfMemory(int64_t allocSize,
                           size_t totalAllocated,
                           size_t totalReserved,
                           c10::Device device) noexcept override {
        if (!d_enabled.load(std::memory_order_relaxed)) {
            return;
        }
        d_recorder->recordOutOfMemory(deviceKeyOf(device), allocSize,
                                      static_cast<int64_t>(totalAllocated),
                                      static_cast<int64_t>(totalReserved));
    }

    std::shared_ptr<AllocationRecorder> d_recorder;
    FrameCaptureFn d_capture;
    std::atomic<bool> d_enabled{true};
    std::atomic<bool> d_captureStacks{true};
    std::atomic<StackToken> d_backwardStack{0};
    std::atomic<bool> d_cpuByTap{false};
    // A device allocator that may ask memoryProfilingEnabled() before reporting is registered.
    // Set before the reporter is pushed, then only read.
    bool d_gatedDeviceReports = true;
    static constexpr DeviceKey kCpu{static_cast<int8_t>(c10::DeviceType::CPU), -1};
};

namespace {

struct Deferred {
    std::shared_ptr<AllocatorHook::Impl> impl;
    std::thread::id thread;
};
std::mutex g_deferredMutex;
std::vector<Deferred> g_deferred;

// The top of this thread's debug-info stack, when it is a PROFILER_STATE entry.
std::shared_ptr<c10::DebugInfoBase> peekProfilerState() noexcept {
    try {
        return c10::ThreadLocalDebugInfo::_peek(c10::DebugInfoKind::PROFILER_STATE);
    } catch (...) {
        return nullptr; // the top entry is of another kind (or there is none)
    }
}

// Whether c10 has an allocator for `type`. GetAllocator returns null for a type with none in
// torch 2.11 to 2.15 (a debug-only assertion); older builds threw.
bool allocatorRegistered(c10::DeviceType type) noexcept {
    try {
        return c10::GetAllocator(type) != nullptr;
    } catch (...) {
        return false;
    }
}

// Whether an out-of-tree (PrivateUse1) allocator is registered: its reports may be gated on
// memoryProfilingEnabled().
bool outOfTreeAllocatorPresent() noexcept {
    return allocatorRegistered(c10::DeviceType::PrivateUse1);
}

// Whether c10 knows an allocator besides the CPU's (which the tap carries) and Meta's (which
// holds no memory): a device whose events can only come through the thread's PROFILER_STATE
// slot. A CUDA or ROCm build registers its caching allocator when torch is imported, GPU or
// not; a CPU-only build registers none.
bool deviceAllocatorPresent() noexcept {
    for (int t = 0; t < static_cast<int>(c10::COMPILE_TIME_MAX_DEVICE_TYPES); ++t) {
        const auto type = static_cast<c10::DeviceType>(t);
        if (type != c10::DeviceType::CPU && type != c10::DeviceType::Meta &&
            allocatorRegistered(type)) {
            return true;
        }
    }
    return false;
}

bool popIfOnTop(const std::shared_ptr<AllocatorHook::Impl>& impl) noexcept {
    auto top = peekProfilerState();
    if (top.get() != impl.get()) {
        return false;
    }
    try {
        c10::ThreadLocalDebugInfo::_pop(c10::DebugInfoKind::PROFILER_STATE);
    } catch (...) {
        return false;
    }
    return true;
}

} // namespace

AllocatorHook::AllocatorHook(std::shared_ptr<Impl> impl)
    : d_impl(std::move(impl)), d_thread(std::this_thread::get_id()) {}

void AllocatorHook::pushReporter() {
    c10::ThreadLocalDebugInfo::_push(c10::DebugInfoKind::PROFILER_STATE, d_impl);
    d_pushed = true;
}

std::shared_ptr<AllocatorHook> AllocatorHook::install(std::shared_ptr<AllocationRecorder> recorder,
                                                      FrameCaptureFn capture) {
    retryDeferredRemovals();
    if (c10::ThreadLocalDebugInfo::get(c10::DebugInfoKind::PROFILER_STATE) != nullptr) {
        throw StateError(
            "a profiler (torch.profiler or another tool) is active on this thread; torchleak "
            "cannot install its allocator hook under it. Start torchleak first, or outside the "
            "profiler");
    }
    auto impl = std::make_shared<Impl>(std::move(recorder), capture);
    impl->d_gatedDeviceReports = outOfTreeAllocatorPresent();
    // The owner exists before the reporter is pushed: from the push on, the owner's destructor
    // is what takes the reporter (and the tap) out again, also when a later push throws.
    std::shared_ptr<AllocatorHook> hook(new AllocatorHook(impl));
    hook->d_removed = true; // nothing to take out if the push fails
    // With a CPU-only torch the slot would carry nothing the tap does not, and while anything
    // sits in it c10 asks it memoryProfilingEnabled() on every CPU allocation and free (a
    // thread-local look-up and a virtual call each: 1.8 points of a loop of small ops' +11.8%).
    if (deviceAllocatorPresent()) {
        hook->pushReporter();
    }
    hook->d_removed = false;
    impl->d_cpuByTap.store(attachCpuTap(impl.get()));
    if (!impl->d_cpuByTap.load() && !hook->d_pushed) {
        hook->pushReporter(); // the tap could not go in: the slot carries CPU events instead
    }
    return hook;
}

AllocatorHook::~AllocatorHook() {
    remove();
}

AllocatorHook::Removal AllocatorHook::remove() noexcept {
    if (d_removed) {
        return Removal::AlreadyRemoved;
    }
    d_removed = true;
    d_impl->d_enabled.store(false, std::memory_order_relaxed);
    detachCpuTap(d_impl.get());
    if (!d_pushed || popIfOnTop(d_impl)) {
        return Removal::Removed;
    }
    try {
        std::lock_guard<std::mutex> lock(g_deferredMutex);
        g_deferred.push_back({d_impl, d_thread});
    } catch (...) {
        // Without room to remember it, the disabled reporter stays in the chain: it records
        // nothing and torch keeps working.
    }
    return Removal::Deferred;
}

bool AllocatorHook::active() const noexcept {
    return !d_removed;
}

bool AllocatorHook::tapsCpu() const noexcept {
    return d_impl->d_cpuByTap.load(std::memory_order_relaxed);
}

bool AllocatorHook::joinProfilerSlotForNewDevice() noexcept {
    if (d_removed || d_pushed || std::this_thread::get_id() != d_thread ||
        !deviceAllocatorPresent() ||
        c10::ThreadLocalDebugInfo::get(c10::DebugInfoKind::PROFILER_STATE) != nullptr) {
        return false;
    }
    // Read only through the slot, which holds nothing of ours yet.
    d_impl->d_gatedDeviceReports = outOfTreeAllocatorPresent();
    try {
        pushReporter();
    } catch (...) {
        return false; // no room to push: the device stays unseen, as before the call
    }
    return true;
}

bool AllocatorHook::onTop() const noexcept {
    return !d_pushed ||
           c10::ThreadLocalDebugInfo::get(c10::DebugInfoKind::PROFILER_STATE) == d_impl.get();
}

void AllocatorHook::setCaptureStacks(bool on) noexcept {
    d_impl->d_captureStacks.store(on, std::memory_order_relaxed);
}

bool AllocatorHook::captureStacks() const noexcept {
    return d_impl->d_captureStacks.load(std::memory_order_relaxed);
}

StackToken AllocatorHook::exchangeBackwardStack(StackToken token) noexcept {
    return d_impl->d_backwardStack.exchange(token, std::memory_order_relaxed);
}

size_t AllocatorHook::retryDeferredRemovals() noexcept {
    std::lock_guard<std::mutex> lock(g_deferredMutex);
    auto self = std::this_thread::get_id();
    // LIFO: the most recently deferred reporter is the one nearest the top.
    for (auto it = g_deferred.rbegin(); it != g_deferred.rend();) {
        if (it->thread == self && popIfOnTop(it->impl)) {
            it = std::make_reverse_iterator(g_deferred.erase(std::next(it).base()));
        } else {
            ++it;
        }
    }
    return g_deferred.size();
}

size_t AllocatorHook::pendingRemovals() noexcept {
    std::lock_guard<std::mutex> lock(g_deferredMutex);
    return g_deferred.size();
}

} // namespace torchleak
