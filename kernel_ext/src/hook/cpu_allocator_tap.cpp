#include "hook/cpu_allocator_tap.h"

#include <algorithm>
#include <atomic>
#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <mutex>

namespace torchleak {

namespace {

// Concurrency: allocate() and trackedDelete() run on any thread, with or without the GIL. They
// read the sink (and the late-free log) and call it under g_tapLock (routeEvent); detach()
// clears the pointer under that lock, so once it returns no thread is inside the sink or the
// log, and none will enter them. The sink's recorder shares the lock: an event takes it once.
// The original allocator and deleter are written once, under g_installMutex, before the tap is
// published to c10, and never change afterwards (a later attach wraps the same allocator).
//
// g_tapLock is constant-initialised and trivially destructible: there from the library's load
// to its unload, so a free during the teardown of statics finds it, and no guard is checked on
// use.
constinit RecorderLock g_tapLock;
std::atomic<CpuEventSink*> g_sink{nullptr};
std::atomic<LateFreeLog*> g_late{nullptr};
std::mutex g_installMutex;
c10::Allocator* g_original = nullptr;
c10::DeleterFnPtr g_originalDeleter = nullptr;

// Calls fn(sink), the sink attached now or null, under g_tapLock. A thread that holds the lock
// already (inside the hook, or in a recorder call) is not let in again: its event is dropped
// rather than wait for itself.
template <typename Fn> void routeEvent(Fn&& fn) noexcept {
    if (g_tapLock.heldByCaller()) {
        return;
    }
    std::lock_guard<RecorderLock> lock(g_tapLock);
    fn(g_sink.load(std::memory_order_relaxed));
}

void trackedDelete(void* ptr) {
    routeEvent([ptr](CpuEventSink* sink) {
        if (sink != nullptr) {
            sink->cpuFreed(ptr);
        } else if (LateFreeLog* log = g_late.load(std::memory_order_relaxed)) {
            log->note(ptr);
        }
    });
    g_originalDeleter(ptr);
}

class TappedCpuAllocator final : public c10::Allocator {
  public:
    c10::DataPtr allocate(size_t n) override {
        c10::DataPtr data;
        try {
            data = g_original->allocate(n);
        } catch (...) {
            routeEvent([n](CpuEventSink* sink) {
                if (sink != nullptr) {
                    sink->cpuAllocationFailed(n);
                }
            });
            throw;
        }
        // Only the plain shape (context == pointer, the original deleter): anything else is
        // passed through untouched and unseen rather than guessed at.
        if (data.get() != nullptr && data.get_context() == data.get() &&
            data.compare_exchange_deleter(g_originalDeleter, &trackedDelete)) {
            routeEvent([&data, n](CpuEventSink* sink) {
                if (sink != nullptr) {
                    sink->cpuAllocated(data.get(), n);
                }
            });
        }
        return data;
    }

    c10::DeleterFnPtr raw_deleter() const override { return &trackedDelete; }

    void copy_data(void* dest, const void* src, std::size_t count) const override {
        g_original->copy_data(dest, src, count);
    }
};

// Never destroyed: c10 may still hold it (and blocks its deleter) while statics are torn down.
TappedCpuAllocator& tap() {
    static auto* instance = new TappedCpuAllocator;
    return *instance;
}

} // namespace

RecorderLock& cpuTapLock() noexcept {
    return g_tapLock;
}

bool attachCpuTap(CpuEventSink* sink) noexcept {
    std::lock_guard<std::mutex> lock(g_installMutex);
    c10::Allocator* current = c10::GetCPUAllocator();
    if (current != &tap()) {
        if (current == nullptr || current->raw_deleter() == nullptr ||
            (g_original != nullptr && current != g_original)) {
            return false; // not the allocator we wrapped before, or not a plain one
        }
        g_original = current;
        g_originalDeleter = current->raw_deleter();
        // Priority 0, the default CPU allocator's: an allocator another library installed with
        // a higher priority is left alone (and GetCPUAllocator() tells us so).
        c10::SetCPUAllocator(&tap(), 0);
        if (c10::GetCPUAllocator() != &tap()) {
            return false;
        }
    }
    std::lock_guard<RecorderLock> events(g_tapLock);
    g_sink.store(sink, std::memory_order_relaxed);
    return true;
}

void detachCpuTap(CpuEventSink* sink) noexcept {
    std::lock_guard<std::mutex> lock(g_installMutex);
    {
        std::lock_guard<RecorderLock> events(g_tapLock);
        if (g_sink.load(std::memory_order_relaxed) != sink) {
            return;
        }
        g_sink.store(nullptr, std::memory_order_relaxed);
    }
    if (c10::GetCPUAllocator() == &tap()) {
        c10::SetCPUAllocator(g_original, 0);
    }
}

LateFreeLog::LateFreeLog(size_t capacity)
    : d_slots(new std::atomic<uintptr_t>[capacity]), d_capacity(capacity) {
    for (size_t i = 0; i < capacity; ++i) {
        d_slots[i].store(0, std::memory_order_relaxed);
    }
}

void LateFreeLog::note(void* ptr) noexcept {
    size_t slot = d_next.fetch_add(1);
    if (slot < d_capacity) {
        d_slots[slot].store(reinterpret_cast<uintptr_t>(ptr));
    }
}

std::vector<uintptr_t> LateFreeLog::freed() const {
    std::vector<uintptr_t> out;
    const size_t n = std::min(d_next.load(), d_capacity);
    out.reserve(n);
    for (size_t i = 0; i < n; ++i) {
        if (uintptr_t p = d_slots[i].load(); p != 0) {
            out.push_back(p);
        }
    }
    return out;
}

void attachLateFrees(LateFreeLog* log) noexcept {
    std::lock_guard<RecorderLock> events(g_tapLock);
    g_late.store(log, std::memory_order_relaxed);
}

// Under the lock also when another log replaced it: once it is taken, no note is under way.
void detachLateFrees(LateFreeLog* log) noexcept {
    std::lock_guard<RecorderLock> events(g_tapLock);
    if (g_late.load(std::memory_order_relaxed) == log) {
        g_late.store(nullptr, std::memory_order_relaxed);
    }
}

bool cpuTapInstalled() noexcept {
    return c10::GetCPUAllocator() == &tap();
}

} // namespace torchleak
