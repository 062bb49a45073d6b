#include "group_samples.h"
#include "torchleak/recorder.h"

#include <catch2/catch.hpp>
#include <cstdint>
#include <map>
#include <random>
#include <vector>

using namespace torchleak;

namespace {
constexpr DeviceKey kCpu{0, -1};
const std::vector<RawFrame> kKept = {{0xA0, 2}};
const std::vector<RawFrame> kTemp = {{0xB0, 4}};
} // namespace

using torchleak::testing::groupWithStack;

TEST_CASE("A young block is a live block to every reader before it is filed") {
    AllocationRecorder rec;
    rec.recordAlloc(0x1000, 4096, kCpu, kKept, nullptr, 0, 0, false);
    REQUIRE(rec.liveBlockCount() == 1);
    REQUIRE(rec.liveBlock(0x1000).has_value());
    REQUIRE(rec.liveBlock(0x1000)->size == 4096);
    REQUIRE(rec.trackedBytes(kCpu) == 4096);
    size_t visited = 0;
    rec.forEachLiveBlock([&](uintptr_t ptr, const BlockRecord& r) {
        visited += ptr == 0x1000 && r.size == 4096 ? 1 : 0;
    });
    REQUIRE(visited == 1);
    // A registry's word reaches it too.
    const uintptr_t blocks[] = {0x1000};
    REQUIRE(rec.markHeldAs(blocks, HeldAs::Parameter) == 1);
    REQUIRE(rec.liveBlock(0x1000)->heldAs == HeldAs::Parameter);
    rec.markBoundary();
    const GroupSample* filed = groupWithStack(rec.boundaries()[0], rec, kKept);
    REQUIRE(filed != nullptr);
    REQUIRE(filed->bytes == 4096);
}

TEST_CASE("A block that outlives the young ones after it is filed under its site") {
    AllocationRecorder rec;
    rec.recordAlloc(0x1000, 1 << 20, kCpu, kKept, nullptr, 0, 0, false);
    for (uintptr_t i = 0; i < 3 * YoungBlocks::kSlots; ++i) {
        rec.recordAlloc(0x9000 + i * 0x100, 64, kCpu, kTemp, nullptr, 0, 0, false);
    }
    for (uintptr_t i = 0; i < 3 * YoungBlocks::kSlots; ++i) {
        rec.recordFree(0x9000 + i * 0x100, kCpu, 0, 0, false);
    }
    REQUIRE(rec.liveBlockCount() == 1);
    const BoundarySnapshot& b = rec.markBoundary();
    const GroupSample* kept = groupWithStack(b, rec, kKept);
    REQUIRE(kept != nullptr);
    REQUIRE(kept->bytes == 1 << 20);
    // The temporaries that were filed before their free read zero; the rest never were.
    const GroupSample* temporaries = groupWithStack(b, rec, kTemp);
    REQUIRE(temporaries != nullptr);
    REQUIRE(temporaries->bytes == 0);
    REQUIRE(b.liveBytes == 1 << 20);
    REQUIRE(b.devices[0].peak == (1 << 20) + 3 * YoungBlocks::kSlots * 64);
}

TEST_CASE("An address handed out again without its free leaves no block behind, young or filed") {
    AllocationRecorder rec;
    SECTION("the old block is young") {
        rec.recordAlloc(0x1000, 100, kCpu, kKept, nullptr, 0, 0, false);
        rec.recordAlloc(0x1000, 30, kCpu, kTemp, nullptr, 0, 0, false);
        REQUIRE(rec.trackedBytes(kCpu) == 30);
        rec.recordFree(0x1000, kCpu, 0, 0, false);
    }
    SECTION("the old block was filed at a boundary") {
        rec.recordAlloc(0x1000, 100, kCpu, kKept, nullptr, 0, 0, false);
        rec.markBoundary();
        rec.recordAlloc(0x1000, 30, kCpu, kTemp, nullptr, 0, 0, false);
        REQUIRE(rec.trackedBytes(kCpu) == 30);
        rec.recordFree(0x1000, kCpu, 0, 0, false);
    }
    REQUIRE(rec.liveBlockCount() == 0);
    REQUIRE(rec.trackedBytes(kCpu) == 0);
    const BoundarySnapshot& b = rec.markBoundary();
    REQUIRE(b.liveBytes == 0);
    const GroupSample* kept = groupWithStack(b, rec, kKept); // absent when it was never filed
    REQUIRE((kept == nullptr || kept->bytes == 0));
}

// Random traffic over a few addresses (so addresses are reused, and some frees are never
// reported), a few sites and boundaries, against a plain map of what is alive: after every
// boundary the recorder's live blocks, tracked bytes and per-site bytes are the map's.
TEST_CASE("Random traffic: the recorder's live blocks and sites are a plain model's") {
    const std::vector<std::vector<RawFrame>> stacks = {{{0x10, 1}}, {{0x20, 2}}, {{0x30, 3}}};
    for (uint32_t seed = 1; seed <= 20; ++seed) {
        std::mt19937 rng(seed);
        AllocationRecorder rec;
        struct Alive {
            uint64_t size;
            size_t stack;
        };
        std::map<uintptr_t, Alive> model;
        for (int event = 0; event < 4000; ++event) {
            const uintptr_t ptr = 0x1000 + (rng() % 24) * 0x40;
            const uint32_t roll = rng() % 100;
            if (roll < 50) {
                const uint64_t size = 1 + rng() % 4096;
                const size_t stack = rng() % stacks.size();
                rec.recordAlloc(ptr, size, kCpu, stacks[stack], nullptr, 0, 0, false);
                model[ptr] = Alive{size, stack}; // an unreported free of the old one, if any
            } else if (roll < 95) {
                rec.recordFree(ptr, kCpu, 0, 0, false);
                model.erase(ptr);
            } else {
                const BoundarySnapshot& b = rec.markBoundary();
                uint64_t total = 0;
                std::vector<uint64_t> perStack(stacks.size(), 0);
                for (const auto& [p, alive] : model) {
                    total += alive.size;
                    perStack[alive.stack] += alive.size;
                }
                INFO("seed " << seed << ", event " << event);
                REQUIRE(rec.liveBlockCount() == model.size());
                REQUIRE(b.liveBytes == total);
                REQUIRE(rec.trackedBytes(kCpu) == static_cast<int64_t>(total));
                for (size_t s = 0; s < stacks.size(); ++s) {
                    // A site absent from every snapshot so far has had nothing filed: zero.
                    uint64_t bytes = 0;
                    for (const BoundarySnapshot& kept : rec.boundaries()) {
                        for (const GroupSample& g : kept.groups) {
                            if (rec.stackFrames(g.key.stack) == stacks[s]) {
                                bytes = g.bytes;
                            }
                        }
                    }
                    REQUIRE(bytes == perStack[s]);
                }
            }
        }
    }
}
