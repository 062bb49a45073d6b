#include "inspect/heap_walker.h"

#include "inspect/frame_capture.h"
#include "inspect/hook_anchors.h"
#include "inspect/path_builder.h"
#include "inspect/saved_variables.h"
#include "inspect/script_constants.h"
#include "inspect/torch_objects.h"
#include "inspect/unreached.h"
#include "inspect/walk_graph.h"
#include "torchleak/pointer_table.h"
#include "torchleak/stack_table.h"

#include <ATen/SparseCsrTensorImpl.h>
#include <ATen/SparseTensorImpl.h>
#include <chrono>
#include <cstring>
#include <deque>
#include <torch/csrc/PyInterpreter.h>
#include <torch/csrc/Storage.h>
#include <torch/csrc/autograd/functions/accumulate_grad.h>
#include <torch/csrc/autograd/python_cpp_function.h>
#include <torch/csrc/autograd/python_function.h>
#include <torch/csrc/autograd/python_variable.h>
#include <unordered_set>

namespace torchleak::python {

namespace {

using torch::autograd::Node;

// numpy's own ndarray (the exact type: a subclass's `base` could be a property) and its base as
// a new reference, or nullptr. The getter is numpy's C code; nothing of the user's runs.
bool isNdarray(PyObject* obj) {
    const char* name = Py_TYPE(obj)->tp_name;
    return name[0] == 'n' && std::strcmp(name, "numpy.ndarray") == 0; // cheap for str, int
}

PyObject* ndarrayBase(PyObject* obj) {
    if (!isNdarray(obj)) {
        return nullptr;
    }
    PyObject* base = PyObject_GetAttrString(obj, "base");
    if (base == nullptr) {
        PyErr_Clear();
        return nullptr;
    }
    if (base == Py_None) {
        Py_DECREF(base);
        return nullptr;
    }
    return base;
}

// ---------------------------------------------------------------------------------------------
// One breadth-first walk.

class Walk {
  public:
    Walk(const std::unordered_set<uintptr_t>& targets, PointerSet& visited, WalkStats& stats)
        : d_targets(targets), d_visited(visited), d_stats(stats) {
        d_nodes.reserve(1 << 20); // untouched pages cost nothing; regrowth copies
    }
    ~Walk() {
        for (PyObject* o : d_temporaries) {
            Py_DECREF(o);
        }
    }

    void addRoots(const std::vector<NamedRoot>& roots) {
        for (size_t r = 0; r < roots.size(); ++r) {
            addRoot(roots[r].object, static_cast<uint32_t>(r));
        }
    }

    void addRoot(PyObject* obj, uint32_t rootIndex) {
        push(obj, NodeKind::Python, kNoParent, Edge::Root, rootIndex, nullptr);
    }

    // Stops early when every target is found (or, with a goal object, when it is reached, or
    // after maxNodes nodes).
    void run(PyObject* goal = nullptr, size_t maxNodes = SIZE_MAX) {
        d_goal = goal;
        size_t i = 0;
        while (true) {
            for (; i < d_nodes.size() && i < maxNodes; ++i) {
                if (d_found.size() == d_targets.size() && d_goal == nullptr) {
                    return;
                }
                if (d_goal != nullptr && d_goalNode != kNoParent) {
                    return;
                }
                expand(static_cast<uint32_t>(i));
            }
            if (d_deferredKeys.empty() || i >= maxNodes) {
                return;
            }
            std::vector<DeferredKey> keys;
            keys.swap(d_deferredKeys);
            for (const DeferredKey& k : keys) {
                push(k.key, NodeKind::Python, k.parent, Edge::DictKey, k.ordinal, nullptr);
            }
        }
    }

    const std::unordered_map<uintptr_t, uint32_t>& found() const { return d_found; }
    const std::vector<WalkNode>& nodes() const { return d_nodes; }
    uint32_t goalNode() const { return d_goalNode; }

    // A ctx and its own autograd node refer to each other in C++: a loop search that took that
    // edge would find only that unlabelled two-member loop, never the user's.
    void skipCtxNode() { d_followCtxNode = false; }

    // Python objects this walk made (custom Function ctx objects) stay alive until it ends.
    PyObject* keep(PyObject* o) {
        d_temporaries.push_back(o);
        return o;
    }

  private:
    void push(const void* ptr,
              NodeKind kind,
              uint32_t parent,
              Edge edge,
              uint32_t index,
              const char* name) {
        if (ptr == nullptr) {
            return;
        }
        if (d_goal != nullptr && kind == NodeKind::Python && ptr == d_goal && parent != kNoParent) {
            d_nodes.push_back({ptr, parent, index, name, kind, edge});
            d_goalNode = static_cast<uint32_t>(d_nodes.size() - 1);
            return;
        }
        if (kind == NodeKind::Python) {
            auto* obj = static_cast<PyObject*>(const_cast<void*>(ptr));
            // Objects that cannot hold references (str, int, ...) and modules or builtin
            // types (whose contents are library state, walked as roots if they are user
            // modules) are leaves.
            // PyType_IS_GC is a flag test; PyObject_IS_GC is an exported call per object. An
            // object gc has untracked (a tuple or dict of atomic values) cannot reach a tensor.
            // TorchScript objects and numpy arrays are not gc types, but their graphs keep
            // tensors in C++, and an array from tensor.numpy() keeps its tensor as `base`.
            bool gcLeaf = !PyType_IS_GC(Py_TYPE(obj)) || !PyObject_GC_IsTracked(obj);
            if ((gcLeaf && !isScriptObject(obj) && !isNdarray(obj)) || PyModule_Check(obj) ||
                PyCode_Check(obj) ||
                (PyType_Check(obj) &&
                 !(reinterpret_cast<PyTypeObject*>(obj)->tp_flags & Py_TPFLAGS_HEAPTYPE))) {
                return;
            }
        }
        if (!d_visited.insert(tag(ptr, kind))) {
            return;
        }
        d_nodes.push_back({ptr, parent, index, name, kind, edge});
        // A tensor is checked when met, not when its turn to be expanded comes: the walk
        // stops as soon as every target is found, and a target one step below a root was
        // otherwise found only after every other root's children were queued (watch mode's
        // cell beside a list of 10^5 tensors: 8 ms of a 9 ms walk). Nodes are expanded in the
        // order they are met, so a tensor names its block by the path it had; only a block
        // also held as a bare UntypedStorage one step nearer a root may now take the tensor's.
        if (kind == NodeKind::Python) {
            auto* obj = static_cast<PyObject*>(const_cast<void*>(ptr));
            if (isTensor(obj)) {
                checkTarget(static_cast<uint32_t>(d_nodes.size() - 1), THPVariable_Unpack(obj));
            }
        }
    }

    void expand(uint32_t i) {
        const WalkNode n = d_nodes[i];
        switch (n.kind) {
        case NodeKind::Python:
            ++d_stats.pythonObjects;
            expandPython(i, static_cast<PyObject*>(const_cast<void*>(n.ptr)));
            break;
        case NodeKind::Tensor: {
            ++d_stats.tensors;
            at::Tensor t = tensorFromImpl(static_cast<const c10::TensorImpl*>(n.ptr));
            expandTensor(i, t);
            break;
        }
        case NodeKind::Autograd:
            ++d_stats.autogradNodes;
            expandAutograd(i, static_cast<Node*>(const_cast<void*>(n.ptr)));
            break;
        }
    }

    void checkTarget(uint32_t i, const at::Tensor& t) {
        if (!t.defined() || !t.has_storage()) {
            return;
        }
        checkBlock(i, reinterpret_cast<uintptr_t>(t.storage().data_ptr().get()));
    }

    // Node i reaches block `ptr`: the first node to do so names its path.
    void checkBlock(uint32_t i, uintptr_t ptr) {
        if (ptr != 0 && d_targets.count(ptr) && !d_found.count(ptr)) {
            d_found.emplace(ptr, i);
        }
    }

    void expandTensor(uint32_t i, const at::Tensor& t) {
        checkTarget(i, t);
        pushSparseParts(i, t);
        const auto& gradFn = t.grad_fn();
        if (gradFn) {
            push(gradFn.get(), NodeKind::Autograd, i, Edge::GradFn, 0, nullptr);
        }
        // TensorImpl::grad, not Tensor::grad: the latter warns for non-leaf tensors.
        const at::Tensor& grad = t.unsafeGetTensorImpl()->grad();
        if (grad.defined()) {
            push(grad.unsafeGetTensorImpl(), NodeKind::Tensor, i, Edge::Grad, 0, nullptr);
        }
    }

    // A sparse tensor has no storage of its own: its values and indices are tensors its
    // TensorImpl owns (members, so their TensorImpls outlive the walk's pointers to them).
    void pushSparseParts(uint32_t i, const at::Tensor& t) {
        const c10::TensorImpl* impl = t.unsafeGetTensorImpl();
        if (const auto* coo = dynamic_cast<const at::SparseTensorImpl*>(impl)) {
            pushMember(i, coo->values(), "_values()");
            pushMember(i, coo->indices(), "_indices()");
        } else if (const auto* compressed = dynamic_cast<const at::SparseCsrTensorImpl*>(impl)) {
            pushMember(i, compressed->values(), "values()");
            pushMember(i, compressed->compressed_indices(), "crow_indices()");
            pushMember(i, compressed->plain_indices(), "col_indices()");
        }
    }

    void pushMember(uint32_t i, const at::Tensor& member, const char* name) {
        if (member.defined()) {
            push(member.unsafeGetTensorImpl(), NodeKind::Tensor, i, Edge::Ref, 0, name);
        }
    }

    void pushSaved(uint32_t i,
                   const torch::autograd::SavedVariable& sv,
                   Edge edge,
                   uint32_t index,
                   const char* name) {
        if (auto t = rawSavedTensor(sv)) {
            // The Tensor handle is temporary; the node holds the TensorImpl for the walk.
            push(t->unsafeGetTensorImpl(), NodeKind::Tensor, i, edge, index, name);
            return;
        }
        // Under torch.autograd.graph.saved_tensors_hooks the variable keeps whatever the pack
        // hook returned, a Python object only C++ refers to. Reading it runs no hook.
        if constexpr (requires { sv.retrieve_unpack_hook_data(); }) {
            decltype(sv.retrieve_unpack_hook_data()) packed;
            try {
                packed = sv.retrieve_unpack_hook_data();
            } catch (...) {
                return; // hooks written in C++ have no Python data to show
            }
            if (packed) {
                uint32_t at = edge == Edge::Saved ? kNoIndex : index;
                push(packed->second.ptr(getPyInterpreter()), NodeKind::Python, i, Edge::SavedPacked,
                     at, name);
                // The unpack hook too: its closure is what non-reentrant checkpointing keeps
                // (the frame with the inputs to recompute from), for as long as the graph.
                push(packed->first.ptr(getPyInterpreter()), NodeKind::Python, i,
                     Edge::SavedUnpackHook, at, name);
            }
        }
    }

    void expandAutograd(uint32_t i, Node* node) {
        for (uint32_t k = 0; k < node->num_outputs(); ++k) {
            const auto& e = node->next_edge(k);
            if (e.function) {
                push(e.function.get(), NodeKind::Autograd, i, Edge::NextFunction, k, nullptr);
            }
        }
        // Python hooks on the node or on its outputs (Tensor.register_hook): their closures
        // live as long as the graph, kept by C++ hook objects gc cannot see.
        forEachPythonHookDict(*node, [&](PyObject* dict, const NodeHookKind& kind) {
            push(dict, NodeKind::Python, i, Edge::NodeHooks, 0, kind.hooks);
        });
        if (SavedVisitFn visit = savedVisitorFor(node)) {
            struct Visitor final : SavedVariableVisitor {
                Walk* walk;
                uint32_t from;
                void one(const char* name, const torch::autograd::SavedVariable& v) override {
                    walk->pushSaved(from, v, Edge::Saved, 0, name);
                }
                void list(const char* name,
                          const std::vector<torch::autograd::SavedVariable>& v) override {
                    for (size_t k = 0; k < v.size(); ++k) {
                        walk->pushSaved(from, v[k], Edge::SavedList, static_cast<uint32_t>(k),
                                        name);
                    }
                }
            } visitor;
            visitor.walk = this;
            visitor.from = i;
            visit(*node, visitor);
            return;
        }
        if (auto* acc = dynamic_cast<torch::autograd::AccumulateGrad*>(node)) {
            if (acc->variable.defined()) {
                push(acc->variable.unsafeGetTensorImpl(), NodeKind::Tensor, i, Edge::Variable, 0,
                     nullptr);
            }
            return;
        }
        if (isPyNode(node)) {
            PyObject* ctx = torch::autograd::functionToPyObject(node->getptr());
            if (ctx == nullptr) {
                PyErr_Clear();
                return;
            }
            push(keep(ctx), NodeKind::Python, i, Edge::CtxOf, 0, nullptr);
        }
    }

    void expandPython(uint32_t i, PyObject* obj) {
        // The common containers first: exact type tests are cheaper than subtype tests.
        if (PyDict_Check(obj)) {
            Py_ssize_t pos = 0, ordinal = 0;
            PyObject *key, *value;
            while (PyDict_Next(obj, &pos, &key, &value)) {
                push(value, NodeKind::Python, i, Edge::DictValue, static_cast<uint32_t>(ordinal),
                     nullptr);
                if (!PyUnicode_Check(key) && PyType_IS_GC(Py_TYPE(key))) {
                    // Keys (a Parameter keying optimizer.state) are a last resort: a path
                    // through the owner's own name (net[0].weight) reads better.
                    d_deferredKeys.push_back({key, i, static_cast<uint32_t>(ordinal)});
                }
                ++ordinal;
            }
            return;
        }
        if (PyList_Check(obj) || PyTuple_Check(obj)) {
            Py_ssize_t n = PySequence_Fast_GET_SIZE(obj);
            PyObject** items = PySequence_Fast_ITEMS(obj);
            for (Py_ssize_t k = 0; k < n; ++k) {
                push(items[k], NodeKind::Python, i, Edge::SeqItem, static_cast<uint32_t>(k),
                     nullptr);
            }
            return;
        }
        if (isTensor(obj)) {
            const at::Tensor& t = THPVariable_Unpack(obj);
            // Mark the TensorImpl too, so the same tensor met again from C++ is not walked twice.
            d_visited.insert(tag(t.unsafeGetTensorImpl(), NodeKind::Tensor));
            expandTensor(i, t);
            pushInstanceDict(i, obj);
            // Tensor.register_hook on a leaf keeps its hooks here, not on a graph node.
            auto* var = reinterpret_cast<THPVariable*>(obj);
            push(var->backward_hooks, NodeKind::Python, i, Edge::Ref, 0, "_backward_hooks");
            push(var->post_accumulate_grad_hooks, NodeKind::Python, i, Edge::Ref, 0,
                 "_post_accumulate_grad_hooks");
            return;
        }
        if (THPStorageClass != nullptr && PyObject_TypeCheck(obj, THPStorageClass)) {
            // A raw storage (torch.UntypedStorage) held by itself: its data is a block.
            checkBlock(i, reinterpret_cast<uintptr_t>(THPStorage_Unpack(obj).data_ptr().get()));
            return;
        }
        if (PyObject* base = ndarrayBase(obj)) {
            // tensor.numpy() shares the tensor's memory and keeps the tensor as its base;
            // numpy arrays are not gc containers, so tp_traverse never shows that edge.
            push(keep(base), NodeKind::Python, i, Edge::Ref, 0, "base");
            return;
        }
        if (isCustomFunctionCtx(obj)) {
            auto* fn = reinterpret_cast<THPFunction*>(obj);
            for (size_t k = 0; k < fn->saved_variables.size(); ++k) {
                pushSaved(i, fn->saved_variables[k], Edge::CtxSaved, static_cast<uint32_t>(k),
                          nullptr);
            }
            pushInstanceDict(i, obj);
            Node* node = d_followCtxNode ? nodeOfCtx(obj) : nullptr;
            if (node != nullptr) {
                push(node, NodeKind::Autograd, i, Edge::NodeOf, 0, nullptr);
            }
            return;
        }
        if (isCppFunctionWrapper(obj)) {
            push(nodeOfWrapper(obj), NodeKind::Autograd, i, Edge::NodeOf, 0, nullptr);
            return;
        }
        if (PyFunction_Check(obj)) {
            auto* f = reinterpret_cast<PyFunctionObject*>(obj);
            if (f->func_closure != nullptr && PyTuple_Check(f->func_closure)) {
                for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(f->func_closure); ++k) {
                    PyObject* cell = PyTuple_GET_ITEM(f->func_closure, k);
                    if (PyCell_Check(cell) && PyCell_GET(cell) != nullptr) {
                        push(PyCell_GET(cell), NodeKind::Python, i, Edge::Closure,
                             static_cast<uint32_t>(k), nullptr);
                    }
                }
            }
            if (f->func_dict != nullptr) {
                push(f->func_dict, NodeKind::Python, i, Edge::AttrDict, 0, nullptr);
            }
            push(f->func_defaults, NodeKind::Python, i, Edge::Ref, 0, "__defaults__");
            push(f->func_kwdefaults, NodeKind::Python, i, Edge::Ref, 0, "__kwdefaults__");
            return; // not func_globals: module state is walked from its own roots
        }
        if (PyType_Check(obj)) {
            push(reinterpret_cast<PyTypeObject*>(obj)->tp_dict, NodeKind::Python, i, Edge::AttrDict,
                 0, nullptr);
            return;
        }
        if (isScriptObject(obj)) {
            struct Ctx {
                Walk* walk;
                uint32_t from;
                uint32_t ordinal;
            } ctx{this, i, 0};
            forEachScriptConstant(
                obj,
                [](void* c, PyObject* tensor, const std::string& function) {
                    auto* x = static_cast<Ctx*>(c);
                    const char* name = x->walk->d_names.emplace_back(function).c_str();
                    x->walk->push(x->walk->keep(tensor), NodeKind::Python, x->from,
                                  Edge::ScriptConstant, x->ordinal++, name);
                },
                &ctx);
            return;
        }
        if (localsOwner(obj) != LocalsOwner::None) {
            // A finished frame kept by a traceback, or a suspended generator: its locals, by
            // name. Not f_back or f_globals: callers and module state have roots of their own.
            struct Ctx {
                Walk* walk;
                uint32_t from;
            } ctx{this, i};
            forEachLocal(
                obj,
                [](void* c, uint32_t index, PyObject* value) {
                    auto* x = static_cast<Ctx*>(c);
                    x->walk->push(value, NodeKind::Python, x->from, Edge::FrameLocal, index,
                                  nullptr);
                },
                &ctx);
            return;
        }
        if (PyExceptionInstance_Check(obj)) {
            // What an exception keeps, by the names Python gives it; the rest (args,
            // attributes, a subclass's fields) below.
            auto* exc = reinterpret_cast<PyBaseExceptionObject*>(obj);
            push(exc->traceback, NodeKind::Python, i, Edge::Ref, 0, "__traceback__");
            push(exc->context, NodeKind::Python, i, Edge::Ref, 0, "__context__");
            push(exc->cause, NodeKind::Python, i, Edge::Ref, 0, "__cause__");
            push(exc->args, NodeKind::Python, i, Edge::Ref, 0, "args");
        } else if (PyTraceBack_Check(obj)) {
            auto* tb = reinterpret_cast<PyTracebackObject*>(obj);
            push(tb->tb_frame, NodeKind::Python, i, Edge::Ref, 0, "tb_frame");
            push(tb->tb_next, NodeKind::Python, i, Edge::Ref, 0, "tb_next");
            return;
        }
        traverseGeneric(i, obj);
    }

    void pushInstanceDict(uint32_t i, PyObject* obj) {
        PyObject** dictPtr = _PyObject_GetDictPtr(obj);
        if (dictPtr != nullptr && *dictPtr != nullptr) {
            push(*dictPtr, NodeKind::Python, i, Edge::AttrDict, 0, nullptr);
        }
    }

    void traverseGeneric(uint32_t i, PyObject* obj) {
        traverseproc traverse = Py_TYPE(obj)->tp_traverse;
        if (traverse == nullptr) {
            return;
        }
        // Instance attributes first, under their dict, so they get `.name` labels.
        bool hasDict = Py_TYPE(obj)->tp_dictoffset != 0;
#ifdef Py_TPFLAGS_MANAGED_DICT
        hasDict = hasDict || (Py_TYPE(obj)->tp_flags & Py_TPFLAGS_MANAGED_DICT);
#endif
        if (hasDict) {
            pushInstanceDict(i, obj);
        }
        struct Ctx {
            Walk* walk;
            uint32_t from;
            uint32_t ordinal;
        } ctx{this, i, 0};
        traverse(
            obj,
            [](PyObject* child, void* arg) -> int {
                auto* c = static_cast<Ctx*>(arg);
                if (child != nullptr && !PyType_Check(child)) {
                    c->walk->push(child, NodeKind::Python, c->from, Edge::Ref, c->ordinal, nullptr);
                }
                ++c->ordinal;
                return 0;
            },
            &ctx);
    }

    const std::unordered_set<uintptr_t>& d_targets;
    bool d_followCtxNode = true;
    PointerSet& d_visited;
    WalkStats& d_stats;
    std::vector<WalkNode> d_nodes;
    std::unordered_map<uintptr_t, uint32_t> d_found;
    std::vector<PyObject*> d_temporaries;
    std::deque<std::string> d_names; // edge names the walk made; a deque never moves them
    struct DeferredKey {
        PyObject* key;
        uint32_t parent;
        uint32_t ordinal;
    };
    std::vector<DeferredKey> d_deferredKeys;
    PyObject* d_goal = nullptr;
    uint32_t d_goalNode = kNoParent;
};

} // namespace

std::unordered_map<uintptr_t, BlockPath>
RetainingPathFinder::explain(const std::vector<uintptr_t>& blocks) {
    auto started = std::chrono::steady_clock::now();
    Paths result;
    std::unordered_set<uintptr_t> targets(blocks.begin(), blocks.end());
    if (targets.empty()) {
        return result;
    }
    // Grows as needed: a report over a small heap (watch mode's cell) should not clear 16 MiB.
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

// Phase 1: breadth first from the named roots, so each reached block gets a shortest path from
// a name the user knows. Returns the blocks no root reaches.
std::unordered_set<uintptr_t> RetainingPathFinder::walkFromNamedRoots(
    const std::unordered_set<uintptr_t>& targets, PointerSet& visited, Paths& result) {
    Walk walk(targets, visited, d_stats);
    walk.addRoots(d_roots);
    walk.run();
    PathBuilder builder(walk.nodes(), d_roots, &d_owners);
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
// a user recognizes: an instance of their own class when the cycle has one (an Attention whose
// .score_fn is its own bound method), else another member that reaches the tensor first. The path
// starts there, goes around the cycle back to it (the last of those steps is noted: that is an
// edge to break) and then on to the tensor.
void RetainingPathFinder::explainCycles(const std::vector<PyObject*>& garbage,
                                        std::unordered_set<uintptr_t>& unreached,
                                        PointerSet& visited,
                                        Paths& result) {
    // Entries in order of what a user recognizes: their own classes' instances, other objects
    // (a custom Function's ctx), then plain containers (often an object's __dict__, whose owner
    // names the path better), and tensors last: a tensor is usually what a cycle keeps, not a
    // member of it.
    std::vector<PyObject*> users, objects, containers, tensors;
    for (PyObject* o : garbage) {
        if (isUserClassInstance(o)) {
            users.push_back(o);
        } else if (isTensor(o)) {
            tensors.push_back(o);
        } else if (PyDict_Check(o) || PyList_Check(o) || PyTuple_Check(o) || PyAnySet_Check(o) ||
                   PyCell_Check(o)) {
            containers.push_back(o);
        } else {
            objects.push_back(o);
        }
    }
    for (const auto* members : {&users, &objects, &containers, &tensors}) {
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
        PathBuilder cycleBuilder(cycles.nodes(), cycleRoots, &d_owners);
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
    PathBuilder builder(island.nodes(), anchorRoots, &d_owners);
    for (const auto& [block, node] : island.found()) {
        result[block] = BlockPath{Retention::CppOnly, builder.build(node)};
        unreached.erase(block);
    }
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
    Walk outside(unreached, visited, d_stats);
    outside.addRoots(outsideRoots);
    outside.run();
    PathBuilder outsideBuilder(outside.nodes(), outsideRoots, &d_owners);
    for (const auto& [block, node] : outside.found()) {
        uint32_t rootNode = rootOf(outside.nodes(), node);
        auto* rootObj = static_cast<PyObject*>(const_cast<void*>(outside.nodes()[rootNode].ptr));
        bool cpp = isCustomFunctionCtx(rootObj) || isTensor(rootObj);
        result[block] =
            BlockPath{cpp ? Retention::CppOnly : Retention::Unnamed, outsideBuilder.build(node)};
        unreached.erase(block);
    }
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
        if (raw && raw->has_storage() && raw->storage().data_ptr().get() == storage) {
            found = std::string(", whose ctx saved a view of this output with "
                                "save_for_backward: a cycle through C++ (output, its grad_fn, "
                                "the saved view, the output's storage) that nothing frees");
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
