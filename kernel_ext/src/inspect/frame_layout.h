#pragma once
// How each CPython lays out its running frames: the one place that knows. frame_capture.cpp
// reads stacks (on the allocating thread, usually without the GIL) and frame locals through
// these accessors; nothing else includes this header, because it pulls in CPython's internal
// headers.
//
//   3.10        PyFrameObjects linked from tstate->frame (public struct, cpython/frameobject.h);
//               f_lasti counts code units; generators point at a frame object (gi_frame)
//   3.11, 3.12  _PyInterpreterFrame records from tstate->cframe->current_frame; f_code
//   3.13        tstate->current_frame; f_executable is a PyObject* (code, or None in shim
//               frames, which _PyFrame_IsIncomplete rejects first); gi_iframe a PyObject*[1]
//   3.14        f_executable and localsplus are _PyStackRef (tagged: read through
//               PyStackRef_AsPyObjectBorrow); the helpers live in pycore_interpframe.h;
//               gi_iframe an embedded _PyInterpreterFrame. Written from CPython 3.14's
//               headers; this machine has no 3.14 to build or run it (see the README).
//   later       no layout: TORCHLEAK_FRAME_LAYOUT is 0 and capture falls back to the public
//               frame API, which only a thread holding the GIL may use; the tracker says so.
//
// Every accessor only reads: no reference count is touched and nothing is allocated, so the
// hook may call them on a thread that does not hold the GIL, while that thread runs C++ and
// its own frame chain is frozen.

#include <Python.h>

#if PY_VERSION_HEX >= 0x030A0000 && PY_VERSION_HEX < 0x030B0000
#    define TORCHLEAK_FRAME_LAYOUT 1
#    include <frameobject.h>
#elif PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030F0000
#    define TORCHLEAK_FRAME_LAYOUT 1
#    ifndef Py_BUILD_CORE
#        define Py_BUILD_CORE 1
#    endif
#    include <internal/pycore_code.h>
#    include <internal/pycore_frame.h>
#    if PY_VERSION_HEX < 0x030C0000
#        include <opcode.h> // PRECALL's variants (byteOffset)
#    endif
#    if PY_VERSION_HEX >= 0x030E0000
#        include <internal/pycore_interpframe.h>
#        include <internal/pycore_stackref.h>
#    endif
#    undef Py_BUILD_CORE
#else
#    define TORCHLEAK_FRAME_LAYOUT 0
#endif

#include <cstdint>

namespace torchleak::python::layout {

#if TORCHLEAK_FRAME_LAYOUT

#    if PY_VERSION_HEX < 0x030B0000
using InterpreterFrame = PyFrameObject;

inline InterpreterFrame* currentFrame(PyThreadState* tstate) noexcept {
    return tstate->frame;
}
inline InterpreterFrame* previousFrame(InterpreterFrame* frame) noexcept {
    return frame->f_back;
}
// The frame's code, or null for a frame that runs no Python code yet.
inline PyCodeObject* codeOf(InterpreterFrame* frame) noexcept {
    return frame->f_code;
}
// Byte offset of the instruction running now (what PyCode_Addr2Line takes); f_lasti is -1
// before the first instruction.
inline int byteOffset(InterpreterFrame* frame) noexcept {
    return frame->f_lasti < 0 ? 0 : frame->f_lasti * static_cast<int>(sizeof(_Py_CODEUNIT));
}
#    else
using InterpreterFrame = _PyInterpreterFrame;

inline InterpreterFrame* currentFrame(PyThreadState* tstate) noexcept {
#        if PY_VERSION_HEX < 0x030D0000
    return tstate->cframe != nullptr ? tstate->cframe->current_frame : nullptr;
#        else
    return tstate->current_frame;
#        endif
}
inline InterpreterFrame* previousFrame(InterpreterFrame* frame) noexcept {
    return frame->previous;
}
inline PyObject* executableOf(InterpreterFrame* frame) noexcept {
#        if PY_VERSION_HEX < 0x030D0000
    return reinterpret_cast<PyObject*>(frame->f_code);
#        elif PY_VERSION_HEX < 0x030E0000
    return frame->f_executable;
#        else
    return PyStackRef_IsNull(frame->f_executable)
               ? nullptr
               : PyStackRef_AsPyObjectBorrow(frame->f_executable);
#        endif
}
inline PyCodeObject* codeOf(InterpreterFrame* frame) noexcept {
    // Shim and entry frames (owned by the C stack or the interpreter) carry no code object;
    // frames still creating their cells are not yet running it.
    PyObject* executable = executableOf(frame);
    if (executable == nullptr || !PyCode_Check(executable) || _PyFrame_IsIncomplete(frame)) {
        return nullptr;
    }
    return reinterpret_cast<PyCodeObject*>(executable);
}
#        if PY_VERSION_HEX < 0x030C0000
// 3.11 splits a call in two, PRECALL then CALL, and CALL is where the frame rests during the
// call, until the specializer (after 8 runs of the line) turns PRECALL into a variant that
// calls a builtin itself and skips CALL: the same call then rests on PRECALL, a second stack
// for the same lines (a loop calling exec() had every site's group split in two at its 8th
// iteration, and each half crossed watch's steady cue again). Any PRECALL names its CALL,
// which has the same source position. The opcode byte is read while another thread may
// specialize it: it only ever changes between PRECALL variants.
inline bool isPrecall(int opcode) noexcept {
    switch (opcode) {
    case PRECALL:
    case PRECALL_ADAPTIVE:
    case PRECALL_BOUND_METHOD:
    case PRECALL_BUILTIN_CLASS:
    case PRECALL_BUILTIN_FAST_WITH_KEYWORDS:
    case PRECALL_METHOD_DESCRIPTOR_FAST_WITH_KEYWORDS:
    case PRECALL_NO_KW_BUILTIN_FAST:
    case PRECALL_NO_KW_BUILTIN_O:
    case PRECALL_NO_KW_ISINSTANCE:
    case PRECALL_NO_KW_LEN:
    case PRECALL_NO_KW_LIST_APPEND:
    case PRECALL_NO_KW_METHOD_DESCRIPTOR_FAST:
    case PRECALL_NO_KW_METHOD_DESCRIPTOR_NOARGS:
    case PRECALL_NO_KW_METHOD_DESCRIPTOR_O:
    case PRECALL_NO_KW_STR_1:
    case PRECALL_NO_KW_TUPLE_1:
    case PRECALL_NO_KW_TYPE_1:
    case PRECALL_PYFUNC:
        return true;
    default:
        return false;
    }
}
#        endif
inline int byteOffset(InterpreterFrame* frame) noexcept {
    int lasti = _PyInterpreterFrame_LASTI(frame);
#        if PY_VERSION_HEX < 0x030C0000
    if (lasti >= 0 && isPrecall(_Py_OPCODE(_PyCode_CODE(frame->f_code)[lasti]))) {
        lasti += 1 + INLINE_CACHE_ENTRIES_PRECALL;
    }
#        endif
    return lasti * static_cast<int>(sizeof(_Py_CODEUNIT));
}
#    endif

// ---- locals of frames kept by tracebacks, and of suspended generators (need the GIL) ----

// The frame record that holds a frame object's or a generator's locals, or null when they are
// gone (a finished generator's frame is cleared).
inline InterpreterFrame* frameOfFrameObject(PyObject* frameObject) noexcept {
#    if PY_VERSION_HEX < 0x030B0000
    return reinterpret_cast<PyFrameObject*>(frameObject);
#    else
    return reinterpret_cast<PyFrameObject*>(frameObject)->f_frame;
#    endif
}
// Generators, coroutines and async generators share the head that holds their frame.
inline InterpreterFrame* frameOfGenerator(PyObject* generator) noexcept {
    auto* gen = reinterpret_cast<PyGenObject*>(generator);
#    if PY_VERSION_HEX < 0x030B0000
    return gen->gi_frame; // null once the generator finished
#    else
    if (gen->gi_frame_state >= FRAME_COMPLETED) {
        return nullptr;
    }
#        if PY_VERSION_HEX < 0x030E0000
    return reinterpret_cast<_PyInterpreterFrame*>(gen->gi_iframe);
#        else
    return &gen->gi_iframe;
#        endif
#    endif
}

// The code whose locals the frame holds, including a suspended generator's (which
// codeOf() would also accept) and a finished frame kept by a traceback.
inline PyCodeObject* localsCodeOf(InterpreterFrame* frame) noexcept {
#    if PY_VERSION_HEX < 0x030B0000
    return frame->f_code;
#    else
    PyObject* executable = executableOf(frame);
    return executable != nullptr && PyCode_Check(executable)
               ? reinterpret_cast<PyCodeObject*>(executable)
               : nullptr;
#    endif
}

// Local slots: arguments and locals, then cell variables, then free variables. A slot of a
// cell or free variable holds the cell, which localValue() dereferences.
inline int localCount(PyCodeObject* code) noexcept {
#    if PY_VERSION_HEX < 0x030B0000
    return code->co_nlocals + static_cast<int>(PyTuple_GET_SIZE(code->co_cellvars)) +
           static_cast<int>(PyTuple_GET_SIZE(code->co_freevars));
#    else
    return code->co_nlocalsplus;
#    endif
}

// A borrowed reference to the value bound in slot i, or null when it is unbound.
inline PyObject* localValue(InterpreterFrame* frame, PyCodeObject* code, int i) noexcept {
#    if PY_VERSION_HEX < 0x030B0000
    PyObject* value = frame->f_localsplus[i];
    bool cellSlot = i >= code->co_nlocals;
#    else
#        if PY_VERSION_HEX < 0x030E0000
    PyObject* value = frame->localsplus[i];
#        else
    PyObject* value = PyStackRef_IsNull(frame->localsplus[i])
                          ? nullptr
                          : PyStackRef_AsPyObjectBorrow(frame->localsplus[i]);
#        endif
    bool cellSlot =
        (_PyLocals_GetKind(code->co_localspluskinds, i) & (CO_FAST_CELL | CO_FAST_FREE)) != 0;
#    endif
    if (value != nullptr && cellSlot && PyCell_Check(value)) {
        value = PyCell_GET(value);
    }
    return value;
}

// A borrowed reference to the name of slot i.
inline PyObject* localNameOf(PyCodeObject* code, int i) noexcept {
#    if PY_VERSION_HEX < 0x030B0000
    if (i < code->co_nlocals) {
        return PyTuple_GET_ITEM(code->co_varnames, i);
    }
    i -= code->co_nlocals;
    Py_ssize_t cells = PyTuple_GET_SIZE(code->co_cellvars);
    return i < cells ? PyTuple_GET_ITEM(code->co_cellvars, i)
                     : PyTuple_GET_ITEM(code->co_freevars, i - cells);
#    else
    return PyTuple_GET_ITEM(code->co_localsplusnames, i);
#    endif
}

#endif // TORCHLEAK_FRAME_LAYOUT

} // namespace torchleak::python::layout
