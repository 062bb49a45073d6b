#pragma once
// What a report is built from besides the recording (report_builder.h): the three interfaces
// through which the bindings supply what only Python knows (StackSymbolizer, BlockDescriber and
// RetentionExplainer in retention.h) and ReportInputs, what the run and its devices were. Its
// own header so that the builder's phases (report_assembly.h) read the inputs without
// depending on the builder's entry point.

#include "torchleak/config.h"
#include "torchleak/devices.h"
#include "torchleak/model.h"
#include "torchleak/out_of_memory.h"
#include "torchleak/recorder.h"
#include "torchleak/resident_memory.h"
#include "torchleak/retention.h"

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace torchleak {

// Turns captured frames into file:line frames, innermost first, with `user` set.
class StackSymbolizer {
  public:
    virtual ~StackSymbolizer() = default;
    virtual std::vector<Frame> symbolize(std::span<const RawFrame> frames) = 0;
    // The text of a site's line, stripped (a notebook cell's from where the interpreter keeps
    // it), or nothing: asked once per finding, for its `source` and the fix written as code.
    virtual std::optional<std::string> sourceLine(const Frame& /*frame*/) { return std::nullopt; }
    // Every line of the frame's file or cell as written (indentation kept, line 1 first), or
    // none: asked only for a leak whose fix would clear its holder, to read the loop around it.
    virtual std::vector<std::string> sourceLines(const Frame& /*frame*/) { return {}; }
};

struct BlockDescription {
    std::string dtype;
    std::vector<int64_t> shape;
};

// Describes the tensors that live in blocks, when they can be found: one answer per block, in
// order. One call per report, so that an implementation can look for exactly these blocks.
class BlockDescriber {
  public:
    virtual ~BlockDescriber() = default;
    virtual std::vector<std::optional<BlockDescription>>
    describe(const std::vector<uintptr_t>& blocks) = 0;
};

// Describes nothing: a verdict that needs no dtype or shape (run watch's checks mid-run)
// skips the heap scan that finding tensors costs.
class NoBlockDescriptions final : public BlockDescriber {
  public:
    std::vector<std::optional<BlockDescription>>
    describe(const std::vector<uintptr_t>& blocks) override {
        return {blocks.size(), std::nullopt};
    }
};

// Cell watch: which notebook cell ran in the iteration a boundary ends. `group` is the
// cell's grouping identity (Frame::group: re-runs of one cell share it), `cell` its execution
// count.
struct BoundaryRun {
    std::string group;
    int cell = 0;
};

struct ReportInputs {
    // Stacks of device blocks that the hook recorded without one (CUDA: the allocator's
    // mutex is held, so PyTorch's own history recording supplies them), innermost first, by
    // block pointer. Surviving blocks are attributed to their sites.
    std::unordered_map<uintptr_t, std::vector<Frame>> external_stacks;
    // The device allocator's own view of what it holds, where it was read (CUDA: the memory
    // snapshot's active blocks), for the device types listed. A block the hook still counts
    // alive that the allocator does not hold was freed on a thread that never carried the hook
    // (a user thread, NCCL's or c10d's, an async checkpoint writer): on CUDA no hook sees such
    // a free, and without this the block would read as a leak until its address is reused.
    std::vector<int8_t> allocator_view_devices;
    std::unordered_set<uintptr_t> allocator_live_blocks;
    // Blocks the hook counts alive that were freed after tracking stopped, when the report is
    // built later: the run's series stand (they were alive when it ended), but no path is
    // looked for (what held them let go, and the address may hold another tensor now).
    // Incomplete: more were freed than could be noted.
    std::unordered_set<uintptr_t> freed_after_stop;
    bool freed_after_stop_incomplete = false;
    std::string torch_version;
    std::string python_version;
    int warmup = 0;
    BoundaryKind boundary = BoundaryKind::Explicit;
    AnalysisConfig config;
    std::vector<DeviceInfo> devices;
    // What this process calls the PrivateUse1 device type (a renamed out-of-tree backend).
    std::string privateuse1_backend = std::string(kPrivateUse1DefaultName);
    std::vector<std::string> warnings;
    // With BoundaryKind::Cell, one entry per boundary (or none). A site's rate and verdict are
    // then taken over the runs of the cell its allocations ran in, not over every cell.
    std::vector<BoundaryRun> boundary_runs;
    // Cell watch's per-cell ledger: retaining paths only for the findings whose live bytes rose
    // in the last iteration, so the walk's cost follows what the cell added, not every finding
    // of the notebook (10^5 tensors kept by an earlier cell would be walked after every cell).
    // The ledger only sums bytes per holder: its findings list no live blocks either (with 10^5
    // alive, sorting and writing them was a third of a watched cell's cost).
    bool explain_grown_only = false;
    // What torch's C++ caches hold now: the evidence for naming one as a keeper.
    TorchCacheState torch_caches;
    // A live view (a cell's report while it runs, sent a few times a second): no live-block
    // lists, and at most this many findings (leaks first), the causes renumbered with them and
    // a warning saying so, so that an update's size is bounded whatever the run finds.
    std::optional<size_t> live_findings;
    // watch()'s looks: each finding's verdict, bytes and growth and nothing a look does not read
    // (no fixes, source lines, live-block lists, devices, causes or summary), written by
    // verdictsJson. A look at 10^4 growing sites had built and parsed a report of 40 MB. With a
    // retention explainer the findings are explained first, and the look names their holders
    // (what a watch that only logs says when it announces).
    bool verdicts_only = false;
    // A look (no explainer) that may leave out the sites its caller's SettledSites kept
    // unchanged since its last such look (settled_sites.h): watch's own looks, which act on
    // leaks and undecided findings only. Any other look lists every finding.
    bool leave_out_settled = false;
    // torch's next hook handle id (torch.utils.hooks.RemovableHandle.next_id) when tracking
    // started: a hook dict's entries keyed at or above it were registered during the run.
    std::optional<uint64_t> first_hook_id;
    // The process's resident set at boundaries (resident_memory.h), where it can be read.
    std::vector<ResidentSample> resident;
    // Set when an out-of-memory error ended the run: the report gets its `oom` forensics.
    std::optional<OutOfMemoryInputs> out_of_memory;
};

} // namespace torchleak
