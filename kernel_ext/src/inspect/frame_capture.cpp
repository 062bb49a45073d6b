#include "inspect/frame_capture.h"

#include "inspect/frame_layout.h"

#include <algorithm>
#include <atomic>
#include <limits>
#include <mutex>
#include <optional>
#include <string_view>
#include <thread>

namespace torchleak::python {

namespace {
std::atomic<PyThreadState*> g_mainThreadState{nullptr};
// Tests force the "capture failed" path with it (torchleak._testing).
std::atomic<bool> g_captureDisabled{false};
std::mutex g_pendingMutex;
std::vector<uintptr_t> g_pendingRetains;
bool g_pendingCallScheduled = false; // guarded by g_pendingMutex

int runPendingRetains(void*) {
    drainPendingRetains();
    return 0;
}
} // namespace

void noteMainThread() noexcept {
    g_mainThreadState.store(PyGILState_GetThisThreadState());
}

const char* captureStrategy() noexcept {
    return TORCHLEAK_FRAME_LAYOUT ? "interpreter-frames" : "frame-objects";
}

void disableCaptureForTesting(bool disabled) noexcept {
    g_captureDisabled.store(disabled, std::memory_order_relaxed);
}

size_t capturePythonStack(RawFrame* out, size_t capacity) noexcept {
    // Pure C++ threads (autograd device workers) have no thread state and no Python stack;
    // their allocations are named by autograd node.
    PyThreadState* tstate = PyGILState_GetThisThreadState();
    if (tstate == nullptr || !Py_IsInitialized() ||
        g_captureDisabled.load(std::memory_order_relaxed)) {
        return 0;
    }
    size_t n = 0;
#if TORCHLEAK_FRAME_LAYOUT
    // The main thread's code objects are pinned by the pending call before its frames can
    // return; other threads' only when they hold the GIL now. The main thread, where nearly
    // every allocation comes from, skips the GIL test (a second thread-specific look-up).
    const bool mainThread = tstate == g_mainThreadState.load(std::memory_order_relaxed);
    const uintptr_t unpinned = mainThread || PyGILState_Check() != 0 ? 0 : kUnpinnedCode;
    for (layout::InterpreterFrame* frame = layout::currentFrame(tstate);
         frame != nullptr && n < capacity; frame = layout::previousFrame(frame)) {
        if (PyCodeObject* code = layout::codeOf(frame)) {
            out[n++] =
                RawFrame{reinterpret_cast<uintptr_t>(code) | unpinned, layout::byteOffset(frame)};
        }
    }
#else
    if (PyGILState_Check() == 0) {
        return 0; // the public frame API creates objects: GIL holders only
    }
    PyFrameObject* frame = PyThreadState_GetFrame(tstate); // new reference
    while (frame != nullptr && n < capacity) {
        PyCodeObject* code = PyFrame_GetCode(frame); // new reference, kept alive by the frame
        out[n++] = RawFrame{reinterpret_cast<uintptr_t>(code), PyFrame_GetLasti(frame)};
        Py_DECREF(code);
        PyFrameObject* back = PyFrame_GetBack(frame);
        Py_DECREF(frame);
        frame = back;
    }
    Py_XDECREF(frame);
#endif
    return n;
}

std::optional<std::string> checkCapture() {
    // What the hook meets: a thread inside a torch operator, which released the GIL.
    RawFrame frames[4];
    size_t n = 0;
    Py_BEGIN_ALLOW_THREADS n = capturePythonStack(frames, 4);
    Py_END_ALLOW_THREADS if (n == 0) {
        return std::string(TORCHLEAK_FRAME_LAYOUT ? "the stack of a thread inside a torch "
                                                    "operator read as empty"
                                                  : "torchleak knows no frame layout for this "
                                                    "interpreter, and torch releases the GIL "
                                                    "inside every operator");
    }
    PyFrameObject* caller = PyThreadState_GetFrame(PyThreadState_Get()); // new reference
    if (caller == nullptr) {
        return std::nullopt; // called from C with no Python frame: nothing to compare
    }
    PyCodeObject* code = PyFrame_GetCode(caller);
    int line = PyFrame_GetLineNumber(caller);
    bool sameCode = (frames[0].code & ~kUnpinnedCode) == reinterpret_cast<uintptr_t>(code);
    int readLine = sameCode ? PyCode_Addr2Line(code, frames[0].offset) : -1;
    Py_DECREF(code);
    Py_DECREF(caller);
    if (!sameCode) {
        return std::string("the innermost frame read is not the running function's");
    }
    if (readLine != line) {
        return "the line read (" + std::to_string(readLine) + ") is not the running line (" +
               std::to_string(line) + ")";
    }
    return std::nullopt;
}

void retainCodeObjects(std::span<const RawFrame> frames) noexcept {
    // Called under the recorder lock by the thread whose capture just produced these frames.
    if (PyGILState_Check() != 0) {
        for (const RawFrame& f : frames) {
            if ((f.code & kUnpinnedCode) == 0) {
                Py_INCREF(reinterpret_cast<PyObject*>(f.code));
            }
        }
        return;
    }
    std::lock_guard<std::mutex> lock(g_pendingMutex);
    try {
        for (const RawFrame& f : frames) {
            if ((f.code & kUnpinnedCode) == 0) {
                g_pendingRetains.push_back(f.code);
            }
        }
    } catch (...) {
        return; // out of memory: the next boundary drains what was queued
    }
    if (!g_pendingCallScheduled) {
        // Callable without the GIL; runs on the main thread with the GIL at its next
        // eval-breaker check.
        g_pendingCallScheduled = Py_AddPendingCall(&runPendingRetains, nullptr) == 0;
    }
}

void drainPendingRetains() noexcept {
    std::vector<uintptr_t> codes;
    {
        std::lock_guard<std::mutex> lock(g_pendingMutex);
        codes.swap(g_pendingRetains);
        g_pendingCallScheduled = false;
    }
    for (uintptr_t code : codes) {
        Py_INCREF(reinterpret_cast<PyObject*>(code));
    }
}

void releaseCodeObjects(const std::vector<RawFrame>& frames) noexcept {
    if (!Py_IsInitialized()) {
        return;
    }
    for (const RawFrame& f : frames) {
        if ((f.code & kUnpinnedCode) == 0) {
            Py_DECREF(reinterpret_cast<PyObject*>(f.code));
        }
    }
}

namespace {

void addCode(PyObject* code,
             std::unordered_set<uintptr_t>& live,
             std::vector<PyCodeObject*>& todo) {
    if (code != nullptr && PyCode_Check(code) &&
        live.insert(reinterpret_cast<uintptr_t>(code)).second) {
        todo.push_back(reinterpret_cast<PyCodeObject*>(code));
    }
}

// Every code object alive now that a running frame can have: those of functions and frames gc
// tracks, of every thread's running frames, and the code nested in their constants (a closure
// not yet made into a function). Needs the GIL; runs no user code.
std::unordered_set<uintptr_t> liveCodeObjects() {
    std::unordered_set<uintptr_t> live;
    std::vector<PyCodeObject*> todo;
    if (PyObject* objects = gcObjects()) {
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(objects); ++i) {
            PyObject* obj = PyList_GET_ITEM(objects, i);
            if (PyFunction_Check(obj)) {
                addCode(PyFunction_GET_CODE(obj), live, todo);
            } else if (PyFrame_Check(obj)) {
                PyCodeObject* code = PyFrame_GetCode(reinterpret_cast<PyFrameObject*>(obj));
                addCode(reinterpret_cast<PyObject*>(code), live, todo);
                Py_XDECREF(code); // the frame keeps it alive
            }
        }
        Py_DECREF(objects);
    }
    PyInterpreterState* interp = PyInterpreterState_Get();
    for (PyThreadState* t = PyInterpreterState_ThreadHead(interp); t != nullptr;
         t = PyThreadState_Next(t)) {
        PyFrameObject* frame = PyThreadState_GetFrame(t); // new reference
        while (frame != nullptr) {
            PyCodeObject* code = PyFrame_GetCode(frame);
            addCode(reinterpret_cast<PyObject*>(code), live, todo);
            Py_DECREF(code);
            PyFrameObject* back = PyFrame_GetBack(frame);
            Py_DECREF(frame);
            frame = back;
        }
    }
    while (!todo.empty()) {
        PyCodeObject* code = todo.back();
        todo.pop_back();
        PyObject* consts = code->co_consts;
        for (Py_ssize_t i = 0;
             consts != nullptr && PyTuple_Check(consts) && i < PyTuple_GET_SIZE(consts); ++i) {
            addCode(PyTuple_GET_ITEM(consts, i), live, todo);
        }
    }
    return live;
}

} // namespace

bool PythonStackSymbolizer::liveCode(uintptr_t code) {
    if (!d_liveCode) {
        d_liveCode = liveCodeObjects();
    }
    return d_liveCode->count(code) != 0;
}

PyObject* gcObjects() noexcept {
    PyObject* gc = PyImport_ImportModule("gc");
    PyObject* objects = gc != nullptr ? PyObject_CallMethod(gc, "get_objects", nullptr) : nullptr;
    Py_XDECREF(gc);
    if (objects == nullptr || !PyList_Check(objects)) {
        PyErr_Clear();
        Py_XDECREF(objects);
        return nullptr;
    }
    return objects;
}

std::string utf8(PyObject* text) {
    if (text == nullptr || !PyUnicode_Check(text)) {
        return {};
    }
    PyObject* bytes = PyUnicode_AsEncodedString(text, "utf-8", "replace");
    if (bytes == nullptr) {
        PyErr_Clear();
        return {};
    }
    std::string out(PyBytes_AS_STRING(bytes), static_cast<size_t>(PyBytes_GET_SIZE(bytes)));
    Py_DECREF(bytes);
    return out;
}

namespace {

// `<ipython-input-N-HASH>`: N, the execution count, and HASH, the source's. Parsed by hand: a
// regex over a hostile 200,000-character name recursed off the stack, and std::stoi threw on a
// count past INT_MAX.
struct IpythonInputName {
    int cell = 0;
    std::string hash;
};

std::optional<IpythonInputName> parseIpythonInput(const std::string& file) {
    static constexpr std::string_view kPrefix = "<ipython-input-";
    if (file.compare(0, kPrefix.size(), kPrefix) != 0) {
        return std::nullopt;
    }
    size_t i = kPrefix.size();
    int64_t cell = 0;
    size_t digits = 0;
    for (; i < file.size() && file[i] >= '0' && file[i] <= '9'; ++i, ++digits) {
        cell = cell * 10 + (file[i] - '0');
        if (cell > std::numeric_limits<int>::max()) {
            return std::nullopt;
        }
    }
    if (digits == 0 || i >= file.size() || file[i] != '-') {
        return std::nullopt;
    }
    size_t hashStart = ++i;
    while (i < file.size() &&
           ((file[i] >= '0' && file[i] <= '9') || (file[i] >= 'a' && file[i] <= 'f'))) {
        ++i;
    }
    if (i == hashStart || i >= file.size() || file[i] != '>') {
        return std::nullopt;
    }
    return IpythonInputName{static_cast<int>(cell), file.substr(hashStart, i - hashStart)};
}

} // namespace

std::string FrameFilter::identity() const {
    std::string text;
    for (const auto* prefixes : {&libraryPrefixes, &packagePrefixes}) {
        for (const std::string& prefix : *prefixes) {
            text += prefix;
            text += '\x1f';
        }
        text += '\x1e';
    }
    std::vector<std::pair<std::string, int>> cells(cellFiles.begin(), cellFiles.end());
    std::sort(cells.begin(), cells.end());
    for (const auto& [file, count] : cells) {
        text += file + '\x1f' + std::to_string(count) + '\x1f';
    }
    return text;
}

FileClass FrameFilter::classify(const std::string& file) const {
    FileClass c;
    // A cell re-run is the same code under a new name (<ipython-input-N-HASH>): group by the
    // hash. ipykernel's cell files are already named by a hash of their source.
    std::optional<IpythonInputName> input = parseIpythonInput(file);
    auto cell = cellFiles.find(file);
    if (cell != cellFiles.end()) {
        c.cell = cell->second;
        c.group = input ? "cell:" + input->hash : file;
        return c;
    }
    if (input) {
        c.cell = input->cell;
        c.group = "cell:" + input->hash;
        return c;
    }
    if (!file.empty() && file.front() == '<') {
        c.user = file.rfind("<stdin>", 0) == 0 || file.rfind("<string>", 0) == 0;
    }
    size_t libraryMatch = 0, packageMatch = 0;
    for (const std::string& prefix : libraryPrefixes) {
        if (!prefix.empty() && file.rfind(prefix, 0) == 0) {
            libraryMatch = std::max(libraryMatch, prefix.size());
        }
    }
    for (const std::string& prefix : packagePrefixes) {
        if (!prefix.empty() && file.rfind(prefix, 0) == 0) {
            packageMatch = std::max(packageMatch, prefix.size());
        }
    }
    if (libraryMatch > packageMatch) {
        c.user = false;
    } else if (packageMatch > 0) {
        c.user = false;
        c.package = true;
    }
    return c;
}

#if PY_VERSION_HEX < 0x030B0000
namespace {
// 3.10's names of the code objects asked for, kept for the process (every caller holds the
// GIL, which guards it): a look at every boundary scanned all of the collector's objects each
// time, 40 ms a look in a process with torch loaded (160,000 objects), and a watched run of
// 3,000 steps took 250 s instead of 40. A freed code object's address can be reused, so an
// entry is trusted only while the code at that address still starts on the same line with the
// same bytecode length. Never destroyed: nothing to free at exit, when the interpreter may
// already be gone.
struct KnownName {
    int firstLine;
    Py_ssize_t codeLength;
    std::string qualified;
};

std::unordered_map<PyCodeObject*, KnownName>& knownNames() {
    static auto* names = new std::unordered_map<PyCodeObject*, KnownName>();
    return *names;
}

Py_ssize_t codeLength(PyCodeObject* code) {
    return code->co_code != nullptr && PyBytes_Check(code->co_code)
               ? PyBytes_GET_SIZE(code->co_code)
               : -1;
}

const std::string* knownName(PyCodeObject* code) {
    auto& names = knownNames();
    auto it = names.find(code);
    if (it == names.end() || it->second.firstLine != code->co_firstlineno ||
        it->second.codeLength != codeLength(code)) {
        return nullptr;
    }
    return &it->second.qualified;
}
} // namespace
#endif

std::string QualifiedNames::of(PyCodeObject* code) {
#if PY_VERSION_HEX >= 0x030B0000
    return utf8(code->co_qualname);
#else
    if (const std::string* known = knownName(code)) {
        return *known;
    }
    // A code object not named before (its function made since, or this is the first report):
    // one scan of the functions alive for this instance, kept while it lives. A code with no
    // function alive (a module's, a class body's) keeps its bare name.
    if (!d_byCode) {
        d_byCode.emplace();
        if (PyObject* objects = gcObjects()) {
            for (Py_ssize_t i = 0; i < PyList_GET_SIZE(objects); ++i) {
                PyObject* obj = PyList_GET_ITEM(objects, i);
                if (PyFunction_Check(obj)) {
                    auto* fn = reinterpret_cast<PyFunctionObject*>(obj);
                    d_byCode->emplace(reinterpret_cast<PyCodeObject*>(fn->func_code),
                                      utf8(fn->func_qualname));
                }
            }
            Py_DECREF(objects);
        }
    }
    auto it = d_byCode->find(code);
    std::string name = it != d_byCode->end() ? it->second : utf8(code->co_name);
    knownNames()[code] = {code->co_firstlineno, codeLength(code), name};
    return name;
#endif
}

PythonStackSymbolizer::CodeInfo& PythonStackSymbolizer::info(PyCodeObject* code) {
    auto it = d_cache.find(code);
    if (it != d_cache.end()) {
        return it->second;
    }
    CodeInfo ci;
    ci.file = utf8(code->co_filename);
    ci.function = d_names.of(code);

    ci.where = d_filter.classify(ci.file);
    return d_cache.emplace(code, std::move(ci)).first->second;
}

namespace {
// co_lines() as ranges; empty when it cannot be read (any error cleared): the caller then asks
// PyCode_Addr2Line, which is always right, only slower.
std::vector<PythonStackSymbolizer::LineRange> readLineTable(PyCodeObject* code) {
    std::vector<PythonStackSymbolizer::LineRange> ranges;
    PyObject* it = PyObject_CallMethod(reinterpret_cast<PyObject*>(code), "co_lines", nullptr);
    PyObject* iter = it != nullptr ? PyObject_GetIter(it) : nullptr;
    Py_XDECREF(it);
    bool ok = iter != nullptr;
    while (ok) {
        PyObject* item = PyIter_Next(iter);
        if (item == nullptr) {
            ok = PyErr_Occurred() == nullptr;
            break;
        }
        if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 3) {
            Py_DECREF(item);
            ok = false;
            break;
        }
        PyObject* line = PyTuple_GET_ITEM(item, 2);
        long start = PyLong_AsLong(PyTuple_GET_ITEM(item, 0));
        long end = PyLong_AsLong(PyTuple_GET_ITEM(item, 1));
        long number = line == Py_None ? -1 : PyLong_AsLong(line);
        Py_DECREF(item);
        if (PyErr_Occurred() != nullptr) {
            ok = false;
            break;
        }
        ranges.push_back(
            {static_cast<int>(start), static_cast<int>(end), static_cast<int>(number)});
    }
    Py_XDECREF(iter);
    PyErr_Clear();
    if (!ok || !std::is_sorted(ranges.begin(), ranges.end(),
                               [](const auto& a, const auto& b) { return a.start < b.start; })) {
        ranges.clear();
    }
    return ranges;
}
} // namespace

int PythonStackSymbolizer::lineOf(PyCodeObject* code, CodeInfo& ci, int offset) {
    if (++ci.lookups == kTableAfter) {
        ci.lines = readLineTable(code);
    }
    if (offset < 0 || ci.lines.empty()) {
        return PyCode_Addr2Line(code, offset); // before the first instruction: its own rule
    }
    auto after = std::upper_bound(ci.lines.begin(), ci.lines.end(), offset,
                                  [](int o, const LineRange& r) { return o < r.start; });
    if (after == ci.lines.begin() || offset >= std::prev(after)->end) {
        return PyCode_Addr2Line(code, offset);
    }
    return std::prev(after)->line;
}

std::vector<Frame> PythonStackSymbolizer::symbolize(std::span<const RawFrame> frames) {
    std::vector<Frame> out;
    out.reserve(frames.size());
    for (const RawFrame& raw : frames) {
        uintptr_t pointer = raw.code & ~kUnpinnedCode;
        if ((raw.code & kUnpinnedCode) != 0 && !liveCode(pointer)) {
            // Its code was freed before the report (code compiled at run time, then dropped).
            Frame gone;
            gone.file = "<code freed before the report>";
            gone.function = "?";
            gone.user = false;
            out.push_back(std::move(gone));
            continue;
        }
        auto* code = reinterpret_cast<PyCodeObject*>(pointer);
        CodeInfo& ci = info(code);
        Frame f;
        f.file = ci.file;
        f.function = ci.function;
        f.cell = ci.where.cell;
        f.group = ci.where.group;
        f.user = ci.where.user;
        f.package = ci.where.package;
        f.line = lineOf(code, ci, raw.offset);
        out.push_back(std::move(f));
    }
    return out;
}

namespace {
// linecache.getlines(file): a new reference to the list of a file's lines, or nullptr (with no
// error set) when it cannot be read. Notebook cells are in linecache under the name IPython
// compiled them with.
PyObject* cachedLines(const std::string& file) {
    PyObject* linecache = PyImport_ImportModule("linecache");
    PyObject* name = PyUnicode_FromStringAndSize(file.data(), static_cast<Py_ssize_t>(file.size()));
    PyObject* lines = linecache == nullptr || name == nullptr
                          ? nullptr
                          : PyObject_CallMethod(linecache, "getlines", "O", name);
    Py_XDECREF(name);
    Py_XDECREF(linecache);
    PyErr_Clear(); // a file that cannot be read has no lines; the report goes on
    if (lines != nullptr && !PyList_Check(lines)) {
        Py_DECREF(lines);
        return nullptr;
    }
    return lines;
}
} // namespace

std::optional<std::string> PythonStackSymbolizer::sourceLine(const Frame& frame) {
    if (frame.file.empty() || frame.line <= 0) {
        return std::nullopt;
    }
    PyObject* lines = cachedLines(frame.file);
    std::optional<std::string> out;
    if (lines != nullptr && frame.line <= PyList_GET_SIZE(lines)) {
        PyObject* line = PyList_GET_ITEM(lines, frame.line - 1);
        const std::string text = PyUnicode_Check(line) ? utf8(line) : std::string();
        const size_t begin = text.find_first_not_of(" \t\r\n\f\v");
        if (begin != std::string::npos) {
            const size_t end = text.find_last_not_of(" \t\r\n\f\v");
            out = text.substr(begin, end - begin + 1);
        }
    }
    Py_XDECREF(lines);
    return out;
}

std::vector<std::string> PythonStackSymbolizer::sourceLines(const Frame& frame) {
    std::vector<std::string> out;
    if (frame.file.empty()) {
        return out;
    }
    if (PyObject* lines = cachedLines(frame.file)) {
        for (Py_ssize_t k = 0; k < PyList_GET_SIZE(lines); ++k) {
            PyObject* line = PyList_GET_ITEM(lines, k);
            out.push_back(PyUnicode_Check(line) ? utf8(line) : std::string());
        }
        Py_DECREF(lines);
    }
    return out;
}

// ---------------------------------------------------------------------------------------------
// Frame locals

LocalsOwner localsOwner(PyObject* obj) noexcept {
    if (PyFrame_Check(obj)) {
        return LocalsOwner::Frame;
    }
    if (PyGen_CheckExact(obj)) {
        return LocalsOwner::Generator;
    }
    if (PyCoro_CheckExact(obj)) {
        return LocalsOwner::Coroutine;
    }
    if (PyAsyncGen_CheckExact(obj)) {
        return LocalsOwner::AsyncGenerator;
    }
    return LocalsOwner::None;
}

#if TORCHLEAK_FRAME_LAYOUT
namespace {
// The frame record that holds the owner's locals, or null when they are gone.
layout::InterpreterFrame* interpreterFrameOf(PyObject* owner) noexcept {
    switch (localsOwner(owner)) {
    case LocalsOwner::Frame:
        return layout::frameOfFrameObject(owner);
    case LocalsOwner::None:
        return nullptr;
    default:
        return layout::frameOfGenerator(owner);
    }
}
} // namespace

void forEachLocal(PyObject* owner, LocalVisitor fn, void* context) noexcept {
    layout::InterpreterFrame* frame = interpreterFrameOf(owner);
    PyCodeObject* code = frame != nullptr ? layout::localsCodeOf(frame) : nullptr;
    if (code == nullptr) {
        return;
    }
    const int count = layout::localCount(code);
    for (int i = 0; i < count; ++i) {
        if (PyObject* value = layout::localValue(frame, code, i)) {
            fn(context, static_cast<uint32_t>(i), value);
        }
    }
}

std::optional<LocalName> localName(PyObject* owner, uint32_t index, QualifiedNames& names) {
    layout::InterpreterFrame* frame = interpreterFrameOf(owner);
    PyCodeObject* code = frame != nullptr ? layout::localsCodeOf(frame) : nullptr;
    if (code == nullptr || index >= static_cast<uint32_t>(layout::localCount(code))) {
        return std::nullopt;
    }
    return LocalName{utf8(layout::localNameOf(code, static_cast<int>(index))), names.of(code)};
}
#else
// Other CPython versions: frames through the public API (f_locals), generators not at all
// (their referents are still walked, without local names).
void forEachLocal(PyObject* owner, LocalVisitor fn, void* context) noexcept {
    if (!PyFrame_Check(owner)) {
        return;
    }
    PyObject* locals = PyFrame_GetLocals(reinterpret_cast<PyFrameObject*>(owner));
    if (locals == nullptr || !PyDict_Check(locals)) {
        PyErr_Clear();
        Py_XDECREF(locals);
        return;
    }
    Py_ssize_t pos = 0;
    PyObject *key, *value;
    uint32_t index = 0;
    while (PyDict_Next(locals, &pos, &key, &value)) {
        fn(context, index++, value);
    }
    Py_DECREF(locals);
}

std::optional<LocalName> localName(PyObject* owner, uint32_t index, QualifiedNames& names) {
    if (!PyFrame_Check(owner)) {
        return std::nullopt;
    }
    auto* frame = reinterpret_cast<PyFrameObject*>(owner);
    PyObject* locals = PyFrame_GetLocals(frame);
    PyCodeObject* code = PyFrame_GetCode(frame);
    std::optional<LocalName> out;
    if (locals != nullptr && PyDict_Check(locals)) {
        Py_ssize_t pos = 0;
        PyObject *key, *value;
        for (uint32_t k = 0; PyDict_Next(locals, &pos, &key, &value); ++k) {
            if (k == index) {
                out = LocalName{utf8(key), names.of(code)};
                break;
            }
        }
    }
    PyErr_Clear();
    Py_XDECREF(locals);
    Py_XDECREF(code);
    return out;
}
#endif

} // namespace torchleak::python
