#pragma once
// AllocationRecorder: the state behind the allocator hook.
//
// It keeps the live-block table, the interned stacks, per-device totals and running totals of
// every allocation site group (stack, autograd node, device), and at every iteration boundary
// takes a BoundarySnapshot of the groups that changed. A boundary therefore costs what the
// iteration touched, not what is alive, and the history is thinned to a grid of at most
// kMaxGridBoundaries boundaries (plus the newest 16) however long the run: the verdicts fit
// lines through (iteration, bytes) points and need no more. The recorder is plain C++ with no
// torch or Python in it, so Catch2 drives it with synthetic events; AllocatorHook
// (allocator_hook.h) feeds it from c10's memory-reporting hook.
//
// Concurrency: recordAlloc/recordFree may be called from any thread that inherited the
// reporter (the tracking thread, autograd workers, CUDA allocator callers holding the device
// mutex). They take one short lock (RecorderLock), never throw, never call back into torch or
// Python, and allocate only when a table grows, a new stack or group appears, or a group gets its
// first block of an iteration (one birth entry); a free never allocates. Everything else
// (boundaries, snapshots, iteration over live blocks) is called by the tracking thread with the GIL
// held.

#include "torchleak/allocation_sampler.h"
#include "torchleak/live_block_table.h"
#include "torchleak/recorder_lock.h"
#include "torchleak/stack_table.h"
#include "torchleak/young_blocks.h"

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

namespace torchleak {

struct GroupKey {
    StackToken stack = 0;
    NodeToken node = 0;
    DeviceKey device;
    bool operator==(const GroupKey&) const = default;
};

struct GroupKeyHash {
    size_t operator()(const GroupKey& k) const noexcept {
        uint64_t h = (static_cast<uint64_t>(k.stack) << 24) ^ (static_cast<uint64_t>(k.node) << 8) ^
                     (static_cast<uint64_t>(static_cast<uint8_t>(k.device.type)) << 4) ^
                     static_cast<uint64_t>(static_cast<uint8_t>(k.device.index));
        return static_cast<size_t>(h * 0x9E3779B97F4A7C15ull);
    }
};

struct GroupSample {
    GroupKey key;
    uint64_t bytes = 0;             // live bytes of the group at this boundary
    uint64_t count = 0;             // live blocks
    uint64_t bornThisIteration = 0; // of those bytes, allocated during the iteration just ended
    uint32_t oldestIteration = 0;   // birth iteration of its oldest live block
};

// One block, briefly: enough to name where it was allocated.
struct BlockBrief {
    uint64_t size = 0;
    uint64_t sequence = 0; // its allocation event's position in the run; 0: none
    StackToken stack = 0;
    NodeToken node = 0;
};

struct DeviceSample {
    DeviceKey device;
    int64_t allocated = 0; // allocator total when the allocator reports one, else tracked bytes
    int64_t reserved = 0;
    int64_t peak = 0; // highest `allocated` seen during the iteration
    bool allocatorTotals = false;
    // Events so far whose allocator totals could not be right (below the block just
    // allocated, reserved below allocated): from the first one on, the device's timeline is
    // the tracked bytes.
    uint64_t rejectedTotals = 0;
    // Where the tracked live bytes come from (birth_phase.h): at the boundary, and at the moment
    // within the iteration when `peak` was reached (the tracked bytes then, whichever total
    // the timeline follows). Each adds up to the tracked bytes of its moment.
    BlockOrigins live{};
    BlockOrigins atPeak{};
    // Of `atPeak`, the blocks freed before the boundary: what the iteration used and gave back
    // (memory_roles.h tells activations and temporaries from kept bytes by it).
    BlockOrigins freedAfterPeak{};
    // The biggest block born in the iteration and alive when its peak was taken: what most
    // likely made a peak that jumps (memory_roles.h's spikes name its site).
    BlockBrief biggestAtPeak{};
    // Bytes a registry named that are no tracked block (made before tracking), by what it named
    // them ([HeldAs - 1]): alive all iteration, at the boundary and at the peak.
    std::array<int64_t, kRegisteredRoles> untrackedHeld{};
};

// The allocator's out-of-memory report (c10's reportOutOfMemoryToProfiler, or PyTorch's CUDA
// OOM observer): the last one of the run.
struct OutOfMemoryEvent {
    DeviceKey device;
    int64_t requested = 0; // bytes asked for; < 0 when the reporter did not say
    int64_t allocated = 0; // the device's totals at the failure; < 0 when unknown
    int64_t reserved = 0;
    uint32_t iteration = 0; // the iteration that was running (0-based)
    uint64_t count = 0;     // out-of-memory reports seen so far
    // Who said so: the allocator itself, through the hook (request and totals exact), or
    // PyTorch's CUDA OOM observer (no request; totals read after the allocator's lock).
    bool fromAllocator = true;
    // The device's allocation count when it failed: an allocation on that device since means
    // the failure was caught and the run went on (a batch-size finder), so it is history.
    uint64_t allocationsBefore = 0;
    // The device's tracked bytes by origin at the failure, before unwinding freed anything.
    BlockOrigins live{};
};

// One kept boundary. `groups` holds only the groups that changed since the kept boundary
// before it (a group absent here has the sample it had there); a group whose blocks were all
// freed appears with zero bytes. The totals describe the iteration the boundary ends.
struct BoundarySnapshot {
    uint32_t iteration = 0; // the iteration this boundary ends (0-based)
    std::vector<GroupSample> groups;
    std::vector<DeviceSample> devices;
    uint64_t liveBytes = 0;  // all tracked bytes alive at the boundary
    uint64_t bornBytes = 0;  // of those, allocated during the iteration
    uint64_t freedBytes = 0; // bytes alive at the previous boundary and freed during the iteration
    // Iterations, among those this boundary stands for, during which another profiler state
    // was on top of the hook at some point.
    uint32_t shadowedIterations = 0;
};

// Births of a group's live blocks by iteration, oldest first. Allocations always happen in the
// current iteration, the newest, so a birth appends to or bumps the back; a free decrements its
// iteration's entry. Emptied entries at the back are popped at once, others are skipped by a
// head index and swept out once they are half the vector: a group that keeps one block per
// iteration for 10^5 iterations costs O(1) per event and per boundary, not O(iterations).
struct BirthCount {
    uint32_t iteration = 0;
    uint64_t count = 0;
    uint64_t bytes = 0;
};

class AllocationRecorder {
  public:
    // Called once per newly interned stack, under the recorder's lock, on the thread whose
    // capture produced the frames: the bindings take a reference on each code object here.
    using StackRetainFn = void (*)(std::span<const RawFrame> frames) noexcept;

    AllocationRecorder();
    // Takes `lock` instead of a lock of its own; it must outlive the recorder. The CPU
    // allocator tap holds its process-wide lock around each event and calls the *Held entry
    // points below: one lock an event instead of the tap's own guard and then this one.
    explicit AllocationRecorder(RecorderLock& lock);
    AllocationRecorder(const AllocationRecorder&) = delete;
    AllocationRecorder& operator=(const AllocationRecorder&) = delete;

    void setStackRetainer(StackRetainFn fn) noexcept { d_retain = fn; }
    // Before the hook is installed: from then on the hook asks sampler() what each allocation
    // weighs (allocation_sampler.h) and passes that weight to recordAlloc.
    void setSampler(AllocationSampler sampler) noexcept { d_sampler = sampler; }
    const AllocationSampler& sampler() const noexcept { return d_sampler; }
    // recordAlloc's weight when the block stands for its own size.
    static constexpr uint64_t kWholeBlock = ~uint64_t{0};

    // ---- hot path: any thread, noexcept, lock held for a table update only ----------------
    void recordAlloc(uintptr_t ptr,
                     uint64_t size,
                     DeviceKey device,
                     std::span<const RawFrame> frames,
                     const char* nodeTypeName,
                     int64_t allocatorAllocated,
                     int64_t allocatorReserved,
                     bool allocatorTotals,
                     uint64_t weight = kWholeBlock,
                     StackToken inheritedStack = 0) noexcept;
    // An allocation the sampler skipped (weight 0): counted, not recorded; a device allocator's
    // totals still move the device's timeline (only then is the lock taken: a caller that holds
    // it passes no totals).
    void recordSkipped(DeviceKey device,
                       int64_t allocatorAllocated,
                       int64_t allocatorReserved,
                       bool allocatorTotals) noexcept;
    void recordFree(uintptr_t ptr,
                    DeviceKey device,
                    int64_t allocatorAllocated,
                    int64_t allocatorReserved,
                    bool allocatorTotals) noexcept;
    // The two above for a caller that holds lock() already.
    void recordAllocHeld(uintptr_t ptr,
                         uint64_t size,
                         DeviceKey device,
                         std::span<const RawFrame> frames,
                         const char* nodeTypeName,
                         int64_t allocatorAllocated,
                         int64_t allocatorReserved,
                         bool allocatorTotals,
                         uint64_t weight = kWholeBlock,
                         StackToken inheritedStack = 0) noexcept;
    void recordFreeHeld(uintptr_t ptr,
                        DeviceKey device,
                        int64_t allocatorAllocated,
                        int64_t allocatorReserved,
                        bool allocatorTotals) noexcept;
    RecorderLock& lock() const noexcept { return d_lock; }
    void noteShadowed() noexcept { d_shadowed.store(true, std::memory_order_relaxed); }
    // The phase blocks allocated from now on are born in, unless an autograd node is running
    // (nodeTypeName given: always Backward). Set by the tracking thread around the optimizer's
    // step; one relaxed atomic, read by the hook on every thread (a block another thread
    // allocates during the step is counted in it too).
    void setPhase(BirthPhase phase) noexcept {
        d_phase.store(static_cast<uint8_t>(phase), std::memory_order_relaxed);
    }
    BirthPhase phase() const noexcept {
        return static_cast<BirthPhase>(d_phase.load(std::memory_order_relaxed));
    }
    // An allocator could not satisfy a request. Allocation-free; may run under the device
    // allocator's mutex like the two above.
    void recordOutOfMemory(DeviceKey device,
                           int64_t requested,
                           int64_t allocatorAllocated,
                           int64_t allocatorReserved,
                           bool fromAllocator = true) noexcept;
    void recordOutOfMemoryHeld(DeviceKey device,
                               int64_t requested,
                               int64_t allocatorAllocated,
                               int64_t allocatorReserved,
                               bool fromAllocator = true) noexcept;

    // ---- slow path: the tracking thread ---------------------------------------------------
    // Interns a stack captured off the hot path, for recordAlloc's inheritedStack: the stack a
    // block takes when its allocation came without one (a block made on autograd's device
    // threads inherits the stack of the backward() call that runs them).
    StackToken internStack(std::span<const RawFrame> frames);
    // A registry's word on live blocks, before a boundary: the blocks at `blocks` (allocation
    // pointers; unknown ones are skipped) are held as `held`, and their bytes move to it in
    // their device's origins. `found`, when given, is as long as `blocks` and says which were
    // live blocks. Returns how many were. O(blocks).
    size_t markHeldAs(std::span<const uintptr_t> blocks,
                      HeldAs held,
                      std::span<uint8_t> found = {}) noexcept;
    // What the registry named that no tracked block is (made before tracking): `bytes` more
    // held as `held` on `device` at the coming boundary. Memory by role counts them; the
    // tracked bytes do not.
    void noteUntrackedHeld(DeviceKey device, HeldAs held, int64_t bytes) noexcept;
    // Ends the current iteration: snapshots the groups it changed and starts the next.
    const BoundarySnapshot& markBoundary();
    // Groups that became steady risers at the last boundary: their live bytes reached a new
    // high at kSteadyNewHighs of the last 8 boundaries, this one included, and had not at the
    // one before. Watch's cue for a leak too small to move the total (4 KiB a step under
    // 1 MiB of transients): the look it asks for decides, this only says when to look. One
    // crossing per rising stretch, so a leak already announced does not keep asking.
    uint32_t newlySteadyGroups() const noexcept { return d_newlySteady; }
    static constexpr int kSteadyNewHighs = 6;
    // Groups that reached a new high at the last boundary in rhythm: the third or later of
    // new highs at regular gaps of 2 boundaries or more (within a quarter), as a leak that
    // steps at each evaluation does. Watch's cue for a staircase, confirmed at its third step
    // (verdict.cpp), whose steps move the total too little and too rarely for the other cues.
    uint32_t steppedGroups() const noexcept { return d_stepped; }
    uint32_t iteration() const noexcept { return d_iteration.load(std::memory_order_relaxed); }
    // The kept boundaries, oldest first: every boundary whose iteration is a multiple of
    // gridStride(), and the newest kNewestKept.
    const std::vector<BoundarySnapshot>& boundaries() const noexcept { return d_boundaries; }
    uint32_t gridStride() const noexcept { return d_stride; }
    static constexpr size_t kMaxGridBoundaries = 512;
    static constexpr size_t kNewestKept = 16;

    // Visits every live block with the lock held; fn must not allocate tensors.
    void forEachLiveBlock(const std::function<void(uintptr_t, const BlockRecord&)>& fn) const;
    std::optional<BlockRecord> liveBlock(uintptr_t ptr) const;
    std::optional<OutOfMemoryEvent> lastOutOfMemory() const;
    // The last out-of-memory event when it is the failure now: nothing was allocated on its
    // device after it. An earlier failure the program caught and survived is not.
    std::optional<OutOfMemoryEvent> currentOutOfMemory() const;
    // Tracked bytes of live blocks on `device` now, and where they come from.
    int64_t trackedBytes(DeviceKey device) const;
    BlockOrigins liveOrigins(DeviceKey device) const;
    std::vector<RawFrame> stackFrames(StackToken token) const;
    std::string nodeName(NodeToken token) const;
    std::vector<RawFrame> allInternedFrames() const;

    uint64_t eventCount() const noexcept {
        return d_events.load(std::memory_order_relaxed) + skippedEvents();
    }
    // Allocations seen (recorded or skipped by sampling). Frees alone do not count: with the
    // CPU tap, a block an earlier session allocated reports its free to this one.
    uint64_t allocationCount() const noexcept {
        return d_allocations.load(std::memory_order_relaxed) + skippedEvents();
    }
    // Allocations that could not be recorded (a device past kMaxDevices, or memory exhausted
    // while a table grew): the report says so, since their blocks are missing from it.
    uint64_t droppedEvents() const noexcept { return d_dropped.load(std::memory_order_relaxed); }
    uint64_t skippedEvents() const noexcept { return d_skipped.load(std::memory_order_relaxed); }
    size_t liveBlockCount() const;
    size_t stackCount() const;

    // log2 of the slots of the group cache in front of the group map (below).
    static constexpr unsigned kGroupCacheBits = 6;

  private:
    struct DeviceState {
        DeviceKey device;
        int64_t tracked = 0; // bytes of live tracked blocks
        int64_t allocatorAllocated = 0;
        int64_t allocatorReserved = 0;
        int64_t peak = 0;
        uint64_t allocations = 0; // recorded or skipped by sampling
        bool allocatorTotals = false;
        bool totalsRejected = false;
        uint64_t rejectedTotals = 0;
        BlockOrigins live;   // tracked live bytes by origin (adds up to `tracked`)
        BlockOrigins atPeak; // `live` when `peak` was last raised
        // The allocation sequence when `atPeak` was taken: a block with a sequence up to it
        // was alive then. Its frees since go to `freedAfterPeak`, and a registry's name moves
        // its bytes in `atPeak` too, so the peak is told by what each block turned out to be.
        uint64_t peakSequence = 0;
        BlockOrigins freedAfterPeak;
        // The biggest block born in this iteration and not freed since (its free forgets it,
        // and the next birth starts over), and that block when the peak was taken.
        BlockBrief biggestBorn;
        BlockBrief biggestAtPeak;
        std::array<int64_t, kRegisteredRoles> untrackedHeld{}; // for the coming boundary
    };
    static constexpr size_t kMaxDevices = 32;

    struct GroupState {
        GroupKey key;
        uint64_t bytes = 0;
        uint64_t count = 0;
        std::vector<BirthCount> births;
        size_t head = 0;        // births[head] is the oldest non-empty entry
        size_t emptyBirths = 0; // entries with count 0 (all before the back)
        // The groups changed since the last boundary form an intrusive list, so that marking
        // one from the hook (on a free too) never allocates.
        GroupState* nextDirty = nullptr;
        bool dirty = false;
        // The highest live bytes seen at a boundary, and which of the last 8 boundaries
        // (bit 0: the one at `newHighsAt`) reached a new one: O(1) per changed group.
        uint64_t high = 0;
        uint8_t newHighs = 0;
        uint32_t newHighsAt = 0;
        uint32_t lastHighs[2] = {0, 0}; // the boundaries of the two new highs before, or 0
    };
    // The rising tests for one changed group at boundary `current`.
    struct Rise {
        bool becameSteady = false;
        bool stepped = false;
    };
    static Rise riseOf(GroupState& group, uint32_t current) noexcept;

    // A live block enters (sign +1) or leaves (-1) its device's tracked bytes and origins,
    // together, so that the origins always add up to `tracked`; a block alive at the peak
    // that leaves is counted as freed after it. Under d_lock.
    void countBlock(DeviceState& st, const BlockRecord& rec, int sign) noexcept;
    // Both under d_lock. addBlock may throw (a new group or birth entry), removeBlock not.
    void addBlock(const BlockRecord& rec);
    void removeBlock(const BlockRecord& rec) noexcept;
    // Takes a block that left no free behind out of its device's counts (countBlock -1).
    void forgetBlock(const BlockRecord& rec) noexcept;
    // Files a young block in the live table and its group (young_blocks.h); settleYoung files
    // them all, before anything reads groups or live blocks. Under d_lock.
    void settle(size_t slot) noexcept;
    void settleYoung() noexcept;
    // The group of `key`, through d_groupCache; null (find) when there is none yet.
    GroupState* findGroup(const GroupKey& key) noexcept;
    GroupState& groupFor(const GroupKey& key); // creates it; may throw
    void markDirty(GroupState& group) noexcept;
    // Folds `older` into `newer`, the kept boundary after it, so that `older` can be dropped.
    static void mergeInto(const BoundarySnapshot& older, BoundarySnapshot& newer);
    void thinHistory();
    // The peak is now: what is alive is what was alive at it.
    void takePeak(DeviceState& st) noexcept;

    DeviceState* deviceState(DeviceKey device) noexcept; // creates it (up to kMaxDevices)
    DeviceState* knownDeviceState(DeviceKey device) noexcept;
    const DeviceState* knownDeviceState(DeviceKey device) const noexcept;
    size_t deviceSlot(DeviceKey device) const noexcept;
    void updateTotals(DeviceState& st,
                      int64_t allocatorAllocated,
                      int64_t allocatorReserved,
                      bool allocatorTotals,
                      uint64_t allocatedBlock) noexcept;

    RecorderLock d_ownLock;
    RecorderLock& d_lock; // d_ownLock, or the one given
    LiveBlockTable d_live;
    YoungBlocks d_young;
    StackTable d_stacks;
    NodeNameTable d_nodes;
    DeviceState d_devices[kMaxDevices];
    size_t d_deviceCount = 0;
    StackRetainFn d_retain = nullptr;
    std::atomic<uint32_t> d_iteration{0};
    // Events and allocations recorded: written only under d_lock, so counted with a plain
    // load and store (no locked add on every event, which the lock already orders), read
    // without it. Skipped allocations, counted without the lock, are d_skipped.
    std::atomic<uint64_t> d_events{0};
    std::atomic<uint64_t> d_allocations{0};
    std::atomic<uint64_t> d_dropped{0};
    std::atomic<uint64_t> d_skipped{0};
    AllocationSampler d_sampler;
    std::atomic<bool> d_shadowed{false};
    std::atomic<uint8_t> d_phase{static_cast<uint8_t>(BirthPhase::Forward)};
    uint64_t d_sequence = 0;
    std::unordered_map<GroupKey, GroupState, GroupKeyHash> d_groups; // nodes: stable addresses
    // The groups last looked up, by their key's hash: every block's birth and death look its
    // group up, and the map's lookup divides by its prime bucket count and chases a node. A
    // loop allocates from a few sites over and over, so a small direct-mapped cache answers
    // nearly all of them. Groups are never erased: a cached pointer stays valid.
    struct GroupCacheSlot {
        GroupKey key;
        GroupState* group = nullptr;
    };
    std::array<GroupCacheSlot, size_t{1} << kGroupCacheBits> d_groupCache{};
    GroupState* d_dirtyHead = nullptr;
    uint32_t d_newlySteady = 0;
    uint32_t d_stepped = 0;
    uint64_t d_liveBytes = 0;
    uint64_t d_bornBytes = 0;  // born during the current iteration and still alive
    uint64_t d_freedBytes = 0; // born before the current iteration and freed during it
    std::vector<BoundarySnapshot> d_boundaries;
    uint32_t d_stride = 1;
    OutOfMemoryEvent d_oom;
};

// What the iteration that kept boundary `b` ended did to tracked memory, with no report: watch
// mode's per-cell ledger, and its way to skip a cell that changed nothing.
struct IterationTotals {
    int64_t live = 0;  // bytes alive at the boundary
    int64_t born = 0;  // of those, allocated during the iteration
    int64_t freed = 0; // bytes alive at the previous boundary and freed during the iteration
};
IterationTotals iterationTotals(const std::vector<BoundarySnapshot>& boundaries, size_t b);

} // namespace torchleak
