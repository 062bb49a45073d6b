// The display strings the core emits into the JSON for every view.
#include "torchleak/display_text.h"

#include <catch2/catch.hpp>

using namespace torchleak;

TEST_CASE("formatBytes: binary units, one decimal from KiB on, signed") {
    REQUIRE(formatBytes(0) == "0 B");
    REQUIRE(formatBytes(1023) == "1023 B");
    REQUIRE(formatBytes(1024) == "1.0 KiB");
    REQUIRE(formatBytes(1536) == "1.5 KiB");
    REQUIRE(formatBytes(2.5 * 1024 * 1024) == "2.5 MiB");
    REQUIRE(formatBytes(-4096) == "-4.0 KiB");
    REQUIRE(formatBytes(5e15) == "4547.5 TiB");
}

TEST_CASE("siteText: notebook cells, backward, files") {
    Frame cell;
    cell.file = "/tmp/ipykernel_1/123.py";
    cell.line = 3;
    cell.cell = 7;
    REQUIRE(siteText(cell) == "In [7], line 3");
    Frame backward;
    backward.file = "<backward>";
    backward.function = "MmBackward0";
    REQUIRE(siteText(backward) == "backward (MmBackward0)");
    Frame file;
    file.file = "train.py";
    file.line = 42;
    REQUIRE(siteText(file) == "train.py:42");
}

TEST_CASE("groupThousands") {
    REQUIRE(groupThousands(0) == "0");
    REQUIRE(groupThousands(999) == "999");
    REQUIRE(groupThousands(1000) == "1,000");
    REQUIRE(groupThousands(6318453766) == "6,318,453,766");
    REQUIRE(groupThousands(-12345) == "-12,345");
}

TEST_CASE("siteText: a re-run cell names every run, a long list keeps its ends") {
    Frame f;
    f.file = "/tmp/ipykernel_1/abc.py";
    f.line = 2;
    f.cell = 9;
    f.runs = {3, 6, 9};
    REQUIRE(siteText(f) == "In [3], [6], [9], line 2");
    f.runs = {1, 2, 3, 4, 5, 6, 7, 8};
    REQUIRE(siteText(f) == "In [1], [2], [3], [4], \u2026, [8] (8 runs), line 2");
    f.runs = {5};
    REQUIRE(siteText(f) == "In [9], line 2");
}

TEST_CASE("iterationNoun: cell watch's rates are per cell run") {
    REQUIRE(std::string(iterationNoun(BoundaryKind::Cell)) == "cell run");
    REQUIRE(std::string(iterationNoun(BoundaryKind::Repeat)) == "iteration");
    DeviceTimeline d;
    d.device = "cpu";
    d.leak_bytes_per_iteration = 1 << 20;
    d.projected_oom_iteration = 1012;
    REQUIRE(projectionText(d, 12, BoundaryKind::Cell) ==
            "at 1.0 MiB per cell run, cpu is full in ~1,000 cell runs");
}

TEST_CASE("projectionText only for a leaking device with a known capacity") {
    DeviceTimeline d;
    d.device = "cpu";
    REQUIRE(projectionText(d, 12).empty());
    d.leak_bytes_per_iteration = 2621440;
    REQUIRE(projectionText(d, 12).empty()); // no capacity, no projection
    d.projected_oom_iteration = 9594;
    REQUIRE(projectionText(d, 12) == "at 2.5 MiB per iteration, cpu is full in ~9,582 iterations");
    d.projected_oom_iteration = 13;
    REQUIRE(projectionText(d, 12) == "at 2.5 MiB per iteration, cpu is full in ~1 iteration");
    d.projected_oom_iteration = 3; // already past it: the device is full (an OOM ended the run)
    REQUIRE(projectionText(d, 12) == "at 2.5 MiB per iteration, cpu is full");
    d.leak_bytes_per_iteration = 4;
    d.projected_oom_iteration = 6'318'453'766;
    REQUIRE(projectionText(d, 12) ==
            "at 4 B per iteration, cpu would take over 100,000,000 iterations to fill: negligible");
}

TEST_CASE("headline counts, the empty sentence only for an empty run") {
    Report r;
    REQUIRE(headline(r) == "0 leak(s), 0 other finding(s)");
    REQUIRE(emptyReportText(r) ==
            "No tensor allocated during the run survived an iteration boundary.");
    Finding leak;
    leak.verdict = Verdict::Leak;
    Finding warm;
    warm.verdict = Verdict::Warmup;
    r.findings = {leak, warm, warm};
    REQUIRE(headline(r) == "1 leak(s), 2 other finding(s)");
    REQUIRE(emptyReportText(r).empty());
}

TEST_CASE("A long retaining path is elided in its middle, at step boundaries") {
    std::string chain = "root";
    for (int i = 0; i < 26; ++i) {
        chain += ".child_level_" + std::to_string(i);
    }
    chain += ".items";
    const std::string s = shortPath(chain);
    REQUIRE(s.size() <= kShortPathChars);
    REQUIRE(s.rfind("root.child_level_0\u2026.child_level_", 0) == 0);
    REQUIRE(s.size() >= 40); // as many whole last steps as fit
    REQUIRE(s.substr(s.size() - 20) == "child_level_25.items");

    REQUIRE(shortPath("losses") == "losses");
    REQUIRE(shortPath("model.cache[3]") == "model.cache[3]");
    // A key with dots and brackets inside quotes stays one step, and is never cut: a redacted
    // report replaces whole keys, so a cut one would leak its prefix.
    const std::string keyed = "stores.by_customer[\"a.b[c]\"][0]";
    REQUIRE(shortPath(keyed, 28) == "stores\u2026[\"a.b[c]\"][0]");
    const std::string secret = "store['customer-" + std::string(120, 's') + "']";
    REQUIRE(shortPath(secret) == "store[\u2026]");
    REQUIRE(shortPath("r.x." + std::string(200, 'y')) == "r.x.\u2026");
    // A module's name as the root: the name the user wrote after it stays.
    REQUIRE(shortPath("test_inner.kept[4].grad_fn.next_functions[0][0].next_functions[0][0]"
                      "._saved_result") ==
            "test_inner.kept[4].grad_fn\u2026[0][0].next_functions[0][0]._saved_result");
    // A root longer than the room stays whole (it is a name the user wrote).
    const std::string longRoot = std::string(90, 'n') + ".items";
    REQUIRE(shortPath(longRoot) == std::string(90, 'n') + ".\u2026");
}

TEST_CASE("deviceText: one line with the live bytes, the leak, the projection, fragmentation") {
    DeviceTimeline d;
    d.device = "cuda:0";
    d.allocated = {0, 1 << 20, 2 << 20};
    REQUIRE(deviceText(d, 3) == "cuda:0: 2.0 MiB tracked live at the end");
    d.leak_bytes_per_iteration = 1 << 20;
    d.capacity_bytes = 10ull << 20;
    d.projected_oom_iteration = 10;
    REQUIRE(deviceText(d, 3, BoundaryKind::Cell) ==
            "cuda:0: 2.0 MiB tracked live at the end, leaking 1.0 MiB per cell run; at 1.0 MiB "
            "per cell run, cuda:0 is full in ~7 cell runs");
    d.leak_bytes_per_iteration = 0;
    d.verdict = "fragmentation";
    d.fragmentation_ratio = 0.416;
    REQUIRE(deviceText(d, 3) ==
            "cuda:0: 2.0 MiB tracked live at the end; fragmentation (42% reserved but unused)");
    DeviceTimeline empty;
    empty.device = "cpu";
    REQUIRE(deviceText(empty, 0) == "cpu: 0 B tracked live at the end");
}

TEST_CASE("tensorText and pathTensorText") {
    REQUIRE(tensorText("float32", {256, 1024}) == "float32 [256, 1024]");
    REQUIRE(tensorText("int64", {}) == "int64 []");
    TensorInfo t;
    t.dtype = "bfloat16";
    t.shape = {4};
    t.nbytes = 1536;
    REQUIRE(pathTensorText(t) == "bfloat16 [4] 1.5 KiB");
    Frame site;
    site.file = "train.py";
    site.line = 16;
    t.site = site;
    REQUIRE(pathTensorText(t) == "bfloat16 [4] 1.5 KiB, allocated at train.py:16");
}

TEST_CASE("rateText: a leak that keeps memory without growing is held, not 0 B") {
    Finding f;
    f.verdict = Verdict::Leak;
    f.bytes_per_iteration = 66560;
    REQUIRE(rateText(f) == "65.0 KiB");
    f.bytes_per_iteration = 0;
    f.total_bytes = 4 << 20;
    REQUIRE(rateText(f) == "held");
    f.verdict = Verdict::Plateau;
    REQUIRE(rateText(f) == "0 B");
}

TEST_CASE("blockLabel: the holder, the verdict and the role, for the memory viewer's stacks") {
    Finding f;
    f.verdict = Verdict::Leak;
    REQUIRE(blockLabel(f) == "torchleak: leak");
    f.holder = Holder{};
    f.holder->path_text = "losses";
    REQUIRE(blockLabel(f) == "torchleak: held by losses (leak)");
    f.verdict = Verdict::Warmup;
    f.holder->path_text = "store[\"<b>'q'</b>";
    f.holder->path_text += std::string(200, 'x');
    f.holder->path_text += "\"]";
    const std::string label = blockLabel(f);
    REQUIRE(label.rfind("torchleak: held by store[", 0) == 0);
    REQUIRE(label.size() < 120);
    REQUIRE(label.substr(label.size() - 9) == " (warmup)");
    f.role = MemoryRole::UserHeld;
    f.holder->path_text = "losses";
    REQUIRE(blockLabel(f) == "torchleak: held by losses (warmup, user-held)");
    f.holder.reset();
    f.role = MemoryRole::OptimizerState;
    REQUIRE(blockLabel(f) == "torchleak: warmup, optimizer state");
}

TEST_CASE("growthText: a leak's onset, growth that stopped, a record in proportion") {
    Finding f;
    f.device = "cuda:0";
    REQUIRE(growthText(f, BoundaryKind::OptimizerStep).empty());
    f.verdict = Verdict::Leak;
    f.growth_since = GrowthSince{2001, 1200000, std::nullopt, 1200000000};
    REQUIRE(growthText(f, BoundaryKind::OptimizerStep) ==
            "leaking since iteration 2,002, 1.1 MiB per iteration");
    REQUIRE(growthText(f, BoundaryKind::Cell) ==
            "leaking since cell run 2,002, 1.1 MiB per cell run");
    f.verdict = Verdict::Plateau;
    f.growth_since = GrowthSince{1, 262144, 100, 26214400};
    REQUIRE(growthText(f, BoundaryKind::OptimizerStep) ==
            "grew 25.0 MiB until iteration 101, flat since");
    // Stopped too recently to tell a filled cache from a pause: its own words.
    f.verdict = Verdict::Undecided;
    f.growth_since = GrowthSince{1, 131072, 379, 49807360, 20};
    REQUIRE(growthText(f, BoundaryKind::OptimizerStep) ==
            "grew 47.5 MiB until iteration 380, flat for the last 20: too soon to tell a filled "
            "cache from a pause");
    f.verdict = Verdict::Growth;
    f.growth_since = GrowthSince{1, 48, std::nullopt, 2352};
    REQUIRE(growthText(f, BoundaryKind::OptimizerStep) ==
            "growing 48 B per iteration since iteration 2: at this rate cuda:0 would take over "
            "100,000,000 iterations to fill");
}

TEST_CASE("A list is said one way: commas and the last word") {
    CHECK(listWords({}).empty());
    CHECK(listWords({"a"}) == "a");
    CHECK(listWords({"a", "b"}) == "a and b");
    CHECK(listWords({"a", "b", "c"}, "or") == "a, b or c");
    CHECK(methodCalls({"clear", "reset"}) == "clear() or reset()");
    CHECK(listFirst({"a", "b", "c"}, 3) == "a, b and c");
    CHECK(listFirst({"a", "b", "c", "d", "e"}, 3) == "a, b, c and 2 more");
    CHECK(listFirst({"a", "b", "c", "d"}, 3, "more module(s)") == "a, b, c and 1 more module(s)");
}

TEST_CASE("A holder's growth in storages, or in entries where they share storages") {
    Holder h{"cache", "dict", 1.0, std::nullopt};
    CHECK(holderGrowthText(h, BoundaryKind::Repeat) == "+1 per iteration");
    h.growth_per_iteration = 1.14;
    CHECK(holderGrowthText(h, BoundaryKind::Cell) == "+1.1 per cell run");
    h.entries_per_iteration = 192;
    CHECK(holderGrowthText(h, BoundaryKind::Repeat) ==
          "+192 entries per iteration, sharing 1 storage");
    h.growth_per_iteration = 3;
    h.entries_per_iteration = 1536;
    CHECK(holderGrowthText(h, BoundaryKind::Repeat) ==
          "+1,536 entries per iteration, sharing 3 storages");
}
