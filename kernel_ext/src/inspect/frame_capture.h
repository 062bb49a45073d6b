#pragma once
// Python stack capture for the allocator hook, and decoding of captured frames.
//
// capturePythonStack is the FrameCaptureFn the hook calls: it records (code object, bytecode
// offset) pairs of the calling thread's frames, innermost first.
//
// torch releases the GIL inside every operator, so allocations usually arrive on a thread that
// does not hold it. That thread's own frame chain is frozen while it runs C++ (only the owning
// thread pushes or pops its frames, and each frame holds a strong reference to its code), so
// reading it is safe; touching reference counts is not. Hence:
//  * with the GIL, or on the main thread: read the frame chain through the interpreter's own
//    frame records (frame_layout.h: CPython 3.10 to 3.14), no frame objects materialised; an
//    interpreter with no known layout gets the public frame API, GIL holders only, and
//    checkCapture() says so;
//  * new stacks take a reference on their code objects at once if the GIL is held, otherwise
//    through Py_AddPendingCall, which the main thread runs with the GIL at its next
//    eval-breaker check: right after the operator returns, while every captured frame is
//    still alive. Boundaries and stop() drain what is left.
// Other threads that do not hold the GIL get no Python stack.

#include "torchleak/report_builder.h"
#include "torchleak/stack_table.h"

#include <Python.h>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace torchleak::python {

// A frame captured on a thread that neither holds the GIL nor is the main thread (a worker
// thread inside a torch operator): no reference can be taken on its code object in time (the
// pending call that takes them runs on the main thread, maybe after the worker's code was
// freed; the hook takes no GIL). Its code pointer carries this bit (code objects are aligned),
// holds no reference, and is checked against the code objects alive when the report is built.
inline constexpr uintptr_t kUnpinnedCode = 1;

size_t capturePythonStack(RawFrame* out, size_t capacity) noexcept;
void retainCodeObjects(std::span<const RawFrame> frames) noexcept;
// The following need the GIL.
void drainPendingRetains() noexcept;
void releaseCodeObjects(const std::vector<RawFrame>& frames) noexcept;
// Records the calling thread as the main thread (module import time).
void noteMainThread() noexcept;
// The name of the capture strategy compiled in ("interpreter-frames" or "frame-objects").
const char* captureStrategy() noexcept;
// Captures the caller's stack as the hook would inside a torch operator (GIL released) and
// compares it with the running frame: nullopt when it matches, else what went wrong. A layout
// that compiles but reads wrong, or no layout at all, is found here instead of as sites that
// silently read "<unknown>". Needs the GIL.
std::optional<std::string> checkCapture();
// Tests only: make every capture come back empty, as on an interpreter with no layout.
void disableCaptureForTesting(bool disabled) noexcept;

// Which files are not user code: torch, the standard library and torchleak itself. A frame's
// file is compared by prefix; "<frozen ...>" and "<string>" style names are never user code
// unless they are notebook cells.
// Installed packages (site-packages, dist-packages) are passed as packagePrefixes; the longest
// matching prefix decides, so a package directory inside a stdlib directory (no virtualenv) is
// not the standard library, while torch inside it is. Installed third-party packages are
// library code too: a finding's site is the user's own line, and the package's line is kept
// beside it ("allocated inside").
struct FileClass {
    bool user = true;
    bool package = false;    // in an installed third-party package (not torch, not the stdlib)
    std::optional<int> cell; // the execution count, when the file is a notebook cell
    std::string group;       // the cell's source identity, shared by its re-runs
};

struct FrameFilter {
    std::vector<std::string> libraryPrefixes;
    std::vector<std::string> packagePrefixes;
    // Notebook cells: the file name IPython compiled a cell under -> its execution count.
    std::unordered_map<std::string, int> cellFiles;

    // The one rule for every frame: captured by the hook or recorded by PyTorch (CUDA).
    FileClass classify(const std::string& file) const;
    // Everything classify() reads, as one text: equal texts name every frame alike.
    std::string identity() const;
};

// The qualified name of a code object's function ("Classifier.forward"). CPython 3.11+ keep
// it on the code object; 3.10 only on the function object, so there it is looked up among the
// functions alive (one scan of the collector's objects per instance, only when asked for a
// code object not named before: the names asked for are kept for the process), else the
// code's bare name. One per report or path search: the scan keeps no reference, and code
// objects are not freed while one is in use. Needs the GIL.
class QualifiedNames {
  public:
    std::string of(PyCodeObject* code);

  private:
    std::optional<std::unordered_map<PyCodeObject*, std::string>> d_byCode; // 3.10 only
};

// Decodes frames with the GIL held; caches per code object for one report.
class PythonStackSymbolizer final : public StackSymbolizer {
  public:
    explicit PythonStackSymbolizer(FrameFilter filter) : d_filter(std::move(filter)) {}
    std::vector<Frame> symbolize(std::span<const RawFrame> frames) override;
    // A line of linecache.getlines: notebook cells are there under the name IPython compiled
    // them with, files are read from disk. Any error is no line.
    std::optional<std::string> sourceLine(const Frame& frame) override;
    // linecache.getlines, likewise; any error is no lines.
    std::vector<std::string> sourceLines(const Frame& frame) override;

    // A code object's line table read once (co_lines), for a code object with many sites:
    // PyCode_Addr2Line scans the table from its start on every call, so a module of 10^4
    // allocating lines cost 10^8 steps a report.
    struct LineRange {
        int start;
        int end;
        int line;
    };

  private:
    struct CodeInfo {
        std::string file;
        std::string function;
        FileClass where;
        int lookups = 0;
        std::vector<LineRange> lines; // sorted by start; built after kTableAfter lookups
    };
    static constexpr int kTableAfter = 16;
    CodeInfo& info(PyCodeObject* code);
    int lineOf(PyCodeObject* code, CodeInfo& ci, int offset);
    // Whether an unpinned frame's code pointer is a code object alive now.
    bool liveCode(uintptr_t code);

    FrameFilter d_filter;
    QualifiedNames d_names;
    std::unordered_map<PyCodeObject*, CodeInfo> d_cache;
    std::optional<std::unordered_set<uintptr_t>> d_liveCode; // built on the first unpinned frame
};

// gc.get_objects() as a new reference to a list, or nullptr (the error cleared). Needs the GIL.
PyObject* gcObjects() noexcept;

// UTF-8 of a str object; lone surrogates and other unencodable text become U+FFFD.
std::string utf8(PyObject* text);

// ---- frame locals, for the retaining-path walk (need the GIL; run no user code) ----------
// What holds a frame's locals: a frame object (a finished frame kept by a traceback, or a live
// one), or a suspended generator, coroutine or async generator, whose frame lives inside it.
enum class LocalsOwner { None, Frame, Generator, Coroutine, AsyncGenerator };
LocalsOwner localsOwner(PyObject* obj) noexcept;

// Calls fn(index, value) for every bound local of `owner` (cell variables dereferenced); the
// index names the local for localName(). Reads the interpreter's own slots: no f_locals dict
// is built and nothing is allocated.
using LocalVisitor = void (*)(void* context, uint32_t index, PyObject* value);
void forEachLocal(PyObject* owner, LocalVisitor fn, void* context) noexcept;

struct LocalName {
    std::string name;     // the variable: "logits"
    std::string function; // the qualified name of its function: "Classifier.forward"
};
std::optional<LocalName> localName(PyObject* owner, uint32_t index, QualifiedNames& names);

} // namespace torchleak::python
