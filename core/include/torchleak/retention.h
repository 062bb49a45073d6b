#pragma once
// Why a finding's memory is still alive: retaining paths per block (found by the inspect layer,
// which walks the Python heap and the autograd graph), and what the core makes of them: the
// path as users write it and the holder (the container the fix belongs to).

#include "torchleak/model.h"

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace torchleak {

struct BlockPath {
    Retention retention = Retention::Unknown;
    std::vector<PathStep> steps; // from the root to the tensor whose storage is the block
};

// Implemented by the bindings: one call per report with every block of every finding.
class RetentionExplainer {
  public:
    virtual ~RetentionExplainer() = default;
    virtual std::unordered_map<uintptr_t, BlockPath>
    explain(const std::vector<uintptr_t>& blocks) = 0;
    // The blocks among `blocks` that the named roots still reach with the objects `cut` (each a
    // PathStep::object) taken out of the graph, as if they were cleared, each with its path
    // then; nothing when this explainer cannot walk again.
    virtual std::optional<std::unordered_map<uintptr_t, BlockPath>>
    explainWithout(const std::vector<uintptr_t>& /*blocks*/,
                   const std::vector<uintptr_t>& /*cut*/) {
        return std::nullopt;
    }
    // Whether explainWithout walks (fixes can be proven at all): without it no fix is proven
    // and none is refuted.
    virtual bool canWalkAgain() const { return false; }
};

// "losses[3].grad_fn": the labels joined, in the syntax a user can paste.
std::string pathText(const std::vector<PathStep>& steps);
// The text of the first `count` steps: the path of a prefix (a holder, a graph's owner).
std::string pathText(const std::vector<PathStep>& steps, size_t count);

// How a finding's paths branch: for every path prefix, how many paths go through it and the
// distinct steps that follow it. A container whose sampled paths go through ever more elements
// is what grows. It keeps views of the paths' labels: the paths must outlive it.
class PathFanout {
  public:
    // `births`, when given, has the iteration each path's block was allocated in (one per
    // path): a container whose every element holds blocks of many iterations (a fixed list of
    // layers, each gaining an entry per iteration) is the route to what grows, not the thing
    // that grows, however many elements the paths go through.
    explicit PathFanout(const std::vector<const std::vector<PathStep>*>& paths,
                        const std::vector<uint32_t>& births = {});

    // The first container on `path` through which the paths fan out (one more element per
    // iteration for a list that keeps a loss per step). The paths are a sample standing for
    // `sampleScale` times as many blocks: a container whose sampled paths all go through
    // different elements is taken to have as many elements as the blocks they stand for.
    // Growth is the fan-out divided by `iterations`.
    std::optional<Holder>
    holderOn(const std::vector<PathStep>& path, double iterations, double sampleScale = 1.0) const;

  private:
    // One node per distinct prefix, a trie over the steps' labels: a report asks for the
    // holders of thousands of findings' blocks, and a prefix followed label by label costs
    // neither its text nor a comparison of it.
    struct Node {
        size_t paths = 0;             // paths that go on past this prefix
        std::vector<size_t> next;     // the nodes of the distinct steps that follow it
        std::vector<uint32_t> births; // the iterations of the blocks behind it, distinct
        bool route = false;           // a route to what grows (decide), once every path is in
        bool gainsInSteps = false;    // gains an element at intervals (decide), likewise
    };
    struct Edge {
        size_t from;
        std::string_view label;
        bool operator==(const Edge& o) const { return from == o.from && label == o.label; }
    };
    struct EdgeHash {
        size_t operator()(const Edge& e) const {
            return std::hash<std::string_view>()(e.label) ^ (e.from * 0x9E3779B97F4A7C15ULL);
        }
    };
    size_t stepFrom(size_t node, std::string_view label) const;
    void decide(Node& n) const;
    static constexpr size_t kNone = static_cast<size_t>(-1);
    std::vector<Node> d_nodes; // [0]: the empty prefix
    std::unordered_map<Edge, size_t, EdgeHash> d_edges;
};

// PathFanout(paths).holderOn(representative, ...): the holder of one finding's representative.
std::optional<Holder> chooseHolder(const std::vector<PathStep>& representative,
                                   const std::vector<const std::vector<PathStep>*>& paths,
                                   double iterations,
                                   double sampleScale = 1.0,
                                   const std::vector<uint32_t>& births = {});

// The name a user knows a block's keeper by: the growing container it hangs in, else the
// root its path starts from (`y`, `model`, `<held only from C++>`); empty when no path was
// found. Blocks of one site are told apart by it (one finding per holder).
std::string holderName(const BlockPath& path, const std::optional<Holder>& holder);

// Shows nn.Module internals the way users write them: `._parameters['weight']` becomes
// `.weight`, `._modules['0']` becomes `[0]`.
std::vector<PathStep> normalizePath(std::vector<PathStep> steps);

// The holder's last step on the finding's path, when an entry follows it: the entry the holder
// keeps per iteration is the next step, its owner the steps before. Nothing without a holder.
std::optional<size_t> holderEnd(const Finding& f);
// The holder's bound while it is still filling: a leak-shaped finding whose holder is a
// container that bounds its own entries (a deque's maxlen) and holds fewer than that. A cache
// of the last 16 requests grows at every one of its first 16 iterations, which is every sign
// of a leak a series can show; what holds it says it stops.
std::optional<GrowthSince::Bounded> fillingBoundedHolder(const Finding& f);
// The step of the library object the finding's holder is private state of: the nearest step
// above the holder whose class is a package's, entered by a private attribute (`._history`).
std::optional<size_t> libraryOwnerStep(const Finding& f);
// That object, named (holder.library).
std::optional<LibraryObject> libraryOwnerOf(const Finding& f);

// The first step of `path` whose label starts with `prefix` (".__traceback__", "<lru_cache"),
// or null.
const PathStep* stepStarting(const std::vector<PathStep>& path, std::string_view prefix);

// The path goes through the autograd graph's nodes (.grad_fn, .next_functions, a saved
// variable): the memory is a graph kept alive.
bool keepsAutogradGraph(const std::vector<PathStep>& path);

// What torch's own C++ caches are doing when the report is built: the evidence a finding that
// no Python object reaches needs before one of them is named as its keeper (frames on the
// allocating stack alone prove nothing: torch wraps its optimizers in dynamo-disable frames).
struct TorchCacheState {
    // Device types with an open torch.autocast region whose cast cache is on.
    std::vector<std::string> autocast_devices;
    // Frames torch._dynamo compiled in this process (its own counters).
    uint64_t dynamo_compiled_frames = 0;
    // Functions in TorchScript's global compilation unit.
    uint64_t torchscript_functions = 0;
};

// The keepers a path can start from or pass through that are torch's, or a Python hook that
// torch's C++ keeps: each has its own remedy. Told by the path's root (TorchScript's
// compilation unit, reached through its graphs' constants; a hook anchor; a C++ cache named by
// namedCppOwner), or by a step of torch's own machinery on it.
enum class TorchOwner {
    None,
    TorchScriptUnit,
    CompileCaches,
    AutocastCache,
    HookOnGraph,       // a Python hook on an autograd node that only C++ keeps
    SavedTensorsHooks, // a saved_tensors_hooks unpack hook the graph keeps
    Checkpoint,        // non-reentrant torch.utils.checkpoint's frame
};
inline constexpr const char* kTorchScriptUnitRoot = "torch.jit._state._python_cu";
inline constexpr const char* kTorchScriptExecutorRoot = "<TorchScript function executor>";
inline constexpr const char* kCompileCachesRoot = "<torch.compile caches>";
inline constexpr const char* kAutocastCacheRoot = "<torch.autocast weight-cast cache>";
// The type of the object on the path (a heap type is named without its module).
inline constexpr const char* kCheckpointFrameType = "_CheckpointFrame";
TorchOwner torchOwnerOf(const Finding& f);

// The C++ owner of memory no Python object reaches, when the evidence names one: a root step
// to start its path with (label and the evidence as its note), or nothing. `f` gives the
// allocating stack and device.
std::optional<PathStep> namedCppOwner(const Finding& f, const TorchCacheState& state);
// A root that only says "C++" (no hook, no named cache): what namedCppOwner may replace.
bool isAnonymousCppRoot(const std::string& label);
// A hook anchor: "<hook on MulBackward0: partial(on_backward, owner)>".
bool isHookAnchorRoot(const std::string& label);

bool isGrowableContainer(const std::string& typeName);
// A root that is notebook machinery, not a name of the user's: IPython's output cache
// (Out[n], _n, the copies of _, __ and ___ in its hidden namespace, and _, __ and ___
// themselves where the Python layer's note says they are the displayhook's: a `_` the user's
// code assigned, `xb, _ = get_batch()`, is the user's own name).
bool isOutputCacheRoot(const PathStep& root);
// The note the Python layer gives the output cache's roots (_roots.py).
inline constexpr const char* kOutputCacheNote = "IPython output cache";
// The root the Python layer names for IPython's hidden copy of `_`, `__` or `___` that no
// longer is the user's (`%reset -f out` leaves it): "get_ipython().user_ns_hidden['_']".
inline constexpr const char* kHiddenOutputCachePrefix = "get_ipython().user_ns_hidden[";
bool isHiddenOutputCacheRoot(const std::string& label);
bool isLastExceptionRoot(const std::string& label);

} // namespace torchleak
