// buildReport end to end on a recorder fed synthetic events, with fake Python collaborators.
#include "library_frame_symbolizer.h"
#include "torchleak/display_text.h"
#include "torchleak/report_builder.h"
#include "torchleak/report_json.h"
#include "torchleak/suggestion.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <nlohmann/json.hpp>
#include <set>

using namespace torchleak;

namespace {

constexpr DeviceKey kCpu{0, -1};
constexpr int64_t MiB = 1 << 20;

using FakeSymbolizer = testing::LibraryFrameSymbolizer;

class FakeDescriber final : public BlockDescriber {
  public:
    std::vector<std::optional<BlockDescription>>
    describe(const std::vector<uintptr_t>& blocks) override {
        asked += blocks.size();
        return {blocks.size(), BlockDescription{"float32", {512, 512}}};
    }
    size_t asked = 0;
};

} // namespace

TEST_CASE("buildReport: one leaking site, attributed to the innermost user frame") {
    AllocationRecorder rec;
    // user frame train.py:42 calls into a library frame (torch) that allocates.
    std::vector<RawFrame> stack = {{0x1000, 120}, {0x1, 42}, {0x2, 7}};
    std::vector<RawFrame> temp = {{0x3, 50}};
    for (uint32_t i = 0; i < 6; ++i) {
        rec.recordAlloc(0x100000 + i * 0x1000, MiB, kCpu, stack, nullptr, 0, 0, false);
        rec.recordAlloc(0x900000, 4 * MiB, kCpu, temp, nullptr, 0, 0, false);
        rec.recordFree(0x900000, kCpu, 0, 0, false);
        rec.markBoundary();
    }
    FakeSymbolizer sym;
    FakeDescriber desc;
    ReportInputs in;
    in.torch_version = "2.13.0";
    in.boundary = BoundaryKind::Repeat;
    in.devices = {{kCpu, "cpu", 64ull << 30}};
    Report r = buildReport(rec, in, sym, desc);
    REQUIRE(r.iterations == 6);
    REQUIRE(r.findings.size() == 1);
    const Finding& f = r.findings[0];
    REQUIRE(f.verdict == Verdict::Leak);
    REQUIRE(f.site.file == "train.py");
    REQUIRE(f.site.line == 42);
    REQUIRE(f.stack.size() == 3);
    REQUIRE_FALSE(f.stack[0].user);
    REQUIRE(f.count == 6);
    REQUIRE(f.bytes_per_iteration == MiB);
    REQUIRE(f.total_bytes == 6 * MiB);
    REQUIRE(f.series == std::vector<int64_t>{MiB, 2 * MiB, 3 * MiB, 4 * MiB, 5 * MiB, 6 * MiB});
    REQUIRE(f.dtype == "float32");
    REQUIRE(f.shape == std::vector<int64_t>{512, 512});
    REQUIRE(r.devices.size() == 1);
    REQUIRE(r.devices[0].leak_bytes_per_iteration == MiB);
    REQUIRE(r.devices[0].projected_oom_iteration == 6 + (64 * 1024 - 6));
    REQUIRE(r.devices[0].peak[0] == 5 * MiB);
    REQUIRE(r.summary.score < 100);
}

TEST_CASE("buildReport: an empty run has no findings and a perfect score") {
    AllocationRecorder rec;
    FakeSymbolizer sym;
    FakeDescriber desc;
    Report r = buildReport(rec, ReportInputs{}, sym, desc);
    REQUIRE(r.iterations == 0);
    REQUIRE(r.findings.empty());
    REQUIRE(r.devices.empty());
    REQUIRE(r.summary.score == 100);
    REQUIRE(r.summary.grade == "A");
}

TEST_CASE("buildReport: backward allocations are named by their autograd node") {
    AllocationRecorder rec;
    for (uint32_t i = 0; i < 4; ++i) {
        rec.recordAlloc(0x200000 + i * 0x1000, 1024, kCpu, {},
                        "N5torch8autograd9generated11MmBackward0E", 0, 0, false);
        rec.markBoundary();
    }
    FakeSymbolizer sym;
    FakeDescriber desc;
    Report r = buildReport(rec, ReportInputs{}, sym, desc);
    REQUIRE(r.findings.size() == 1);
    REQUIRE(r.findings[0].site.function == "MmBackward0");
    REQUIRE(r.findings[0].autograd_node == "MmBackward0");
    REQUIRE(r.findings[0].verdict == Verdict::Leak);
}

TEST_CASE("buildReport: CUDA blocks without a hook stack are attributed by external stacks") {
    // The CUDA path records no Python stack in the hook; PyTorch's history recording supplies
    // one per surviving block at report time.
    constexpr DeviceKey kCuda0{1, 0};
    AllocationRecorder rec;
    ReportInputs in;
    for (uint32_t i = 0; i < 5; ++i) {
        uintptr_t kept = 0x700000 + i * 0x1000;
        rec.recordAlloc(kept, MiB, kCuda0, {}, nullptr, 0, 0, true);         // survives: a leak
        rec.recordAlloc(0x900000, 4 * MiB, kCuda0, {}, nullptr, 0, 0, true); // temporary
        rec.recordFree(0x900000, kCuda0, 0, 0, true);
        in.external_stacks[kept] = {
            Frame{"/torch/nn/functional.py", 10, "linear", std::nullopt, false, std::nullopt, ""},
            Frame{"train.py", 42, "step", std::nullopt, true, std::nullopt, ""}};
        rec.markBoundary();
    }
    in.devices = {{kCuda0, "cuda:0", 80ull << 30}};
    FakeSymbolizer sym;
    FakeDescriber desc;
    Report r = buildReport(rec, in, sym, desc);
    REQUIRE(r.findings.size() == 1);
    const Finding& f = r.findings[0];
    REQUIRE(f.device == "cuda:0");
    REQUIRE(f.site.file == "train.py");
    REQUIRE(f.site.line == 42);
    REQUIRE(f.verdict == Verdict::Leak);
    REQUIRE(f.bytes_per_iteration == MiB);
    REQUIRE(f.series == std::vector<int64_t>{MiB, 2 * MiB, 3 * MiB, 4 * MiB, 5 * MiB});
    REQUIRE(f.count == 5);
    REQUIRE(f.stack.size() == 2);
}

namespace {

// Code 0xA0 + k: line 1 of notebook cell k ("cell:k" groups its re-runs).
class CellSymbolizer final : public StackSymbolizer {
  public:
    std::vector<Frame> symbolize(std::span<const RawFrame> frames) override {
        std::vector<Frame> out;
        for (const RawFrame& r : frames) {
            Frame f;
            int k = static_cast<int>(r.code - 0xA0);
            f.file = "/tmp/ipykernel_1/" + std::to_string(k) + ".py";
            f.line = r.offset;
            f.function = "<module>";
            f.cell = 100 + k; // the newest run's count, as IPython's file map says
            f.group = "cell:" + std::to_string(k);
            out.push_back(f);
        }
        return out;
    }
};

} // namespace

TEST_CASE("buildReport: in cell watch a re-run cell grows per run of that cell") {
    // Cell 0 adds 1 MiB each run; cells 1 and 2 run between its runs and allocate nothing.
    AllocationRecorder rec;
    std::vector<RawFrame> cell0 = {{0xA0, 1}};
    ReportInputs in;
    in.boundary = BoundaryKind::Cell;
    int count = 1;
    for (uint32_t run = 0; run < 4; ++run) {
        for (int k = 0; k < 3; ++k, ++count) {
            if (k == 0) {
                rec.recordAlloc(0x100000 + run * 0x1000, MiB, kCpu, cell0, nullptr, 0, 0, false);
            }
            rec.markBoundary();
            in.boundary_runs.push_back({"cell:" + std::to_string(k), count});
        }
    }
    CellSymbolizer sym;
    FakeDescriber desc;
    Report r = buildReport(rec, in, sym, desc);
    REQUIRE(r.findings.size() == 1);
    REQUIRE(r.findings[0].verdict == Verdict::Leak);
    REQUIRE(r.findings[0].bytes_per_iteration == MiB);
    REQUIRE(r.findings[0].site.runs == std::vector<int>{1, 4, 7, 10});

    SECTION("without the runs, every cell is an iteration") {
        in.boundary_runs.clear();
        Report all = buildReport(rec, in, sym, desc);
        REQUIRE(all.findings[0].bytes_per_iteration < MiB);
        REQUIRE(all.findings[0].site.runs.empty());
    }
}

TEST_CASE("buildReport: a function from one cell called by another grows per run of the caller") {
    // Cell 0 defines the function (the site, innermost); cell 1 calls it and is what re-runs.
    AllocationRecorder rec;
    std::vector<RawFrame> stack = {{0xA0, 3}, {0xA1, 1}};
    ReportInputs in;
    in.boundary = BoundaryKind::Cell;
    in.boundary_runs = {{"cell:0", 1}};
    rec.markBoundary();
    for (uint32_t run = 0; run < 4; ++run) {
        rec.recordAlloc(0x100000 + run * 0x1000, 2 * MiB, kCpu, stack, nullptr, 0, 0, false);
        rec.markBoundary();
        in.boundary_runs.push_back({"cell:1", 2 + 2 * static_cast<int>(run)});
        rec.markBoundary();
        in.boundary_runs.push_back({"cell:2", 3 + 2 * static_cast<int>(run)});
    }
    CellSymbolizer sym;
    FakeDescriber desc;
    Report r = buildReport(rec, in, sym, desc);
    REQUIRE(r.findings.size() == 1);
    REQUIRE(r.findings[0].verdict == Verdict::Leak);
    REQUIRE(r.findings[0].bytes_per_iteration == 2 * MiB);
    REQUIRE(r.findings[0].site.line == 3);
    REQUIRE(r.findings[0].site.runs.empty()); // the site's own cell did not re-run
}

TEST_CASE("A long run's thinned history gives the exact rate and tells a plateau apart") {
    AllocationRecorder rec;
    std::vector<RawFrame> leaking = {{0x1, 42}};
    std::vector<RawFrame> cache = {{0x2, 43}};
    constexpr uint32_t kIterations = 1500;
    for (uint32_t i = 0; i < kIterations; ++i) {
        rec.recordAlloc(0x1000000 + i * 0x1000, MiB, kCpu, leaking, nullptr, 0, 0, false);
        if (i < 40) {
            rec.recordAlloc(0x9000000 + i * 0x1000, 3 * MiB, kCpu, cache, nullptr, 0, 0, false);
        }
        rec.markBoundary();
    }
    FakeSymbolizer sym;
    FakeDescriber desc;
    ReportInputs in;
    in.boundary = BoundaryKind::Explicit;
    Report r = buildReport(rec, in, sym, desc);
    REQUIRE(r.iterations == static_cast<int>(kIterations));
    REQUIRE(r.series_iterations.size() == rec.boundaries().size());
    REQUIRE(r.series_iterations.size() <=
            AllocationRecorder::kMaxGridBoundaries + AllocationRecorder::kNewestKept);
    REQUIRE(r.series_iterations.back() == kIterations - 1);
    REQUIRE(r.findings.size() == 2);
    const Finding& leak = r.findings[0];
    REQUIRE(leak.site.line == 42);
    REQUIRE(leak.verdict == Verdict::Leak);
    REQUIRE(leak.bytes_per_iteration == MiB);
    REQUIRE(leak.count == kIterations);
    REQUIRE(leak.series.size() == r.series_iterations.size());
    for (size_t k = 0; k < leak.series.size(); ++k) {
        REQUIRE(leak.series[k] == (r.series_iterations[k] + 1) * MiB);
    }
    REQUIRE(r.findings[1].site.line == 43);
    REQUIRE(r.findings[1].verdict != Verdict::Leak);
    REQUIRE(r.findings[1].total_bytes == 40 * 3 * MiB);
    REQUIRE(desc.asked == 2); // one example per finding, in one call
}

namespace {
// Every block is held by `keep[k]`, k its order of asking: a list that grows with the blocks.
class ListExplainer final : public RetentionExplainer {
  public:
    std::unordered_map<uintptr_t, BlockPath>
    explain(const std::vector<uintptr_t>& blocks) override {
        std::unordered_map<uintptr_t, BlockPath> out;
        for (uintptr_t b : blocks) {
            PathStep root;
            root.kind = StepKind::Root;
            root.label = "keep";
            root.type = "list";
            PathStep item;
            item.kind = StepKind::Index;
            item.label = "[" + std::to_string(b) + "]";
            item.type = "Tensor";
            out[b] = BlockPath{Retention::Reachable, {root, item}};
        }
        asked.insert(asked.end(), blocks.begin(), blocks.end());
        return out;
    }
    std::vector<uintptr_t> asked;
};
} // namespace

TEST_CASE("Paths are found for a sample of a big finding, and the holder still grows") {
    AllocationRecorder rec;
    std::vector<RawFrame> leaking = {{0x1, 42}};
    for (uint32_t i = 0; i < 4; ++i) {
        for (uint32_t k = 0; k < 2500; ++k) {
            rec.recordAlloc(0x1000000 + (i * 2500 + k) * 0x100, 64, kCpu, leaking, nullptr, 0, 0,
                            false);
        }
        rec.markBoundary();
    }
    FakeSymbolizer sym;
    FakeDescriber desc;
    ListExplainer explainer;
    ReportInputs in;
    Report r = buildReport(rec, in, sym, desc, &explainer);
    REQUIRE(r.findings.size() == 1);
    REQUIRE(explainer.asked.size() == 256);
    REQUIRE(r.findings[0].count == 10000);
    REQUIRE(r.findings[0].holder);
    REQUIRE(r.findings[0].holder->path_text == "keep");
    REQUIRE(r.findings[0].holder->growth_per_iteration == Approx(2500.0));
}

namespace {
// Fifty lists filled in turn from one line: block k of iteration i is `obj.l{k}[i]`.
class TurnTakingExplainer final : public RetentionExplainer {
  public:
    static constexpr uintptr_t kBase = 0x2000000;
    static constexpr uint32_t kLists = 50;
    std::unordered_map<uintptr_t, BlockPath>
    explain(const std::vector<uintptr_t>& blocks) override {
        std::unordered_map<uintptr_t, BlockPath> out;
        for (uintptr_t b : blocks) {
            const uintptr_t n = (b - kBase) / 0x100;
            PathStep root;
            root.label = "obj";
            root.type = "Obj";
            PathStep list;
            list.kind = StepKind::Attr;
            list.label = ".l" + std::to_string(n % kLists);
            list.type = "list";
            PathStep item;
            item.kind = StepKind::Index;
            item.label = "[" + std::to_string(n / kLists) + "]";
            item.type = "Tensor";
            out[b] = BlockPath{Retention::Reachable, {root, list, item}};
        }
        walks.push_back(blocks.size());
        return out;
    }
    std::vector<size_t> walks;
};
} // namespace

TEST_CASE("Holders that take turns get every block's own path: fifty lists, fifty leaks") {
    // Before: 256 of the 400 blocks were walked and the rest went with their neighbour in
    // allocation order, a list of the other 49; each list's curve was a scramble and all 50
    // were judged plateaus.
    AllocationRecorder rec;
    std::vector<RawFrame> leaking = {{0x1, 42}};
    for (uint32_t i = 0; i < 8; ++i) {
        for (uint32_t k = 0; k < TurnTakingExplainer::kLists; ++k) {
            rec.recordAlloc(TurnTakingExplainer::kBase +
                                (i * TurnTakingExplainer::kLists + k) * 0x100,
                            10240, kCpu, leaking, nullptr, 0, 0, false);
        }
        rec.markBoundary();
    }
    FakeSymbolizer sym;
    FakeDescriber desc;
    TurnTakingExplainer explainer;
    ReportInputs in;
    Report r = buildReport(rec, in, sym, desc, &explainer);
    REQUIRE(explainer.walks == std::vector<size_t>{256, 144});
    REQUIRE(r.findings.size() == TurnTakingExplainer::kLists);
    std::set<std::string> holders;
    for (const Finding& f : r.findings) {
        CHECK(f.verdict == Verdict::Leak);
        CHECK(f.bytes_per_iteration == 10240);
        CHECK(f.count == 8);
        REQUIRE(f.holder);
        holders.insert(f.holder->path_text);
    }
    REQUIRE(holders.size() == TurnTakingExplainer::kLists);
    REQUIRE(holders.count("obj.l7") == 1);
}

TEST_CASE("Live blocks are listed oldest first, an even spread past the cap, the rest counted") {
    AllocationRecorder rec;
    std::vector<RawFrame> leaking = {{0x1, 42}};
    const uint64_t perIteration = 2500; // 10,000 live at the end, past kLiveBlocksListed
    for (uint32_t i = 0; i < 4; ++i) {
        for (uint64_t k = 0; k < perIteration; ++k) {
            rec.recordAlloc(0x1000000 + (i * perIteration + k) * 0x100, 64 + i, kCpu, leaking,
                            nullptr, 0, 0, false);
        }
        rec.markBoundary();
    }
    rec.recordAlloc(0x9000000, 4096, kCpu, leaking, nullptr, 0, 0, false); // no boundary yet
    FakeSymbolizer sym;
    FakeDescriber desc;
    Report r = buildReport(rec, ReportInputs{}, sym, desc);
    REQUIRE(r.findings.size() == 1);
    const Finding& f = r.findings[0];
    REQUIRE(f.live_blocks.size() == kLiveBlocksListed);
    REQUIRE(f.live_blocks.size() + f.live_blocks_unlisted == 4 * perIteration + 1);
    uint64_t listedBytes = 0;
    for (size_t k = 0; k < f.live_blocks.size(); ++k) {
        listedBytes += f.live_blocks[k].size;
        if (k > 0) {
            REQUIRE(f.live_blocks[k].sequence > f.live_blocks[k - 1].sequence);
        }
    }
    const uint64_t allBytes = perIteration * (64 + 65 + 66 + 67) + 4096;
    REQUIRE(listedBytes + f.live_bytes_unlisted == allBytes);
    // The spread reaches every iteration, the first block included.
    REQUIRE(f.live_blocks.front().address == 0x1000000);
    REQUIRE(f.live_blocks.front().iteration == 0);
    REQUIRE(f.live_blocks.back().iteration >= 3);
}

TEST_CASE("A few live blocks are all listed with their addresses and iterations") {
    AllocationRecorder rec;
    std::vector<RawFrame> leaking = {{0x1, 42}};
    for (uint32_t i = 0; i < 3; ++i) {
        rec.recordAlloc(0x5000 + i * 0x1000, 1024, kCpu, leaking, nullptr, 0, 0, false);
        rec.recordAlloc(0x90000, 64, kCpu, leaking, nullptr, 0, 0, false);
        rec.recordFree(0x90000, kCpu, 0, 0, false);
        rec.markBoundary();
    }
    FakeSymbolizer sym;
    FakeDescriber desc;
    Report r = buildReport(rec, ReportInputs{}, sym, desc);
    const Finding& f = r.findings.at(0);
    REQUIRE(f.live_blocks.size() == 3);
    REQUIRE(f.live_blocks_unlisted == 0);
    for (uint32_t i = 0; i < 3; ++i) {
        REQUIRE(f.live_blocks[i].address == 0x5000 + i * 0x1000);
        REQUIRE(f.live_blocks[i].size == 1024);
        REQUIRE(f.live_blocks[i].iteration == i);
    }
}

TEST_CASE("Cell watch's ledger asks for the paths of what grew in the last iteration only") {
    AllocationRecorder rec;
    std::vector<RawFrame> earlier = {{0x1, 10}};
    std::vector<RawFrame> growing = {{0x2, 20}};
    for (uint32_t k = 0; k < 100; ++k) {
        rec.recordAlloc(0x1000000 + k * 0x100, 64, kCpu, earlier, nullptr, 0, 0, false);
    }
    rec.markBoundary();
    for (uint32_t i = 0; i < 3; ++i) {
        rec.recordAlloc(0x2000000 + i * 0x100, 64, kCpu, growing, nullptr, 0, 0, false);
        rec.markBoundary();
    }
    FakeSymbolizer sym;
    FakeDescriber desc;
    ListExplainer explainer;
    ReportInputs in;
    in.explain_grown_only = true;
    Report r = buildReport(rec, in, sym, desc, &explainer);
    REQUIRE(r.findings.size() == 2);
    REQUIRE(explainer.asked.size() == 3);
    for (const Finding& f : r.findings) {
        REQUIRE(f.path.empty() == (f.site.line == 10));
        // It sums bytes per holder: no block is listed (nor sorted to be listed).
        REQUIRE(f.live_blocks.empty());
        REQUIRE(f.live_blocks_unlisted == 0);
    }
}

TEST_CASE("Blocks the allocator no longer holds are freed, not leaked, whichever thread freed "
          "them") {
    // CUDA: a block made on the tracked thread and freed on a thread that never carried the
    // hook (NCCL's, a checkpoint writer) sends no free event; the snapshot's active blocks do
    // not list it. One real leak beside it stays a leak.
    const DeviceKey cuda0{1, 0};
    const std::vector<RawFrame> leakStack = {{0x1, 42}};
    AllocationRecorder rec;
    for (uint32_t i = 0; i < 8; ++i) {
        // stackless (CUDA: the hook takes no stack under the allocator's mutex)
        rec.recordAlloc(0x10000000 + i * 0x100000, MiB, cuda0, {}, nullptr, 0, 0, false);
        rec.recordAlloc(0x20000000 + i * 0x100000, MiB, cuda0, leakStack, nullptr, 0, 0, false);
        rec.markBoundary();
    }
    FakeSymbolizer sym;
    FakeDescriber desc;
    ReportInputs in;
    in.boundary = BoundaryKind::Repeat;
    in.devices = {{cuda0, "cuda:0", 80ull << 30}};
    Report before = buildReport(rec, in, sym, desc);
    REQUIRE(before.findings.size() == 2);
    for (const Finding& f : before.findings) {
        REQUIRE(f.verdict == Verdict::Leak); // both grow, as the hook saw them
    }

    in.allocator_view_devices = {cuda0.type};
    for (uint32_t i = 0; i < 8; ++i) {
        in.allocator_live_blocks.insert(0x20000000 + i * 0x100000); // the real leak only
    }
    Report after = buildReport(rec, in, sym, desc);
    size_t leaks = 0;
    for (const Finding& f : after.findings) {
        if (f.verdict == Verdict::Leak) {
            ++leaks;
            REQUIRE(f.site.line == 42);
        } else {
            REQUIRE(f.series.back() == 0);
        }
    }
    REQUIRE(leaks == 1);
    bool said = false;
    for (const std::string& w : after.warnings) {
        said = said || w.rfind("cuda:0: 8 block(s) (8.0 MiB) were freed on a thread", 0) == 0;
    }
    REQUIRE(said);
    // A device the view does not cover is left as the hook saw it.
    in.allocator_view_devices = {static_cast<int8_t>(kPrivateUse1Type)};
    in.allocator_live_blocks.clear();
    Report uncovered = buildReport(rec, in, sym, desc);
    REQUIRE(std::count_if(uncovered.findings.begin(), uncovered.findings.end(),
                          [](const Finding& f) { return f.verdict == Verdict::Leak; }) == 2);
}

TEST_CASE("Blocks freed after tracking stopped keep the run's verdict and are never walked") {
    // A report built after the block ended: the holder let 5 of 8 kept blocks go (the hook no
    // longer hears frees; the CPU tap's late-free log noted them). Their addresses may hold
    // other tensors now, so they are not looked for; the growth the run saw stands.
    AllocationRecorder rec;
    const std::vector<RawFrame> leaking = {{0x1, 42}};
    for (uint32_t i = 0; i < 8; ++i) {
        rec.recordAlloc(0x1000000 + i * 0x100000, MiB, kCpu, leaking, nullptr, 0, 0, false);
        rec.markBoundary();
    }
    FakeSymbolizer sym;
    FakeDescriber desc;
    ListExplainer explainer;
    ReportInputs in;
    for (uint32_t i = 0; i < 5; ++i) {
        in.freed_after_stop.insert(0x1000000 + i * 0x100000);
    }
    Report r = buildReport(rec, in, sym, desc, &explainer);
    REQUIRE(r.findings.size() == 1);
    REQUIRE(r.findings[0].verdict == Verdict::Leak);
    REQUIRE(r.findings[0].bytes_per_iteration == MiB);
    REQUIRE(explainer.asked.size() == 3);
    for (uintptr_t b : explainer.asked) {
        REQUIRE(in.freed_after_stop.count(b) == 0);
    }
    REQUIRE(r.warnings.size() == 1);
    REQUIRE(r.warnings[0].rfind("5 block(s) (5.0 MiB) alive when tracking stopped were freed", 0) ==
            0);

    in.freed_after_stop.clear();
    in.freed_after_stop_incomplete = true;
    Report unsure = buildReport(rec, in, sym, desc, &explainer);
    REQUIRE(unsure.warnings.size() == 1);
    REQUIRE(unsure.warnings[0].rfind("more blocks were freed after tracking stopped", 0) == 0);
}

TEST_CASE("Allocations that could not be recorded are a warning, zero-byte ones are nothing") {
    AllocationRecorder rec;
    std::vector<RawFrame> site = {{0x1, 7}};
    rec.recordAlloc(0, 0, kCpu, site, nullptr, 0, 0, false); // torch.empty(0): no block
    FakeSymbolizer sym;
    FakeDescriber desc;
    ReportInputs in;
    rec.markBoundary();
    REQUIRE(rec.droppedEvents() == 0);
    REQUIRE(buildReport(rec, in, sym, desc, nullptr).warnings.empty());
    // One device more than the recorder has slots for.
    for (int8_t index = 0; index <= 32; ++index) {
        rec.recordAlloc(0x4000000 + static_cast<uintptr_t>(index) * 0x1000, 64, DeviceKey{1, index},
                        site, nullptr, 0, 0, false);
    }
    rec.markBoundary();
    REQUIRE(rec.droppedEvents() == 1);
    const Report r = buildReport(rec, in, sym, desc, nullptr);
    REQUIRE(r.warnings.size() == 1);
    REQUIRE(r.warnings[0].rfind("1 allocation(s) could not be recorded", 0) == 0);
}

namespace {
// FakeSymbolizer with the site's line as the interpreter would give it.
class LineSymbolizer final : public StackSymbolizer {
  public:
    std::vector<Frame> symbolize(std::span<const RawFrame> frames) override {
        return FakeSymbolizer().symbolize(frames);
    }
    std::optional<std::string> sourceLine(const Frame& frame) override {
        asked.push_back(frame.line);
        return frame.line == 42 ? std::optional<std::string>("keep.append(x)") : std::nullopt;
    }
    std::vector<int> asked;
};
} // namespace

TEST_CASE("The builder asks each site's line once and writes a leak's fix as code from it") {
    AllocationRecorder rec;
    std::vector<RawFrame> leaking = {{0x1, 42}};
    for (uint32_t i = 0; i < 6; ++i) {
        rec.recordAlloc(0x2000000 + i * 0x200000, MiB, kCpu, leaking, nullptr, 0, 0, false);
        rec.markBoundary();
    }
    LineSymbolizer sym;
    FakeDescriber desc;
    ListExplainer explainer;
    ReportInputs in;
    Report r = buildReport(rec, in, sym, desc, &explainer);
    REQUIRE(r.findings.size() == 1);
    REQUIRE(r.findings[0].verdict == Verdict::Leak);
    REQUIRE(r.findings[0].site.source == "keep.append(x)");
    REQUIRE(sym.asked == std::vector<int>{42});
    REQUIRE(r.findings[0].fix_code == "keep.clear()");
    REQUIRE(r.findings[0].fix_code == suggestFixCode(r.findings[0]));
}

TEST_CASE("A live view lists no live blocks and keeps the first findings, its causes renumbered") {
    AllocationRecorder rec;
    for (uint32_t i = 0; i < 6; ++i) {
        for (uint32_t site = 0; site < 5; ++site) {
            std::vector<RawFrame> at = {{0x1, static_cast<int32_t>(40 + site)}};
            rec.recordAlloc(0x3000000 + (i * 5 + site) * 0x200000, MiB * (site + 1), kCpu, at,
                            nullptr, 0, 0, false);
        }
        rec.markBoundary();
    }
    FakeSymbolizer sym;
    FakeDescriber desc;
    ReportInputs in;
    const Report whole = buildReport(rec, in, sym, desc);
    REQUIRE(whole.findings.size() == 5);
    REQUIRE_FALSE(whole.findings[0].live_blocks.empty());
    in.live_findings = 2;
    const Report live = buildReport(rec, in, sym, desc);
    REQUIRE(live.findings.size() == 2);
    for (size_t k = 0; k < 2; ++k) {
        REQUIRE(live.findings[k].site.line == whole.findings[k].site.line);
        REQUIRE(live.findings[k].live_blocks.empty());
    }
    for (const Cause& c : live.causes) {
        for (int f : c.findings) {
            REQUIRE((f >= 0 && f < 2));
        }
    }
    REQUIRE(live.warnings.back() ==
            "while the cell runs: the first 2 of 5 findings; the finished report lists every one");
    in.live_findings = 5; // all of them fit: no warning, still no live blocks
    const Report all = buildReport(rec, in, sym, desc);
    REQUIRE(all.findings.size() == 5);
    REQUIRE(all.warnings == whole.warnings);
    REQUIRE(all.findings[0].live_blocks.empty());
}

TEST_CASE("buildReport: a look's verdicts are the report's, in a document of their own") {
    AllocationRecorder rec;
    std::vector<RawFrame> leaking = {{0x1, 42}};
    std::vector<RawFrame> flat = {{0x2, 7}};
    for (uint32_t i = 0; i < 12; ++i) {
        rec.recordAlloc(0x100000 + i * 0x1000, MiB, kCpu, leaking, nullptr, 0, 0, false);
        rec.recordAlloc(0x900000, 4 * MiB, kCpu, flat, nullptr, 0, 0, false);
        if (i > 0) {
            rec.recordFree(0x900000, kCpu, 0, 0, false);
        }
        rec.markBoundary();
    }
    FakeSymbolizer sym;
    FakeDescriber desc;
    ReportInputs in;
    in.boundary = BoundaryKind::Repeat;
    in.devices = {{kCpu, "cpu", 64ull << 30}};
    const Report full = buildReport(rec, in, sym, desc);
    in.verdicts_only = true;
    const Report look = buildReport(rec, in, sym, desc);
    REQUIRE(look.findings.size() == full.findings.size());
    for (size_t i = 0; i < full.findings.size(); ++i) {
        CHECK(look.findings[i].verdict == full.findings[i].verdict);
        CHECK(look.findings[i].site.line == full.findings[i].site.line);
        CHECK(look.findings[i].total_bytes == full.findings[i].total_bytes);
        CHECK(look.findings[i].suggestion.empty()); // nothing a look does not read
    }
    CHECK(look.causes.empty());
    CHECK(desc.asked == 1); // the full report's example only: a look describes no tensor

    const std::string text = verdictsJson(look);
    const nlohmann::json j = nlohmann::json::parse(text);
    CHECK(j.dump() == text); // written as text, the same bytes as nlohmann's dump
    CHECK(j["schema_version"] == kVerdictsSchema);
    CHECK(j["iterations"] == 12);
    const nlohmann::json& leak = j["findings"][0];
    CHECK(leak["verdict"] == "leak");
    CHECK(leak["site"]["line"] == 42);
    CHECK(leak["site"]["text"] == full.findings[0].site.file + ":42");
    CHECK(leak["bytes_per_iteration"] == MiB);
    CHECK(leak["growth_since"]["iteration"] == 0);
    CHECK(leak["growth_since"]["settles_at"].is_null());
    CHECK(leak["growth_since"]["text"] == growthText(full.findings[0], BoundaryKind::Repeat));
    CHECK(j["boundary"] == "repeat");
    CHECK_FALSE(leak.contains("live_blocks"));
    CHECK_FALSE(leak.contains("holder")); // no explainer, no paths
    CHECK_FALSE(leak.contains("path_text"));
}

TEST_CASE("buildReport: a look with an explainer names each finding's holder and path") {
    // What a watch that only logs announces: the holder of the report's own finding, without
    // a report's fixes, causes or live-block lists.
    AllocationRecorder rec;
    std::vector<RawFrame> leaking = {{0x1, 42}};
    for (uint32_t i = 0; i < 12; ++i) {
        rec.recordAlloc(0x100000 + i * 0x1000, MiB, kCpu, leaking, nullptr, 0, 0, false);
        rec.markBoundary();
    }
    FakeSymbolizer sym;
    FakeDescriber desc;
    ListExplainer explainer;
    ReportInputs in;
    in.boundary = BoundaryKind::Repeat;
    in.devices = {{kCpu, "cpu", 64ull << 30}};
    const Report full = buildReport(rec, in, sym, desc, &explainer);
    REQUIRE(full.findings.size() == 1);
    REQUIRE(full.findings[0].holder);
    in.verdicts_only = true;
    in.live_findings = 1000;
    const Report look = buildReport(rec, in, sym, desc, &explainer);
    REQUIRE(look.findings.size() == 1);
    CHECK(look.findings[0].live_blocks.empty());

    const std::string text = verdictsJson(look);
    const nlohmann::json j = nlohmann::json::parse(text);
    CHECK(j.dump() == text);
    const nlohmann::json& leak = j["findings"][0];
    CHECK(leak["verdict"] == "leak");
    CHECK(leak["holder"]["path_text"] == full.findings[0].holder->path_text);
    CHECK(leak["path_text"] == full.findings[0].path_text);
    CHECK(leak["growth_since"]["text"] == growthText(full.findings[0], BoundaryKind::Repeat));
}

namespace {
// A staircase of `step` bytes every `every` iterations from `onset` on (an evaluation epoch's
// leak), beside a working set the loop replaces every iteration, judged from its onset as watch()
// with its whole budget judges: the first boundary it is a leak at, whether it was ever not one
// after that, whether the working set ever was, and the report at the end.
struct JudgedRun {
    uint32_t confirmedAt = 0;
    bool flapped = false;
    bool workingSetLeaked = false;
    Report last;
};
JudgedRun judgeStaircase(uint32_t iterations, uint32_t onset, uint32_t every, int64_t step) {
    AllocationRecorder rec;
    const std::vector<RawFrame> kept = {{0x1, 42}};
    const std::vector<RawFrame> working = {{0x2, 7}};
    FakeSymbolizer sym;
    FakeDescriber desc;
    ReportInputs in;
    in.boundary = BoundaryKind::Explicit;
    in.verdicts_only = true;
    JudgedRun run;
    for (uint32_t i = 0; i < iterations; ++i) {
        const uintptr_t slot = 0x900000 + (i % 2) * 0x100000;
        rec.recordAlloc(slot, 4 * MiB, kCpu, working, nullptr, 0, 0, false);
        if (i > 0) {
            rec.recordFree(0x900000 + ((i + 1) % 2) * 0x100000, kCpu, 0, 0, false);
        }
        if (i >= onset && (i - onset) % every == 0) {
            rec.recordAlloc(0x10000000 + uintptr_t{i} * 0x100000, static_cast<size_t>(step), kCpu,
                            kept, nullptr, 0, 0, false);
        }
        rec.markBoundary();
        // Every boundary up to a step past the third, every 7th after (a look costs a replay).
        if (i < onset || (i > onset + 3 * every && (i - onset) % 7 != 0)) {
            continue;
        }
        const Report look = buildReport(rec, in, sym, desc);
        const auto site = std::find_if(look.findings.begin(), look.findings.end(),
                                       [](const Finding& f) { return f.site.line == 42; });
        const bool leak = site != look.findings.end() && site->verdict == Verdict::Leak;
        if (leak && run.confirmedAt == 0) {
            run.confirmedAt = i;
        }
        run.flapped = run.flapped || (!leak && run.confirmedAt != 0);
        run.workingSetLeaked =
            run.workingSetLeaked ||
            std::any_of(look.findings.begin(), look.findings.end(), [](const Finding& f) {
                return f.site.line == 7 && f.verdict == Verdict::Leak;
            });
    }
    in.verdicts_only = false;
    run.last = buildReport(rec, in, sym, desc);
    return run;
}
} // namespace

TEST_CASE("A staircase on a long run's thinned grid is confirmed at its third step, its onset "
          "and period exact") {
    // At 1,500 and 5,000 boundaries the history keeps a grid of stride 4 and 16 (plus the newest
    // 16): watch() confirmed these 48-451 boundaries after the third step, and a step every 25
    // on a grid of 16 read as irregular (gaps of 16 and 32).
    for (auto [iterations, onset, every] :
         {std::tuple{1500u, 500u, 25u}, {5000u, 1667u, 25u}, {5000u, 1500u, 40u}}) {
        CAPTURE(iterations, onset, every);
        const JudgedRun run = judgeStaircase(iterations, onset, every, MiB);
        REQUIRE(run.confirmedAt >= onset + 2 * every);
        REQUIRE(run.confirmedAt <= onset + 2 * every + 10);
        REQUIRE_FALSE(run.flapped);
        REQUIRE_FALSE(run.workingSetLeaked);
        REQUIRE(run.last.series_iterations.size() <
                AllocationRecorder::kMaxGridBoundaries + AllocationRecorder::kNewestKept);
        const auto site = std::find_if(run.last.findings.begin(), run.last.findings.end(),
                                       [](const Finding& f) { return f.site.line == 42; });
        REQUIRE(site != run.last.findings.end());
        REQUIRE(site->verdict == Verdict::Leak);
        REQUIRE(site->growth_since);
        REQUIRE(site->growth_since->iteration == static_cast<int64_t>(onset));
        REQUIRE(site->growth_since->step_bytes == MiB);
        REQUIRE(site->growth_since->step_every == static_cast<int64_t>(every));
    }
}

TEST_CASE("A late leak on a long run's thinned grid is dated at its first kept block, not the "
          "grid's point") {
    // 5,000 boundaries keep a grid of stride 16: the onset was named up to 15 iterations early.
    for (uint32_t onset : {501u, 2503u, 4499u}) {
        CAPTURE(onset);
        AllocationRecorder rec;
        const std::vector<RawFrame> kept = {{0x1, 42}};
        for (uint32_t i = 0; i < 5000; ++i) {
            if (i >= onset) {
                rec.recordAlloc(0x10000000 + uintptr_t{i} * 0x1000, MiB / 4, kCpu, kept, nullptr, 0,
                                0, false);
            }
            rec.markBoundary();
        }
        FakeSymbolizer sym;
        FakeDescriber desc;
        ReportInputs in;
        in.boundary = BoundaryKind::Explicit;
        const Report r = buildReport(rec, in, sym, desc);
        REQUIRE(r.findings.size() == 1);
        REQUIRE(r.findings[0].verdict == Verdict::Leak);
        REQUIRE(r.findings[0].growth_since);
        REQUIRE(r.findings[0].growth_since->iteration == static_cast<int64_t>(onset));
    }
}

TEST_CASE("On a long run's thinned grid a steady leak is no staircase, and a saw-tooth's onset is "
          "the dense run's") {
    FakeSymbolizer sym;
    FakeDescriber desc;
    ReportInputs in;
    in.boundary = BoundaryKind::Explicit;
    // 384 KiB kept every iteration from 750 of 1,500 (stride 4 at the end): every kept point
    // jumped by 1.5 MiB, the newest 16 rose by 384 KiB under the tolerance, and the leak read
    // as "1.5 MiB every 4 iterations since iteration 754".
    {
        AllocationRecorder rec;
        const std::vector<RawFrame> kept = {{0x1, 42}};
        for (uint32_t i = 0; i < 1500; ++i) {
            if (i >= 750) {
                rec.recordAlloc(0x10000000 + uintptr_t{i} * 0x100000, 384 * 1024, kCpu, kept,
                                nullptr, 0, 0, false);
            }
            rec.markBoundary();
        }
        const Report r = buildReport(rec, in, sym, desc);
        REQUIRE(r.findings.size() == 1);
        REQUIRE(r.findings[0].verdict == Verdict::Leak);
        REQUIRE(r.findings[0].growth_since);
        CHECK_FALSE(r.findings[0].growth_since->step_bytes);
        CHECK(r.findings[0].growth_since->iteration == 750);
        CHECK(r.findings[0].bytes_per_iteration == 384 * 1024);
    }
    // A buffer that gains a block every iteration and is cleared every 10th, one block left
    // behind: its first kept point rose by a buffer's worth and kept one block. The dense run
    // dates its growth from its first block (1); the grid's did from the floor's first (10).
    auto sawTooth = [&](uint32_t iterations) {
        AllocationRecorder rec;
        const std::vector<RawFrame> site = {{0x1, 42}};
        std::vector<uintptr_t> buffer;
        for (uint32_t i = 0; i < iterations; ++i) {
            const uintptr_t ptr = 0x10000000 + uintptr_t{i} * 0x10000;
            if (i > 0) { // from the second iteration, as a loop's first step fills it
                rec.recordAlloc(ptr, 64 * 1024, kCpu, site, nullptr, 0, 0, false);
                buffer.push_back(ptr);
            }
            if (buffer.size() == 10) {
                for (size_t k = 0; k + 1 < buffer.size(); ++k) {
                    rec.recordFree(buffer[k], kCpu, 0, 0, false);
                }
                buffer.clear();
            }
            rec.markBoundary();
        }
        return buildReport(rec, in, sym, desc);
    };
    const Report dense = sawTooth(300), grid = sawTooth(5000);
    REQUIRE(grid.series_iterations.size() < 5000);
    REQUIRE(dense.findings.size() == 1);
    REQUIRE(grid.findings.size() == 1);
    REQUIRE(dense.findings[0].verdict == Verdict::Leak);
    REQUIRE(grid.findings[0].verdict == Verdict::Leak);
    REQUIRE(dense.findings[0].growth_since);
    REQUIRE(grid.findings[0].growth_since);
    CHECK(grid.findings[0].growth_since->iteration == dense.findings[0].growth_since->iteration);
}
