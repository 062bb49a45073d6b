// How each step of a retaining path is labelled (PathBuilder::label and its labellers): by
// tables of the edge kinds, the text Python would use to read the step back, and the notes that
// say what a label cannot. Beside path_builder.cpp, which chains the steps and notes what they
// are (tensors, modules, graphs).

#include "inspect/frame_capture.h"
#include "inspect/hook_anchors.h"
#include "inspect/path_builder.h"
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

namespace {

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

} // namespace

// Only the exact type: its getter is C, where a subclass could override `maxlen` in Python.
int64_t dequeCapacity(PyObject* deque) {
    if (dequeType() == nullptr || Py_TYPE(deque) != dequeType()) {
        return -1;
    }
    PyObject* maxlen = PyObject_GetAttrString(deque, "maxlen");
    int64_t capacity = -1;
    if (maxlen != nullptr && PyLong_Check(maxlen)) {
        capacity = PyLong_AsLongLong(maxlen);
    }
    Py_XDECREF(maxlen);
    PyErr_Clear();
    return capacity;
}

namespace {

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

std::string keyText(PyObject* key);

// A tuple of keys that print as literals ("(3, 64)", "('en', 512)", "(7,)"), or a torch.Size
// ("torch.Size([3, 64])", read from the tuple it is): caches keyed by shape. Every entry of
// such a dict read "<tuple key>", one label for all, so the dict never fanned out into a
// growing holder. Anything else in it, or a tuple too big to be a label, gives "".
std::string tupleKeyText(PyObject* key, int depth) {
    constexpr Py_ssize_t kMostItems = 8;
    constexpr size_t kMostChars = 80;
    const bool size = std::strcmp(Py_TYPE(key)->tp_name, "torch.Size") == 0;
    if (depth > 2 || !(PyTuple_CheckExact(key) || (size && PyTuple_Check(key))) ||
        PyTuple_GET_SIZE(key) > kMostItems) {
        return "";
    }
    std::string text = size ? "torch.Size([" : "(";
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(key); ++i) {
        PyObject* item = PyTuple_GET_ITEM(key, i);
        std::string part = PyTuple_Check(item) ? tupleKeyText(item, depth + 1) : keyText(item);
        if (part.empty() || part[0] == '<' || (size && !PyLong_CheckExact(item))) {
            return "";
        }
        text += (i > 0 ? ", " : "") + part;
        if (text.size() > kMostChars) {
            return "";
        }
    }
    if (!size && PyTuple_GET_SIZE(key) == 1) {
        text += ',';
    }
    return text + (size ? "])" : ")");
}

// Keys that print as Python literals; anything else would need its __repr__ (user code).
std::string keyText(PyObject* key) {
    if (PyUnicode_Check(key)) {
        return keyTextOf(utf8(key));
    }
    if (PyTuple_Check(key)) {
        if (std::string text = tupleKeyText(key, 0); !text.empty()) {
            return text;
        }
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
    if (PyWeakref_CheckRef(key)) {
        // A WeakKeyDictionary's key: what it refers to is what keeps the entry (`<weakref to
        // Key>`); its type is read from the object, no user code runs.
        std::string referent = "a dead object";
#if PY_VERSION_HEX >= 0x030D0000
        PyObject* target = nullptr;
        if (PyWeakref_GetRef(key, &target) > 0) {
            referent = Py_TYPE(target)->tp_name;
            Py_DECREF(target);
        }
        PyErr_Clear();
#else
        PyObject* target = PyWeakref_GetObject(key); // borrowed
        if (target != nullptr && target != Py_None) {
            referent = Py_TYPE(target)->tp_name;
        }
        PyErr_Clear();
#endif
        return "<weakref to " + referent + " key>";
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

namespace {

// Edges whose label is fixed text around the node's name and index: `before`, then the node's
// name when `named`, then `[index]` when `indexed`, then `after`.
struct FixedEdgeLabel {
    Edge edge;
    StepKind kind;
    const char* before;
    bool named;
    bool indexed;
    const char* after;
};

constexpr FixedEdgeLabel kFixedEdgeLabels[] = {
    {Edge::GradFn, StepKind::GradFn, ".grad_fn", false, false, ""},
    {Edge::NextFunction, StepKind::NextFunctions, ".next_functions", false, true, "[0]"},
    {Edge::Saved, StepKind::Saved, ".", true, false, ""},               // ._saved_self
    {Edge::SavedList, StepKind::Saved, ".", true, true, ""},            // ._saved_tensors[1]
    {Edge::CtxSaved, StepKind::Ctx, ".saved_tensors", false, true, ""}, // ctx.saved_tensors[0]
    {Edge::Variable, StepKind::Attr, ".variable", false, false, ""},    // AccumulateGrad's
    {Edge::Grad, StepKind::Grad, ".grad", false, false, ""},
};

// Steps of the walk that Python spells as nothing (an object's __dict__, a custom Function's
// ctx, a Python node's C++ node): no label of their own, normalizePath drops them.
constexpr Edge kUnlabelledEdges[] = {Edge::AttrDict, Edge::CtxOf, Edge::NodeOf};

PathStep fixedStep(const FixedEdgeLabel& row, const WalkNode& n) {
    PathStep s;
    s.kind = row.kind;
    s.label = row.before;
    if (row.named && n.name != nullptr) {
        s.label += n.name;
    }
    if (row.indexed) {
        s.label += "[" + std::to_string(n.index) + "]";
    }
    s.label += row.after;
    return s;
}

// `.name` or `.saved_tensors`, then `[index]` when it has one: a saved variable as Python reads
// it from the node.
std::string savedVariableText(const WalkNode& n) {
    std::string text =
        n.name != nullptr ? std::string(".") + n.name : std::string(".saved_tensors");
    if (n.index != kNoIndex) {
        text += "[" + std::to_string(n.index) + "]";
    }
    return text;
}

} // namespace

PyObject* PathBuilder::parentObject(const WalkNode& n) const {
    return static_cast<PyObject*>(const_cast<void*>(d_nodes[n.parent].ptr));
}

PathStep PathBuilder::label(uint32_t i) {
    // The edges whose label needs the objects at either end, each by a labeller of its own.
    using Labeller = PathStep (PathBuilder::*)(const WalkNode&);
    static constexpr std::pair<Edge, Labeller> kLabellers[] = {
        {Edge::Root, &PathBuilder::labelRoot},
        {Edge::DictValue, &PathBuilder::labelDictEntry},
        {Edge::DictKey, &PathBuilder::labelDictEntry},
        {Edge::SeqItem, &PathBuilder::labelSequenceItem},
        {Edge::Closure, &PathBuilder::labelClosureCell},
        {Edge::Ref, &PathBuilder::labelReferent},
        {Edge::FrameLocal, &PathBuilder::labelFrameLocal},
        {Edge::SavedPacked, &PathBuilder::labelSavedPacked},
        {Edge::SavedUnpackHook, &PathBuilder::labelUnpackHook},
        {Edge::ScriptConstant, &PathBuilder::labelScriptConstant},
        {Edge::NodeHooks, &PathBuilder::labelNodeHooks},
    };
    // Every edge in exactly one of the three tables: a new Edge does not compile until it is
    // given a label (or declared to have none).
    static_assert(
        [] {
            for (int e = 0; e <= static_cast<int>(kLastEdge); ++e) {
                int rows = 0;
                for (const auto& row : kFixedEdgeLabels) {
                    rows += static_cast<int>(row.edge) == e;
                }
                for (const auto& row : kLabellers) {
                    rows += static_cast<int>(row.first) == e;
                }
                for (Edge none : kUnlabelledEdges) {
                    rows += static_cast<int>(none) == e;
                }
                if (rows != 1) {
                    return false;
                }
            }
            return true;
        }(),
        "every Edge is labelled by exactly one row");
    const WalkNode& n = d_nodes[i];
    for (const FixedEdgeLabel& row : kFixedEdgeLabels) {
        if (row.edge == n.edge) {
            return fixedStep(row, n);
        }
    }
    for (const auto& [edge, labeller] : kLabellers) {
        if (edge == n.edge) {
            return (this->*labeller)(n);
        }
    }
    return {};
}

PathStep PathBuilder::labelRoot(const WalkNode& n) {
    const NamedRoot& r = d_roots[n.index];
    PathStep s;
    s.kind = r.kind;
    s.label = r.label;
    s.note = r.note;
    return s;
}

// `.name` for an object's attribute (a custom Function ctx's own, marked so), `['key']` for a
// dict's entry (a key that is itself an object by its path: optimizer.state[model.fc.weight]),
// `<key ...>` for the key object itself.
PathStep PathBuilder::labelDictEntry(const WalkNode& n) {
    PathStep s;
    PyObject* dict = parentObject(n);
    Py_ssize_t pos = 0, ordinal = 0;
    PyObject *key = nullptr, *value = nullptr;
    while (PyDict_Next(dict, &pos, &key, &value) && ordinal < n.index) {
        ++ordinal;
    }
    const WalkNode& dictNode = d_nodes[n.parent];
    bool attributes = dictNode.edge == Edge::AttrDict;
    bool ctxAttributes = attributes && dictNode.parent != kNoParent &&
                         d_nodes[dictNode.parent].kind == NodeKind::Python &&
                         isCustomFunctionCtx(parentObject(dictNode));
    std::string name = key != nullptr && PyUnicode_Check(key) ? utf8(key) : "";
    if (n.edge == Edge::DictKey) {
        s.kind = StepKind::Key;
        s.label = "<key " + (key ? keyText(key) : std::string("?")) + ">";
    } else if (attributes && isIdentifier(name)) {
        s.kind = ctxAttributes ? StepKind::Ctx : StepKind::Attr;
        s.label = "." + name;
        if (value != nullptr) {
            s.hooks = hookDictGrowth(name, value);
        }
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

// An attribute named like torch's hook dicts (`_forward_hooks`, a tensor's `_backward_hooks`)
// holding a dict keyed by hook handle ids: how many of its hooks were registered since tracking
// started (ids at or above the first one of the run; torch's ids only grow), and the newest's
// function. Keys that are not ints mean it is no such dict.
std::optional<HookDictGrowth> PathBuilder::hookDictGrowth(const std::string& name, PyObject* dict) {
    if (!d_firstHookId || name.size() < 5 || name.compare(name.size() - 5, 5, "hooks") != 0 ||
        !PyDict_Check(dict)) {
        return std::nullopt;
    }
    HookDictGrowth growth;
    PyObject* newest = nullptr;
    Py_ssize_t pos = 0;
    PyObject *key = nullptr, *hook = nullptr;
    while (PyDict_Next(dict, &pos, &key, &hook)) {
        if (!PyLong_CheckExact(key)) {
            return std::nullopt;
        }
        int overflow = 0;
        const long long id = PyLong_AsLongLongAndOverflow(key, &overflow);
        if (overflow != 0 || id < 0) {
            PyErr_Clear();
            return std::nullopt;
        }
        if (static_cast<uint64_t>(id) >= *d_firstHookId) {
            ++growth.added;
            newest = hook;
        }
    }
    if (growth.added == 0) {
        return std::nullopt;
    }
    growth.newest = newest != nullptr ? callableText(newest) : "";
    return growth;
}

// `[3]`; a functools.partial's bound argument noted by the parameter it binds.
PathStep PathBuilder::labelSequenceItem(const WalkNode& n) {
    PathStep s;
    s.kind = StepKind::Index;
    s.label = "[" + std::to_string(n.index) + "]";
    const WalkNode& tuple = d_nodes[n.parent];
    if (tuple.parent != kNoParent && d_nodes[tuple.parent].kind == NodeKind::Python) {
        PyObject* owner = parentObject(tuple);
        if (isPartial(owner)) {
            std::string parameter = partialArgumentName(owner, n.index);
            if (!parameter.empty()) {
                s.note = "argument '" + parameter + "' of " + callableText(owner);
            }
        }
    }
    return s;
}

// By the free variable's name: `_visit.<cell batch_tree>`; the note keeps the Python that reads
// it back.
PathStep PathBuilder::labelClosureCell(const WalkNode& n) {
    PathStep s;
    s.kind = StepKind::Closure;
    std::string cell = ".__closure__[" + std::to_string(n.index) + "].cell_contents";
    s.label = cell;
    auto* f = reinterpret_cast<PyFunctionObject*>(parentObject(n));
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

// A generic tp_traverse referent: by its attribute name where one is found, else by what the
// container is (an lru_cache's entries, a deque's index, a set's element).
PathStep PathBuilder::labelReferent(const WalkNode& n) {
    PathStep s;
    auto* child = static_cast<PyObject*>(const_cast<void*>(n.ptr));
    // An attribute reached without a __dict__ (Python 3.12+ keeps an object's attributes inline
    // until its dict is asked for) is still an attribute, a dict of hooks included.
    if (n.name != nullptr) {
        s.kind = StepKind::Attr;
        s.label = std::string(".") + n.name;
        if (n.kind == NodeKind::Python) { // (a sparse tensor's parts are C++ tensors)
            s.hooks = hookDictGrowth(n.name, child);
        }
        return s;
    }
    PyObject* parent = parentObject(n);
    auto name = attributeName(parent, child);
    if (name) {
        s.kind = StepKind::Attr;
        s.label = "." + *name;
        s.hooks = hookDictGrowth(*name, child);
    } else if (std::strcmp(Py_TYPE(parent)->tp_name, "functools._lru_cache_wrapper") == 0) {
        s.kind = StepKind::Ref;
        s.label = "<lru_cache entries>";
    } else if (dequeType() != nullptr && PyObject_TypeCheck(parent, dequeType())) {
        // A deque's tp_traverse visits its items in order: the ordinal is the index.
        s.kind = StepKind::Index;
        s.label = "[" + std::to_string(n.index) + "]";
    } else if (PyAnySet_Check(parent)) {
        // A set's elements have no name and no order; their place in its iteration order tells
        // them apart (each kept tensor is one more element: the set is what grows).
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

PathStep PathBuilder::labelFrameLocal(const WalkNode& n) {
    return frameLocalStep(parentObject(n), n.index, d_names);
}

PathStep PathBuilder::labelSavedPacked(const WalkNode& n) {
    PathStep s;
    s.kind = n.name != nullptr ? StepKind::Saved : StepKind::Ctx;
    s.label = savedVariableText(n);
    s.note = "what a torch.autograd.graph.saved_tensors_hooks pack hook returned; the graph keeps "
             "it in C++";
    return s;
}

PathStep PathBuilder::labelUnpackHook(const WalkNode& n) {
    PathStep s;
    const std::string variable = savedVariableText(n);
    s.kind = StepKind::Ref;
    s.label = "<unpack hook of " + variable + ": " +
              callableText(static_cast<PyObject*>(const_cast<void*>(n.ptr))) + ">";
    s.note = "the torch.autograd.graph.saved_tensors_hooks unpack hook backward calls for " +
             variable.substr(1) + "; the graph keeps it, and what it captured, in C++";
    return s;
}

PathStep PathBuilder::labelScriptConstant(const WalkNode& n) {
    PathStep s;
    s.kind = StepKind::Ref;
    s.label = std::string("<TorchScript constant of ") + n.name + ">";
    s.note = "torch.jit.trace captured this tensor as a constant of " + std::string(n.name) +
             "'s compiled graph, which keeps it in C++";
    return s;
}

PathStep PathBuilder::labelNodeHooks(const WalkNode& n) {
    PathStep s;
    s.kind = StepKind::Ref;
    s.label = std::string("<") + n.name + ">";
    s.note = std::string("Python ") + n.name +
             " kept by this autograd node in C++: they live as long as its graph";
    return s;
}

} // namespace torchleak::python
