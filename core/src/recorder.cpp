#include "torchleak/recorder.h"

#include <algorithm>
#include <unordered_map>

namespace torchleak {

AllocationRecorder::AllocationRecorder() : d_live(1 << 14) {}

AllocationRecorder::DeviceState* AllocationRecorder::deviceState(DeviceKey device) noexcept {
    for (size_t i = 0; i < d_deviceCount; ++i) {
        if (d_devices[i].device == device) {
            return &d_devices[i];
        }
    }
    if (d_deviceCount == kMaxDevices) {
        return nullptr;
    }
    d_devices[d_deviceCount].device = device;
    return &d_devices[d_deviceCount++];
}

void AllocationRecorder::updateTotals(DeviceState& st,
                                      int64_t allocatorAllocated,
                                      int64_t allocatorReserved,
                                      bool allocatorTotals) noexcept {
    if (allocatorTotals) {
        st.allocatorTotals = true;
        st.allocatorAllocated = allocatorAllocated;
        st.allocatorReserved = allocatorReserved;
    }
    int64_t current = st.allocatorTotals ? st.allocatorAllocated : st.tracked;
    st.peak = std::max(st.peak, current);
}

void AllocationRecorder::recordAlloc(uintptr_t ptr,
                                     uint64_t size,
                                     DeviceKey device,
                                     std::span<const RawFrame> frames,
                                     const char* nodeTypeName,
                                     int64_t allocatorAllocated,
                                     int64_t allocatorReserved,
                                     bool allocatorTotals) noexcept {
    d_events.fetch_add(1, std::memory_order_relaxed);
    std::lock_guard<std::mutex> lock(d_mutex);
    DeviceState* st = deviceState(device);
    if (st == nullptr || ptr == 0) {
        d_dropped.fetch_add(1, std::memory_order_relaxed);
        return;
    }
    try {
        bool inserted = false;
        StackToken stack = d_stacks.intern(frames, &inserted);
        if (inserted && d_retain != nullptr) {
            d_retain(frames);
        }
        BlockRecord rec;
        rec.size = size;
        rec.sequence = ++d_sequence;
        rec.iteration = d_iteration.load(std::memory_order_relaxed);
        rec.stack = stack;
        rec.node = nodeTypeName != nullptr ? d_nodes.intern(nodeTypeName) : NodeToken{0};
        rec.device = device;
        if (const BlockRecord* stale = d_live.find(ptr)) {
            // The allocator handed out an address whose free we did not see (a gap while
            // another profiler was on top): forget the old block.
            for (size_t i = 0; i < d_deviceCount; ++i) {
                if (d_devices[i].device == stale->device) {
                    d_devices[i].tracked -= static_cast<int64_t>(stale->size);
                }
            }
        }
        d_live.insert(ptr, rec);
        st->tracked += static_cast<int64_t>(size);
    } catch (...) {
        // Out of memory while growing a table: losing one event beats terminating the
        // process from inside the allocator.
        d_dropped.fetch_add(1, std::memory_order_relaxed);
    }
    updateTotals(*st, allocatorAllocated, allocatorReserved, allocatorTotals);
}

void AllocationRecorder::recordFree(uintptr_t ptr,
                                    DeviceKey device,
                                    int64_t allocatorAllocated,
                                    int64_t allocatorReserved,
                                    bool allocatorTotals) noexcept {
    d_events.fetch_add(1, std::memory_order_relaxed);
    std::lock_guard<std::mutex> lock(d_mutex);
    auto removed = d_live.erase(ptr);
    DeviceState* st = deviceState(device);
    if (st == nullptr) {
        return;
    }
    if (removed) {
        st->tracked -= static_cast<int64_t>(removed->size);
    }
    updateTotals(*st, allocatorAllocated, allocatorReserved, allocatorTotals);
}

const BoundarySnapshot& AllocationRecorder::markBoundary() {
    BoundarySnapshot snap;
    std::unordered_map<GroupKey, size_t, GroupKeyHash> index;
    {
        std::lock_guard<std::mutex> lock(d_mutex);
        uint32_t current = d_iteration.load(std::memory_order_relaxed);
        snap.iteration = current;
        d_live.forEach([&](uintptr_t ptr, const BlockRecord& rec) {
            GroupKey key{rec.stack, rec.node, rec.device};
            auto [it, fresh] = index.try_emplace(key, snap.groups.size());
            if (fresh) {
                GroupSample sample;
                sample.key = key;
                sample.oldestIteration = rec.iteration;
                snap.groups.push_back(sample);
            }
            GroupSample& g = snap.groups[it->second];
            g.bytes += rec.size;
            g.count += 1;
            if (rec.iteration == current) {
                g.bornThisIteration += rec.size;
            }
            g.oldestIteration = std::min(g.oldestIteration, rec.iteration);
            if (rec.size > g.largestBlockSize) {
                g.largestBlockSize = rec.size;
                g.largestBlock = ptr;
            }
        });
        for (size_t i = 0; i < d_deviceCount; ++i) {
            DeviceState& st = d_devices[i];
            DeviceSample ds;
            ds.device = st.device;
            ds.allocatorTotals = st.allocatorTotals;
            ds.allocated = st.allocatorTotals ? st.allocatorAllocated : st.tracked;
            ds.reserved = st.allocatorTotals ? st.allocatorReserved : ds.allocated;
            ds.peak = std::max(st.peak, ds.allocated);
            snap.devices.push_back(ds);
            st.peak = ds.allocated; // the next iteration's peak starts from here
        }
        snap.shadowed = d_shadowed.exchange(false, std::memory_order_relaxed);
        d_iteration.store(current + 1, std::memory_order_relaxed);
    }
    std::sort(snap.groups.begin(), snap.groups.end(),
              [](const GroupSample& a, const GroupSample& b) { return a.bytes > b.bytes; });
    d_boundaries.push_back(std::move(snap));
    return d_boundaries.back();
}

void AllocationRecorder::forEachLiveBlock(
    const std::function<void(uintptr_t, const BlockRecord&)>& fn) const {
    std::lock_guard<std::mutex> lock(d_mutex);
    d_live.forEach(fn);
}

std::vector<RawFrame> AllocationRecorder::stackFrames(StackToken token) const {
    std::lock_guard<std::mutex> lock(d_mutex);
    auto frames = d_stacks.frames(token);
    return {frames.begin(), frames.end()};
}

std::string AllocationRecorder::nodeName(NodeToken token) const {
    std::lock_guard<std::mutex> lock(d_mutex);
    return d_nodes.name(token);
}

std::vector<RawFrame> AllocationRecorder::allInternedFrames() const {
    std::lock_guard<std::mutex> lock(d_mutex);
    return d_stacks.allFrames();
}

size_t AllocationRecorder::liveBlockCount() const {
    std::lock_guard<std::mutex> lock(d_mutex);
    return d_live.size();
}

size_t AllocationRecorder::stackCount() const {
    std::lock_guard<std::mutex> lock(d_mutex);
    return d_stacks.size();
}

IterationTotals iterationTotals(const std::vector<BoundarySnapshot>& boundaries, size_t b) {
    IterationTotals t;
    if (b >= boundaries.size()) {
        return t;
    }
    for (const GroupSample& g : boundaries[b].groups) {
        t.live += static_cast<int64_t>(g.bytes);
        t.born += static_cast<int64_t>(g.bornThisIteration);
    }
    int64_t before = 0;
    if (b > 0) {
        for (const GroupSample& g : boundaries[b - 1].groups) {
            before += static_cast<int64_t>(g.bytes);
        }
    }
    // What survived from before is live minus born; the rest of `before` was freed.
    t.freed = std::max<int64_t>(before - (t.live - t.born), 0);
    return t;
}

} // namespace torchleak
