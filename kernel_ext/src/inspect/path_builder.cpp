#include "inspect/path_builder.h"

#include "inspect/frame_capture.h"
#include "inspect/hook_anchors.h"
#include "inspect/tensor_index.h"
#include "inspect/torch_objects.h"
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

// collections.deque, looked up once (the collections module is loaded at interpreter start).
PyTypeObject* dequeType() {
    static PyTypeObject* type = []() -> PyTypeObject* {
        PyObject* collections = PyImport_ImportModule("_collections");
        PyObject* deque = collections ? PyObject_GetAttrString(collections, "deque") : nullptr;
        Py_XDECREF(collections);
        if (deque == nullptr || !PyType_Check(deque)) {
            PyErr_Clear();
            Py_XDECREF(deque);
            return nullptr;
        }
        return reinterpret_cast<PyTypeObject*>(deque); // kept: a static type, never freed
    }();
    return type;
}

// A str key as a Python literal.
std::string keyTextOf(const std::string& s) {
    std::string out = "'";
    for (char c : s) {
        if (c == '\'' || c == '\\') {
            out += '\\';
        }
        out += c;
    }
    return out + "'";
}

// Keys that print as Python literals; anything else would need its __repr__ (user code).
std::string keyText(PyObject* key) {
    if (PyUnicode_Check(key)) {
        return keyTextOf(utf8(key));
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

// `.f_locals['logits']` with the note "local 'logits' in Classifier.forward": Python that
// reads the value back from the frame (or from a suspended generator's frame).
PathStep frameLocalStep(PyObject* owner, uint32_t index, QualifiedNames& names) {
    PathStep s;
    s.kind = StepKind::Frame;
    auto name = localName(owner, index, names);
    std::string variable = name ? name->name : "local " + std::to_string(index);
    std::string via;
    std::string where = name ? name->function : std::string("?");
    switch (localsOwner(owner)) {
    case LocalsOwner::Generator:
        via = ".gi_frame";
        where = "suspended generator " + where;
        break;
    case LocalsOwner::Coroutine:
        via = ".cr_frame";
        where = "suspended coroutine " + where;
        break;
    case LocalsOwner::AsyncGenerator:
        via = ".ag_frame";
        where = "suspended async generator " + where;
        break;
    case LocalsOwner::Frame:
    case LocalsOwner::None:
        break;
    }
    s.label = via + ".f_locals[" + keyTextOf(variable) + "]";
    s.note = "local '" + variable + "' in " + where;
    return s;
}

} // namespace

std::vector<PathStep> PathBuilder::build(uint32_t i, bool dropRoot) {
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
        noteResetMethod(n, step);
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

PathStep PathBuilder::label(uint32_t i) {
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
            std::string text = key ? keyText(key) : std::string("?");
            if (key != nullptr && text.front() == '<') {
                if (auto path = keyPath(key)) {
                    text = *path; // optimizer.state[model.fc.weight]
                }
            }
            s.label = "[" + text + "]";
        }
        return s;
    }
    case Edge::SeqItem: {
        s.kind = StepKind::Index;
        s.label = "[" + std::to_string(n.index) + "]";
        // A functools.partial's bound argument, by the parameter it binds.
        const WalkNode& tuple = d_nodes[n.parent];
        if (tuple.parent != kNoParent && d_nodes[tuple.parent].kind == NodeKind::Python) {
            auto* owner = static_cast<PyObject*>(const_cast<void*>(d_nodes[tuple.parent].ptr));
            if (isPartial(owner)) {
                std::string parameter = partialArgumentName(owner, n.index);
                if (!parameter.empty()) {
                    s.note = "argument '" + parameter + "' of " + callableText(owner);
                }
            }
        }
        return s;
    }
    case Edge::Closure: {
        // By the free variable's name: `_visit.<cell batch_tree>`; the note keeps the Python
        // that reads it back.
        s.kind = StepKind::Closure;
        std::string cell = ".__closure__[" + std::to_string(n.index) + "].cell_contents";
        s.label = cell;
        auto* f = reinterpret_cast<PyFunctionObject*>(parentObj());
        PyObject* freevars = PyObject_GetAttrString(f->func_code, "co_freevars");
        if (freevars != nullptr && PyTuple_Check(freevars) &&
            static_cast<Py_ssize_t>(n.index) < PyTuple_GET_SIZE(freevars)) {
            std::string variable = utf8(PyTuple_GET_ITEM(freevars, n.index));
            s.label = ".<cell " + variable + ">";
            s.note = "closure variable '" + variable + "' of " + utf8(f->func_qualname) +
                     " (read it as " + cell.substr(1) + ")";
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
        } else if (dequeType() != nullptr && PyObject_TypeCheck(parent, dequeType())) {
            // A deque's tp_traverse visits its items in order: the ordinal is the index.
            s.kind = StepKind::Index;
            s.label = "[" + std::to_string(n.index) + "]";
        } else if (PyAnySet_Check(parent)) {
            // A set's elements have no name and no order; their place in its iteration order
            // tells them apart (each kept tensor is one more element: the set is what grows).
            s.kind = StepKind::Index;
            s.label = "<element " + std::to_string(n.index) + ">";
            s.note = "an element of the " + std::string(Py_TYPE(parent)->tp_name) +
                     " (numbered in its iteration order)";
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
    case Edge::FrameLocal:
        return frameLocalStep(parentObj(), n.index, d_names);
    case Edge::SavedPacked:
        s.kind = n.name != nullptr ? StepKind::Saved : StepKind::Ctx;
        s.label = n.name != nullptr ? std::string(".") + n.name : std::string(".saved_tensors");
        if (n.index != kNoIndex) {
            s.label += "[" + std::to_string(n.index) + "]";
        }
        s.note = "what a torch.autograd.graph.saved_tensors_hooks pack hook returned; the "
                 "graph keeps it in C++";
        return s;
    case Edge::SavedUnpackHook: {
        std::string variable = n.name != nullptr ? std::string(".") + n.name : ".saved_tensors";
        if (n.index != kNoIndex) {
            variable += "[" + std::to_string(n.index) + "]";
        }
        s.kind = StepKind::Ref;
        s.label = "<unpack hook of " + variable + ": " +
                  callableText(static_cast<PyObject*>(const_cast<void*>(n.ptr))) + ">";
        s.note = "the torch.autograd.graph.saved_tensors_hooks unpack hook backward calls for " +
                 variable.substr(1) + "; the graph keeps it, and what it captured, in C++";
        return s;
    }
    case Edge::ScriptConstant:
        s.kind = StepKind::Ref;
        s.label = std::string("<TorchScript constant of ") + n.name + ">";
        s.note = "torch.jit.trace captured this tensor as a constant of " + std::string(n.name) +
                 "'s compiled graph, which keeps it in C++";
        return s;
    case Edge::NodeHooks:
        s.kind = StepKind::Ref;
        s.label = std::string("<") + n.name + ">";
        s.note = std::string("Python ") + n.name +
                 " kept by this autograd node in C++: they live as long as its graph";
        return s;
    case Edge::AttrDict:
    case Edge::CtxOf:
    case Edge::NodeOf:
        break;
    }
    return s;
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

void PathBuilder::noteResetMethod(const WalkNode& n, PathStep& step) {
    if (n.kind != NodeKind::Python) {
        return;
    }
    auto* obj = static_cast<PyObject*>(const_cast<void*>(n.ptr));
    if (!isTensor(obj) && definesReset(obj)) {
        appendNote(step, kDefinesResetNote);
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
    const std::string* owner = nullptr;
    for (const torch::autograd::Edge& edge : node->next_edges()) {
        owner = ownerOfEdge(edge, *d_owners);
        if (owner == nullptr && edge.function && edge.function->num_inputs() == 1 &&
            edge.function->next_edges().size() == 1) {
            owner = ownerOfEdge(edge.function->next_edges().front(), *d_owners);
        }
        if (owner != nullptr) {
            break;
        }
    }
    if (owner != nullptr) {
        appendNote(step, "made by " + *owner);
    }
}

} // namespace torchleak::python
