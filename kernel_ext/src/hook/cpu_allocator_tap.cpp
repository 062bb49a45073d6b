#include "hook/cpu_allocator_tap.h"

#include <algorithm>
#include <atomic>
#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <mutex>
#include <thread>

namespace torchleak {

namespace {

// Concurrency: allocate() and trackedDelete() run on any thread, with or without the GIL. They
// read the sink (and the late-free log) through an in-flight count: detach() clears the
// pointer, then waits until no thread is between enter() and leave(), so neither is used after
// its detach returns. The
// original allocator and deleter are written once, under g_installMutex, before the tap is
// published to c10, and never change afterwards (a later attach wraps the same allocator).
std::atomic<CpuEventSink*> g_sink{nullptr};
std::atomic<LateFreeLog*> g_late{nullptr};
std::atomic<int> g_inFlight{0};
std::mutex g_installMutex;
c10::Allocator* g_original = nullptr;
c10::DeleterFnPtr g_originalDeleter = nullptr;

CpuEventSink* enter() noexcept {
    g_inFlight.fetch_add(1);
    CpuEventSink* sink = g_sink.load();
    if (sink == nullptr) {
        g_inFlight.fetch_sub(1);
    }
    return sink;
}

void leave() noexcept {
    g_inFlight.fetch_sub(1);
}

void trackedDelete(void* ptr) {
    g_inFlight.fetch_add(1);
    if (CpuEventSink* sink = g_sink.load()) {
        sink->cpuFreed(ptr);
    } else if (LateFreeLog* log = g_late.load()) {
        log->note(ptr);
    }
    leave();
    g_originalDeleter(ptr);
}

void waitForInFlight() noexcept {
    while (g_inFlight.load() != 0) {
        std::this_thread::yield();
    }
}

class TappedCpuAllocator final : public c10::Allocator {
  public:
    c10::DataPtr allocate(size_t n) override {
        c10::DataPtr data;
        try {
            data = g_original->allocate(n);
        } catch (...) {
            if (CpuEventSink* sink = enter()) {
                sink->cpuAllocationFailed(n);
                leave();
            }
            throw;
        }
        // Only the plain shape (context == pointer, the original deleter): anything else is
        // passed through untouched and unseen rather than guessed at.
        if (data.get() != nullptr && data.get_context() == data.get() &&
            data.compare_exchange_deleter(g_originalDeleter, &trackedDelete)) {
            if (CpuEventSink* sink = enter()) {
                sink->cpuAllocated(data.get(), n);
                leave();
            }
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
    g_sink.store(sink);
    return true;
}

void detachCpuTap(CpuEventSink* sink) noexcept {
    std::lock_guard<std::mutex> lock(g_installMutex);
    CpuEventSink* expected = sink;
    if (!g_sink.compare_exchange_strong(expected, nullptr)) {
        return;
    }
    waitForInFlight();
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
    g_late.store(log);
}

void detachLateFrees(LateFreeLog* log) noexcept {
    LateFreeLog* expected = log;
    g_late.compare_exchange_strong(expected, nullptr);
    waitForInFlight(); // also when another log replaced it: a note into it may be under way
}

bool cpuTapInstalled() noexcept {
    return c10::GetCPUAllocator() == &tap();
}

} // namespace torchleak
