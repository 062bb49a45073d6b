#pragma once
// TorchScript keeps tensors in C++ where Python's gc cannot see them: a tensor torch.jit.trace
// captured (a closure variable, a module's plain tensor attribute) becomes a constant of the
// compiled graph, and every function traced or scripted into the global compilation unit
// (torch.jit._state._python_cu) stays there, with its constants, until the process ends. This
// reads those constants through torch's own Python bindings of the graph (its properties and
// methods are torch's C++, never user code).

#include <Python.h>
#include <string>

namespace torchleak::python {

// A TorchScript object whose graphs a walk can read: a traced or scripted function, a script
// method, a C++ script module (a RecursiveScriptModule's `_c`), or a compilation unit.
bool isScriptObject(PyObject* obj);

// Calls visit(tensor, function) for every tensor constant of the object's graphs (for a
// compilation unit: of every function in it). `tensor` is a new reference handed to the
// caller; `function` is the function's name as a user wrote it (TorchScript's `__torch__.` and
// `___torch_mangle_N.` prefixes dropped). Errors from the bindings are cleared: an object whose
// graph cannot be read has no constants to report.
void forEachScriptConstant(PyObject* obj,
                           void (*visit)(void* ctx, PyObject* tensor, const std::string& function),
                           void* ctx);

} // namespace torchleak::python
