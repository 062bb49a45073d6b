#pragma once
// Hook anchors: the Python hooks that autograd nodes no named root reaches keep in C++.
//
// A hook registered on a node (grad_fn.register_hook, register_prehook, Tensor.register_hook)
// lives in a dict the node's C++ hook object owns. When the hook captures something that holds
// tensors whose graph contains that node (`partial(on_backward, owner)` and owner.cache holds
// the outputs), node → hook → owner → tensor → node is a cycle through C++: gc cannot see the
// first edge, so nothing ever frees it. The hook is the one object on that cycle a user wrote
// and can act on, so an island's paths start there.

#include "torchleak/pointer_table.h"

#include <Python.h>
#include <string>
#include <vector>

namespace torchleak::python {

struct HookAnchor {
    PyObject* callable; // borrowed: the hook dict keeps it alive while the GIL is held
    std::string label;  // "<hook on MulBackward0: partial(on_backward, owner)>"
    std::string note;   // how it was registered and why C++ keeps it
};

// The Python hooks on the autograd graphs of `tensors` (objects no named root reached), on
// nodes the walk so far did not visit. Needs the GIL; runs no user code.
std::vector<HookAnchor> hooksOnUnreachedGraphs(const std::vector<PyObject*>& tensors,
                                               const PointerSet& visited);

// What a user calls a callable, read from its fields: "partial(on_backward, owner)" (the
// bound arguments by the function's parameter names), "Trainer.on_grad", "step.<locals>.<lambda>".
std::string callableText(PyObject* callable);

// The parameter of `function` that a partial's positional argument `index` binds, or "".
std::string partialArgumentName(PyObject* partial, size_t index);

// A functools.partial (or a subclass), by type, without isinstance().
bool isPartial(PyObject* obj);

} // namespace torchleak::python
