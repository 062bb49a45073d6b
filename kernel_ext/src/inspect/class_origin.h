#pragma once
// Where a class was written: the user's own code, an installed third-party package, or torch and
// the standard library. Told by the file of the module the class names as its `__module__`,
// classified by the same FrameFilter as every frame, so a class and a line of the same file are
// never judged apart. Read from dicts (the type's, sys.modules, the module's): no attribute
// lookup, no user code. Needs the GIL.

#include "inspect/frame_capture.h"

#include <Python.h>
#include <string>
#include <unordered_map>

namespace torchleak::python {

struct ClassOrigin {
    bool user = true;     // defined in the user's code (a script, a notebook cell, their package)
    bool package = false; // defined in an installed third-party package
    std::string top;      // the top-level module: "somepkg", "torch", "collections"; "" if unknown
};

class ClassOrigins {
  public:
    // Without a filter every class outside torch and Python's own modules counts as the user's,
    // as for a walk asked for outside a report.
    explicit ClassOrigins(const FrameFilter* filter = nullptr) : d_filter(filter) {}
    const ClassOrigin& of(PyTypeObject* type);

  private:
    ClassOrigin classify(PyTypeObject* type) const;

    const FrameFilter* d_filter;
    std::unordered_map<PyTypeObject*, ClassOrigin> d_cache; // types outlive one walk
};

} // namespace torchleak::python
