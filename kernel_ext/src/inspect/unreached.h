#pragma once
// Objects no named root reached, sorted the way gc does it: gc.collect() would free the cyclic
// garbage; the rest is held from outside Python's view (C code, library state, C++).

#include "torchleak/pointer_table.h"

#include <Python.h>
#include <vector>

namespace torchleak::python {

struct Unreached {
    std::vector<PyObject*> garbage;  // only reference cycles keep these
    std::vector<PyObject*> external; // held from outside the candidates: their holders
    std::vector<PyObject*> tensors;  // every unreached tensor, either kind: their graphs may
                                     // hold the hooks that keep them (hook_anchors.h)
};

// `objects` is gc.get_objects(); `visited` the walk's visited set (tagged pointers). Needs the
// GIL; calls only tp_traverse.
Unreached classifyUnreached(PyObject* objects, const PointerSet& visited);

} // namespace torchleak::python
