#include "torchleak/finding_blocks.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <functional>

using namespace torchleak;

namespace {

BlockPath pathTo(const std::string& root) {
    BlockPath p;
    p.retention = Retention::Reachable;
    PathStep step;
    step.label = root;
    p.steps.push_back(step);
    return p;
}

} // namespace

TEST_CASE("Sorted descending, a finding's blocks put the newest iteration's biggest first") {
    std::vector<FindingBlock> blocks{{1, 4096, 10, 0xa, 4096},
                                     {2, 8, 11, 0xb, 8},
                                     {2, 1 << 20, 12, 0xc, 1 << 20},
                                     {0, 1 << 22, 9, 0xd, 1 << 22}};
    std::sort(blocks.begin(), blocks.end(), std::greater<>());
    REQUIRE(blocks[0].block == 0xc); // iteration 2, the big one
    REQUIRE(blocks[1].block == 0xb); // iteration 2, the scalar
    REQUIRE(blocks[2].block == 0xa);
    REQUIRE(blocks[3].block == 0xd); // the oldest last, however big
}

TEST_CASE("The path sample keeps the newest blocks, then spreads over the rest") {
    std::vector<FindingBlock> blocks;
    for (uint32_t i = 0; i < 10000; ++i) {
        blocks.push_back({10000 - i, 64, 10000 - i, 0x1000 + i, 64});
    }
    auto sample = samplePathBlocks(blocks);
    REQUIRE(sample.size() == kPathSamplesPerFinding);
    for (size_t k = 0; k < kPathHeadSamples; ++k) {
        REQUIRE(sample[k].block == blocks[k].block);
    }
    REQUIRE(sample.back().birth < 100); // the spread reaches the oldest blocks
    std::vector<FindingBlock> few(blocks.begin(), blocks.begin() + 5);
    REQUIRE(samplePathBlocks(few) == few);
}

TEST_CASE("Thousands of findings share one budget of path samples") {
    REQUIRE(pathSamplesPerFinding(0) == kPathSamplesPerFinding);
    REQUIRE(pathSamplesPerFinding(10) == kPathSamplesPerFinding); // a usual report: unchanged
    REQUIRE(pathSamplesPerFinding(64) == kPathSamplesPerFinding);
    REQUIRE(pathSamplesPerFinding(128) == kPathSamplesPerReport / 128);
    REQUIRE(pathSamplesPerFinding(2000) == kPathSamplesAtLeast);
    REQUIRE(pathSamplesPerFinding(1000000) == kPathSamplesAtLeast);
    std::vector<FindingBlock> blocks;
    for (uint32_t i = 0; i < 30; ++i) {
        blocks.push_back({30 - i, 256, 30 - i, 0x1000 + i, 256});
    }
    auto sample = samplePathBlocks(blocks, kPathSamplesAtLeast);
    REQUIRE(sample.size() == kPathSamplesAtLeast);
    REQUIRE(sample[0].block == blocks[0].block); // the newest, for the representative
    REQUIRE(sample[1].block == blocks[1].block);
    REQUIRE(sample.back().birth <= 3); // and the spread still reaches the oldest
}

TEST_CASE("The representative path is the newest one from before the site's last iteration") {
    // Newest first: the last iteration's block is the current state (model.last_hidden), the
    // one before it is what leaks.
    std::vector<FindingBlock> blocks{
        {5, 64, 50, 0x50, 64}, {4, 64, 40, 0x40, 64}, {3, 64, 30, 0x30, 64}};
    std::unordered_map<uintptr_t, BlockPath> paths{
        {0x50, pathTo("model.last_hidden")}, {0x40, pathTo("losses")}, {0x30, pathTo("losses")}};
    std::vector<const std::vector<PathStep>*> found;
    const BlockPath* chosen = representativePath(blocks, paths, 5, found);
    REQUIRE(chosen != nullptr);
    REQUIRE(chosen->steps[0].label == "losses");
    REQUIRE(found.size() == 3);

    SECTION("in cell watch the run may end in another cell: the site's own newest is current") {
        found.clear();
        REQUIRE(representativePath(blocks, paths, 9, found)->steps[0].label == "losses");
    }
    SECTION("with paths only from the last iteration, the newest stands") {
        found.clear();
        std::unordered_map<uintptr_t, BlockPath> newestOnly{{0x50, pathTo("model.last_hidden")}};
        REQUIRE(representativePath(blocks, newestOnly, 5, found)->steps[0].label ==
                "model.last_hidden");
        REQUIRE(found.size() == 1);
    }
    SECTION("no path found, no representative") {
        found.clear();
        REQUIRE(representativePath(blocks, {}, 5, found) == nullptr);
        REQUIRE(found.empty());
    }
}
