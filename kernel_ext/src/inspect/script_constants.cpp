#include "inspect/script_constants.h"

#include <array>

namespace torchleak::python {

namespace {

enum class ScriptKind { None, Function, Method, Module, CompilationUnit };

// torch._C's TorchScript types, looked up once (torch._C is loaded before any walk).
const std::array<PyTypeObject*, 4>& scriptTypes() {
    static const std::array<PyTypeObject*, 4> types = [] {
        std::array<PyTypeObject*, 4> out{};
        PyObject* c = PyImport_ImportModule("torch._C");
        const char* names[] = {"ScriptFunction", "ScriptMethod", "ScriptModule", "CompilationUnit"};
        for (size_t k = 0; c != nullptr && k < out.size(); ++k) {
            PyObject* t = PyObject_GetAttrString(c, names[k]);
            if (t != nullptr && PyType_Check(t)) {
                out[k] = reinterpret_cast<PyTypeObject*>(t); // kept: lives as long as torch
            } else {
                Py_XDECREF(t);
            }
        }
        Py_XDECREF(c);
        PyErr_Clear();
        return out;
    }();
    return types;
}

ScriptKind scriptKind(PyObject* obj) {
    const auto& types = scriptTypes();
    PyTypeObject* type = Py_TYPE(obj);
    if (type == types[0]) {
        return ScriptKind::Function;
    }
    if (type == types[1]) {
        return ScriptKind::Method;
    }
    if (type == types[2]) {
        return ScriptKind::Module;
    }
    if (type == types[3]) {
        return ScriptKind::CompilationUnit;
    }
    return ScriptKind::None;
}

// "__torch__.___torch_mangle_3.f" -> "f"; "__torch__.Model.forward" -> "Model.forward".
std::string userName(std::string name) {
    const std::string top = "__torch__.";
    if (name.rfind(top, 0) == 0) {
        name.erase(0, top.size());
    }
    for (size_t at; (at = name.find("___torch_mangle_")) != std::string::npos;) {
        size_t dot = name.find('.', at);
        name.erase(at, dot == std::string::npos ? std::string::npos : dot - at + 1);
    }
    return name;
}

std::string strAttr(PyObject* obj, const char* attr) {
    std::string out;
    PyObject* v = PyObject_GetAttrString(obj, attr);
    if (v != nullptr && PyUnicode_Check(v)) {
        const char* s = PyUnicode_AsUTF8(v);
        out = s != nullptr ? s : "";
    }
    Py_XDECREF(v);
    PyErr_Clear();
    return out;
}

// A binding call's result when it is a list (the new reference passes on), else null with the
// call's error cleared.
PyObject* asList(PyObject* result) {
    if (result == nullptr || !PyList_Check(result)) {
        Py_XDECREF(result);
        PyErr_Clear();
        return nullptr;
    }
    return result;
}

using Visit = void (*)(void*, PyObject*, const std::string&);

// The tensor constants of one graph: prim::Constant nodes (in nested blocks too) whose value
// attribute is a tensor.
void graphConstants(PyObject* graph, const std::string& function, Visit visit, void* ctx) {
    PyObject* nodes = asList(PyObject_CallMethod(graph, "findAllNodes", "s", "prim::Constant"));
    if (nodes == nullptr) {
        return;
    }
    for (Py_ssize_t k = 0; k < PyList_GET_SIZE(nodes); ++k) {
        PyObject* node = PyList_GET_ITEM(nodes, k);
        PyObject* kind = PyObject_CallMethod(node, "kindOf", "s", "value");
        bool tensor = kind != nullptr && PyUnicode_Check(kind) &&
                      PyUnicode_CompareWithASCIIString(kind, "t") == 0;
        Py_XDECREF(kind);
        PyErr_Clear(); // kindOf raises for a constant without a value (None)
        if (!tensor) {
            continue;
        }
        PyObject* value = PyObject_CallMethod(node, "t", "s", "value");
        if (value != nullptr) {
            visit(ctx, value, function);
        }
        PyErr_Clear();
    }
    Py_DECREF(nodes);
}

// A function or method: its graph, under its name.
void callableConstants(PyObject* fn, const std::string& name, Visit visit, void* ctx) {
    PyObject* graph = PyObject_GetAttrString(fn, "graph");
    if (graph != nullptr) {
        graphConstants(graph, name, visit, ctx);
    }
    Py_XDECREF(graph);
    PyErr_Clear();
}

void moduleConstants(PyObject* module, Visit visit, void* ctx) {
    PyObject* names = asList(PyObject_CallMethod(module, "_method_names", nullptr));
    if (names == nullptr) {
        return;
    }
    for (Py_ssize_t k = 0; k < PyList_GET_SIZE(names); ++k) {
        PyObject* method =
            PyObject_CallMethod(module, "_get_method", "O", PyList_GET_ITEM(names, k));
        if (method != nullptr) {
            const char* name = PyUnicode_AsUTF8(PyList_GET_ITEM(names, k));
            callableConstants(method, name != nullptr ? name : "?", visit, ctx);
        }
        Py_XDECREF(method);
        PyErr_Clear();
    }
    Py_DECREF(names);
}

void unitConstants(PyObject* unit, Visit visit, void* ctx) {
    PyObject* functions = asList(PyObject_CallMethod(unit, "get_functions", nullptr));
    if (functions == nullptr) {
        return;
    }
    for (Py_ssize_t k = 0; k < PyList_GET_SIZE(functions); ++k) {
        PyObject* fn = PyList_GET_ITEM(functions, k);
        callableConstants(fn, userName(strAttr(fn, "qualified_name")), visit, ctx);
    }
    Py_DECREF(functions);
}

} // namespace

bool isScriptObject(PyObject* obj) {
    return scriptKind(obj) != ScriptKind::None;
}

void forEachScriptConstant(PyObject* obj, Visit visit, void* ctx) {
    switch (scriptKind(obj)) {
    case ScriptKind::Function:
        callableConstants(obj, userName(strAttr(obj, "qualified_name")), visit, ctx);
        break;
    case ScriptKind::Method:
        callableConstants(obj, strAttr(obj, "name"), visit, ctx);
        break;
    case ScriptKind::Module:
        moduleConstants(obj, visit, ctx);
        break;
    case ScriptKind::CompilationUnit:
        unitConstants(obj, visit, ctx);
        break;
    case ScriptKind::None:
        break;
    }
}

} // namespace torchleak::python
