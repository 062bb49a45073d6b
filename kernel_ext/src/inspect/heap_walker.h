#pragma once
// RetainingPathFinder: why is this block still alive?
//
// A breadth-first walk from named roots (globals, locals of live frames, Out[n], the last
// exception; collected by the Python layer) over the Python heap *and* the autograd graph, so
// the first time a tensor whose storage is a leaked block is reached, the path to it is a
// shortest one. Python edges come from tp_traverse and the containers' own items; autograd
// edges (grad_fn, next_functions, saved variables, custom Function ctx, AccumulateGrad's
// variable, .grad) are read in C++, because Python's gc cannot see them.
//
// Rules: the walk runs with the GIL and calls no user code (no __getattr__, __repr__,
// properties, __instancecheck__ or unpack hooks); it takes references only on objects it
// creates itself and drops them before returning; labels are computed only for the paths
// that are reported. Blocks no root reaches are explained in a second phase: a reference cycle
// that gc.collect() would free, a Python hook an unreached autograd node keeps (hook_anchors.h),
// memory held by objects outside the roots, or by C++ alone.

#include "inspect/class_origin.h"
#include "inspect/walk_graph.h"
#include "torchleak/pointer_table.h"
#include "torchleak/retention.h"

#include <ATen/core/Tensor.h>
#include <Python.h>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace torchleak::python {

class RetainingPathFinder final : public RetentionExplainer {
  public:
    // `firstHookId`: torch's next hook handle id when tracking started (ReportInputs), so a
    // path's dict of hooks says how many of its hooks the run registered.
    // `filter`: the report's rule for which code is the user's, by which a class's instances
    // are told the user's own or a library's (class_origin.h); it must outlive the finder.
    explicit RetainingPathFinder(std::vector<NamedRoot> roots,
                                 ParameterOwners owners = {},
                                 std::optional<uint64_t> firstHookId = std::nullopt,
                                 const FrameFilter* filter = nullptr)
        : d_roots(std::move(roots)), d_owners(std::move(owners)), d_firstHookId(firstHookId),
          d_origins(filter) {}
    std::unordered_map<uintptr_t, BlockPath> explain(const std::vector<uintptr_t>& blocks) override;
    std::optional<std::unordered_map<uintptr_t, BlockPath>>
    explainWithout(const std::vector<uintptr_t>& blocks,
                   const std::vector<uintptr_t>& cut) override;
    bool canWalkAgain() const override { return true; }
    const WalkStats& stats() const noexcept { return d_stats; }

  private:
    using Paths = std::unordered_map<uintptr_t, BlockPath>;
    // The phases of explain(), in order; each takes what the ones before left unreached.
    std::unordered_set<uintptr_t> walkFromNamedRoots(const std::unordered_set<uintptr_t>& targets,
                                                     PointerSet& visited,
                                                     Paths& result);
    void explainCycles(const std::vector<PyObject*>& garbage,
                       std::unordered_set<uintptr_t>& unreached,
                       PointerSet& visited,
                       Paths& result);
    static std::vector<PathStep> aroundCycle(PyObject* entry);
    void explainHookAnchors(const std::vector<PyObject*>& tensors,
                            std::unordered_set<uintptr_t>& unreached,
                            PointerSet& visited,
                            Paths& result);
    void explainOutsideRoots(const std::vector<PyObject*>& external,
                             std::unordered_set<uintptr_t>& unreached,
                             PointerSet& visited,
                             Paths& result);
    static std::string savedOwnOutput(const at::Tensor& t);
    // `rootNodes[k]`: the autograd node roots[k] stands for, or nullptr.
    static std::unordered_map<PyObject*, std::string>
    sameGraph(std::vector<NamedRoot>& roots, const std::vector<torch::autograd::Node*>& rootNodes);
    static void markHeldOnlyFromCpp(const std::unordered_set<uintptr_t>& unreached, Paths& result);

    std::vector<NamedRoot> d_roots;
    ParameterOwners d_owners;
    std::optional<uint64_t> d_firstHookId;
    ClassOrigins d_origins;
    WalkStats d_stats;
};

} // namespace torchleak::python
