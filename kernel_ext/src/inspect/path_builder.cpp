#include "inspect/path_builder.h"

#include "inspect/frame_capture.h"
#include "inspect/hook_anchors.h"
#include "inspect/tensor_index.h"
#include "inspect/torch_objects.h"
#include "torchleak/display_text.h"
#include "torchleak/stack_table.h"

#include <algorithm>
#include <cstring>
#include <structmember.h>
#include <torch/csrc/autograd/functions/accumulate_grad.h>
#include <torch/csrc/autograd/python_cpp_function.h>
#include <torch/csrc/autograd/python_variable.h>

namespace torchleak::python {

using torch::autograd::Node;

namespace {

// A step's notes, "; "-separated: what the label cannot say, each rule adding its own.
void appendNote(PathStep& step, const std::string& note) {
    if (!step.note.empty()) {
        step.note += "; ";
    }
    step.note += note;
}

// The public methods a heap type (and the heap types it derives from) defines whose names say
// they release what the object holds, in MRO order, read from the types' own dicts.
// A method a fix may tell the user to call as `obj.name()`: every parameter after self has a
// default. Read from its code object and defaults, without calling or inspecting it in Python.
bool callableWithoutArguments(PyObject* function) {
    auto* code = reinterpret_cast<PyCodeObject*>(PyFunction_GET_CODE(function));
    PyObject* defaults = PyFunction_GET_DEFAULTS(function);
    PyObject* kwDefaults = PyFunction_GET_KW_DEFAULTS(function);
    const Py_ssize_t positional = code->co_argcount;
    const Py_ssize_t defaulted =
        defaults && PyTuple_Check(defaults) ? PyTuple_GET_SIZE(defaults) : 0;
    const Py_ssize_t keywordOnly = code->co_kwonlyargcount;
    const Py_ssize_t keywordDefaulted =
        kwDefaults && PyDict_Check(kwDefaults) ? PyDict_Size(kwDefaults) : 0;
    return positional - defaulted <= 1 && keywordOnly <= keywordDefaulted;
}

// Each function (name, function) in the class dicts of the object's heap-type class and bases,
// in MRO order, until `visit` returns false: read without attribute access, so no user code
// runs (a metaclass's __getattribute__ or a property on __mro__ is never called).
template <typename Visit> void forEachClassFunction(PyObject* obj, Visit visit) {
    PyTypeObject* type = Py_TYPE(obj);
    if (!(type->tp_flags & Py_TPFLAGS_HEAPTYPE) || type->tp_mro == nullptr ||
        !PyTuple_Check(type->tp_mro)) {
        return;
    }
    for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(type->tp_mro); ++k) {
        auto* base = reinterpret_cast<PyTypeObject*>(PyTuple_GET_ITEM(type->tp_mro, k));
        if (!(base->tp_flags & Py_TPFLAGS_HEAPTYPE) || base->tp_dict == nullptr) {
            continue;
        }
        Py_ssize_t pos = 0;
        PyObject *key = nullptr, *value = nullptr;
        while (PyDict_Next(base->tp_dict, &pos, &key, &value)) {
            if (PyUnicode_Check(key) && PyFunction_Check(value) && !visit(key, value)) {
                return;
            }
        }
    }
}

std::vector<std::string> releaseMethods(PyObject* obj) {
    std::vector<std::string> names;
    auto releasing = [](const std::string& name) {
        for (const char* exact : {"clear", "reset", "close", "release", "free"}) {
            if (name == exact) {
                return true;
            }
        }
        for (const char* prefix : {"clear_", "reset_", "release_", "delete_", "remove_", "free_"}) {
            if (name.rfind(prefix, 0) == 0) {
                return true;
            }
        }
        return false;
    };
    constexpr size_t kMost = 4;
    forEachClassFunction(obj, [&](PyObject* key, PyObject* function) {
        if (callableWithoutArguments(function)) {
            std::string name = utf8(key);
            if (releasing(name) && std::find(names.begin(), names.end(), name) == names.end()) {
                names.push_back(std::move(name));
            }
        }
        return names.size() < kMost;
    });
    return names;
}

// Where the Python methods of the object's class and bases are written (file and `def` line,
// from each function's code object): the loop-read check reads them for uses of an attribute
// the fix would clear.
std::vector<MethodSource> methodSources(PyObject* obj) {
    std::vector<MethodSource> out;
    constexpr size_t kMost = 128;
    forEachClassFunction(obj, [&](PyObject* key, PyObject* function) {
        auto* code = reinterpret_cast<PyCodeObject*>(PyFunction_GET_CODE(function));
        if (code != nullptr && PyCode_Check(code) && PyUnicode_Check(code->co_filename)) {
            out.push_back(MethodSource{utf8(key), utf8(code->co_filename), code->co_firstlineno});
        }
        return out.size() < kMost;
    });
    return out;
}

// A class of the user's (or a library's, like torchmetrics' Metric) that defines reset() says
// how it wants its accumulated state dropped. Looked up in the type's MRO dicts: no
// attribute access, no user code.
bool definesReset(PyObject* obj) {
    static PyObject* name = PyUnicode_InternFromString("reset");
    if (name == nullptr || !(Py_TYPE(obj)->tp_flags & Py_TPFLAGS_HEAPTYPE)) {
        return false;
    }
    PyObject* found = _PyType_Lookup(Py_TYPE(obj), name);
    return found != nullptr && PyFunction_Check(found);
}

} // namespace

std::vector<PathStep> PathBuilder::build(uint32_t i, bool dropRoot) {
    std::vector<uint32_t> chain;
    for (uint32_t k = i; k != kNoParent; k = d_nodes[k].parent) {
        chain.push_back(k);
    }
    std::reverse(chain.begin(), chain.end());
    // A path through a long graph (an RNN unrolled over thousands of steps) keeps the first and
    // last steps of its run through the graph; that run's middle is summarised in one step. The
    // Python part stays whole: it is the holder's name, which a fix's code spells (a leak 26
    // attributes deep lost its `.clear()` to "root.child_level_0...."). Only a chain of Python
    // objects past kLongest (a linked list thousands long) is cut the same way, in its middle.
    constexpr size_t kKeep = 24;
    constexpr size_t kLongest = 400;
    size_t elideFrom = chain.size(), elideTo = chain.size();
    size_t runFrom = 0, bestFrom = 0, bestLength = 0;
    for (size_t c = 0; c <= chain.size(); ++c) {
        if (c < chain.size() && d_nodes[chain[c]].kind == NodeKind::Autograd) {
            continue;
        }
        if (c - runFrom > bestLength) {
            bestFrom = runFrom;
            bestLength = c - runFrom;
        }
        runFrom = c + 1;
    }
    if (bestLength > 2 * kKeep + 1) {
        elideFrom = bestFrom + kKeep;
        elideTo = bestFrom + bestLength - kKeep;
    } else if (chain.size() > kLongest) {
        elideFrom = kLongest / 2;
        elideTo = chain.size() - kLongest / 2;
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
        if (n.kind == NodeKind::Python) {
            step.object = reinterpret_cast<uintptr_t>(n.ptr);
            // From the C struct, never len(): a subclass's __len__ is user code.
            auto* object = static_cast<PyObject*>(const_cast<void*>(n.ptr));
            if (PyList_Check(object)) {
                step.entries = PyList_GET_SIZE(object);
            } else if (PyDict_Check(object)) {
                step.entries = PyDict_GET_SIZE(object);
            } else if (PyAnySet_Check(object)) {
                step.entries = PySet_GET_SIZE(object);
            } else if (int64_t capacity = dequeCapacity(object); capacity >= 0) {
                step.entries = Py_SIZE(object); // a deque's length is its object header's
                step.capacity = capacity;
            }
        }
        describeTensor(n, step);
        noteClass(n, step);
        noteModuleOfNode(n, step);
        steps.push_back(std::move(step));
    }
    noteGraphOfLastTensor(d_nodes[i], steps);
    appendViewBase(d_nodes[i], steps);
    return steps;
}

void PathBuilder::appendViewBase(const WalkNode& n, std::vector<PathStep>& steps) {
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

std::string PathBuilder::typeName(const WalkNode& n) {
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

at::Tensor PathBuilder::tensorOf(const WalkNode& n) {
    if (n.kind == NodeKind::Tensor) {
        return tensorFromImpl(static_cast<const c10::TensorImpl*>(n.ptr));
    }
    auto* obj = static_cast<PyObject*>(const_cast<void*>(n.ptr));
    if (n.kind == NodeKind::Python && isTensor(obj)) {
        return THPVariable_Unpack(obj);
    }
    return at::Tensor();
}

void PathBuilder::describeTensor(const WalkNode& n, PathStep& step) {
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

std::optional<std::string> PathBuilder::attributeName(PyObject* parent, PyObject* child) {
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

std::optional<std::string> PathBuilder::keyPath(PyObject* key) {
    if (!d_keysInProgress.insert(key).second) {
        return std::nullopt; // the key's own path goes through the entry it keys
    }
    struct Done {
        std::unordered_set<PyObject*>& keys;
        PyObject* key;
        ~Done() { keys.erase(key); }
    } done{d_keysInProgress, key};
    // The parameter's path through its module first: the name the user gave the model.
    if (d_owners != nullptr && isTensor(key)) {
        auto owner = d_owners->find(THPVariable_Unpack(key).unsafeGetTensorImpl());
        if (owner != d_owners->end() && !owner->second.path.empty()) {
            return owner->second.path;
        }
    }
    if (d_pythonNodes.empty()) {
        for (uint32_t k = 0; k < d_nodes.size(); ++k) {
            if (d_nodes[k].kind == NodeKind::Python) {
                d_pythonNodes.emplace(d_nodes[k].ptr, k);
            }
        }
    }
    auto it = d_pythonNodes.find(key);
    if (it != d_pythonNodes.end() && d_nodes[it->second].edge != Edge::DictKey) {
        std::vector<PathStep> steps = build(it->second);
        if (!steps.empty() && steps.front().label.front() != '<') {
            return pathText(normalizePath(std::move(steps)));
        }
    }
    return std::nullopt;
}

// A tensor kept after backward() (losses.append(loss)) holds no saved activations any more, but
// its grad_fn still keeps the graph's nodes: the path ends at it, so say so there.
void PathBuilder::noteGraphOfLastTensor(const WalkNode& n, std::vector<PathStep>& steps) {
    if (steps.empty() || !steps.back().tensor) {
        return;
    }
    bool throughGraph = std::any_of(steps.begin(), steps.end(),
                                    [](const PathStep& s) { return isAutogradStep(s.kind); });
    if (throughGraph) {
        return; // the path already shows the graph
    }
    at::Tensor t = tensorOf(n);
    if (t.defined() && t.grad_fn()) {
        PathStep& last = steps.back();
        appendNote(last, std::string(kKeepsGraphNote) + " (" +
                             shortTypeName(typeid(*t.grad_fn()).name()) + ")");
    }
}

void PathBuilder::noteClass(const WalkNode& n, PathStep& step) {
    if (n.kind != NodeKind::Python) {
        return;
    }
    auto* obj = static_cast<PyObject*>(const_cast<void*>(n.ptr));
    if (!isTensor(obj) && definesReset(obj)) {
        appendNote(step, kDefinesResetNote);
    }
    if (!isTensor(obj)) {
        step.release_methods = releaseMethods(obj);
        step.methods = methodSources(obj);
        if (d_origins != nullptr) {
            if (const ClassOrigin& origin = d_origins->of(Py_TYPE(obj)); origin.package) {
                step.package = origin.top;
            }
        }
    }
}

namespace {

// The parameter an edge accumulates into, when it is one the owners know.
const std::string* ownerOfEdge(const torch::autograd::Edge& edge, const ParameterOwners& owners) {
    auto* acc = dynamic_cast<torch::autograd::AccumulateGrad*>(edge.function.get());
    if (acc == nullptr || !acc->variable.defined()) {
        return nullptr;
    }
    auto it = owners.find(acc->variable.unsafeGetTensorImpl());
    return it != owners.end() ? &it->second.module : nullptr;
}

} // namespace

// `AddmmBackward0` made by `model[7] (Linear)`: a node's own inputs include the module's
// parameters (the bias directly, the weight through the one-input TBackward0 of `weight.t()`).
// Only those two shapes: going further up the graph would name the module of an earlier layer.
void PathBuilder::noteModuleOfNode(const WalkNode& n, PathStep& step) {
    if (d_owners == nullptr || d_owners->empty() || n.kind != NodeKind::Autograd) {
        return;
    }
    auto* node = static_cast<Node*>(const_cast<void*>(n.ptr));
    // Every module whose parameters the node takes: one for a layer's own node, several for a
    // graph torch.compile fused (CompiledFunctionBackward takes the whole model's).
    std::vector<std::string> owners;
    for (const torch::autograd::Edge& edge : node->next_edges()) {
        const std::string* owner = ownerOfEdge(edge, *d_owners);
        if (owner == nullptr && edge.function && edge.function->num_inputs() == 1 &&
            edge.function->next_edges().size() == 1) {
            owner = ownerOfEdge(edge.function->next_edges().front(), *d_owners);
        }
        if (owner != nullptr && std::find(owners.begin(), owners.end(), *owner) == owners.end()) {
            owners.push_back(*owner);
        }
    }
    if (owners.empty()) {
        return;
    }
    appendNote(step, "made by " + listFirst(owners, 3, "more module(s)"));
}

} // namespace torchleak::python
