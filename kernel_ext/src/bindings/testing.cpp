// torchleak._testing: a test-only extension module (memray's _test idea). It drives the core
// deterministically from pytest: raising each C++ error for the translation table, and timing
// the recorder's per-event work without torch's own allocator in the way.

#include "inspect/frame_capture.h"
#include "torchleak/errors.h"
#include "torchleak/recorder.h"

#include <chrono>
#include <pybind11/pybind11.h>

namespace py = pybind11;
using namespace torchleak;

PYBIND11_MODULE(_testing, m) {
    m.doc() = "Test-only hooks into torchleak's C++ core. Not a public API.";
    m.def("raise_error", [](const std::string& kind) {
        if (kind == "state")
            throw StateError("state error from C++");
        if (kind == "invalid")
            throw InvalidArgument("invalid argument from C++");
        if (kind == "schema")
            throw SchemaError("schema error from C++");
        if (kind == "io")
            throw IoError("io error from C++");
        if (kind == "base")
            throw Error("base error from C++");
        if (kind == "std")
            throw std::runtime_error("std error from C++");
        throw std::logic_error("unknown kind");
    });
    m.def(
        "recorder_event_cost_ns",
        [](size_t events, bool captureStacks) {
            // What the hook does per allocation + free pair, minus c10's own bookkeeping:
            // capture (optional), intern, table insert, then erase. Runs with the GIL held so
            // the capture sees the caller's Python stack, as it would for a real allocation.
            AllocationRecorder recorder;
            recorder.setStackRetainer(&python::retainCodeObjects);
            RawFrame frames[48];
            auto t0 = std::chrono::steady_clock::now();
            for (size_t i = 0; i < events / 2; ++i) {
                size_t depth = captureStacks ? python::capturePythonStack(frames, 48) : 0;
                uintptr_t ptr = 0x10000 + (i % 4096) * 64;
                recorder.recordAlloc(ptr, 256, DeviceKey{0, -1}, {frames, depth}, nullptr, 0, 0,
                                     false);
                recorder.recordFree(ptr, DeviceKey{0, -1}, 0, 0, false);
            }
            auto t1 = std::chrono::steady_clock::now();
            python::drainPendingRetains();
            python::releaseCodeObjects(recorder.allInternedFrames());
            double ns = std::chrono::duration<double, std::nano>(t1 - t0).count();
            return ns / static_cast<double>((events / 2) * 2);
        },
        py::arg("events"), py::arg("capture_stacks"));
    m.def("capture_depth", []() {
        RawFrame frames[256];
        return python::capturePythonStack(frames, 256);
    });
}
