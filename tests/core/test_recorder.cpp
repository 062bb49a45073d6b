#include "torchleak/recorder.h"

#include <catch2/catch.hpp>
#include <thread>
#include <vector>

using namespace torchleak;

namespace {
constexpr DeviceKey kCpu{0, -1};
constexpr DeviceKey kCuda0{1, 0};
const std::vector<RawFrame> kStackA = {{0xA0, 2}, {0xB0, 4}};
const std::vector<RawFrame> kStackB = {{0xC0, 6}};
} // namespace

TEST_CASE("A block kept per iteration shows up in every boundary's snapshot") {
    AllocationRecorder rec;
    for (uint32_t i = 0; i < 5; ++i) {
        rec.recordAlloc(0x1000 + i * 0x100, 1 << 20, kCpu, kStackA, nullptr, 0, 0, false);
        rec.recordAlloc(0x9000, 4096, kCpu, kStackB, nullptr, 0, 0, false); // temporary
        rec.recordFree(0x9000, kCpu, 0, 0, false);
        rec.markBoundary();
    }
    const auto& b = rec.boundaries();
    REQUIRE(b.size() == 5);
    for (uint32_t i = 0; i < 5; ++i) {
        REQUIRE(b[i].iteration == i);
        REQUIRE(b[i].groups.size() == 1);
        REQUIRE(b[i].groups[0].bytes == (i + 1) * (1ull << 20));
        REQUIRE(b[i].groups[0].count == i + 1);
        REQUIRE(b[i].groups[0].bornThisIteration == 1ull << 20);
        REQUIRE(b[i].groups[0].oldestIteration == 0);
        REQUIRE(b[i].devices.size() == 1);
        REQUIRE(b[i].devices[0].allocated == static_cast<int64_t>((i + 1) * (1ull << 20)));
    }
    // Peak within iteration 0 includes the temporary block.
    REQUIRE(b[0].devices[0].peak == (1 << 20) + 4096);
    REQUIRE(rec.eventCount() == 15);
    REQUIRE(rec.liveBlockCount() == 5);
    REQUIRE(rec.stackCount() == 2);
}

TEST_CASE("Frees of blocks allocated before tracking are ignored") {
    AllocationRecorder rec;
    rec.recordFree(0xdead0, kCpu, 0, 0, false);
    rec.markBoundary();
    REQUIRE(rec.boundaries()[0].groups.empty());
    REQUIRE(rec.boundaries()[0].devices[0].allocated == 0);
}

TEST_CASE("Device allocators' own totals are kept apart from tracked bytes") {
    AllocationRecorder rec;
    rec.recordAlloc(0x2000, 512, kCuda0, kStackA, nullptr, 10'000, 20'000, true);
    rec.markBoundary();
    const auto& d = rec.boundaries()[0].devices[0];
    REQUIRE(d.device == kCuda0);
    REQUIRE(d.allocatorTotals);
    REQUIRE(d.allocated == 10'000);
    REQUIRE(d.reserved == 20'000);
}

TEST_CASE("Allocations inside backward are grouped by autograd node") {
    AllocationRecorder rec;
    const char* node = "N5torch8autograd9generated11MmBackward0E";
    rec.recordAlloc(0x3000, 100, kCpu, {}, node, 0, 0, false);
    rec.recordAlloc(0x3100, 100, kCpu, {}, node, 0, 0, false);
    rec.markBoundary();
    const auto& g = rec.boundaries()[0].groups;
    REQUIRE(g.size() == 1);
    REQUIRE(g[0].count == 2);
    REQUIRE(rec.nodeName(g[0].key.node) == "MmBackward0");
}

TEST_CASE("The recorder is safe under concurrent events from several threads") {
    AllocationRecorder rec;
    constexpr int kThreads = 4;
    constexpr int kPerThread = 50'000;
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
        threads.emplace_back([&rec, t] {
            for (int i = 0; i < kPerThread; ++i) {
                uintptr_t ptr =
                    (static_cast<uintptr_t>(t + 1) << 32) + static_cast<uintptr_t>(i) * 16;
                rec.recordAlloc(ptr, 16, kCpu, kStackA, nullptr, 0, 0, false);
                if (i % 2 == 0) {
                    rec.recordFree(ptr, kCpu, 0, 0, false);
                }
            }
        });
    }
    for (auto& th : threads) {
        th.join();
    }
    rec.markBoundary();
    REQUIRE(rec.liveBlockCount() == kThreads * kPerThread / 2);
    REQUIRE(rec.boundaries()[0].groups[0].bytes == 16ull * kThreads * kPerThread / 2);
    REQUIRE(rec.eventCount() == static_cast<uint64_t>(kThreads) * kPerThread * 3 / 2);
}

TEST_CASE("A new stack is handed to the retainer exactly once") {
    static int retained = 0;
    retained = 0;
    AllocationRecorder rec;
    rec.setStackRetainer([](std::span<const RawFrame> frames) noexcept {
        retained += static_cast<int>(frames.size());
    });
    for (int i = 0; i < 10; ++i) {
        rec.recordAlloc(0x4000 + static_cast<uintptr_t>(i) * 64, 8, kCpu, kStackA, nullptr, 0, 0,
                        false);
    }
    REQUIRE(retained == 2);
}

TEST_CASE("iterationTotals: what an iteration left alive and what it freed, without a report") {
    AllocationRecorder rec;
    std::vector<RawFrame> stack = {{0x1, 1}};
    constexpr DeviceKey cpu{0, -1};
    REQUIRE(iterationTotals(rec.boundaries(), 0).live == 0); // no boundary yet
    rec.recordAlloc(0x1000, 100, cpu, stack, nullptr, 0, 0, false);
    rec.recordAlloc(0x2000, 50, cpu, stack, nullptr, 0, 0, false);
    rec.markBoundary();
    IterationTotals first = iterationTotals(rec.boundaries(), 0);
    REQUIRE(first.live == 150);
    REQUIRE(first.born == 150);
    REQUIRE(first.freed == 0);
    rec.recordFree(0x1000, cpu, 0, 0, false);
    rec.recordAlloc(0x3000, 7, cpu, stack, nullptr, 0, 0, false);
    rec.markBoundary();
    IterationTotals second = iterationTotals(rec.boundaries(), 1);
    REQUIRE(second.live == 57);
    REQUIRE(second.born == 7);
    REQUIRE(second.freed == 100);
    rec.markBoundary(); // a cell that did nothing
    IterationTotals idle = iterationTotals(rec.boundaries(), 2);
    REQUIRE(idle.born == 0);
    REQUIRE(idle.freed == 0);
}
