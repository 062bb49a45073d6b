#include "group_samples.h"
#include "torchleak/recorder.h"

#include <catch2/catch.hpp>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

using namespace torchleak;

namespace {
constexpr DeviceKey kCpu{0, -1};
constexpr DeviceKey kCuda0{1, 0};
const std::vector<RawFrame> kStackA = {{0xA0, 2}, {0xB0, 4}};
const std::vector<RawFrame> kStackB = {{0xC0, 6}};
} // namespace

using torchleak::testing::groupWithStack;

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
        // The temporary was born and freed young (young_blocks.h): its site was never filed,
        // and a boundary has nothing to say of it but the device's peak.
        REQUIRE(b[i].groups.size() == 1);
        const GroupSample* kept = groupWithStack(b[i], rec, kStackA);
        REQUIRE(kept != nullptr);
        REQUIRE(kept->bytes == (i + 1) * (1ull << 20));
        REQUIRE(kept->count == i + 1);
        REQUIRE(kept->bornThisIteration == 1ull << 20);
        REQUIRE(kept->oldestIteration == 0);
        REQUIRE(groupWithStack(b[i], rec, kStackB) == nullptr);
        REQUIRE(b[i].devices.size() == 1);
        REQUIRE(b[i].devices[0].allocated == static_cast<int64_t>((i + 1) * (1ull << 20)));
    }
    // Peak within iteration 0 includes the temporary block.
    REQUIRE(b[0].devices[0].peak == (1 << 20) + 4096);
    REQUIRE(rec.eventCount() == 15);
    REQUIRE(rec.liveBlockCount() == 5);
    REQUIRE(rec.stackCount() == 2);
}

TEST_CASE("A boundary holds only the groups its iteration changed") {
    AllocationRecorder rec;
    rec.recordAlloc(0x1000, 100, kCpu, kStackA, nullptr, 0, 0, false);
    rec.recordAlloc(0x2000, 200, kCpu, kStackB, nullptr, 0, 0, false);
    rec.markBoundary();
    rec.recordAlloc(0x3000, 10, kCpu, kStackB, nullptr, 0, 0, false);
    rec.markBoundary();
    rec.markBoundary(); // nothing happened
    rec.recordFree(0x1000, kCpu, 0, 0, false);
    rec.recordFree(0x2000, kCpu, 0, 0, false);
    rec.markBoundary();
    const auto& b = rec.boundaries();
    REQUIRE(b[0].groups.size() == 2);
    REQUIRE(b[1].groups.size() == 1);
    REQUIRE(groupWithStack(b[1], rec, kStackB)->bytes == 210);
    REQUIRE(groupWithStack(b[1], rec, kStackB)->bornThisIteration == 10);
    REQUIRE(b[2].groups.empty());
    REQUIRE(b[2].liveBytes == 310);
    // The group's oldest block went: its oldest birth moves to iteration 1.
    REQUIRE(groupWithStack(b[3], rec, kStackB)->bytes == 10);
    REQUIRE(groupWithStack(b[3], rec, kStackB)->oldestIteration == 1);
    REQUIRE(groupWithStack(b[3], rec, kStackA)->bytes == 0);
    REQUIRE(b[3].freedBytes == 300);
}

TEST_CASE("A group that keeps rising is a steady riser once, however long it rises") {
    // Stack A keeps 4 KiB a boundary from boundary 10; stack B replaces one block of a varying
    // size every boundary (a run's transient, kept across the boundary by a name).
    AllocationRecorder rec;
    std::vector<uint32_t> crossings;
    uint64_t sizes[] = {1 << 20, 300 << 10, 900 << 10, 10 << 10, 1000 << 10, 50 << 10};
    for (uint32_t i = 0; i < 60; ++i) {
        if (i > 0) {
            rec.recordFree(0x900000 + (i - 1) * 0x100000, kCpu, 0, 0, false);
        }
        rec.recordAlloc(0x900000 + i * 0x100000, sizes[i % 6], kCpu, kStackB, nullptr, 0, 0, false);
        if (i >= 10 && i < 40) {
            rec.recordAlloc(0x1000 + i * 0x1000, 4096, kCpu, kStackA, nullptr, 0, 0, false);
        }
        rec.markBoundary();
        if (rec.newlySteadyGroups() > 0) {
            REQUIRE(rec.newlySteadyGroups() == 1);
            crossings.push_back(i);
        }
    }
    // Its sixth new high in a row, once for the stretch (B's highs came at its first boundaries
    // only); after 20 flat boundaries a second stretch crosses again.
    REQUIRE(crossings == std::vector<uint32_t>{15});
    for (uint32_t i = 60; i < 70; ++i) {
        rec.recordAlloc(0x1000 + i * 0x1000, 4096, kCpu, kStackA, nullptr, 0, 0, false);
        rec.markBoundary();
        if (rec.newlySteadyGroups() > 0) {
            crossings.push_back(i);
        }
    }
    REQUIRE(crossings == std::vector<uint32_t>{15, 65});
}

TEST_CASE("A group that steps at regular gaps is said to step from its third step") {
    // Stack A keeps 1 MiB every 5 boundaries from boundary 20; stack B keeps a block at
    // boundaries 3, 4, 9 and 30: new highs, never in rhythm.
    AllocationRecorder rec;
    std::vector<uint32_t> steps;
    for (uint32_t i = 1; i < 60; ++i) {
        if (i >= 20 && (i - 20) % 5 == 0) {
            rec.recordAlloc(0x100000 * i, 1 << 20, kCpu, kStackA, nullptr, 0, 0, false);
        }
        if (i == 3 || i == 4 || i == 9 || i == 30) {
            rec.recordAlloc(0x10 * i, 4096, kCpu, kStackB, nullptr, 0, 0, false);
        }
        rec.markBoundary();
        REQUIRE(rec.steppedGroups() <= 1);
        if (rec.steppedGroups() == 1) {
            steps.push_back(i);
        }
    }
    REQUIRE(steps == std::vector<uint32_t>{30, 35, 40, 45, 50, 55});
    REQUIRE(rec.newlySteadyGroups() == 0);
}

TEST_CASE("A long run keeps a bounded grid of boundaries and every group's latest state") {
    // Random allocations and frees over a few groups; the kept boundaries replayed in order
    // must give each group exactly the bytes, count and oldest birth it had at that iteration.
    AllocationRecorder rec;
    const std::vector<std::vector<RawFrame>> stacks = {
        {{0x10, 1}}, {{0x20, 2}}, {{0x30, 3}}, {{0x40, 4}}};
    struct Live {
        uintptr_t ptr;
        size_t group;
        uint64_t size;
        uint32_t born;
    };
    std::vector<Live> live;
    struct Truth {
        uint64_t bytes = 0, count = 0;
        uint32_t oldest = 0;
    };
    std::vector<std::vector<Truth>> truth; // per iteration, per group
    uint64_t seed = 12345;
    auto next = [&seed] {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        return seed >> 33;
    };
    uintptr_t nextPtr = 0x100000;
    constexpr uint32_t kIterations = 3000;
    for (uint32_t it = 0; it < kIterations; ++it) {
        size_t events = next() % 6;
        for (size_t e = 0; e < events; ++e) {
            if (!live.empty() && next() % 3 == 0) {
                size_t k = next() % live.size();
                rec.recordFree(live[k].ptr, kCpu, 0, 0, false);
                live.erase(live.begin() + static_cast<std::ptrdiff_t>(k));
            } else {
                size_t g = next() % stacks.size();
                uint64_t size = 1 + next() % 1000;
                rec.recordAlloc(nextPtr, size, kCpu, stacks[g], nullptr, 0, 0, false);
                live.push_back({nextPtr, g, size, it});
                nextPtr += 0x40;
            }
        }
        rec.markBoundary();
        std::vector<Truth> now(stacks.size());
        for (size_t g = 0; g < stacks.size(); ++g) {
            now[g].oldest = it;
        }
        for (const Live& l : live) {
            now[l.group].bytes += l.size;
            now[l.group].count += 1;
            now[l.group].oldest = std::min(now[l.group].oldest, l.born);
        }
        truth.push_back(now);
    }
    const auto& kept = rec.boundaries();
    REQUIRE(kept.size() <=
            AllocationRecorder::kMaxGridBoundaries + AllocationRecorder::kNewestKept);
    REQUIRE(kept.size() > AllocationRecorder::kMaxGridBoundaries / 2);
    REQUIRE(kept.front().iteration == 0);
    REQUIRE(kept.back().iteration == kIterations - 1);
    // The newest stay dense, one per iteration.
    for (size_t k = 1; k <= AllocationRecorder::kNewestKept; ++k) {
        REQUIRE(kept[kept.size() - k].iteration == kIterations - k);
    }
    std::vector<GroupSample> state(stacks.size());
    for (size_t b = 0; b < kept.size(); ++b) {
        if (b + AllocationRecorder::kNewestKept < kept.size()) {
            REQUIRE(kept[b].iteration % rec.gridStride() == 0);
        }
        if (b > 0) {
            REQUIRE(kept[b].iteration > kept[b - 1].iteration);
        }
        for (const GroupSample& g : kept[b].groups) {
            auto frames = rec.stackFrames(g.key.stack);
            for (size_t k = 0; k < stacks.size(); ++k) {
                if (frames == stacks[k]) {
                    state[k] = g;
                }
            }
        }
        const auto& expected = truth[kept[b].iteration];
        for (size_t k = 0; k < stacks.size(); ++k) {
            REQUIRE(state[k].bytes == expected[k].bytes);
            REQUIRE(state[k].count == expected[k].count);
            if (expected[k].count > 0) {
                REQUIRE(state[k].oldestIteration == expected[k].oldest);
            }
        }
        uint64_t total = 0;
        for (const Truth& t : expected) {
            total += t.bytes;
        }
        REQUIRE(kept[b].liveBytes == total);
    }
}

TEST_CASE("Frees of blocks allocated before tracking are ignored") {
    AllocationRecorder rec;
    rec.recordAlloc(0x1000, 64, kCpu, kStackA, nullptr, 0, 0, false);
    rec.recordFree(0x1000, kCpu, 0, 0, false);
    rec.recordFree(0xdead0, kCpu, 0, 0, false);
    rec.recordFree(0, kCpu, 0, 0, false); // an empty tensor's free
    REQUIRE(rec.liveBlockCount() == 0);
    rec.markBoundary();
    REQUIRE(rec.boundaries()[0].groups.empty()); // born and freed young: never filed
    REQUIRE(rec.boundaries()[0].liveBytes == 0);
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

namespace {
constexpr uint64_t KiB = 1024;
constexpr uint64_t MiB = 1024 * 1024;
constexpr size_t kForward = static_cast<size_t>(BirthPhase::Forward);
constexpr size_t kBackward = static_cast<size_t>(BirthPhase::Backward);
constexpr size_t kStep = static_cast<size_t>(BirthPhase::OptimizerStep);

// One training iteration as the allocator sees it: three activations and an output in the
// forward pass, the output kept (a list that grows); in backward a gradient (first iteration
// only: later ones accumulate in place) and a temporary; the activations freed; the optimizer's
// state made at its first step. `spike` adds a forward temporary of that size at the peak.
void trainingIteration(AllocationRecorder& rec, uint32_t i, uint64_t spike = 0) {
    const uintptr_t base = 0x100000 + uintptr_t{i} * 0x1000;
    for (uintptr_t a = 0; a < 3; ++a) {
        rec.recordAlloc(0x10 + a, MiB, kCpu, kStackA, nullptr, 0, 0, false);
    }
    rec.recordAlloc(base, 4 * KiB, kCpu, kStackB, nullptr, 0, 0, false);
    if (spike > 0) {
        rec.recordAlloc(0x20, spike, kCpu, kStackA, nullptr, 0, 0, false);
    }
    if (i == 0) {
        rec.recordAlloc(0x30, 64 * KiB, kCpu, {}, "AccumulateGrad", 0, 0, false);
    }
    rec.recordAlloc(0x40, 128 * KiB, kCpu, {}, "AddmmBackward0", 0, 0, false);
    if (spike > 0) {
        rec.recordFree(0x20, kCpu, 0, 0, false);
    }
    rec.recordFree(0x40, kCpu, 0, 0, false);
    for (uintptr_t a = 0; a < 3; ++a) {
        rec.recordFree(0x10 + a, kCpu, 0, 0, false);
    }
    rec.setPhase(BirthPhase::OptimizerStep);
    if (i == 0) {
        rec.recordAlloc(0x50, 128 * KiB, kCpu, kStackB, nullptr, 0, 0, false);
    }
    rec.setPhase(BirthPhase::Forward);
}
} // namespace

TEST_CASE("Live bytes by birth phase add up to the tracked bytes at every boundary and peak") {
    AllocationRecorder rec;
    for (uint32_t i = 0; i < 4; ++i) {
        trainingIteration(rec, i);
        rec.markBoundary();
    }
    const auto& b = rec.boundaries();
    REQUIRE(b.size() == 4);
    for (uint32_t i = 0; i < 4; ++i) {
        const DeviceSample& d = b[i].devices.at(0);
        INFO("iteration " << i);
        REQUIRE(d.live.total() == d.allocated);
        REQUIRE(d.atPeak.total() == d.peak);
        // At the boundary: the iteration's kept output, its gradient and optimizer state the
        // first time, the outputs of the iterations before.
        REQUIRE(d.live.thisIteration[kForward] == static_cast<int64_t>(4 * KiB));
        REQUIRE(d.live.earlier[kForward] == static_cast<int64_t>(i * 4 * KiB));
        REQUIRE(d.live.thisIteration[kBackward] == (i == 0 ? static_cast<int64_t>(64 * KiB) : 0));
        REQUIRE(d.live.thisIteration[kStep] == (i == 0 ? static_cast<int64_t>(128 * KiB) : 0));
        REQUIRE(d.live.earlier[kStep] == (i == 0 ? 0 : static_cast<int64_t>(128 * KiB)));
        // At the peak (in backward, before the activations are freed): the activations and the
        // output, the backward temporary (and the new gradient), what earlier iterations left.
        REQUIRE(d.atPeak.thisIteration[kForward] == static_cast<int64_t>(3 * MiB + 4 * KiB));
        REQUIRE(d.atPeak.thisIteration[kBackward] ==
                static_cast<int64_t>(128 * KiB + (i == 0 ? 64 * KiB : 0)));
        REQUIRE(d.atPeak.thisIteration[kStep] == 0);
        REQUIRE(d.atPeak.earlier == d.live.earlier);
    }
}

TEST_CASE("A thinned history keeps the phases alive at the highest peak it folded in") {
    AllocationRecorder rec;
    const uint32_t n = 2000, spiked = 777;
    for (uint32_t i = 0; i < n; ++i) {
        trainingIteration(rec, i, i == spiked ? 50 * MiB : 0);
        rec.markBoundary();
    }
    const auto& b = rec.boundaries();
    REQUIRE(b.size() <= AllocationRecorder::kMaxGridBoundaries + AllocationRecorder::kNewestKept);
    const DeviceSample* highest = nullptr;
    for (const BoundarySnapshot& s : b) {
        const DeviceSample& d = s.devices.at(0);
        REQUIRE(d.live.total() == d.allocated);
        REQUIRE(d.atPeak.total() == d.peak);
        if (highest == nullptr || d.peak > highest->peak) {
            highest = &d;
        }
    }
    REQUIRE(highest->atPeak.thisIteration[kForward] ==
            static_cast<int64_t>(3 * MiB + 4 * KiB + 50 * MiB));
    REQUIRE(highest->atPeak.earlier[kForward] == static_cast<int64_t>(spiked * 4 * KiB));
}

TEST_CASE("The phase set by the tracking thread tags blocks allocated on other threads") {
    AllocationRecorder rec;
    rec.setPhase(BirthPhase::OptimizerStep);
    std::thread other([&] { rec.recordAlloc(0x10, 1000, kCpu, {}, nullptr, 0, 0, false); });
    other.join();
    rec.setPhase(BirthPhase::Forward);
    rec.recordAlloc(0x20, 10, kCpu, {}, "MulBackward0", 0, 0, false); // a node: backward
    REQUIRE(rec.liveBlock(0x10)->phase == BirthPhase::OptimizerStep);
    REQUIRE(rec.liveBlock(0x20)->phase == BirthPhase::Backward);
    REQUIRE(toString(BirthPhase::OptimizerStep) == "optimizer_step");
    const DeviceSample& d = rec.markBoundary().devices.at(0);
    REQUIRE(d.live.thisIteration == std::array<int64_t, kBirthPhases>{0, 10, 1000});
}

TEST_CASE("A registry's word moves a block's bytes to what it is held as, until it is freed") {
    AllocationRecorder rec;
    rec.recordAlloc(0x10, 1000, kCpu, kStackA, nullptr, 0, 0, false);     // a parameter, made here
    rec.recordAlloc(0x20, 1000, kCpu, {}, "AccumulateGrad", 0, 0, false); // its gradient
    rec.recordAlloc(0x30, 500, kCuda0, kStackB, nullptr, 0, 0, false);
    const std::vector<uintptr_t> params = {0x10, 0x999}, grads = {0x20};
    REQUIRE(rec.markHeldAs(params, HeldAs::Parameter) == 1); // 0x999: not a live block
    REQUIRE(rec.markHeldAs(grads, HeldAs::Gradient) == 1);
    REQUIRE(rec.markHeldAs(params, HeldAs::Parameter) == 1); // again: nothing moves twice
    const BoundarySnapshot& first = rec.markBoundary();
    const DeviceSample& cpu = first.devices.at(0);
    REQUIRE(cpu.live.registeredAs(HeldAs::Parameter) == 1000);
    REQUIRE(cpu.live.registeredAs(HeldAs::Gradient) == 1000);
    REQUIRE(cpu.live.thisIteration == std::array<int64_t, kBirthPhases>{0, 0, 0});
    REQUIRE(cpu.live.total() == cpu.allocated);
    REQUIRE(first.devices.at(1).live.thisIteration[kForward] == 500);
    // Freed, the gradient leaves its role; a new one is born in backward, unnamed until the
    // next boundary's registry.
    rec.recordFree(0x20, kCpu, 0, 0, false);
    rec.recordAlloc(0x40, 1000, kCpu, {}, "AccumulateGrad", 0, 0, false);
    const BoundarySnapshot& second = rec.markBoundary();
    const DeviceSample& cpu2 = second.devices.at(0);
    REQUIRE(cpu2.live.registeredAs(HeldAs::Gradient) == 0);
    REQUIRE(cpu2.live.thisIteration[kBackward] == 1000);
    REQUIRE(cpu2.live.registeredAs(HeldAs::Parameter) == 1000);
    REQUIRE(cpu2.live.total() == cpu2.allocated);
    REQUIRE(cpu2.atPeak.total() == cpu2.peak);
    REQUIRE(toString(HeldAs::OptimizerState) == "optimizer_state");
}

TEST_CASE("RecorderLock lets one thread at a time in, a long holder included") {
    RecorderLock lock;
    uint64_t counter = 0; // plain: only the lock keeps the increments whole
    bool inside = false;
    bool overlapped = false;
    constexpr int kThreads = 6;
    constexpr int kPerThread = 20000;
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
        threads.emplace_back([&, t] {
            for (int i = 0; i < kPerThread; ++i) {
                std::lock_guard<RecorderLock> held(lock);
                overlapped = overlapped || inside;
                inside = true;
                ++counter;
                if (t == 0 && i % 5000 == 0) {
                    // A boundary's length: the others spin, then yield, and still get in.
                    std::this_thread::sleep_for(std::chrono::milliseconds(2));
                }
                inside = false;
            }
        });
    }
    for (auto& th : threads) {
        th.join();
    }
    REQUIRE_FALSE(overlapped);
    REQUIRE(counter == static_cast<uint64_t>(kThreads) * kPerThread);
}

TEST_CASE("Blocks of more sites than the group cache holds keep their own groups' counts") {
    // 300 sites take turns (five times the cache's slots, so they evict each other's entries
    // between a block's birth and its death): every group still counts only its own blocks.
    AllocationRecorder rec;
    constexpr uintptr_t kSites = 300;
    std::vector<std::vector<RawFrame>> stacks;
    for (uintptr_t s = 0; s < kSites; ++s) {
        stacks.push_back({RawFrame{0x5000 + s * 8, static_cast<int32_t>(s)}});
    }
    for (uintptr_t round = 0; round < 3; ++round) {
        for (uintptr_t s = 0; s < kSites; ++s) {
            rec.recordAlloc(0x100000 + (round * kSites + s) * 64, 8 + s, kCpu, stacks[s], nullptr,
                            0, 0, false);
        }
    }
    for (uintptr_t s = 0; s < kSites; ++s) {
        rec.recordFree(0x100000 + (kSites + s) * 64, kCpu, 0, 0, false); // round 1's block
    }
    rec.markBoundary();
    const BoundarySnapshot& b = rec.boundaries().back();
    REQUIRE(b.groups.size() == kSites);
    for (uintptr_t s = 0; s < kSites; ++s) {
        const GroupSample* g = groupWithStack(b, rec, stacks[s]);
        REQUIRE(g != nullptr);
        REQUIRE(g->count == 2);
        REQUIRE(g->bytes == 2 * (8 + s));
    }
    REQUIRE(rec.liveBlockCount() == 2 * kSites);
}

TEST_CASE("RecorderLock knows whether the calling thread holds it") {
    RecorderLock lock;
    REQUIRE_FALSE(lock.heldByCaller());
    {
        std::lock_guard<RecorderLock> held(lock);
        REQUIRE(lock.heldByCaller());
        bool elsewhere = true;
        std::thread other([&] { elsewhere = lock.heldByCaller(); });
        other.join();
        REQUIRE_FALSE(elsewhere); // another thread does not hold it: it would wait
    }
    REQUIRE_FALSE(lock.heldByCaller());
}

TEST_CASE("A recorder given a lock takes that one, and its *Held calls take none") {
    RecorderLock shared;
    AllocationRecorder rec(shared);
    REQUIRE(&rec.lock() == &shared);
    {
        std::lock_guard<RecorderLock> held(shared); // as the CPU tap holds it around an event
        rec.recordAllocHeld(0x1000, 64, kCpu, kStackA, nullptr, 0, 0, false);
        rec.recordFreeHeld(0x2000, kCpu, 0, 0, false); // a block it never saw
        rec.recordOutOfMemoryHeld(kCpu, 1 << 20, -1, -1);
    }
    REQUIRE(rec.liveBlockCount() == 1);
    REQUIRE(rec.eventCount() == 2);
    REQUIRE(rec.lastOutOfMemory().has_value());
    rec.recordFree(0x1000, kCpu, 0, 0, false); // and the plain calls take it themselves
    REQUIRE(rec.liveBlockCount() == 0);
}
