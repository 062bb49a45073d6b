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
};

// "losses[3].grad_fn": the labels joined, in the syntax a user can paste.
std::string pathText(const std::vector<PathStep>& steps);

// How a finding's paths branch: for every path prefix, how many paths go through it and the
// distinct steps that follow it. A container whose sampled paths go through ever more elements
// is what grows.
class PathFanout {
  public:
    explicit PathFanout(const std::vector<const std::vector<PathStep>*>& paths);

    // The first container on `path` through which the paths fan out (one more element per
    // iteration for a list that keeps a loss per step). The paths are a sample standing for
    // `sampleScale` times as many blocks: a container whose sampled paths all go through
    // different elements is taken to have as many elements as the blocks they stand for.
    // Growth is the fan-out divided by `iterations`.
    std::optional<Holder>
    holderOn(const std::vector<PathStep>& path, double iterations, double sampleScale = 1.0) const;

  private:
    struct Branch {
        size_t paths = 0;
        std::set<std::string> next;
    };
    std::map<std::string, Branch> d_branches;
};

// PathFanout(paths).holderOn(representative, ...): the holder of one finding's representative.
std::optional<Holder> chooseHolder(const std::vector<PathStep>& representative,
                                   const std::vector<const std::vector<PathStep>*>& paths,
                                   double iterations,
                                   double sampleScale = 1.0);

// The name a user knows a block's keeper by: the growing container it hangs in, else the
// root its path starts from (`y`, `model`, `<held only from C++>`); empty when no path was
// found. Blocks of one site are told apart by it (one finding per holder).
std::string holderName(const BlockPath& path, const std::optional<Holder>& holder);

// Shows nn.Module internals the way users write them: `._parameters['weight']` becomes
// `.weight`, `._modules['0']` becomes `[0]`.
std::vector<PathStep> normalizePath(std::vector<PathStep> steps);

// The first step of `path` whose label starts with `prefix` (".__traceback__", "<lru_cache"),
// or null.
const PathStep* stepStarting(const std::vector<PathStep>& path, std::string_view prefix);

// The path goes through the autograd graph's nodes (.grad_fn, .next_functions, a saved
// variable): the memory is a graph kept alive.
bool keepsAutogradGraph(const std::vector<PathStep>& path);

// An owner inside torch's C++ that keeps a finding's memory, told by its path (TorchScript's
// compilation unit, reached as a root through its graphs' constants) or, for memory no Python
// object reaches, by where it was allocated (while TorchScript or torch.compile ran).
enum class TorchOwner { None, TorchScriptUnit, CompileCaches };
inline constexpr const char* kTorchScriptUnitRoot = "torch.jit._state._python_cu";
inline constexpr const char* kCompileCachesOwner = "torch.compile's caches";
TorchOwner torchOwnerOf(const Finding& f);

bool isGrowableContainer(const std::string& typeName);
// A root that is notebook machinery, not a name of the user's: IPython's output cache
// (Out[n], _, __, ___, _n) or the last exception.
bool isOutputCacheRoot(const std::string& label);
bool isLastExceptionRoot(const std::string& label);

} // namespace torchleak
