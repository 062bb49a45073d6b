#include "inspect/class_origin.h"

namespace torchleak::python {

namespace {

// The `__file__` of module `name` in sys.modules, or "" (a built-in module, IPython's __main__).
std::string moduleFile(const std::string& name) {
    PyObject* modules = PyImport_GetModuleDict(); // borrowed
    PyObject* module = modules ? PyDict_GetItemString(modules, name.c_str()) : nullptr;
    if (module == nullptr || !PyModule_Check(module)) {
        return "";
    }
    PyObject* dict = PyModule_GetDict(module); // borrowed, never fails for a module
    PyObject* file = dict ? PyDict_GetItemString(dict, "__file__") : nullptr;
    return file != nullptr && PyUnicode_Check(file) ? utf8(file) : "";
}

bool pythonsOwn(const std::string& module) {
    for (const char* library : {"torch", "builtins", "functools", "collections", "typing", "abc",
                                "enum", "weakref", "dataclasses", "_"}) {
        if (module.rfind(library, 0) == 0) {
            return true;
        }
    }
    return false;
}

} // namespace

const ClassOrigin& ClassOrigins::of(PyTypeObject* type) {
    auto it = d_cache.find(type);
    if (it == d_cache.end()) {
        it = d_cache.emplace(type, classify(type)).first;
    }
    return it->second;
}

ClassOrigin ClassOrigins::classify(PyTypeObject* type) const {
    ClassOrigin origin;
    PyObject* module = (type->tp_flags & Py_TPFLAGS_HEAPTYPE) && type->tp_dict
                           ? PyDict_GetItemString(type->tp_dict, "__module__")
                           : nullptr;
    if (module == nullptr || !PyUnicode_Check(module)) {
        origin.user = false; // a static type: CPython's, torch's, an extension's
        return origin;
    }
    const std::string name = utf8(module);
    origin.top = name.substr(0, name.find('.'));
    if (name == "__main__") {
        return origin; // a script's or a notebook's own classes
    }
    if (pythonsOwn(name)) {
        origin.user = false;
        return origin;
    }
    if (d_filter == nullptr) {
        return origin;
    }
    const std::string file = moduleFile(name);
    if (file.empty()) {
        return origin; // a module made at run time (exec, a test's fake module): the user's
    }
    const FileClass where = d_filter->classify(file);
    origin.user = where.user;
    origin.package = where.package;
    return origin;
}

} // namespace torchleak::python
