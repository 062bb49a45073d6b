#pragma once
// GcPause: Python's cyclic collector does not run while a report is built. Any allocation the
// walk makes (a label, a list) can trigger a collection, whose finalizers run user code that
// may free objects the walk holds borrowed pointers to (a use-after-free, seen in the wild
// when a __del__ emptied a list on the path being labelled). Needs the GIL.

#include <Python.h>

namespace torchleak::python {

class GcPause {
  public:
    GcPause() noexcept : d_wasEnabled(PyGC_Disable() != 0) {}
    ~GcPause() {
        if (d_wasEnabled) {
            PyGC_Enable();
        }
    }
    GcPause(const GcPause&) = delete;
    GcPause& operator=(const GcPause&) = delete;

  private:
    bool d_wasEnabled;
};

} // namespace torchleak::python
