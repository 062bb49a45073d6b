#pragma once
// The plain data model of a torchleak report. Nothing here knows about torch or Python: the
// recorder fills it from allocator events, the inspect layer adds paths, the report layer writes
// it as `torchleak.report/1`. Field names are the JSON's (report_json.h): a contract that code
// outside this repository reads, so fields are added, never renamed.

#include "torchleak/memory_roles.h"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace torchleak {

// Growth: a site that grows without end, but is the user's own record held by their own name
// and negligible against its device (verdict.h's ownRecord): said with its projection, not as a
// leak with a fix that would delete it.
// Undecided: growth that stopped too recently to tell a filled cache from a paused leak (a
// staircase between its steps): neither a leak nor a plateau, no fix and no score.
enum class Verdict { Leak, Warmup, Plateau, Transient, Fragmentation, Allowed, Growth, Undecided };
enum class Severity { Critical, Warning, Info };
enum class BoundaryKind { Explicit, OptimizerStep, Repeat, Cell };

// How one step of a retaining path gets from the previous object to the next. The JSON spells
// them as toString() does; those names are part of the schema: new kinds may be added, and
// these keep their names.
enum class StepKind {
    Root,          // a named root: a global, Out[n], the last exception, a cycle or C++ owner
    Frame,         // a frame's local (live threads, the last exception's traceback)
    Attr,          // `.name`, incl. instance __dict__ entries and slots
    Index,         // `[3]`
    Key,           // `['k']`
    GradFn,        // `.grad_fn`
    NextFunctions, // `.next_functions[0][0]`
    Saved,         // a generated node's saved variable: `._saved_self`
    Ctx,           // a custom Function's ctx attribute or `.saved_tensors[i]`
    Base,          // `._base` of a view
    Grad,          // `.grad`
    Closure,       // a closure cell variable
    Ref,           // a referent with no name of its own (`<lru_cache entries>`)
    Elided,        // the middle of a very long path, summarised in one step
};

// How the leaked memory is kept alive.
enum class Retention {
    Reachable, // from a named root (a global, a local, Out[n], the last exception ...)
    Cycle,     // only by a reference cycle: gc.collect() would free it
    Unnamed,   // by Python objects outside the walked roots (library state, C extensions)
    CppOnly,   // by no Python object at all: C++ holds it (autograd graph, a C++ cache)
    Unknown,   // not inspected
};

// The schema's names of the enums above (model.cpp holds them all). The *FromString functions
// throw SchemaError for a name that is not part of the schema.
std::string_view toString(Verdict v) noexcept;
std::string_view toString(Severity s) noexcept;
std::string_view toString(BoundaryKind b) noexcept;
std::string_view toString(StepKind k) noexcept;
std::string_view toString(Retention r) noexcept;
Verdict verdictFromString(std::string_view s);
// Every verdict's schema name, in the enum's order: the views' lists of verdicts (colours,
// ranks) are checked against it (tests/python/test_render.py).
std::vector<std::string_view> verdictNames();
Severity severityFromString(std::string_view s);
BoundaryKind boundaryFromString(std::string_view s);
StepKind stepKindFromString(std::string_view s);
Retention retentionFromString(std::string_view s);

// A step into or through the autograd graph: .grad_fn, .next_functions, a saved variable, a ctx.
bool isAutogradStep(StepKind k) noexcept;

// One decoded stack frame. `cell` is the IPython execution count when the frame is a notebook
// cell; `user` is false for library code: torch, the standard library, torchleak itself and
// installed third-party packages (`package`).
// The file of a site whose blocks came with no Python stack at all: a thread with no Python
// frames (a C++ worker outside backward), or an interpreter whose stacks cannot be read (the
// report then carries a warning saying which). Shown as kNoStackSiteText, never as "<unknown>:0".
inline constexpr const char* kNoStackFile = "<unknown>";
inline constexpr const char* kNoStackSiteText = "no Python stack";

struct Frame {
    std::string file;
    int line = 0;
    std::string function;
    std::optional<int> cell;
    bool user = true;
    std::optional<std::string> source; // the line's text, when known (filled at report time)
    // Identity for grouping, when the file name is not one (a notebook cell re-run is compiled
    // under a new name but is the same code). Not serialised.
    std::string group;
    bool package = false; // in an installed third-party package (site-packages, dist-packages)
    // Cell watch: the execution count of every run of this frame's cell, oldest first, when it
    // ran more than once (the site then names them all: "In [3], [6], [9], line 1").
    std::vector<int> runs = {};
};

// What torch.compile's generated code allocated a finding's block for (compiled_op.h): the
// graph nodes and ATen ops of inductor's comment beside the allocation.
struct CompiledOp {
    std::vector<std::string> source_nodes; // "input_3"
    std::vector<std::string> aten_ops;     // "aten.t", "aten.addmm"
};

// A line of the code around a leak's site that reads its holder (loop_reads.h): clearing the
// holder would break it.
struct HolderRead {
    int line = 0;
    std::string source;
    std::string file; // where the line is, when not in the site's file ("" there)
};

// The one tensor expression the loop appends to a finding's holder, as its source writes it
// (loop_reads.h: appendedValueAnywhere): `y` of `state.hist.append(y)`. The fix quotes it.
struct AppendedValue {
    std::string holder; // as the line writes it ("state.hist", "self.history")
    std::string value;  // "F.cross_entropy(model(xv), yv)"
    int line = 0;
};

// A method of the class of an object on a retaining path, where it is written: what the loop
// may call on the holder's owner (`k.last()` reading `self.history`). Read from the class dicts
// without running user code.
struct MethodSource {
    std::string name;
    std::string file;
    int line = 0; // its `def`
};

// A tensor met on a retaining path.
struct TensorInfo {
    std::string dtype;
    std::vector<int64_t> shape;
    std::string device;
    uint64_t nbytes = 0;       // of its storage
    uintptr_t block = 0;       // the storage's data pointer (not serialised)
    std::optional<Frame> site; // where its storage was allocated, when torchleak saw it
};

// The note the walk gives an object whose class defines reset(): how that class (a torchmetrics
// Metric, a user's accumulator) wants its state dropped. The fix names it.
inline constexpr const char* kDefinesResetNote = "its class defines reset()";
// The words of a note that says a custom Function's ctx saved a view of its own output (a cycle
// through C++ that keeps its graph): the walk writes them, the fix and the graph's grouping
// look for them.
inline constexpr const char* kSavedViewOfOutput = "ctx saved a view of";
// The note on a path's last tensor when it has a grad_fn: kept, it keeps its graph's nodes.
inline constexpr const char* kKeepsGraphNote = "keeps its autograd graph through .grad_fn";

// A dict of hooks (an nn.Module's `_forward_hooks`, a tensor's `_backward_hooks`): keyed by
// torch's hook handle ids, which only grow, so the entries registered since tracking started
// are counted exactly. Not part of the report: the holder and its fix are decided from it.
struct HookDictGrowth {
    uint32_t added = 0; // entries registered since tracking started (and still there)
    std::string newest; // the newest entry's function ("Explainer._save"), or ""
};

struct PathStep {
    StepKind kind = StepKind::Root;
    std::string label; // the pasteable fragment: "losses", "[3]", ".grad_fn", "['k']"
    std::string type;
    std::string
        note; // what the label cannot say: "local 'x' in train_step", "closure variable 'buf'"
    std::optional<TensorInfo> tensor;
    // "_modules", "_parameters" or "_buffers": the nn.Module dict this step was an entry of
    // before normalizePath showed it as `.name`. The module is then the container (not part of
    // the report: the holder and the fix are decided while building it).
    std::string registry;
    std::optional<HookDictGrowth> hooks; // set on the step that is a dict of hooks
    // len() of a list, dict or set step when the report was built, read from the object's own
    // C struct (no user code); -1 for anything else. Not part of the report: the holder's
    // entries per iteration come from it.
    int64_t entries = -1;
    // The most entries it can hold, where the object itself bounds them (a deque's maxlen, read
    // through the exact type's own getter: no user code); -1 for anything else. Not part of the
    // report: a leak held by a bounded container still filling is not called one yet.
    int64_t capacity = -1;
    // The object this step reaches (a Python object's address; 0 for C++ state), so that a
    // fix can be proven by walking again with it cut. Not part of the report.
    uintptr_t object = 0;
    // Public methods of the object's class whose names say they release what it holds (clear,
    // reset, close, release*, delete_*, remove_*) and take no argument beyond self, read from
    // its class dicts without running user code: what a fix may call on a library's object.
    // Not part of the report.
    std::vector<std::string> release_methods = {};
    // The methods of the object's class (and its bases') written in Python: where a fix that
    // clears an attribute of it must look for reads. Not part of the report.
    std::vector<MethodSource> methods = {};
    // The installed third-party package the object's class was written in ("trainpkg"), or ""
    // for the user's own classes, torch's and Python's. Not part of the path text.
    std::string package = {};
    // On the first step of a path held only from C++: the autograd graph it belongs to ("the
    // autograd graph of SaveOwnViewBackward") when other such paths share it, so that one graph
    // is one cause. Not part of the report.
    std::string graph = {};
};

// A library's object whose private state is what grows (`ema._history` of a trainpkg EMA): the
// report names it, its type and package and its releasing methods instead of patching its
// internals (#47).
struct LibraryObject {
    std::string object;  // its path text: "ema"
    std::string type;    // its class: "EMA"
    std::string package; // "trainpkg"
    // Public methods of its class that say they release and take no argument beyond self.
    std::vector<std::string> methods;
};

struct Holder {
    std::string path_text;
    std::string type;
    double growth_per_iteration = 0.0;
    // Set when what grows is a dict of hooks: one more hook registered (and its handle dropped)
    // per iteration, each keeping what it records.
    std::optional<HookDictGrowth> hooks;
    // Set when the holder is a library object's private state (reached by a `._name` step
    // from it).
    std::optional<LibraryObject> library = std::nullopt;
    // Entries it gained per iteration (its len() over the iterations), where that is known and
    // differs from growth_per_iteration, which counts the storages it keeps: 192 rows of one
    // batch are 192 entries and one storage. 0 when unknown or the same.
    double entries_per_iteration = 0.0;
};

// One block a finding has alive when the report is built: what PyTorch's memory viewer
// (torch.cuda._memory_viz, a `.pickle` report) draws, one entry per tensor storage.
struct LiveBlockEntry {
    uint64_t address = 0;   // the pointer the allocator handed out
    uint64_t size = 0;      // bytes
    uint32_t iteration = 0; // the iteration (0-based) it was allocated in
    uint64_t sequence = 0;  // its allocation event's position in the run
};

// A finding lists at most this many live blocks (spread evenly over allocation order); the
// rest are counted, so a report of a million live blocks stays a few hundred KiB per finding.
inline constexpr size_t kLiveBlocksListed = 4096;

struct Trend {
    double slope_bytes_per_iteration = 0.0;
    double r2 = 0.0;
    double p_value = 1.0;
};

// When a site's growth began, and whether it stopped (verdict.h finds both): a leak that began
// late is "leaking since iteration 121", its rate measured from there; growth that stopped is
// "grew 25.0 MiB until iteration 100, flat since", a bounded cache rather than a leak.
// Iterations are 0-based here and in the JSON (`growth_since`); the text counts from 1.
struct GrowthSince {
    int64_t iteration = 0;             // the first iteration of the growth
    int64_t bytes_per_iteration = 0;   // its rate from there (to the stop, when it stopped)
    std::optional<int64_t> stopped_at; // the last iteration that grew, when it has stopped
    int64_t grown_bytes = 0;           // what it added from its start (to the stop)
    int64_t flat_iterations = 0;       // since the stop, when it has stopped
    // Undecided: the iteration at which, still flat, it becomes a plateau (watch looks then).
    std::optional<int64_t> settles_at = std::nullopt;
    // A leak that grows in regular steps (growth_shape.h): each step's bytes and the
    // iterations between steps; `iteration` is then its first step's.
    std::optional<int64_t> step_bytes = std::nullopt;
    std::optional<int64_t> step_every = std::nullopt;
    // A leak that grew, paused and grows again: the earlier stretch, its first iteration, the
    // last that grew and what it added. The leak's own fields are the stretch now growing.
    struct Earlier {
        int64_t iteration = 0;
        int64_t stopped_at = 0;
        int64_t grown_bytes = 0;
    };
    std::optional<Earlier> earlier = std::nullopt;
    // Undecided because its holder bounds it and is still filling (a deque(maxlen=16) holding
    // 8): the entries it can hold and holds now. It stops growing when full; a leak through it
    // then is one of bytes per entry, and is called so.
    struct Bounded {
        int64_t capacity = 0;
        int64_t entries = 0;
    };
    std::optional<Bounded> bounded = std::nullopt;
};

// What the suggested fix was proven to free: the heap walked again from the named roots with
// the holder cut (as if cleared). A fix that frees less than the leak says so, and names what
// else holds it.
struct FixProof {
    uint64_t frees_bytes = 0; // of the finding's live bytes, scaled from its sampled blocks
    std::string also_held_by; // the path of one block the holder's clearing leaves reachable
    // When the holder alone frees less: its owner (the object the holder is an attribute of),
    // what releasing everything the owner keeps frees, and the owner's releasing methods.
    std::string owner;
    uint64_t owner_frees_bytes = 0;
    std::vector<std::string> owner_methods;
    // What clearing the holder and `also_held_by` together frees, when that was walked (a
    // module's dict and an lru_cache on the method that fills it hold the same tensors).
    std::optional<uint64_t> together_frees_bytes;
};

struct Finding {
    Verdict verdict = Verdict::Transient;
    Frame site;
    std::vector<Frame> stack; // innermost first
    std::string device;
    std::optional<std::string> dtype;
    std::optional<std::vector<int64_t>> shape;
    std::optional<std::string> autograd_node; // set when allocated inside backward
    // The innermost frame of an installed package between the allocation and the site, when
    // the user's line called into one: "allocated inside somepkg/ops.py:41".
    std::optional<Frame> allocated_inside;
    // When the innermost frame is torch.compile's generated code: the op it allocated for.
    std::optional<CompiledOp> compiled_op;
    // When the holder's fix would clear it and the code around the site reads it.
    std::optional<HolderRead> holder_read;
    // When the holder keeps graphs and its loop appends one expression to it: that append
    // (set by the report builder, for the fix's words and code).
    std::optional<AppendedValue> appended;
    uint64_t count = 0;       // live blocks of this site at the last boundary
    uint64_t total_bytes = 0; // their bytes
    int64_t bytes_per_iteration = 0;
    std::vector<int64_t> series; // live bytes of this site at every kept boundary
    std::vector<PathStep> path;
    std::string path_text;
    std::optional<Holder> holder;
    std::string suggestion;
    // The fix as a line of code the user can paste, where one can be written with certainty
    // (suggestion.h's suggestFixCode); empty otherwise. Never prose: copying it must run.
    std::string fix_code;
    // The remedy rule that gave `suggestion` (suggestion.h: a name of remedyRuleNames(), or a
    // later step's: "bound-what-the-loop-reads", "holder-frees-nothing", "shared-new-key");
    // empty with no fix.
    std::string fix_rule;
    std::optional<FixProof> fix; // set where the fix was checked on the heap
    Retention retention = Retention::Unknown;
    bool released_periodically = false; // grows, then freed at a coarser boundary (saw-tooth)
    // A leak's onset, or growth that stopped (a plateau); absent for a site that never grew.
    std::optional<GrowthSince> growth_since;
    // Alive when the report was built (the blocks of an iteration no boundary ended included),
    // oldest first; past kLiveBlocksListed the rest are only counted.
    std::vector<LiveBlockEntry> live_blocks;
    uint64_t live_blocks_unlisted = 0;
    uint64_t live_bytes_unlisted = 0;
    Severity severity = Severity::Info;
    Trend trend;
    double confidence = 0.0;
    // In a report merged from a torch.distributed job (rank_merge.h): the ranks on which this
    // site has this verdict, ascending. Empty in a single process's report.
    std::vector<int> ranks;
    // The role (memory_roles.h) most of its live bytes have when the report is built; unknown
    // when none of its blocks was gathered (a watched cell's site that did not grow).
    std::optional<MemoryRole> role;
};

// The order of a report's findings: leaks first, then by live bytes.
inline bool listedBefore(const Finding& a, const Finding& b) noexcept {
    bool la = a.verdict == Verdict::Leak, lb = b.verdict == Verdict::Leak;
    if (la != lb) {
        return la;
    }
    return a.total_bytes > b.total_bytes;
}

// An iteration whose peak jumped over the device's typical peak and came back down
// (peak_spikes.h): the JSON's `devices[].spikes`.
struct PeakSpike {
    int64_t iteration = 0; // 0-based
    int64_t peak_bytes = 0;
    int64_t typical_peak_bytes = 0; // the median of the device's peaks
    std::optional<MemoryRole> role; // the role that rose most over its median at the peak
    int64_t role_rise_bytes = 0;
    // The biggest block born in that iteration and alive at its peak: its size and site.
    uint64_t block_bytes = 0;
    std::optional<Frame> site;
};

struct DeviceTimeline {
    std::string device;
    uint64_t capacity_bytes = 0;
    std::vector<int64_t> allocated; // at every boundary
    std::vector<int64_t> reserved;  // at every boundary (CPU: equal to allocated, no reserve)
    std::vector<int64_t> peak;      // highest allocated within each iteration
    int64_t leak_bytes_per_iteration = 0;
    std::optional<int64_t> projected_oom_iteration;
    std::string verdict = "ok";       // "ok" or "fragmentation"
    double fragmentation_ratio = 0.0; // (reserved - allocated) / reserved at the end
    // What the memory is made of (memory_roles.h), at every boundary and at each iteration's
    // peak, beside `allocated` and `peak`; empty in a report written before roles existed.
    std::vector<RoleBytes> roles_at_boundary;
    std::vector<RoleBytes> roles_at_peak;
    std::vector<PeakSpike> spikes; // biggest first
};

// One root cause: the leak findings that one holder (or one graph, one object, one user line)
// keeps alive, reported as one entry however many allocation sites it spans.
struct Cause {
    Verdict verdict = Verdict::Leak;
    std::string keeper; // where the fix goes: the holder's path, the tensor keeping a graph, ...
    std::optional<Holder> holder;
    int64_t bytes_per_iteration = 0; // of all its findings
    uint64_t total_bytes = 0;
    std::vector<int> findings; // indices into Report::findings, biggest first
    std::string suggestion;
    Severity severity = Severity::Info;
    std::optional<int64_t> projected_oom_iteration; // its device full at this rate alone
    // Set when one line adds an entry under the same new key to several containers every
    // iteration (an adapter's name in every wrapped layer): the containers (biggest first) and
    // the entry's label in its newest sampled form ("['task7']"). One cause, one fix for all:
    // clearing one of them frees only its share.
    std::vector<std::string> holders;
    std::string new_key;
};

// Causes that are one pattern: kCauseGroupMin or more kept side by side in one container
// (`obj.l0` ... `obj.l49`, a list per key of `stores`) or, kept by no container, allocated
// at one site. Every cause is in exactly one group, most alone; biggest group first. A view
// says "50 lists in obj grow" once and shows the fifty behind it. Built by groupRelatedCauses
// (causes.h); here so that the sentences (display_text.h) need no dependency on the grouping.
struct CauseGroup {
    std::string container;   // "obj"; empty for a group by site and for a cause alone
    std::vector<int> causes; // indices into Report::causes, biggest first
    int64_t bytes_per_iteration = 0;
    uint64_t total_bytes = 0;
    Severity severity = Severity::Info; // the gravest of its causes'
};
inline constexpr size_t kCauseGroupMin = 4;

struct Recommendation {
    std::string priority; // high, medium, low
    std::string text;
    std::vector<int> findings; // indices into Report::findings
};

struct Summary {
    int score = 100;
    std::string grade = "A";
    std::vector<std::string> critical_issues;
    std::vector<Recommendation> recommendations;
};

// Forensics of a run that an out-of-memory error ended: the JSON's `oom` section.
struct OutOfMemorySite {
    int finding = -1;        // index into Report::findings
    std::string site;        // its site's text
    uint64_t live_bytes = 0; // alive on the device when the error reached torchleak
    uint64_t count = 0;
    int64_t bytes_per_iteration = 0;
};

struct OutOfMemoryHolder {
    std::string holder; // the holder's path ("losses"), or what keeps it when no holder grows
    uint64_t live_bytes = 0;
    std::vector<int> findings;
};

struct OutOfMemoryReport {
    std::string device;    // "cuda:0", "cpu"
    std::string error;     // the exception's type: "OutOfMemoryError", "MemoryError"
    std::string message;   // its first line
    int64_t iteration = 0; // the iteration that was running, 0-based (= complete iterations)
    std::optional<int64_t> requested_bytes;
    int64_t allocated_bytes = 0;
    int64_t reserved_bytes = 0;
    uint64_t capacity_bytes = 0; // 0 when unknown
    std::string totals_from;     // "allocator" (its report at the failure) or "tracked"
    uint64_t live_bytes = 0;     // tracked bytes alive on the device at the failure
    std::vector<int> findings;   // the device's findings that grew before it, culprit first
    std::vector<OutOfMemorySite> by_site;     // biggest live first
    std::vector<OutOfMemoryHolder> by_holder; // biggest live first
    // What filled the device at the failure, by role (memory_roles.h's rolesInFlight); absent in
    // a report written before roles existed.
    std::optional<RoleBytes> roles;
};

// One rank of a torch.distributed job in a report merged at rank 0: the JSON's `ranks`.
struct RankSummary {
    int rank = 0;
    std::string status = "ok"; // "ok", "failed" (its run raised: the report is partial) or
                               // "missing" (no report arrived: crashed, hung, unreadable)
    std::string note;          // why, for a failed or missing rank
    int iterations = 0;
    int leaks = 0;
    int64_t leak_bytes_per_iteration = 0; // of its leak findings together
    int64_t peak_bytes = 0;               // the highest allocated any of its devices reached
    std::vector<DeviceTimeline> devices;  // its own curves
    std::vector<int64_t> series_iterations;
};

struct JobRanks {
    int world_size = 0;
    std::vector<RankSummary> ranks; // one per rank of the job, by rank
};

struct Report {
    std::string torch_version;
    std::string python_version;
    int iterations = 0;
    // The iteration each point of the series (findings' and devices') was taken at, when a
    // long run's history was thinned; empty when every boundary was kept (point i: iteration i).
    std::vector<int64_t> series_iterations;
    int warmup = 0;
    BoundaryKind boundary = BoundaryKind::Explicit;
    std::vector<DeviceTimeline> devices;
    std::vector<Finding> findings;
    // A look's findings left out of `findings`: settled at an earlier look and unchanged since
    // (settled_sites.h). 0 in a report, which lists every finding.
    size_t settled_left_out = 0;
    std::vector<Cause> causes; // the leaks, one entry per root cause, biggest first
    Summary summary;
    std::vector<std::string> warnings; // e.g. events missed while torch.profiler was on top
    uint64_t events_recorded = 0;
    // Run watch's sampling threshold (allocation_sampler.h); 0 when every allocation was
    // recorded. Above 0, small blocks' bytes and counts are estimates.
    uint64_t sample_bytes = 0;
    std::optional<OutOfMemoryReport> oom;
    std::optional<JobRanks> ranks; // set in a report merged from a torch.distributed job
};

// The iteration point `i` of a series of `n` points was taken at: `at[i]` where `at`
// (Report::series_iterations, SiteSeries::at) gives every point's, `i` where every boundary
// was kept.
template <typename Iteration>
int64_t pointIteration(const std::vector<Iteration>& at, size_t n, size_t i) {
    return at.size() == n ? static_cast<int64_t>(at[i]) : static_cast<int64_t>(i);
}

} // namespace torchleak
