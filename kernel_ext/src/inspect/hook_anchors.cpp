#include "inspect/hook_anchors.h"

#include "inspect/frame_capture.h"
#include "inspect/torch_objects.h"
#include "inspect/walk_graph.h"
#include "torchleak/stack_table.h"

#include <cstring>
#include <deque>
#include <structmember.h>
#include <torch/csrc/autograd/python_variable.h>
#include <unordered_set>

namespace torchleak::python {

using torch::autograd::Node;

namespace {

// A graph kept by hooks is an island a user built in one step; far bigger ones are walked from
// their roots already. The bound keeps a pathological graph from stalling the report.
constexpr size_t kMaxNodes = 200000;

// A member slot of a C type (`func`, `args` of functools.partial), read from the object's
// memory: no descriptor, no user code.
PyObject* memberObject(PyObject* obj, const char* name) {
    for (PyTypeObject* type = Py_TYPE(obj); type != nullptr; type = type->tp_base) {
        for (PyMemberDef* m = type->tp_members; m != nullptr && m->name != nullptr; ++m) {
            if ((m->type == T_OBJECT || m->type == T_OBJECT_EX) &&
                std::strcmp(m->name, name) == 0) {
                return *reinterpret_cast<PyObject**>(reinterpret_cast<char*>(obj) + m->offset);
            }
        }
    }
    return nullptr;
}

std::string qualname(PyObject* function) {
    if (PyFunction_Check(function)) {
        PyObject* q = reinterpret_cast<PyFunctionObject*>(function)->func_qualname;
        return q != nullptr && PyUnicode_Check(q) ? utf8(q) : std::string("<function>");
    }
    if (PyMethod_Check(function)) {
        return qualname(PyMethod_GET_FUNCTION(function));
    }
    if (PyCFunction_Check(function)) {
        return reinterpret_cast<PyCFunctionObject*>(function)->m_ml->ml_name;
    }
    return typeQualname(function) + " instance";
}

// The names of a function's positional parameters, from its code object.
std::vector<std::string> parameterNames(PyObject* function) {
    std::vector<std::string> names;
    if (PyMethod_Check(function)) {
        function = PyMethod_GET_FUNCTION(function);
        names = parameterNames(function);
        if (!names.empty()) {
            names.erase(names.begin()); // self is bound
        }
        return names;
    }
    if (!PyFunction_Check(function)) {
        return names;
    }
    PyObject* code = reinterpret_cast<PyFunctionObject*>(function)->func_code;
    PyObject* varnames = PyObject_GetAttrString(code, "co_varnames");
    PyObject* argcount = PyObject_GetAttrString(code, "co_argcount");
    if (varnames != nullptr && argcount != nullptr && PyTuple_Check(varnames) &&
        PyLong_Check(argcount)) {
        Py_ssize_t n = std::min(PyLong_AsSsize_t(argcount), PyTuple_GET_SIZE(varnames));
        for (Py_ssize_t k = 0; k < n; ++k) {
            names.push_back(utf8(PyTuple_GET_ITEM(varnames, k)));
        }
    }
    Py_XDECREF(varnames);
    Py_XDECREF(argcount);
    PyErr_Clear();
    return names;
}

void addAnchors(PyObject* dict,
                const NodeHookKind& kind,
                Node* node,
                std::vector<HookAnchor>& out) {
    if (!PyDict_Check(dict)) {
        return;
    }
    std::string nodeName = shortTypeName(typeid(*node).name());
    Py_ssize_t pos = 0;
    PyObject *key, *value;
    while (PyDict_Next(dict, &pos, &key, &value)) {
        HookAnchor a;
        a.callable = value;
        a.label =
            std::string("<") + kind.hook + " on " + nodeName + ": " + callableText(value) + ">";
        a.note = std::string("registered with ") + kind.how + " on " + nodeName +
                 ", a node no named root reaches: the node keeps the hook in C++ as long as its "
                 "graph lives";
        out.push_back(std::move(a));
    }
}

} // namespace

bool isPartial(PyObject* obj) {
    for (PyTypeObject* type = Py_TYPE(obj); type != nullptr; type = type->tp_base) {
        if (std::strcmp(type->tp_name, "functools.partial") == 0) {
            return true;
        }
    }
    return false;
}

std::string partialArgumentName(PyObject* partial, size_t index) {
    PyObject* function = memberObject(partial, "func");
    if (function == nullptr) {
        return "";
    }
    std::vector<std::string> names = parameterNames(function);
    return index < names.size() ? names[index] : "";
}

std::string callableText(PyObject* callable) {
    if (!isPartial(callable)) {
        return qualname(callable);
    }
    PyObject* function = memberObject(callable, "func");
    PyObject* args = memberObject(callable, "args");
    PyObject* keywords = memberObject(callable, "keywords");
    std::string text = "partial(" + (function ? qualname(function) : std::string("?"));
    if (args != nullptr && PyTuple_Check(args)) {
        std::vector<std::string> names =
            function ? parameterNames(function) : std::vector<std::string>{};
        for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(args); ++k) {
            size_t at = static_cast<size_t>(k);
            text += ", " + (at < names.size() ? names[at] : "args[" + std::to_string(k) + "]");
        }
    }
    if (keywords != nullptr && PyDict_Check(keywords)) {
        Py_ssize_t pos = 0;
        PyObject *key, *value;
        while (PyDict_Next(keywords, &pos, &key, &value)) {
            if (PyUnicode_Check(key)) {
                std::string name = utf8(key);
                text += ", " + name + "=" + name;
            }
        }
    }
    return text + ")";
}

std::vector<HookAnchor> hooksOnUnreachedGraphs(const std::vector<PyObject*>& tensors,
                                               const PointerSet& visited) {
    std::vector<HookAnchor> out;
    std::unordered_set<const Node*> seen;
    std::deque<Node*> queue;
    auto enqueue = [&](Node* node) {
        if (node != nullptr && !visited.contains(tag(node, NodeKind::Autograd)) &&
            seen.size() < kMaxNodes && seen.insert(node).second) {
            queue.push_back(node);
        }
    };
    for (PyObject* o : tensors) {
        try {
            enqueue(THPVariable_Unpack(o).grad_fn().get());
        } catch (...) {
        }
    }
    while (!queue.empty()) {
        Node* node = queue.front();
        queue.pop_front();
        forEachPythonHookDict(*node, [&](PyObject* dict, const NodeHookKind& kind) {
            addAnchors(dict, kind, node, out);
        });
        for (const auto& edge : node->next_edges()) {
            enqueue(edge.function.get());
        }
    }
    return out;
}

} // namespace torchleak::python
