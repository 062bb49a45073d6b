#include "inspect/walk.h"

#include "inspect/frame_capture.h"
#include "inspect/hook_anchors.h"
#include "inspect/saved_variables.h"
#include "inspect/script_constants.h"
#include "inspect/torch_objects.h"

#include <ATen/SparseCsrTensorImpl.h>
#include <ATen/SparseTensorImpl.h>
#include <cstring>
#include <torch/csrc/PyInterpreter.h>
#include <torch/csrc/Storage.h>
#include <torch/csrc/autograd/functions/accumulate_grad.h>
#include <torch/csrc/autograd/python_cpp_function.h>
#include <torch/csrc/autograd/python_function.h>
#include <torch/csrc/autograd/python_variable.h>

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

bool isStorage(PyObject* obj) {
    return THPStorageClass != nullptr && PyObject_TypeCheck(obj, THPStorageClass);
}

} // namespace

Walk::Walk(const std::unordered_set<uintptr_t>& targets, PointerSet& visited, WalkStats& stats)
    : d_targets(targets), d_visited(visited), d_stats(stats) {
    d_nodes.reserve(1 << 20); // untouched pages cost nothing; regrowth copies
}

Walk::~Walk() {
    for (PyObject* o : d_temporaries) {
        Py_DECREF(o);
    }
}

void Walk::addRoots(const std::vector<NamedRoot>& roots) {
    for (size_t r = 0; r < roots.size(); ++r) {
        addRoot(roots[r].object, static_cast<uint32_t>(r));
    }
}

void Walk::addRoot(PyObject* obj, uint32_t rootIndex) {
    push(obj, NodeKind::Python, kNoParent, Edge::Root, rootIndex, nullptr);
}

void Walk::run(PyObject* goal, size_t maxNodes) {
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

void Walk::push(
    const void* ptr, NodeKind kind, uint32_t parent, Edge edge, uint32_t index, const char* name) {
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
    // otherwise found only after every other root's children were queued (cell watch's
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

void Walk::expand(uint32_t i) {
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

void Walk::checkTarget(uint32_t i, const at::Tensor& t) {
    if (!t.defined() || !t.has_storage()) {
        return;
    }
    checkBlock(i, reinterpret_cast<uintptr_t>(t.storage().data_ptr().get()));
}

// Node i reaches block `ptr`: the first node to do so names its path.
void Walk::checkBlock(uint32_t i, uintptr_t ptr) {
    if (ptr != 0 && d_targets.count(ptr) && !d_found.count(ptr)) {
        d_found.emplace(ptr, i);
    }
}

void Walk::expandTensor(uint32_t i, const at::Tensor& t) {
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
void Walk::pushSparseParts(uint32_t i, const at::Tensor& t) {
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

void Walk::pushMember(uint32_t i, const at::Tensor& member, const char* name) {
    if (member.defined()) {
        push(member.unsafeGetTensorImpl(), NodeKind::Tensor, i, Edge::Ref, 0, name);
    }
}

void Walk::pushSaved(uint32_t i,
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
            push(packed->second.ptr(getPyInterpreter()), NodeKind::Python, i, Edge::SavedPacked, at,
                 name);
            // The unpack hook too: its closure is what non-reentrant checkpointing keeps
            // (the frame with the inputs to recompute from), for as long as the graph.
            push(packed->first.ptr(getPyInterpreter()), NodeKind::Python, i, Edge::SavedUnpackHook,
                 at, name);
        }
    }
}

void Walk::expandAutograd(uint32_t i, Node* node) {
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
                    walk->pushSaved(from, v[k], Edge::SavedList, static_cast<uint32_t>(k), name);
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

// One expander per kind of object whose references tp_traverse does not show, or shows without
// the names a path needs; anything else is traversed generically. The order is the cost order:
// exact type tests for the common containers before subtype tests.
void Walk::expandPython(uint32_t i, PyObject* obj) {
    if (PyDict_Check(obj)) {
        expandDict(i, obj);
    } else if (PyList_Check(obj) || PyTuple_Check(obj)) {
        expandSequence(i, obj);
    } else if (isTensor(obj)) {
        expandPythonTensor(i, obj);
    } else if (isStorage(obj)) {
        expandStorage(i, obj);
    } else if (PyObject* base = ndarrayBase(obj)) {
        // tensor.numpy() shares the tensor's memory and keeps the tensor as its base;
        // numpy arrays are not gc containers, so tp_traverse never shows that edge.
        push(keep(base), NodeKind::Python, i, Edge::Ref, 0, "base");
    } else if (isCustomFunctionCtx(obj)) {
        expandCustomFunctionCtx(i, obj);
    } else if (isCppFunctionWrapper(obj)) {
        push(nodeOfWrapper(obj), NodeKind::Autograd, i, Edge::NodeOf, 0, nullptr);
    } else if (PyFunction_Check(obj)) {
        expandFunction(i, obj);
    } else if (PyType_Check(obj)) {
        push(reinterpret_cast<PyTypeObject*>(obj)->tp_dict, NodeKind::Python, i, Edge::AttrDict, 0,
             nullptr);
    } else if (isScriptObject(obj)) {
        expandScriptObject(i, obj);
    } else if (localsOwner(obj) != LocalsOwner::None) {
        expandFrameLocals(i, obj);
    } else if (PyExceptionInstance_Check(obj)) {
        expandException(i, obj);
    } else if (PyTraceBack_Check(obj)) {
        expandTraceback(i, obj);
    } else {
        traverseGeneric(i, obj);
    }
}

void Walk::expandDict(uint32_t i, PyObject* dict) {
    Py_ssize_t pos = 0, ordinal = 0;
    PyObject *key, *value;
    while (PyDict_Next(dict, &pos, &key, &value)) {
        push(value, NodeKind::Python, i, Edge::DictValue, static_cast<uint32_t>(ordinal), nullptr);
        if (!PyUnicode_Check(key) && PyType_IS_GC(Py_TYPE(key))) {
            // Keys (a Parameter keying optimizer.state) are a last resort: a path through the
            // owner's own name (net[0].weight) reads better.
            d_deferredKeys.push_back({key, i, static_cast<uint32_t>(ordinal)});
        }
        ++ordinal;
    }
}

void Walk::expandSequence(uint32_t i, PyObject* listOrTuple) {
    Py_ssize_t n = PySequence_Fast_GET_SIZE(listOrTuple);
    PyObject** items = PySequence_Fast_ITEMS(listOrTuple);
    for (Py_ssize_t k = 0; k < n; ++k) {
        push(items[k], NodeKind::Python, i, Edge::SeqItem, static_cast<uint32_t>(k), nullptr);
    }
}

void Walk::expandPythonTensor(uint32_t i, PyObject* obj) {
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
}

// A raw storage (torch.UntypedStorage) held by itself: its data is a block.
void Walk::expandStorage(uint32_t i, PyObject* storage) {
    checkBlock(i, reinterpret_cast<uintptr_t>(THPStorage_Unpack(storage).data_ptr().get()));
}

void Walk::expandCustomFunctionCtx(uint32_t i, PyObject* ctx) {
    auto* fn = reinterpret_cast<THPFunction*>(ctx);
    for (size_t k = 0; k < fn->saved_variables.size(); ++k) {
        pushSaved(i, fn->saved_variables[k], Edge::CtxSaved, static_cast<uint32_t>(k), nullptr);
    }
    pushInstanceDict(i, ctx);
    Node* node = d_followCtxNode ? nodeOfCtx(ctx) : nullptr;
    if (node != nullptr) {
        push(node, NodeKind::Autograd, i, Edge::NodeOf, 0, nullptr);
    }
}

// Not func_globals: module state is walked from its own roots.
void Walk::expandFunction(uint32_t i, PyObject* function) {
    auto* f = reinterpret_cast<PyFunctionObject*>(function);
    if (f->func_closure != nullptr && PyTuple_Check(f->func_closure)) {
        for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(f->func_closure); ++k) {
            PyObject* cell = PyTuple_GET_ITEM(f->func_closure, k);
            if (PyCell_Check(cell) && PyCell_GET(cell) != nullptr) {
                push(PyCell_GET(cell), NodeKind::Python, i, Edge::Closure, static_cast<uint32_t>(k),
                     nullptr);
            }
        }
    }
    if (f->func_dict != nullptr) {
        push(f->func_dict, NodeKind::Python, i, Edge::AttrDict, 0, nullptr);
    }
    push(f->func_defaults, NodeKind::Python, i, Edge::Ref, 0, "__defaults__");
    push(f->func_kwdefaults, NodeKind::Python, i, Edge::Ref, 0, "__kwdefaults__");
}

// TorchScript keeps tensor constants in its C++ graphs, by function.
void Walk::expandScriptObject(uint32_t i, PyObject* obj) {
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
            x->walk->push(x->walk->keep(tensor), NodeKind::Python, x->from, Edge::ScriptConstant,
                          x->ordinal++, name);
        },
        &ctx);
}

// A finished frame kept by a traceback, or a suspended generator: its locals, by name. Not
// f_back or f_globals: callers and module state have roots of their own.
void Walk::expandFrameLocals(uint32_t i, PyObject* owner) {
    struct Ctx {
        Walk* walk;
        uint32_t from;
    } ctx{this, i};
    forEachLocal(
        owner,
        [](void* c, uint32_t index, PyObject* value) {
            auto* x = static_cast<Ctx*>(c);
            x->walk->push(value, NodeKind::Python, x->from, Edge::FrameLocal, index, nullptr);
        },
        &ctx);
}

// What an exception keeps, by the names Python gives it; the rest (args, attributes, a
// subclass's fields) generically.
void Walk::expandException(uint32_t i, PyObject* exception) {
    auto* exc = reinterpret_cast<PyBaseExceptionObject*>(exception);
    push(exc->traceback, NodeKind::Python, i, Edge::Ref, 0, "__traceback__");
    push(exc->context, NodeKind::Python, i, Edge::Ref, 0, "__context__");
    push(exc->cause, NodeKind::Python, i, Edge::Ref, 0, "__cause__");
    push(exc->args, NodeKind::Python, i, Edge::Ref, 0, "args");
    traverseGeneric(i, exception);
}

void Walk::expandTraceback(uint32_t i, PyObject* traceback) {
    auto* tb = reinterpret_cast<PyTracebackObject*>(traceback);
    push(tb->tb_frame, NodeKind::Python, i, Edge::Ref, 0, "tb_frame");
    push(tb->tb_next, NodeKind::Python, i, Edge::Ref, 0, "tb_next");
}

void Walk::pushInstanceDict(uint32_t i, PyObject* obj) {
    PyObject** dictPtr = _PyObject_GetDictPtr(obj);
    if (dictPtr != nullptr && *dictPtr != nullptr) {
        push(*dictPtr, NodeKind::Python, i, Edge::AttrDict, 0, nullptr);
    }
}

void Walk::traverseGeneric(uint32_t i, PyObject* obj) {
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

} // namespace torchleak::python
