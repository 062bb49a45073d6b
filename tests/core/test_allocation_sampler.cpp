// AllocationSampler and the recorder under sampling: big blocks exact, small ones estimated.
#include "torchleak/allocation_sampler.h"
#include "torchleak/recorder.h"

#include <catch2/catch.hpp>
#include <cmath>

using namespace torchleak;

namespace {
const DeviceKey kCpu{0, -1};
RawFrame frameAt(int line) {
    return RawFrame{0x100, line};
}
} // namespace

TEST_CASE("sampler: no threshold records every block whole") {
    AllocationSampler every;
    for (uint64_t size : {0ull, 1ull, 4096ull, 1ull << 40}) {
        REQUIRE(every.weigh(size) == size);
    }
}

TEST_CASE("sampler: blocks at the threshold and above are exact, smaller ones unbiased") {
    AllocationSampler sampler(64 * 1024);
    REQUIRE(sampler.weigh(64 * 1024) == 64 * 1024);
    REQUIRE(sampler.weigh(10u << 20) == 10u << 20);
    for (uint64_t size : {8ull, 1000ull, 16ull * 1024, 60ull * 1024}) {
        const int n = 200000;
        uint64_t total = 0;
        int kept = 0;
        for (int i = 0; i < n; ++i) {
            uint64_t w = sampler.weigh(size);
            REQUIRE((w == 0 || w == 64 * 1024));
            total += w;
            kept += w > 0 ? 1 : 0;
        }
        const double expected = static_cast<double>(size) * n;
        // The estimate's standard deviation is threshold * sqrt(n p (1-p)); five of them.
        const double p = static_cast<double>(size) / (64 * 1024);
        const double tolerance = 5.0 * 64 * 1024 * std::sqrt(n * p * (1 - p)) + 1;
        INFO("size " << size << ": kept " << kept << " of " << n);
        REQUIRE(std::fabs(static_cast<double>(total) - expected) <= tolerance);
    }
}

TEST_CASE(
    "recorder under sampling: totals are the kept blocks' weights, skipped ones only counted") {
    AllocationRecorder rec;
    rec.setSampler(AllocationSampler(4096));
    RawFrame frames[1] = {frameAt(7)};
    // A leak of one 1 MiB block per iteration and churn of small temporaries.
    uint64_t smallKept = 0;
    for (uint32_t it = 0; it < 10; ++it) {
        rec.recordAlloc(0x100000 * (it + 1), 1 << 20, kCpu, frames, nullptr, 0, 0, false,
                        rec.sampler().weigh(1 << 20));
        for (int k = 0; k < 100; ++k) {
            uint64_t w = rec.sampler().weigh(64);
            if (w == 0) {
                rec.recordSkipped(kCpu, 0, 0, false);
                rec.recordFree(0x50, kCpu, 0, 0, false); // its free: a pointer never recorded
                continue;
            }
            ++smallKept;
            rec.recordAlloc(0x50, 64, kCpu, frames, nullptr, 0, 0, false, w);
            rec.recordFree(0x50, kCpu, 0, 0, false);
        }
        rec.markBoundary();
    }
    REQUIRE(rec.eventCount() == 10 + 10 * 100 * 2);
    REQUIRE(rec.skippedEvents() == 10 * 100 - smallKept);
    REQUIRE(rec.liveBlockCount() == 10);
    REQUIRE(rec.trackedBytes(kCpu) == 10 << 20);
    REQUIRE(rec.boundaries().back().liveBytes == 10u << 20);
    REQUIRE(rec.liveBlock(0x100000)->weight == 1u << 20);
}

TEST_CASE("recorder: a kept small block stands for the threshold until it is freed") {
    AllocationRecorder rec;
    RawFrame frames[1] = {frameAt(3)};
    rec.recordAlloc(0x10, 100, kCpu, frames, nullptr, 0, 0, false, 8192);
    REQUIRE(rec.trackedBytes(kCpu) == 8192);
    REQUIRE(rec.liveBlock(0x10)->size == 100); // the real size stays for the memory viewer
    rec.markBoundary();
    REQUIRE(rec.boundaries().back().liveBytes == 8192);
    rec.recordFree(0x10, kCpu, 0, 0, false);
    REQUIRE(rec.trackedBytes(kCpu) == 0);
}
