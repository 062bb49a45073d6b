#include "inspect/heap_walker.h"

#include "inspect/frame_capture.h"
#include "inspect/hook_anchors.h"
#include "inspect/path_builder.h"
#include "inspect/torch_objects.h"
#include "inspect/unreached.h"
#include "inspect/walk.h"
#include "inspect/walk_graph.h"
#include "torchleak/pointer_table.h"

#include <chrono>
#include <torch/csrc/autograd/functions/accumulate_grad.h>
#include <torch/csrc/autograd/python_cpp_function.h>
#include <torch/csrc/autograd/python_function.h>
#include <torch/csrc/autograd/python_variable.h>
#include <unordered_set>

namespace torchleak::python {

using torch::autograd::Node;

std::unordered_map<uintptr_t, BlockPath>
RetainingPathFinder::explain(const std::vector<uintptr_t>& blocks) {
    auto started = std::chrono::steady_clock::now();
    Paths result;
    std::unordered_set<uintptr_t> targets(blocks.begin(), blocks.end());
    if (targets.empty()) {
        return result;
    }
    // Grows as needed: a report over a small heap (cell watch's cell) should not clear 16 MiB.
    PointerSet visited(1 << 16, kVisitedLoadQuarters);
    // The stats add up over every explain() of this finder: a report may walk twice (its
    // builder's second walk for holders that take turns) and its walk line counts both.

    std::unordered_set<uintptr_t> unreached = walkFromNamedRoots(targets, visited, result);
    if (!unreached.empty()) {
        d_stats.secondPhase = true;
        if (PyObject* objects = gcObjects()) {
            Unreached classes = classifyUnreached(objects, visited);
            explainCycles(classes.garbage, unreached, visited, result);
            if (!unreached.empty()) {
                explainHookAnchors(classes.tensors, unreached, visited, result);
            }
            if (!unreached.empty()) {
                explainOutsideRoots(classes.external, unreached, visited, result);
            }
            Py_DECREF(objects);
        }
        markHeldOnlyFromCpp(unreached, result);
    }
    d_stats.reached += result.size() - unreached.size();
    d_stats.unreached += unreached.size();
    d_stats.seconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    return result;
}

// A fix's proof: the named roots walked again with each of `cut` marked visited before the walk
// starts, so nothing is reached through them (a root that is cut is itself skipped).
std::optional<std::unordered_map<uintptr_t, BlockPath>>
RetainingPathFinder::explainWithout(const std::vector<uintptr_t>& blocks,
                                    const std::vector<uintptr_t>& cut) {
    std::unordered_set<uintptr_t> targets(blocks.begin(), blocks.end());
    PointerSet visited(1 << 12, kVisitedLoadQuarters);
    for (uintptr_t object : cut) {
        visited.insert(tag(reinterpret_cast<const void*>(object), NodeKind::Python));
    }
    Walk walk(targets, visited, d_stats);
    walk.addRoots(d_roots);
    walk.run();
    PathBuilder builder(walk.nodes(), d_roots, &d_owners, d_firstHookId, &d_origins);
    Paths result;
    for (const auto& [block, node] : walk.found()) {
        result[block] = BlockPath{Retention::Reachable, builder.build(node)};
    }
    return result;
}

// Phase 1: breadth first from the named roots, so each reached block gets a shortest path from
// a name the user knows. Returns the blocks no root reaches.
std::unordered_set<uintptr_t> RetainingPathFinder::walkFromNamedRoots(
    const std::unordered_set<uintptr_t>& targets, PointerSet& visited, Paths& result) {
    Walk walk(targets, visited, d_stats);
    walk.addRoots(d_roots);
    walk.run();
    PathBuilder builder(walk.nodes(), d_roots, &d_owners, d_firstHookId, &d_origins);
    for (const auto& [block, node] : walk.found()) {
        result[block] = BlockPath{Retention::Reachable, builder.build(node)};
    }
    std::unordered_set<uintptr_t> unreached;
    for (uintptr_t b : targets) {
        if (!result.count(b)) {
            unreached.insert(b);
        }
    }
    return unreached;
}

// Phase 2a: reference cycles that only gc.collect() frees. The entry of a cycle is the member
// a user recognizes: an instance of a class of their own code when the cycle has one (an
// Attention whose .score_fn is its own bound method; the user's module, not the training
// framework's optimizer wrapper that closes the cycle with it), else another member that
// reaches the tensor first. The path starts there, goes around the cycle back to it (the last
// of those steps is noted: that is the edge that closes it) and then on to the tensor.
void RetainingPathFinder::explainCycles(const std::vector<PyObject*>& garbage,
                                        std::unordered_set<uintptr_t>& unreached,
                                        PointerSet& visited,
                                        Paths& result) {
    // Entries in order of what a user recognizes: their own classes' instances, a library's
    // classes' instances, other objects (a custom Function's ctx), then plain containers (often
    // an object's __dict__, whose owner names the path better), and tensors last: a tensor is
    // usually what a cycle keeps, not a member of it.
    std::vector<PyObject*> own, library, objects, containers, tensors;
    for (PyObject* o : garbage) {
        if (isTensor(o)) {
            tensors.push_back(o);
        } else if (PyDict_Check(o) || PyList_Check(o) || PyTuple_Check(o) || PyAnySet_Check(o) ||
                   PyCell_Check(o)) {
            containers.push_back(o);
        } else if (!(Py_TYPE(o)->tp_flags & Py_TPFLAGS_HEAPTYPE) || PyType_Check(o) ||
                   isCustomFunctionCtx(o) || PyExceptionInstance_Check(o)) {
            objects.push_back(o);
        } else if (const ClassOrigin& origin = d_origins.of(Py_TYPE(o)); origin.user) {
            own.push_back(o);
        } else if (origin.package) {
            library.push_back(o);
        } else {
            objects.push_back(o);
        }
    }
    for (const auto* members : {&own, &library, &objects, &containers, &tensors}) {
        if (unreached.empty() || members->empty()) {
            continue;
        }
        std::vector<NamedRoot> cycleRoots;
        for (PyObject* o : *members) {
            cycleRoots.push_back({"<cycle: " + typeQualname(o) + ">", StepKind::Root,
                                  "unreachable: only a reference cycle keeps it; gc.collect() "
                                  "frees it",
                                  o});
        }
        Walk cycles(unreached, visited, d_stats);
        cycles.addRoots(cycleRoots);
        cycles.run();
        PathBuilder cycleBuilder(cycles.nodes(), cycleRoots, &d_owners, std::nullopt, &d_origins);
        for (const auto& [block, node] : cycles.found()) {
            std::vector<PathStep> steps = cycleBuilder.build(node);
            uint32_t rootNode = rootOf(cycles.nodes(), node);
            PyObject* entry =
                static_cast<PyObject*>(const_cast<void*>(cycles.nodes()[rootNode].ptr));
            std::vector<PathStep> around = aroundCycle(entry);
            if (!steps.empty() && !around.empty()) {
                std::string& note = around.back().note;
                note = (note.empty() ? "" : note + "; ") + "back to the " + typeQualname(entry) +
                       " the cycle started from: an edge to break";
                steps.insert(steps.begin() + 1, around.begin(), around.end());
            }
            result[block] = BlockPath{Retention::Cycle, std::move(steps)};
            unreached.erase(block);
        }
    }
}

// The steps from a cycle's member around the cycle back to it, or none.
std::vector<PathStep> RetainingPathFinder::aroundCycle(PyObject* entry) {
    PointerSet loopVisited(1 << 16, kVisitedLoadQuarters);
    std::unordered_set<uintptr_t> none;
    WalkStats scratch;
    Walk loop(none, loopVisited, scratch);
    loop.skipCtxNode();
    std::vector<NamedRoot> loopRoots = {{"", StepKind::Root, "", entry}};
    loop.addRoot(entry, 0);
    loop.run(entry, 200000);
    if (loop.goalNode() == kNoParent) {
        return {};
    }
    return PathBuilder(loop.nodes(), loopRoots).build(loop.goalNode(), true);
}

// Phase 2b: islands a Python hook on an unreached autograd node keeps (a cycle through C++ that
// gc cannot see): their paths start at the hook, the object a user can remove or change.
void RetainingPathFinder::explainHookAnchors(const std::vector<PyObject*>& tensors,
                                             std::unordered_set<uintptr_t>& unreached,
                                             PointerSet& visited,
                                             Paths& result) {
    std::vector<HookAnchor> anchors = hooksOnUnreachedGraphs(tensors, visited);
    if (anchors.empty()) {
        return;
    }
    std::vector<NamedRoot> anchorRoots;
    for (HookAnchor& a : anchors) {
        anchorRoots.push_back({std::move(a.label), StepKind::Root, std::move(a.note), a.callable});
    }
    Walk island(unreached, visited, d_stats);
    island.addRoots(anchorRoots);
    island.run();
    PathBuilder builder(island.nodes(), anchorRoots, &d_owners, d_firstHookId, &d_origins);
    for (const auto& [block, node] : island.found()) {
        result[block] = BlockPath{Retention::CppOnly, builder.build(node)};
        unreached.erase(block);
    }
}

// The autograd node an object outside the roots stands for: a tensor's grad_fn, a custom
// Function ctx's node.
static Node* graphNodeOf(PyObject* o) {
    if (isCustomFunctionCtx(o)) {
        return nodeOfCtx(o);
    }
    if (isTensor(o)) {
        try {
            return THPVariable_Unpack(o).grad_fn().get();
        } catch (...) {
            return nullptr;
        }
    }
    return nullptr;
}

// Phase 2c: held by objects outside the roots: library state, C extensions, or (a tensor or a
// custom Function's ctx that no Python object refers to) C++ itself.
void RetainingPathFinder::explainOutsideRoots(const std::vector<PyObject*>& external,
                                              std::unordered_set<uintptr_t>& unreached,
                                              PointerSet& visited,
                                              Paths& result) {
    std::vector<NamedRoot> outsideRoots;
    for (PyObject* o : external) {
        if (isTensor(o)) {
            // Python holds no reference to it, so C++ does: an autograd graph (a saved
            // variable) kept alive by a C++ reference cycle or a hook.
            std::string note = "only C++ refers to this tensor";
            try {
                const at::Tensor& t = THPVariable_Unpack(o);
                if (t.grad_fn()) {
                    note += "; its grad_fn is " + shortTypeName(typeid(*t.grad_fn()).name());
                    note += savedOwnOutput(t);
                } else if (t.requires_grad()) {
                    note += ": a leaf that requires grad, kept by the AccumulateGrad node of an "
                            "autograd graph no Python object, hook or cache torchleak can read "
                            "reaches";
                }
            } catch (...) {
            }
            outsideRoots.push_back({"<Tensor held only from C++>", StepKind::Root, note, o});
        } else if (isCustomFunctionCtx(o)) {
            // Only its autograd node refers to it: a C++ reference cycle (a custom Function
            // that saved a view of its own output) keeps the graph alive.
            outsideRoots.push_back({std::string("<") + Py_TYPE(o)->tp_name + " held only from C++>",
                                    StepKind::Root,
                                    "an autograd node no Python object reaches keeps this "
                                    "custom Function's ctx alive",
                                    o});
        } else {
            outsideRoots.push_back(
                {std::string("<") + Py_TYPE(o)->tp_name + " outside the named roots>",
                 StepKind::Root, "held from C code or library state", o});
        }
    }
    std::vector<Node*> graphNodes;
    for (const NamedRoot& root : outsideRoots) {
        graphNodes.push_back(graphNodeOf(root.object));
    }
    const std::unordered_map<PyObject*, std::string> graphs = sameGraph(outsideRoots, graphNodes);
    // Members of an autograd graph first: a tensor a node saved (an input of a matmul) is then
    // shown inside the graph that keeps it, not as a root of its own.
    std::vector<NamedRoot> ofGraphs, others;
    for (size_t k = 0; k < outsideRoots.size(); ++k) {
        (graphNodes[k] != nullptr ? ofGraphs : others).push_back(std::move(outsideRoots[k]));
    }
    for (const auto* roots : {&ofGraphs, &others}) {
        if (unreached.empty() || roots->empty()) {
            continue;
        }
        Walk outside(unreached, visited, d_stats);
        outside.addRoots(*roots);
        outside.run();
        PathBuilder outsideBuilder(outside.nodes(), *roots, &d_owners, std::nullopt, &d_origins);
        for (const auto& [block, node] : outside.found()) {
            uint32_t rootNode = rootOf(outside.nodes(), node);
            auto* rootObj =
                static_cast<PyObject*>(const_cast<void*>(outside.nodes()[rootNode].ptr));
            bool cpp = isCustomFunctionCtx(rootObj) || isTensor(rootObj);
            std::vector<PathStep> steps = outsideBuilder.build(node);
            if (auto graph = graphs.find(rootObj); graph != graphs.end() && !steps.empty()) {
                steps.front().graph = graph->second;
            }
            result[block] =
                BlockPath{cpp ? Retention::CppOnly : Retention::Unnamed, std::move(steps)};
            unreached.erase(block);
        }
    }
}

// "MulBackward0", or a custom Function's own class name ("SaveOwnViewBackward").
static std::string nodeName(Node* node) {
    if (isPyNode(node)) {
        if (PyObject* ctx = torch::autograd::functionToPyObject(node->getptr())) {
            std::string name = Py_TYPE(ctx)->tp_name;
            Py_DECREF(ctx);
            return name;
        }
        PyErr_Clear();
    }
    return shortTypeName(typeid(*node).name());
}

// Objects held only from C++ that belong to one autograd graph (a recomputed region, a model's
// forward kept by one custom Function's cycle) are one leak: each gets the graph's name, and all
// get the note of the member that says why the graph stays (`ctx saved a view of this
// output`). Two members are in one graph when the nodes reachable from theirs meet.
std::unordered_map<PyObject*, std::string>
RetainingPathFinder::sameGraph(std::vector<NamedRoot>& roots, const std::vector<Node*>& rootNodes) {
    std::vector<size_t> parent(roots.size());
    for (size_t k = 0; k < parent.size(); ++k) {
        parent[k] = k;
    }
    auto find = [&](size_t k) {
        while (parent[k] != k) {
            k = parent[k] = parent[parent[k]];
        }
        return k;
    };
    constexpr size_t kMostNodes = 200000; // a graph bigger than this is named by what was seen
    std::unordered_map<const Node*, size_t> seenBy;
    for (size_t k = 0; k < roots.size(); ++k) {
        Node* start = rootNodes[k];
        std::vector<Node*> queue;
        if (start != nullptr) {
            queue.push_back(start);
        }
        while (!queue.empty() && seenBy.size() < kMostNodes) {
            Node* node = queue.back();
            queue.pop_back();
            auto [it, fresh] = seenBy.emplace(node, k);
            if (!fresh) {
                parent[find(it->second)] = find(k); // met another member's graph
                continue;
            }
            for (const torch::autograd::Edge& edge : node->next_edges()) {
                // A parameter's AccumulateGrad is in every graph that uses it: meeting there
                // does not make two graphs one.
                if (edge.function && dynamic_cast<torch::autograd::AccumulateGrad*>(
                                         edge.function.get()) == nullptr) {
                    queue.push_back(edge.function.get());
                }
            }
        }
    }
    std::unordered_map<size_t, std::vector<size_t>> members;
    for (size_t k = 0; k < roots.size(); ++k) {
        if (rootNodes[k] != nullptr) {
            members[find(k)].push_back(k);
        }
    }
    std::unordered_map<PyObject*, std::string> names;
    for (const auto& [top, group] : members) {
        if (group.size() < 2) {
            continue;
        }
        // The member whose note says why the graph stays names it; else the first.
        size_t why = group.front();
        for (size_t k : group) {
            if (roots[k].note.find(kSavedViewOfOutput) != std::string::npos) {
                why = k;
            }
        }
        const std::string name = "the autograd graph of " + nodeName(rootNodes[why]);
        for (size_t k : group) {
            names[roots[k].object] = name;
            if (k != why && roots[why].note.find(kSavedViewOfOutput) != std::string::npos) {
                roots[k].note += std::string("; one autograd graph with a custom Function whose ") +
                                 kSavedViewOfOutput +
                                 " its own output with save_for_backward: that cycle through "
                                 "C++ keeps the whole graph";
            }
        }
    }
    return names;
}

// A custom Function that saved (a view of) its own output with ctx.save_for_backward: the
// output's grad_fn keeps the saved view, the view keeps the output's storage, and the output
// keeps its grad_fn — a cycle through C++ that only the Function's author can break.
std::string RetainingPathFinder::savedOwnOutput(const at::Tensor& t) {
    Node* node = t.grad_fn().get();
    if (node == nullptr || !isPyNode(node) || !t.has_storage()) {
        return "";
    }
    PyObject* ctx = torch::autograd::functionToPyObject(node->getptr());
    if (ctx == nullptr) {
        PyErr_Clear();
        return "";
    }
    std::string found;
    auto* fn = reinterpret_cast<THPFunction*>(ctx);
    const void* storage = t.storage().data_ptr().get();
    for (const auto& saved : fn->saved_variables) {
        auto raw = rawSavedTensor(saved);
        // A view of the output: the output saved itself is kept without its grad_fn (autograd
        // saves an output's data alone), no cycle, and not to be blamed.
        if (raw && raw->is_view() && raw->has_storage() &&
            raw->storage().data_ptr().get() == storage) {
            found = std::string(", whose ") + kSavedViewOfOutput +
                    " this output with save_for_backward: a cycle through C++ (output, its "
                    "grad_fn, the saved view, the output's storage) that nothing frees";
            break;
        }
    }
    Py_DECREF(ctx);
    return found;
}

// The last resort, once every Python edge was followed: no Python object reaches the block.
void RetainingPathFinder::markHeldOnlyFromCpp(const std::unordered_set<uintptr_t>& unreached,
                                              Paths& result) {
    for (uintptr_t b : unreached) {
        PathStep s;
        s.kind = StepKind::Root;
        s.label = "<held only from C++>";
        s.note = "no Python object reaches it, nor any autograd graph, hook or torch cache "
                 "torchleak can read: C++ state torch does not expose keeps it";
        result[b] = BlockPath{Retention::CppOnly, {s}};
    }
}

} // namespace torchleak::python
