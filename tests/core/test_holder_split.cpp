#include "torchleak/holder_split.h"

#include <catch2/catch.hpp>

using namespace torchleak;

namespace {

// A site that keeps, per iteration, one block of `a` bytes in `first` and one of `b` bytes in
// `second` (both growing lists), for `n` iterations: its blocks, their holders and its curve.
struct TwoHolderSite {
    std::vector<FindingBlock> blocks;
    std::unordered_map<uintptr_t, BlockHolder> holders;
    SiteSeries series;
};

TwoHolderSite twoHolders(int n, uint64_t a, uint64_t b, const char* second = "val_outs") {
    TwoHolderSite s;
    uint64_t seq = 0;
    int64_t live = 0;
    for (int i = 0; i < n; ++i) {
        auto birth = static_cast<uint32_t>(i);
        uintptr_t pa = 0x1000 + 0x100 * static_cast<uintptr_t>(seq);
        s.blocks.push_back({birth, a, seq++, pa, a});
        s.holders[pa] = {"train_outs", true};
        uintptr_t pb = 0x1000 + 0x100 * static_cast<uintptr_t>(seq);
        s.blocks.push_back({birth, b, seq++, pb, b});
        s.holders[pb] = {second, true};
        live += static_cast<int64_t>(a + b);
        s.series.bytes.push_back(live);
        s.series.born.push_back(static_cast<int64_t>(a + b));
        s.series.oldest.push_back(0);
    }
    return s;
}

const HolderPart& partNamed(const std::vector<HolderPart>& parts, const std::string& name) {
    auto it = std::find_if(parts.begin(), parts.end(),
                           [&](const HolderPart& p) { return p.name == name; });
    REQUIRE(it != parts.end());
    return *it;
}

} // namespace

TEST_CASE("Two lists filled from one site are two parts, each with its own curve") {
    TwoHolderSite s = twoHolders(10, 512 * 1024, 128 * 1024);
    auto parts = splitByHolder(s.blocks, s.holders, s.series, 2, {});
    REQUIRE(parts.size() == 2);
    const HolderPart& train = partNamed(parts, "train_outs");
    const HolderPart& val = partNamed(parts, "val_outs");
    REQUIRE(train.grows);
    REQUIRE(train.blocks.size() == 10);
    REQUIRE(train.series.bytes.back() == 10 * 512 * 1024);
    REQUIRE(val.series.bytes.front() == 128 * 1024);
    REQUIRE(val.series.bytes.back() == 10 * 128 * 1024);
    REQUIRE(classify(val.series, 2).verdict == Verdict::Leak);
    REQUIRE(classify(val.series, 2).bytes_per_iteration == 128 * 1024);
}

TEST_CASE("A site with one holder is not split") {
    TwoHolderSite s = twoHolders(10, 4096, 4096, "train_outs");
    REQUIRE(splitByHolder(s.blocks, s.holders, s.series, 2, {}).empty());
    std::unordered_map<uintptr_t, BlockHolder> none;
    REQUIRE(splitByHolder(s.blocks, none, s.series, 2, {}).empty());
}

TEST_CASE("Blocks outside the path sample go with their nearest sampled neighbour") {
    TwoHolderSite s = twoHolders(10, 1000, 10);
    // Only the first and last iterations' blocks were walked.
    std::unordered_map<uintptr_t, BlockHolder> sample;
    for (size_t k : {size_t{0}, size_t{1}, size_t{18}, size_t{19}}) {
        sample[s.blocks[k].block] = s.holders[s.blocks[k].block];
    }
    auto parts = splitByHolder(s.blocks, sample, s.series, 2, {});
    REQUIRE(parts.size() == 2);
    size_t total = parts[0].blocks.size() + parts[1].blocks.size();
    REQUIRE(total == s.blocks.size());
}

// `keep.append(fwd(y))` grows 1 KiB per iteration; `state = fwd(x)` is replaced now and then
// (its last replacement two iterations ago). Returns the site with `state`'s block born in
// iteration `stateBirth`.
static TwoHolderSite keepAndState(int n, uint32_t stateBirth) {
    TwoHolderSite s;
    for (int i = 0; i < n; ++i) {
        auto ptr = static_cast<uintptr_t>(0x9000 + i);
        s.blocks.push_back(
            {static_cast<uint32_t>(i), 1024, static_cast<uint64_t>(2 * i), ptr, 1024});
        s.holders[ptr] = {"keep", true};
        s.series.bytes.push_back(4096 + 1024 * (i + 1));
        s.series.born.push_back(1024 + (static_cast<uint32_t>(i) <= stateBirth ? 4096 : 0));
        s.series.oldest.push_back(0);
    }
    s.blocks.push_back({stateBirth, 4096, 2 * stateBirth + 1, 0x1, 4096});
    s.holders[0x1] = {"state", false};
    return s;
}

TEST_CASE("What a replaced working set freed goes to the holder that keeps replacing it") {
    const int n = 12;
    TwoHolderSite s = keepAndState(n, n - 3);
    auto parts = splitByHolder(s.blocks, s.holders, s.series, 2, {});
    REQUIRE(parts.size() == 2);
    const HolderPart& state = partNamed(parts, "state");
    REQUIRE(state.series.bytes == std::vector<int64_t>(n, 4096));
    REQUIRE(classify(state.series, 2).verdict != Verdict::Leak);
    REQUIRE(classify(partNamed(parts, "keep").series, 2).verdict == Verdict::Leak);
}

TEST_CASE("A name holding only the newest block is the loop's current value, not a holder") {
    // `t = fwd(x); keep.append(t)`: the path to the newest block goes through `t`, shorter.
    const int n = 12;
    TwoHolderSite s = keepAndState(n, n - 1);
    s.blocks.back().weight = 1024;
    s.series.bytes.back() -= 4096 - 1024;
    REQUIRE(splitByHolder(s.blocks, s.holders, s.series, 2, {}).empty());
    // With a second list, the newest block joins the one whose blocks are its size.
    TwoHolderSite two = twoHolders(n, 512 * 1024, 128 * 1024);
    two.holders[two.blocks[2 * n - 2].block] = {"t", false};
    auto parts = splitByHolder(two.blocks, two.holders, two.series, 2, {});
    REQUIRE(parts.size() == 2);
    REQUIRE(partNamed(parts, "train_outs").series.bytes.back() == n * 512 * 1024);
    REQUIRE(classify(partNamed(parts, "train_outs").series, 2).verdict == Verdict::Leak);
}

TEST_CASE("Freed memory that kept growing is not split: its holder cannot be told now") {
    // An epoch-end list was cleared (its history is gone), and two steady names remain.
    SiteSeries series;
    std::vector<FindingBlock> blocks;
    std::unordered_map<uintptr_t, BlockHolder> holders;
    for (int i = 0; i < 12; ++i) {
        series.bytes.push_back(2048 + 1000 * i);
        series.born.push_back(2048);
        series.oldest.push_back(0);
    }
    blocks.push_back({0, 1024, 0, 0x1, 1024});
    blocks.push_back({0, 1024, 1, 0x2, 1024});
    holders[0x1] = {"a", false};
    holders[0x2] = {"b", false};
    REQUIRE(splitByHolder(blocks, holders, series, 2, {}).empty());
}

TEST_CASE("Adversarial holder names split like any other") {
    TwoHolderSite s = twoHolders(6, 100, 100, "d['<script>\"x\"</script>']");
    auto parts = splitByHolder(s.blocks, s.holders, s.series, 0, {});
    REQUIRE(parts.size() == 2);
    REQUIRE(partNamed(parts, "d['<script>\"x\"</script>']").series.bytes.back() == 600);
}

TEST_CASE("The nearest-neighbour rule's error is measured on the sample itself") {
    std::vector<std::pair<uint64_t, std::string>> runs, turns;
    for (uint64_t k = 0; k < 100; ++k) {
        runs.emplace_back(k, k < 50 ? "train_outs" : "val_outs"); // one list, then the other
        turns.emplace_back(k, "l" + std::to_string(k % 5));       // five lists in turn
    }
    REQUIRE(nearestHolderErrorRate(runs) <= 0.02);
    REQUIRE(nearestHolderErrorRate(turns) == 1.0);
    // One holder in fifty taking its turn among the others' (`kept`, the loop's name for the
    // last of 50 lists): right for 96% of the sample, a scramble for that holder.
    std::vector<std::pair<uint64_t, std::string>> oneInFifty;
    for (uint64_t k = 0; k < 400; ++k) {
        oneInFifty.emplace_back(k, k % 50 == 49 ? "kept" : "stores");
    }
    REQUIRE(nearestHolderErrorRate(oneInFifty) == 1.0);
    REQUIRE(nearestHolderErrorRate({}) == 0.0);
    REQUIRE(nearestHolderErrorRate({{7, "a"}}) == 0.0);
    // Unordered input is sorted by allocation order first.
    std::vector<std::pair<uint64_t, std::string>> shuffled(runs.rbegin(), runs.rend());
    REQUIRE(nearestHolderErrorRate(shuffled) == nearestHolderErrorRate(runs));
}

TEST_CASE("A name holding the block before the newest is the loop's alias, not a holder") {
    // `prev = hist[-1]; hist.append(prev + 1)`: at each boundary `prev` holds the second newest
    // block, which `hist` holds too.
    const int n = 8;
    TwoHolderSite s;
    for (int i = 0; i < n; ++i) {
        auto ptr = static_cast<uintptr_t>(0x9000 + i);
        s.blocks.push_back({static_cast<uint32_t>(i), 1024, static_cast<uint64_t>(i), ptr, 1024});
        s.holders[ptr] = {i == n - 2 ? "prev" : "hist", i != n - 2};
        s.series.bytes.push_back(1024 * (i + 1));
        s.series.born.push_back(1024);
        s.series.oldest.push_back(0);
    }
    REQUIRE(splitByHolder(s.blocks, s.holders, s.series, 2, {}).empty());
    // A working set of another size, last replaced then, stays a holder of its own.
    TwoHolderSite state = keepAndState(12, 10);
    REQUIRE(splitByHolder(state.blocks, state.holders, state.series, 2, {}).size() == 2);
}
