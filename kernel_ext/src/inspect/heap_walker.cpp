#include "inspect/heap_walker.h"

#include "inspect/frame_capture.h"
#include "inspect/saved_variables.h"
#include "inspect/tensor_index.h"
#include "torchleak/pointer_table.h"
#include "torchleak/stack_table.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <deque>
#include <memory>
#include <structmember.h>
#include <torch/csrc/autograd/functions/accumulate_grad.h>
#include <torch/csrc/autograd/python_cpp_function.h>
#include <torch/csrc/autograd/python_function.h>
#include <torch/csrc/autograd/python_variable.h>
#include <unordered_set>

namespace torchleak::python {

namespace {

using torch::autograd::Node;

enum class NodeKind : uint8_t { Python, Tensor, Autograd };

enum class Edge : uint8_t {
    Root,
    DictValue, // index: position in PyDict_Next order
    DictKey,   // index: position
    SeqItem,   // index: list/tuple position
    AttrDict,  // an object's __dict__ (no label of its own)
    Closure,   // index: cell number in __closure__
    Ref,       // generic tp_traverse referent; index: ordinal
    GradFn,
    NextFunction, // index: edge number
    Saved,        // name: "_saved_self"
    SavedList,    // name and index
    CtxSaved,     // index into ctx.saved_tensors
    CtxOf,        // a custom Function node's ctx object (the same thing as grad_fn in Python)
    NodeOf,       // a Python wrapper's C++ node
    Variable,     // AccumulateGrad.variable
    Grad,
};

struct WalkNode {
    const void* ptr;
    uint32_t parent;
    uint32_t index;
    const char* name;
    NodeKind kind;
    Edge edge;
};

constexpr uint32_t kNoParent = UINT32_MAX;
// Insert-only and the walk's main cache cost: a load of up to 3/4 keeps it small.
constexpr unsigned kVisitedLoadQuarters = 3;

// The visited set holds tagged pointers: the low two bits are the node kind.

// std::type_index hashes the mangled name; a node's type_info address is enough, cached here
// for the few dozen node types a program uses.
SavedVisitFn savedVisitorFor(const Node* node) {
    static std::unordered_map<const std::type_info*, SavedVisitFn> cache;
    const std::type_info* type = &typeid(*node);
    auto it = cache.find(type);
    if (it != cache.end()) {
        return it->second;
    }
    const auto& table = generatedSavedVariableVisitors();
    auto found = table.find(std::type_index(*type));
    SavedVisitFn fn = found == table.end() ? nullptr : found->second;
    cache.emplace(type, fn);
    return fn;
}

uintptr_t tag(const void* p, NodeKind k) {
    return reinterpret_cast<uintptr_t>(p) | static_cast<uintptr_t>(k);
}

PyTypeObject* tensorType() {
    return reinterpret_cast<PyTypeObject*>(THPVariableClass);
}

bool isTensor(PyObject* obj) {
    PyTypeObject* t = tensorType();
    return t != nullptr && PyObject_TypeCheck(obj, t);
}

bool isCustomFunctionCtx(PyObject* obj) {
    return PyObject_TypeCheck(obj, &THPFunctionType);
}

// All Python wrappers of C++ autograd nodes share one deallocator; learn it once from a
// wrapper torch makes for us, so no isinstance() (and no user code) is needed to spot them.
destructor cppFunctionDealloc() {
    static destructor dealloc = []() -> destructor {
        try {
            at::Tensor leaf = at::ones({1}).set_requires_grad(true);
            at::Tensor out = leaf.neg();
            PyObject* wrapper = torch::autograd::functionToPyObject(out.grad_fn());
            if (wrapper == nullptr) {
                PyErr_Clear();
                return nullptr;
            }
            destructor d = Py_TYPE(wrapper)->tp_dealloc;
            Py_DECREF(wrapper);
            return d;
        } catch (...) {
            return nullptr;
        }
    }();
    return dealloc;
}

bool isCppFunctionWrapper(PyObject* obj) {
    destructor d = cppFunctionDealloc();
    return d != nullptr && Py_TYPE(obj)->tp_dealloc == d && !isCustomFunctionCtx(obj);
}

// torch <= 2.11 holds a weak_ptr<PyNode> in THPFunction::cdata, newer torch an owning
// intrusive_ptr<Node>.
template <typename Function> Node* nodeOfFunction(Function* fn) {
    if constexpr (requires { fn->cdata.lock(); }) {
        return fn->cdata.lock().get(); // the node stays alive: the graph holds it
    } else {
        return fn->cdata.get();
    }
}

Node* nodeOfCtx(PyObject* ctx) {
    return nodeOfFunction(reinterpret_cast<THPFunction*>(ctx));
}

Node* nodeOfWrapper(PyObject* wrapper) {
    return reinterpret_cast<torch::autograd::THPCppFunction*>(wrapper)->cdata.get();
}

// PyNode's type_info is not exported by libtorch_python, so no dynamic_cast: compare the
// mangled name of the dynamic type instead.
bool isPyNode(const Node* node) {
    return std::strcmp(typeid(*node).name(), "N5torch8autograd6PyNodeE") == 0;
}

at::Tensor tensorFromImpl(const c10::TensorImpl* impl) {
    return at::Tensor(c10::intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>::reclaim_copy(
        const_cast<c10::TensorImpl*>(impl)));
}

// Keys that print as Python literals; anything else would need its __repr__ (user code).
std::string keyText(PyObject* key) {
    if (PyUnicode_Check(key)) {
        std::string s = utf8(key);
        std::string out = "'";
        for (char c : s) {
            if (c == '\'' || c == '\\') {
                out += '\\';
            }
            out += c;
        }
        return out + "'";
    }
    if (PyLong_CheckExact(key)) {
        int overflow = 0;
        long long v = PyLong_AsLongLongAndOverflow(key, &overflow);
        if (!overflow && !PyErr_Occurred()) {
            return std::to_string(v);
        }
        PyErr_Clear();
    }
    if (key == Py_None) {
        return "None";
    }
    if (key == Py_True || key == Py_False) {
        return key == Py_True ? "True" : "False";
    }
    return std::string("<") + Py_TYPE(key)->tp_name + " key>";
}

bool isIdentifier(const std::string& s) {
    if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) {
        return false;
    }
    return std::all_of(s.begin(), s.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || (c & 0x80);
    });
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
            if (!PyType_IS_GC(Py_TYPE(obj)) || !PyObject_GC_IsTracked(obj) || PyModule_Check(obj) ||
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
        auto ptr = reinterpret_cast<uintptr_t>(t.storage().data_ptr().get());
        if (ptr != 0 && d_targets.count(ptr) && !d_found.count(ptr)) {
            d_found.emplace(ptr, i);
        }
    }

    void expandTensor(uint32_t i, const at::Tensor& t) {
        checkTarget(i, t);
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

    void pushSaved(uint32_t i,
                   const torch::autograd::SavedVariable& sv,
                   Edge edge,
                   uint32_t index,
                   const char* name) {
        if (auto t = rawSavedTensor(sv)) {
            // The Tensor handle is temporary; the node holds the TensorImpl for the walk.
            push(t->unsafeGetTensorImpl(), NodeKind::Tensor, i, edge, index, name);
        }
    }

    void expandAutograd(uint32_t i, Node* node) {
        for (uint32_t k = 0; k < node->num_outputs(); ++k) {
            const auto& e = node->next_edge(k);
            if (e.function) {
                push(e.function.get(), NodeKind::Autograd, i, Edge::NextFunction, k, nullptr);
            }
        }
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
            return;
        }
        if (isCustomFunctionCtx(obj)) {
            auto* fn = reinterpret_cast<THPFunction*>(obj);
            for (size_t k = 0; k < fn->saved_variables.size(); ++k) {
                pushSaved(i, fn->saved_variables[k], Edge::CtxSaved, static_cast<uint32_t>(k),
                          nullptr);
            }
            pushInstanceDict(i, obj);
            if (Node* node = nodeOfCtx(obj)) {
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
        if (PyFrame_Check(obj)) {
            return; // frames are roots (by local name) when they matter
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
    PointerSet& d_visited;
    WalkStats& d_stats;
    std::vector<WalkNode> d_nodes;
    std::unordered_map<uintptr_t, uint32_t> d_found;
    std::vector<PyObject*> d_temporaries;
    struct DeferredKey {
        PyObject* key;
        uint32_t parent;
        uint32_t ordinal;
    };
    std::vector<DeferredKey> d_deferredKeys;
    PyObject* d_goal = nullptr;
    uint32_t d_goalNode = kNoParent;

    friend class PathBuilder;
};

// ---------------------------------------------------------------------------------------------
// Labels, computed only for the paths that are reported.

// The root a node was reached from.
uint32_t rootOf(const std::vector<WalkNode>& nodes, uint32_t i) {
    while (nodes[i].parent != kNoParent) {
        i = nodes[i].parent;
    }
    return i;
}

class PathBuilder {
  public:
    PathBuilder(const std::vector<WalkNode>& nodes, const std::vector<NamedRoot>& roots)
        : d_nodes(nodes), d_roots(roots) {}

    // Steps from the root to node `i`. With `dropRoot`, the root itself is left out.
    std::vector<PathStep> build(uint32_t i, bool dropRoot = false) {
        std::vector<uint32_t> chain;
        for (uint32_t k = i; k != kNoParent; k = d_nodes[k].parent) {
            chain.push_back(k);
        }
        std::reverse(chain.begin(), chain.end());
        // A path through a long graph (an RNN unrolled over thousands of steps) keeps its
        // first and last steps; the middle is summarised in one step.
        constexpr size_t kKeep = 24;
        size_t elideFrom = chain.size(), elideTo = chain.size();
        if (chain.size() > 2 * kKeep + 1) {
            elideFrom = kKeep;
            elideTo = chain.size() - kKeep;
        }
        std::vector<PathStep> steps;
        for (size_t c = 0; c < chain.size(); ++c) {
            const WalkNode& n = d_nodes[chain[c]];
            if (dropRoot && c == 0) {
                continue;
            }
            if (c == elideFrom) {
                PathStep gap;
                gap.kind = StepKind::Elided;
                gap.label = "...";
                gap.note = std::to_string(elideTo - elideFrom) + " steps elided";
                steps.push_back(std::move(gap));
                c = elideTo - 1;
                continue;
            }
            if (n.edge == Edge::AttrDict || n.edge == Edge::CtxOf || n.edge == Edge::NodeOf) {
                // No label of their own; the type of what follows tells the story.
                if (!steps.empty() && n.kind == NodeKind::Python && n.edge != Edge::AttrDict) {
                    steps.back().type = typeName(n);
                }
                continue;
            }
            PathStep step = label(chain[c]);
            step.type = typeName(n);
            describeTensor(n, step);
            steps.push_back(std::move(step));
        }
        appendViewBase(d_nodes[i], steps);
        return steps;
    }

  private:
    // A view shares its base's storage: the path ends at the view, and `._base` shows the
    // (often much larger) tensor whose storage the view keeps alive.
    void appendViewBase(const WalkNode& n, std::vector<PathStep>& steps) {
        at::Tensor t = tensorOf(n);
        try {
            if (!t.defined() || !t.is_view()) {
                return;
            }
            at::Tensor base(t._base());
            if (!base.defined()) {
                return;
            }
            WalkNode baseNode{base.unsafeGetTensorImpl(), n.parent,      0, nullptr,
                              NodeKind::Tensor,           Edge::Variable};
            PathStep step;
            step.kind = StepKind::Base;
            step.label = "._base";
            step.type = "Tensor";
            describeTensor(baseNode, step);
            steps.push_back(std::move(step));
        } catch (...) {
        }
    }

    std::string typeName(const WalkNode& n) {
        switch (n.kind) {
        case NodeKind::Python: {
            auto* obj = static_cast<PyObject*>(const_cast<void*>(n.ptr));
            if (isTensor(obj)) {
                return "Tensor";
            }
            return Py_TYPE(obj)->tp_name;
        }
        case NodeKind::Tensor:
            return "Tensor";
        case NodeKind::Autograd: {
            auto* node = static_cast<Node*>(const_cast<void*>(n.ptr));
            if (isPyNode(node)) {
                PyObject* ctx = torch::autograd::functionToPyObject(node->getptr());
                if (ctx == nullptr) {
                    PyErr_Clear();
                    return "PyNode";
                }
                std::string name = Py_TYPE(ctx)->tp_name;
                Py_DECREF(ctx);
                return name;
            }
            return shortTypeName(typeid(*node).name());
        }
        }
        return "";
    }

    // The tensor a node is (a C++ tensor, or a Python one), or an undefined tensor.
    static at::Tensor tensorOf(const WalkNode& n) {
        if (n.kind == NodeKind::Tensor) {
            return tensorFromImpl(static_cast<const c10::TensorImpl*>(n.ptr));
        }
        auto* obj = static_cast<PyObject*>(const_cast<void*>(n.ptr));
        if (n.kind == NodeKind::Python && isTensor(obj)) {
            return THPVariable_Unpack(obj);
        }
        return at::Tensor();
    }

    void describeTensor(const WalkNode& n, PathStep& step) {
        at::Tensor t = tensorOf(n);
        if (!t.defined()) {
            return;
        }
        TensorInfo info;
        try {
            info.dtype = dtypeName(t.scalar_type());
            auto sizes = t.sizes();
            info.shape.assign(sizes.begin(), sizes.end());
            info.device = t.device().str();
            if (t.has_storage()) {
                info.nbytes = t.storage().nbytes();
                info.block = reinterpret_cast<uintptr_t>(t.storage().data_ptr().get());
                uint64_t own = static_cast<uint64_t>(t.numel()) * t.element_size();
                if (t.is_view() && own < info.nbytes && step.note.empty()) {
                    step.note = "a view: its ._base storage (" + std::to_string(info.nbytes) +
                                " bytes) stays alive with it";
                }
            }
        } catch (...) {
            return; // sizes of nested or symbolic tensors
        }
        step.tensor = std::move(info);
    }

    // The object `parent` refers to `child` through: find the name (dict key, slot) without
    // running user code.
    std::optional<std::string> attributeName(PyObject* parent, PyObject* child) {
        PyObject** dictPtr = _PyObject_GetDictPtr(parent);
        if (dictPtr != nullptr && *dictPtr != nullptr && PyDict_Check(*dictPtr)) {
            Py_ssize_t pos = 0;
            PyObject *key, *value;
            while (PyDict_Next(*dictPtr, &pos, &key, &value)) {
                if (value == child && PyUnicode_Check(key)) {
                    return utf8(key);
                }
            }
        }
        for (PyTypeObject* type = Py_TYPE(parent); type != nullptr; type = type->tp_base) {
            for (PyMemberDef* m = type->tp_members; m != nullptr && m->name != nullptr; ++m) {
                if ((m->type == T_OBJECT || m->type == T_OBJECT_EX) &&
                    *reinterpret_cast<PyObject**>(reinterpret_cast<char*>(parent) + m->offset) ==
                        child) {
                    return std::string(m->name);
                }
            }
        }
        return std::nullopt;
    }

    PathStep label(uint32_t i) {
        const WalkNode& n = d_nodes[i];
        PathStep s;
        auto parentObj = [&]() -> PyObject* {
            return static_cast<PyObject*>(const_cast<void*>(d_nodes[n.parent].ptr));
        };
        switch (n.edge) {
        case Edge::Root: {
            const NamedRoot& r = d_roots[n.index];
            s.kind = r.kind;
            s.label = r.label;
            s.note = r.note;
            return s;
        }
        case Edge::DictValue:
        case Edge::DictKey: {
            PyObject* dict = parentObj();
            Py_ssize_t pos = 0, ordinal = 0;
            PyObject *key = nullptr, *value = nullptr;
            while (PyDict_Next(dict, &pos, &key, &value) && ordinal < n.index) {
                ++ordinal;
            }
            const WalkNode& dictNode = d_nodes[n.parent];
            bool attributes = dictNode.edge == Edge::AttrDict;
            bool ctxAttributes = attributes && dictNode.parent != kNoParent &&
                                 d_nodes[dictNode.parent].kind == NodeKind::Python &&
                                 isCustomFunctionCtx(static_cast<PyObject*>(
                                     const_cast<void*>(d_nodes[dictNode.parent].ptr)));
            std::string name = key != nullptr && PyUnicode_Check(key) ? utf8(key) : "";
            if (n.edge == Edge::DictKey) {
                s.kind = StepKind::Key;
                s.label = "<key " + (key ? keyText(key) : std::string("?")) + ">";
            } else if (attributes && isIdentifier(name)) {
                s.kind = ctxAttributes ? StepKind::Ctx : StepKind::Attr;
                s.label = "." + name;
            } else {
                s.kind = StepKind::Key;
                s.label = "[" + (key ? keyText(key) : std::string("?")) + "]";
            }
            return s;
        }
        case Edge::SeqItem:
            s.kind = StepKind::Index;
            s.label = "[" + std::to_string(n.index) + "]";
            return s;
        case Edge::Closure: {
            s.kind = StepKind::Closure;
            s.label = ".__closure__[" + std::to_string(n.index) + "].cell_contents";
            auto* f = reinterpret_cast<PyFunctionObject*>(parentObj());
            PyObject* freevars = PyObject_GetAttrString(f->func_code, "co_freevars");
            if (freevars != nullptr && PyTuple_Check(freevars) &&
                static_cast<Py_ssize_t>(n.index) < PyTuple_GET_SIZE(freevars)) {
                s.note = "closure variable '" + utf8(PyTuple_GET_ITEM(freevars, n.index)) +
                         "' of " + utf8(f->func_qualname);
            }
            Py_XDECREF(freevars);
            PyErr_Clear();
            return s;
        }
        case Edge::Ref: {
            if (n.name != nullptr) {
                s.kind = StepKind::Attr;
                s.label = std::string(".") + n.name;
                return s;
            }
            PyObject* parent = parentObj();
            auto name = attributeName(parent, static_cast<PyObject*>(const_cast<void*>(n.ptr)));
            if (name) {
                s.kind = StepKind::Attr;
                s.label = "." + *name;
            } else if (std::strcmp(Py_TYPE(parent)->tp_name, "functools._lru_cache_wrapper") == 0) {
                s.kind = StepKind::Ref;
                s.label = "<lru_cache entries>";
            } else {
                s.kind = StepKind::Ref;
                s.label = std::string("<referent of ") + Py_TYPE(parent)->tp_name + ">";
            }
            return s;
        }
        case Edge::GradFn:
            s.kind = StepKind::GradFn;
            s.label = ".grad_fn";
            return s;
        case Edge::NextFunction:
            s.kind = StepKind::NextFunctions;
            s.label = ".next_functions[" + std::to_string(n.index) + "][0]";
            return s;
        case Edge::Saved:
            s.kind = StepKind::Saved;
            s.label = std::string(".") + n.name;
            return s;
        case Edge::SavedList:
            s.kind = StepKind::Saved;
            s.label = std::string(".") + n.name + "[" + std::to_string(n.index) + "]";
            return s;
        case Edge::CtxSaved:
            s.kind = StepKind::Ctx;
            s.label = ".saved_tensors[" + std::to_string(n.index) + "]";
            return s;
        case Edge::Variable:
            s.kind = StepKind::Attr;
            s.label = ".variable";
            return s;
        case Edge::Grad:
            s.kind = StepKind::Grad;
            s.label = ".grad";
            return s;
        case Edge::AttrDict:
        case Edge::CtxOf:
        case Edge::NodeOf:
            break;
        }
        return s;
    }

    const std::vector<WalkNode>& d_nodes;
    const std::vector<NamedRoot>& d_roots;
};

// gc's own computation, restricted to the objects the first walk did not reach: those whose
// reference count exceeds the references held by other such objects are held from outside
// (C code, library state); everything they reach is alive; the rest is cyclic garbage.
struct Unreached {
    std::vector<PyObject*> garbage;
    std::vector<PyObject*> external;
};

Unreached classifyUnreached(PyObject* objects, const PointerSet& visited) {
    Unreached out;
    std::unordered_map<PyObject*, Py_ssize_t> refs;
    std::vector<PyObject*> candidates;
    Py_ssize_t n = PyList_GET_SIZE(objects);
    for (Py_ssize_t k = 0; k < n; ++k) {
        PyObject* o = PyList_GET_ITEM(objects, k);
        if (!visited.contains(tag(o, NodeKind::Python))) {
            candidates.push_back(o);
            refs.emplace(o, Py_REFCNT(o) - 1); // minus the list gc.get_objects() returned
        }
    }
    for (PyObject* o : candidates) {
        traverseproc traverse = Py_TYPE(o)->tp_traverse;
        if (traverse == nullptr) {
            continue;
        }
        traverse(
            o,
            [](PyObject* child, void* arg) -> int {
                auto* r = static_cast<std::unordered_map<PyObject*, Py_ssize_t>*>(arg);
                auto it = r->find(child);
                if (it != r->end()) {
                    --it->second;
                }
                return 0;
            },
            &refs);
    }
    std::unordered_set<PyObject*> alive;
    std::deque<PyObject*> queue;
    for (PyObject* o : candidates) {
        if (refs[o] > 0) {
            out.external.push_back(o);
            alive.insert(o);
            queue.push_back(o);
        }
    }
    while (!queue.empty()) {
        PyObject* o = queue.front();
        queue.pop_front();
        traverseproc traverse = Py_TYPE(o)->tp_traverse;
        if (traverse == nullptr) {
            continue;
        }
        struct Ctx {
            std::unordered_map<PyObject*, Py_ssize_t>* refs;
            std::unordered_set<PyObject*>* alive;
            std::deque<PyObject*>* queue;
        } ctx{&refs, &alive, &queue};
        traverse(
            o,
            [](PyObject* child, void* arg) -> int {
                auto* c = static_cast<Ctx*>(arg);
                if (c->refs->count(child) && c->alive->insert(child).second) {
                    c->queue->push_back(child);
                }
                return 0;
            },
            &ctx);
    }
    for (PyObject* o : candidates) {
        if (!alive.count(o)) {
            out.garbage.push_back(o);
        }
    }
    return out;
}

} // namespace

std::unordered_map<uintptr_t, BlockPath>
RetainingPathFinder::explain(const std::vector<uintptr_t>& blocks) {
    auto started = std::chrono::steady_clock::now();
    Paths result;
    std::unordered_set<uintptr_t> targets(blocks.begin(), blocks.end());
    if (targets.empty()) {
        return result;
    }
    PointerSet visited(1 << 21, kVisitedLoadQuarters);
    d_stats = WalkStats{};

    std::unordered_set<uintptr_t> unreached = walkFromNamedRoots(targets, visited, result);
    if (!unreached.empty()) {
        d_stats.secondPhase = true;
        PyObject* gc = PyImport_ImportModule("gc");
        PyObject* objects = gc ? PyObject_CallMethod(gc, "get_objects", nullptr) : nullptr;
        Py_XDECREF(gc);
        if (objects != nullptr && PyList_Check(objects)) {
            Unreached classes = classifyUnreached(objects, visited);
            explainCycles(classes.garbage, unreached, visited, result);
            if (!unreached.empty()) {
                explainOutsideRoots(classes.external, unreached, visited, result);
            }
        } else {
            PyErr_Clear();
        }
        Py_XDECREF(objects);
        markHeldOnlyFromCpp(unreached, result);
    }
    d_stats.reached = result.size() - unreached.size();
    d_stats.unreached = unreached.size();
    d_stats.seconds =
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
    PathBuilder builder(walk.nodes(), d_roots);
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

// Phase 2a: reference cycles that only gc.collect() frees. The path starts at a member of the
// cycle and shows the way around it back to that member before it goes on to the tensor.
void RetainingPathFinder::explainCycles(const std::vector<PyObject*>& garbage,
                                        std::unordered_set<uintptr_t>& unreached,
                                        PointerSet& visited,
                                        Paths& result) {
    std::vector<NamedRoot> cycleRoots;
    for (PyObject* o : garbage) {
        cycleRoots.push_back({"<reference cycle>", StepKind::Root,
                              "unreachable: only a reference cycle keeps it; gc.collect() "
                              "frees it",
                              o});
    }
    Walk cycles(unreached, visited, d_stats);
    cycles.addRoots(cycleRoots);
    cycles.run();
    PathBuilder cycleBuilder(cycles.nodes(), cycleRoots);
    for (const auto& [block, node] : cycles.found()) {
        std::vector<PathStep> steps = cycleBuilder.build(node);
        uint32_t rootNode = rootOf(cycles.nodes(), node);
        PyObject* rootObj = static_cast<PyObject*>(const_cast<void*>(cycles.nodes()[rootNode].ptr));
        PointerSet loopVisited(1 << 16, kVisitedLoadQuarters);
        std::unordered_set<uintptr_t> none;
        WalkStats scratch;
        Walk loop(none, loopVisited, scratch);
        std::vector<NamedRoot> loopRoots = {{"", StepKind::Root, "", rootObj}};
        loop.addRoot(rootObj, 0);
        loop.run(rootObj, 200000);
        if (loop.goalNode() != kNoParent) {
            PathBuilder loopBuilder(loop.nodes(), loopRoots);
            std::vector<PathStep> around = loopBuilder.build(loop.goalNode(), true);
            if (!steps.empty()) {
                steps.insert(steps.begin() + 1, around.begin(), around.end());
            }
        }
        result[block] = BlockPath{Retention::Cycle, std::move(steps)};
        unreached.erase(block);
    }
}

// Phase 2b: held by objects outside the roots: library state, C extensions, or (a tensor or a
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
    PathBuilder outsideBuilder(outside.nodes(), outsideRoots);
    for (const auto& [block, node] : outside.found()) {
        uint32_t rootNode = rootOf(outside.nodes(), node);
        auto* rootObj = static_cast<PyObject*>(const_cast<void*>(outside.nodes()[rootNode].ptr));
        bool cpp = isCustomFunctionCtx(rootObj) || isTensor(rootObj);
        result[block] =
            BlockPath{cpp ? Retention::CppOnly : Retention::Unnamed, outsideBuilder.build(node)};
        unreached.erase(block);
    }
}

// The last resort, once every Python edge was followed: no Python object reaches the block.
void RetainingPathFinder::markHeldOnlyFromCpp(const std::unordered_set<uintptr_t>& unreached,
                                              Paths& result) {
    for (uintptr_t b : unreached) {
        PathStep s;
        s.kind = StepKind::Root;
        s.label = "<held only from C++>";
        s.note = "no Python object reaches it: an autograd graph or cache in C++ keeps it";
        result[b] = BlockPath{Retention::CppOnly, {s}};
    }
}

} // namespace torchleak::python
