#include "torchleak/recorder.h"

#include <algorithm>
#include <bit>
#include <unordered_map>

namespace torchleak {

namespace {
// Fibonacci hashing: GroupKeyHash multiplies by the golden ratio, so its top bits are the
// well-mixed ones.
size_t cacheSlotOf(const GroupKey& key) noexcept {
    return static_cast<size_t>(static_cast<uint64_t>(GroupKeyHash{}(key)) >>
                               (64 - AllocationRecorder::kGroupCacheBits));
}

// One more on a counter whose every writer holds the recorder's lock: no locked add.
void countUnderLock(std::atomic<uint64_t>& counter) noexcept {
    counter.store(counter.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
}
} // namespace

// The live table starts small and doubles as blocks accumulate. Every event probes it at a
// hashed, so random, slot: a loop of small ops with a handful of live blocks, whose addresses
// wander over the heap, missed the cache on nearly every event in a 16,384-slot (768 KiB) table.
AllocationRecorder::AllocationRecorder() : d_lock(d_ownLock), d_live(1 << 10) {}

AllocationRecorder::AllocationRecorder(RecorderLock& lock) : d_lock(lock), d_live(1 << 10) {}

size_t AllocationRecorder::deviceSlot(DeviceKey device) const noexcept {
    size_t i = 0;
    while (i < d_deviceCount && !(d_devices[i].device == device)) {
        ++i;
    }
    return i; // d_deviceCount when unknown
}

AllocationRecorder::DeviceState* AllocationRecorder::knownDeviceState(DeviceKey device) noexcept {
    size_t slot = deviceSlot(device);
    return slot < d_deviceCount ? &d_devices[slot] : nullptr;
}

const AllocationRecorder::DeviceState*
AllocationRecorder::knownDeviceState(DeviceKey device) const noexcept {
    size_t slot = deviceSlot(device);
    return slot < d_deviceCount ? &d_devices[slot] : nullptr;
}

AllocationRecorder::DeviceState* AllocationRecorder::deviceState(DeviceKey device) noexcept {
    if (DeviceState* known = knownDeviceState(device)) {
        return known;
    }
    if (d_deviceCount == kMaxDevices) {
        return nullptr;
    }
    d_devices[d_deviceCount].device = device;
    return &d_devices[d_deviceCount++];
}

// An allocator's totals are believed until one event contradicts them: allocated below the
// block it just handed out (an allocator that reports 0, 0), reserved below allocated, or a
// negative number (a size_t that wrapped). One bad event and the device's timeline falls back
// to the bytes torchleak tracks itself for the rest of the run: a timeline that mixes the two
// would show jumps that are neither leaks nor frees.
void AllocationRecorder::updateTotals(DeviceState& st,
                                      int64_t allocatorAllocated,
                                      int64_t allocatorReserved,
                                      bool allocatorTotals,
                                      uint64_t allocatedBlock) noexcept {
    if (allocatorTotals && !st.totalsRejected) {
        bool plausible = allocatorAllocated >= 0 && allocatorReserved >= 0 &&
                         allocatorReserved >= allocatorAllocated &&
                         static_cast<uint64_t>(allocatorAllocated) >= allocatedBlock;
        if (plausible) {
            st.allocatorTotals = true;
            st.allocatorAllocated = allocatorAllocated;
            st.allocatorReserved = allocatorReserved;
        } else {
            st.totalsRejected = true;
            st.allocatorTotals = false;
        }
    }
    if (allocatorTotals && st.totalsRejected) {
        ++st.rejectedTotals;
    }
    int64_t current = st.allocatorTotals ? st.allocatorAllocated : st.tracked;
    if (current > st.peak) {
        st.peak = current;
        takePeak(st);
    }
}

void AllocationRecorder::takePeak(DeviceState& st) noexcept {
    st.atPeak = st.live;
    st.peakSequence = d_sequence;
    st.freedAfterPeak = BlockOrigins{};
    st.biggestAtPeak = st.biggestBorn;
}

void AllocationRecorder::recordAlloc(uintptr_t ptr,
                                     uint64_t size,
                                     DeviceKey device,
                                     std::span<const RawFrame> frames,
                                     const char* nodeTypeName,
                                     int64_t allocatorAllocated,
                                     int64_t allocatorReserved,
                                     bool allocatorTotals,
                                     uint64_t weight,
                                     StackToken inheritedStack) noexcept {
    std::lock_guard<RecorderLock> lock(d_lock);
    recordAllocHeld(ptr, size, device, frames, nodeTypeName, allocatorAllocated, allocatorReserved,
                    allocatorTotals, weight, inheritedStack);
}

void AllocationRecorder::recordAllocHeld(uintptr_t ptr,
                                         uint64_t size,
                                         DeviceKey device,
                                         std::span<const RawFrame> frames,
                                         const char* nodeTypeName,
                                         int64_t allocatorAllocated,
                                         int64_t allocatorReserved,
                                         bool allocatorTotals,
                                         uint64_t weight,
                                         StackToken inheritedStack) noexcept {
    countUnderLock(d_events);
    countUnderLock(d_allocations);
    if (ptr == 0) {
        return; // a zero-byte allocation: no block, nothing to lose
    }
    DeviceState* st = deviceState(device);
    if (st == nullptr) {
        d_dropped.fetch_add(1, std::memory_order_relaxed); // more devices than kMaxDevices
        return;
    }
    try {
        bool inserted = false;
        StackToken stack = frames.empty() && inheritedStack != 0
                               ? inheritedStack
                               : d_stacks.intern(frames, &inserted);
        if (inserted && d_retain != nullptr) {
            d_retain(frames);
        }
        const NodeToken node =
            nodeTypeName != nullptr ? d_nodes.intern(nodeTypeName) : NodeToken{0};
        if (size_t same = d_young.find(ptr); same != YoungBlocks::kNone) {
            // The allocator handed out an address whose free we did not see (a gap while
            // another profiler was on top): forget the old block.
            forgetBlock(d_young.take(same));
        } else if (auto old = d_live.erase(ptr)) {
            removeBlock(*old);
            forgetBlock(*old);
        }
        if (d_young.full()) {
            settle(d_young.oldest());
        }
        // Written in its slot field by field: a record built on the stack and copied in was
        // read back wider than it was written, a store-forwarding stall on every allocation.
        BlockRecord& rec = d_young.put(ptr);
        rec.size = size;
        rec.weight = weight == kWholeBlock ? size : weight;
        rec.sequence = ++d_sequence;
        rec.iteration = d_iteration.load(std::memory_order_relaxed);
        rec.stack = stack;
        rec.node = node;
        rec.device = device;
        rec.phase = nodeTypeName != nullptr ? BirthPhase::Backward : phase();
        rec.heldAs = HeldAs::Unknown;
        countBlock(*st, rec, +1);
        st->allocations += 1;
    } catch (...) {
        // Out of memory while growing a table: losing one event beats terminating the
        // process from inside the allocator.
        d_dropped.fetch_add(1, std::memory_order_relaxed);
    }
    updateTotals(*st, allocatorAllocated, allocatorReserved, allocatorTotals, size);
}

void AllocationRecorder::recordSkipped(DeviceKey device,
                                       int64_t allocatorAllocated,
                                       int64_t allocatorReserved,
                                       bool allocatorTotals) noexcept {
    d_skipped.fetch_add(1, std::memory_order_relaxed);
    if (!allocatorTotals) {
        return; // the tracked totals are the recorded blocks' weights: nothing to update
    }
    std::lock_guard<RecorderLock> lock(d_lock);
    if (DeviceState* st = deviceState(device)) {
        st->allocations += 1;
        updateTotals(*st, allocatorAllocated, allocatorReserved, allocatorTotals, 0);
    }
}

void AllocationRecorder::recordFree(uintptr_t ptr,
                                    DeviceKey device,
                                    int64_t allocatorAllocated,
                                    int64_t allocatorReserved,
                                    bool allocatorTotals) noexcept {
    std::lock_guard<RecorderLock> lock(d_lock);
    recordFreeHeld(ptr, device, allocatorAllocated, allocatorReserved, allocatorTotals);
}

void AllocationRecorder::recordFreeHeld(uintptr_t ptr,
                                        DeviceKey device,
                                        int64_t allocatorAllocated,
                                        int64_t allocatorReserved,
                                        bool allocatorTotals) noexcept {
    countUnderLock(d_events);
    std::optional<BlockRecord> removed;
    if (size_t slot = d_young.find(ptr); slot != YoungBlocks::kNone) {
        removed = d_young.take(slot); // born and freed young: no table ever held it
    } else if ((removed = d_live.erase(ptr))) {
        removeBlock(*removed);
    }
    if (removed) {
        // The block's own device: a free reported on another one must not move two counts.
        if (DeviceState* owner = deviceState(removed->device)) {
            countBlock(*owner, *removed, -1);
        }
    }
    // The free of a block never seen (allocated before tracking, or a report gone astray)
    // updates the totals of a device already known but does not make one up.
    DeviceState* st = removed ? deviceState(device) : knownDeviceState(device);
    if (st == nullptr) {
        return;
    }
    updateTotals(*st, allocatorAllocated, allocatorReserved, allocatorTotals, 0);
}

void AllocationRecorder::recordOutOfMemory(DeviceKey device,
                                           int64_t requested,
                                           int64_t allocatorAllocated,
                                           int64_t allocatorReserved,
                                           bool fromAllocator) noexcept {
    std::lock_guard<RecorderLock> lock(d_lock);
    recordOutOfMemoryHeld(device, requested, allocatorAllocated, allocatorReserved, fromAllocator);
}

void AllocationRecorder::recordOutOfMemoryHeld(DeviceKey device,
                                               int64_t requested,
                                               int64_t allocatorAllocated,
                                               int64_t allocatorReserved,
                                               bool fromAllocator) noexcept {
    d_oom.device = device;
    d_oom.requested = requested;
    d_oom.allocated = allocatorAllocated;
    d_oom.reserved = allocatorReserved;
    d_oom.iteration = d_iteration.load(std::memory_order_relaxed);
    d_oom.count += 1;
    d_oom.fromAllocator = fromAllocator;
    const DeviceState* st = knownDeviceState(device);
    d_oom.allocationsBefore = st != nullptr ? st->allocations : 0;
    d_oom.live = st != nullptr ? st->live : BlockOrigins{};
}

StackToken AllocationRecorder::internStack(std::span<const RawFrame> frames) {
    std::lock_guard<RecorderLock> lock(d_lock);
    bool inserted = false;
    StackToken stack = d_stacks.intern(frames, &inserted);
    if (inserted && d_retain != nullptr) {
        d_retain(frames);
    }
    return stack;
}

std::optional<OutOfMemoryEvent> AllocationRecorder::currentOutOfMemory() const {
    std::lock_guard<RecorderLock> lock(d_lock);
    if (d_oom.count == 0) {
        return std::nullopt;
    }
    const DeviceState* st = knownDeviceState(d_oom.device);
    const uint64_t allocations = st != nullptr ? st->allocations : 0;
    return allocations == d_oom.allocationsBefore ? std::optional<OutOfMemoryEvent>(d_oom)
                                                  : std::nullopt;
}

std::optional<OutOfMemoryEvent> AllocationRecorder::lastOutOfMemory() const {
    std::lock_guard<RecorderLock> lock(d_lock);
    return d_oom.count > 0 ? std::optional<OutOfMemoryEvent>(d_oom) : std::nullopt;
}

int64_t AllocationRecorder::trackedBytes(DeviceKey device) const {
    std::lock_guard<RecorderLock> lock(d_lock);
    size_t slot = deviceSlot(device);
    return slot < d_deviceCount ? d_devices[slot].tracked : 0;
}

BlockOrigins AllocationRecorder::liveOrigins(DeviceKey device) const {
    std::lock_guard<RecorderLock> lock(d_lock);
    const DeviceState* st = knownDeviceState(device);
    return st != nullptr ? st->live : BlockOrigins{};
}

void AllocationRecorder::markDirty(GroupState& group) noexcept {
    if (!group.dirty) {
        group.dirty = true;
        group.nextDirty = d_dirtyHead;
        d_dirtyHead = &group;
    }
}

void AllocationRecorder::countBlock(DeviceState& st, const BlockRecord& rec, int sign) noexcept {
    const int64_t bytes = sign * static_cast<int64_t>(rec.weight);
    const bool bornThisIteration = rec.iteration == d_iteration.load(std::memory_order_relaxed);
    st.tracked += bytes;
    st.live.add(rec.heldAs, rec.phase, bornThisIteration, bytes);
    if (sign < 0 && rec.sequence <= st.peakSequence) {
        st.freedAfterPeak.add(rec.heldAs, rec.phase, bornThisIteration, -bytes);
    }
    if (sign > 0 && bornThisIteration && rec.size > st.biggestBorn.size) {
        st.biggestBorn = BlockBrief{rec.size, rec.sequence, rec.stack, rec.node};
    } else if (sign < 0 && rec.sequence == st.biggestBorn.sequence) {
        st.biggestBorn = BlockBrief{};
    }
}

AllocationRecorder::GroupState* AllocationRecorder::findGroup(const GroupKey& key) noexcept {
    GroupCacheSlot& slot = d_groupCache[cacheSlotOf(key)];
    if (slot.group != nullptr && slot.key == key) {
        return slot.group;
    }
    auto it = d_groups.find(key);
    if (it == d_groups.end()) {
        return nullptr;
    }
    slot = GroupCacheSlot{key, &it->second};
    return &it->second;
}

AllocationRecorder::GroupState& AllocationRecorder::groupFor(const GroupKey& key) {
    if (GroupState* known = findGroup(key)) {
        return *known;
    }
    GroupState& group = d_groups[key];
    group.key = key;
    d_groupCache[cacheSlotOf(key)] = GroupCacheSlot{key, &group};
    return group;
}

void AllocationRecorder::forgetBlock(const BlockRecord& rec) noexcept {
    if (DeviceState* owner = knownDeviceState(rec.device)) {
        countBlock(*owner, rec, -1);
    }
}

// A young block's birth is filed now, in the iteration it was born in (young blocks are all
// settled before a boundary). Its slot in the live table is a new one: its allocation took any
// older block at its address out of the table, and no other young block has that address. A
// table that cannot grow loses the block, counted as dropped.
void AllocationRecorder::settle(size_t slot) noexcept {
    const uintptr_t ptr = d_young.pointer(slot);
    const BlockRecord rec = d_young.take(slot);
    try {
        BlockRecord* entry = d_live.emplace(ptr).first;
        try {
            addBlock(rec);
        } catch (...) {
            d_live.erase(ptr);
            throw;
        }
        *entry = rec;
    } catch (...) {
        forgetBlock(rec);
        d_dropped.fetch_add(1, std::memory_order_relaxed);
    }
}

void AllocationRecorder::settleYoung() noexcept {
    while (!d_young.empty()) {
        settle(d_young.oldest());
    }
}

void AllocationRecorder::addBlock(const BlockRecord& rec) {
    GroupState& group = groupFor(GroupKey{rec.stack, rec.node, rec.device});
    if (group.births.empty() || group.births.back().iteration != rec.iteration) {
        group.births.push_back(BirthCount{rec.iteration, 0, 0});
    }
    group.births.back().count += 1;
    group.births.back().bytes += rec.weight;
    group.bytes += rec.weight;
    group.count += 1;
    d_liveBytes += rec.weight;
    d_bornBytes += rec.weight;
    markDirty(group);
}

void AllocationRecorder::removeBlock(const BlockRecord& rec) noexcept {
    GroupState* found = findGroup(GroupKey{rec.stack, rec.node, rec.device});
    if (found == nullptr) {
        return;
    }
    GroupState& group = *found;
    // Most blocks die in the iteration that made them: their birth entry is the last one.
    auto birth = !group.births.empty() && group.births.back().iteration == rec.iteration
                     ? group.births.end() - 1
                     : std::lower_bound(group.births.begin(), group.births.end(), rec.iteration,
                                        [](const BirthCount& c, uint32_t iteration) {
                                            return c.iteration < iteration;
                                        });
    if (birth == group.births.end() || birth->iteration != rec.iteration || birth->count == 0) {
        return; // not added (addBlock threw): nothing to take back
    }
    birth->count -= 1;
    birth->bytes -= std::min(birth->bytes, rec.weight);
    if (birth->count == 0) {
        group.emptyBirths += 1;
        while (!group.births.empty() && group.births.back().count == 0) {
            group.births.pop_back();
            group.emptyBirths -= 1;
        }
        while (group.head < group.births.size() && group.births[group.head].count == 0) {
            group.head += 1;
        }
        group.head = std::min(group.head, group.births.size());
    }
    group.bytes -= std::min(group.bytes, rec.weight);
    group.count -= 1;
    d_liveBytes -= std::min(d_liveBytes, rec.weight);
    if (rec.iteration == d_iteration.load(std::memory_order_relaxed)) {
        d_bornBytes -= std::min(d_bornBytes, rec.weight);
    } else {
        d_freedBytes += rec.weight;
    }
    markDirty(group);
}

size_t AllocationRecorder::markHeldAs(std::span<const uintptr_t> blocks,
                                      HeldAs held,
                                      std::span<uint8_t> found) noexcept {
    std::lock_guard<RecorderLock> lock(d_lock);
    settleYoung();
    const uint32_t current = d_iteration.load(std::memory_order_relaxed);
    size_t live = 0;
    for (size_t i = 0; i < blocks.size(); ++i) {
        BlockRecord* rec = d_live.find(blocks[i]);
        if (i < found.size()) {
            found[i] = rec != nullptr ? 1 : 0;
        }
        if (rec == nullptr) {
            continue;
        }
        ++live;
        if (rec->heldAs == held) {
            continue;
        }
        if (DeviceState* st = knownDeviceState(rec->device)) {
            const bool bornThisIteration = rec->iteration == current;
            const auto bytes = static_cast<int64_t>(rec->weight);
            st->live.add(rec->heldAs, rec->phase, bornThisIteration, -bytes);
            st->live.add(held, rec->phase, bornThisIteration, bytes);
            if (rec->sequence <= st->peakSequence) {
                st->atPeak.add(rec->heldAs, rec->phase, bornThisIteration, -bytes);
                st->atPeak.add(held, rec->phase, bornThisIteration, bytes);
            }
        }
        rec->heldAs = held;
    }
    return live;
}

void AllocationRecorder::noteUntrackedHeld(DeviceKey device, HeldAs held, int64_t bytes) noexcept {
    if (held == HeldAs::Unknown) {
        return;
    }
    std::lock_guard<RecorderLock> lock(d_lock);
    if (DeviceState* st = deviceState(device)) {
        st->untrackedHeld[static_cast<size_t>(held) - 1] += bytes;
    }
}

const BoundarySnapshot& AllocationRecorder::markBoundary() {
    BoundarySnapshot snap;
    {
        std::lock_guard<RecorderLock> lock(d_lock);
        settleYoung();
        uint32_t current = d_iteration.load(std::memory_order_relaxed);
        snap.iteration = current;
        uint32_t newlySteady = 0, stepped = 0;
        for (GroupState* g = d_dirtyHead; g != nullptr; g = g->nextDirty) {
            const Rise rise = riseOf(*g, current);
            newlySteady += rise.becameSteady ? 1 : 0;
            stepped += rise.stepped ? 1 : 0;
            if (g->emptyBirths > 0 && g->emptyBirths * 2 >= g->births.size()) {
                std::erase_if(g->births, [](const BirthCount& c) { return c.count == 0; });
                g->head = 0;
                g->emptyBirths = 0;
            }
            GroupSample sample;
            sample.key = g->key;
            sample.bytes = g->bytes;
            sample.count = g->count;
            if (g->head < g->births.size()) {
                sample.oldestIteration = g->births[g->head].iteration;
                if (g->births.back().iteration == current) {
                    sample.bornThisIteration = g->births.back().bytes;
                }
            } else {
                sample.oldestIteration = current;
            }
            snap.groups.push_back(sample);
        }
        for (size_t i = 0; i < d_deviceCount; ++i) {
            DeviceState& st = d_devices[i];
            DeviceSample ds;
            ds.device = st.device;
            ds.allocatorTotals = st.allocatorTotals;
            ds.rejectedTotals = st.rejectedTotals;
            ds.allocated = st.allocatorTotals ? st.allocatorAllocated : st.tracked;
            ds.reserved = st.allocatorTotals ? st.allocatorReserved : ds.allocated;
            ds.peak = std::max(st.peak, ds.allocated);
            ds.live = st.live;
            const bool peakIsNow = ds.peak > st.peak;
            ds.atPeak = peakIsNow ? st.live : st.atPeak;
            ds.freedAfterPeak = peakIsNow ? BlockOrigins{} : st.freedAfterPeak;
            ds.biggestAtPeak = peakIsNow ? st.biggestBorn : st.biggestAtPeak;
            ds.untrackedHeld = st.untrackedHeld;
            snap.devices.push_back(ds);
        }
        // Nothing above changed the recorder but the groups' steady-riser bits, which a retry
        // of this boundary leaves as they are: from here on the boundary cannot fail halfway.
        d_newlySteady = newlySteady;
        d_stepped = stepped;
        for (GroupState* g = d_dirtyHead; g != nullptr;) {
            GroupState* next = g->nextDirty;
            g->dirty = false;
            g->nextDirty = nullptr;
            g = next;
        }
        d_dirtyHead = nullptr;
        for (size_t i = 0; i < d_deviceCount; ++i) {
            d_devices[i].peak = snap.devices[i].allocated; // the next iteration's peak starts here
            d_devices[i].live.endIteration();
            d_devices[i].biggestBorn = BlockBrief{};
            d_devices[i].untrackedHeld = {}; // the next boundary's registry says it again
            takePeak(d_devices[i]);
        }
        snap.liveBytes = d_liveBytes;
        snap.bornBytes = d_bornBytes;
        snap.freedBytes = d_freedBytes;
        d_bornBytes = 0;
        d_freedBytes = 0;
        snap.shadowedIterations = d_shadowed.exchange(false, std::memory_order_relaxed) ? 1 : 0;
        d_iteration.store(current + 1, std::memory_order_relaxed);
    }
    // Biggest first, then by stack: the builder's choice of a site's shown stack does not
    // depend on hash order.
    std::sort(snap.groups.begin(), snap.groups.end(),
              [](const GroupSample& a, const GroupSample& b) {
                  return a.bytes != b.bytes ? a.bytes > b.bytes : a.key.stack < b.key.stack;
              });
    d_boundaries.push_back(std::move(snap));
    thinHistory();
    return d_boundaries.back();
}

AllocationRecorder::Rise AllocationRecorder::riseOf(GroupState& group, uint32_t current) noexcept {
    // A group unchanged since its last boundary reached no new high in between: shift by the
    // boundaries passed, not by one.
    const uint32_t passed = current - group.newHighsAt;
    const bool was = std::popcount(group.newHighs) >= kSteadyNewHighs;
    group.newHighs = passed >= 8 ? 0 : static_cast<uint8_t>(group.newHighs << passed);
    group.newHighsAt = current;
    Rise rise;
    if (group.bytes > group.high) {
        group.high = group.bytes;
        group.newHighs |= 1;
        // Boundary 0 stands for "none yet": a group's first high there starts no rhythm.
        const uint32_t older = group.lastHighs[0], last = group.lastHighs[1];
        if (older > 0 && last > older && current > last) {
            const uint32_t gap = current - last, before = last - older;
            const uint32_t apart = gap > before ? gap - before : before - gap;
            rise.stepped = gap >= 2 && before >= 2 && apart * 4 <= std::max(gap, before);
        }
        group.lastHighs[0] = last;
        group.lastHighs[1] = current;
    }
    const bool is = (group.newHighs & 1) != 0 && std::popcount(group.newHighs) >= kSteadyNewHighs;
    rise.becameSteady = is && !(was && passed == 1);
    return rise;
}

void AllocationRecorder::mergeInto(const BoundarySnapshot& older, BoundarySnapshot& newer) {
    std::unordered_map<GroupKey, size_t, GroupKeyHash> present;
    for (size_t i = 0; i < newer.groups.size(); ++i) {
        present.emplace(newer.groups[i].key, i);
    }
    for (const GroupSample& g : older.groups) {
        if (!present.count(g.key)) {
            GroupSample carried = g; // unchanged since: its state at `newer` too
            carried.bornThisIteration = 0;
            newer.groups.push_back(carried);
        }
    }
    for (const DeviceSample& d : older.devices) {
        for (DeviceSample& n : newer.devices) {
            if (n.device == d.device && d.peak > n.peak) {
                n.peak = d.peak; // the stretch's peak, and what was alive at it
                n.atPeak = d.atPeak;
                n.freedAfterPeak = d.freedAfterPeak;
                n.biggestAtPeak = d.biggestAtPeak;
            }
        }
    }
    newer.shadowedIterations += older.shadowedIterations;
}

// Boundaries other than the newest kNewestKept must lie on the grid (iteration % d_stride ==
// 0); when the grid would exceed kMaxGridBoundaries, its stride doubles. What a dropped
// boundary recorded moves into the kept boundary after it, so every group's latest state
// survives. The newest stay dense so that a leak that begins late in a long run shows its
// first iterations one by one, and watch can confirm it within a few of them.
void AllocationRecorder::thinHistory() {
    auto offGrid = [this](const BoundarySnapshot& b) { return b.iteration % d_stride != 0; };
    size_t n = d_boundaries.size();
    if (n > kNewestKept && offGrid(d_boundaries[n - kNewestKept - 1])) {
        mergeInto(d_boundaries[n - kNewestKept - 1], d_boundaries[n - kNewestKept]);
        d_boundaries.erase(d_boundaries.begin() + static_cast<std::ptrdiff_t>(n - kNewestKept - 1));
        n -= 1;
    }
    if (n <= kMaxGridBoundaries + kNewestKept) {
        return;
    }
    d_stride *= 2;
    std::vector<BoundarySnapshot> kept;
    for (size_t i = 0; i < n; ++i) {
        if (i + kNewestKept < n && offGrid(d_boundaries[i])) {
            mergeInto(d_boundaries[i], d_boundaries[i + 1]);
        } else {
            kept.push_back(std::move(d_boundaries[i]));
        }
    }
    d_boundaries = std::move(kept);
}

void AllocationRecorder::forEachLiveBlock(
    const std::function<void(uintptr_t, const BlockRecord&)>& fn) const {
    std::lock_guard<RecorderLock> lock(d_lock);
    d_live.forEach(fn);
    d_young.forEach(fn);
}

std::optional<BlockRecord> AllocationRecorder::liveBlock(uintptr_t ptr) const {
    std::lock_guard<RecorderLock> lock(d_lock);
    if (size_t slot = d_young.find(ptr); slot != YoungBlocks::kNone) {
        return d_young.record(slot);
    }
    const BlockRecord* rec = d_live.find(ptr);
    return rec != nullptr ? std::optional<BlockRecord>(*rec) : std::nullopt;
}

std::vector<RawFrame> AllocationRecorder::stackFrames(StackToken token) const {
    std::lock_guard<RecorderLock> lock(d_lock);
    auto frames = d_stacks.frames(token);
    return {frames.begin(), frames.end()};
}

std::string AllocationRecorder::nodeName(NodeToken token) const {
    std::lock_guard<RecorderLock> lock(d_lock);
    return d_nodes.name(token);
}

std::vector<RawFrame> AllocationRecorder::allInternedFrames() const {
    std::lock_guard<RecorderLock> lock(d_lock);
    return d_stacks.allFrames();
}

size_t AllocationRecorder::liveBlockCount() const {
    std::lock_guard<RecorderLock> lock(d_lock);
    return d_live.size() + d_young.size();
}

size_t AllocationRecorder::stackCount() const {
    std::lock_guard<RecorderLock> lock(d_lock);
    return d_stacks.size();
}

IterationTotals iterationTotals(const std::vector<BoundarySnapshot>& boundaries, size_t b) {
    IterationTotals t;
    if (b < boundaries.size()) {
        t.live = static_cast<int64_t>(boundaries[b].liveBytes);
        t.born = static_cast<int64_t>(boundaries[b].bornBytes);
        t.freed = static_cast<int64_t>(boundaries[b].freedBytes);
    }
    return t;
}

} // namespace torchleak
