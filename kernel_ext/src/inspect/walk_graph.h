#pragma once
// The graph a retaining-path walk records: one WalkNode per object it reached (a Python object,
// a C++ tensor, an autograd node), each with the edge it was reached through from its parent;
// the named roots it starts from and what it counted. Walk (walk.h) writes them; PathBuilder
// turns a chain of them into labelled steps.

#include "torchleak/retention.h"

#include <Python.h>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace torchleak::python {

enum class NodeKind : uint8_t { Python, Tensor, Autograd };

enum class Edge : uint8_t {
    Root,
    DictValue, // index: position in PyDict_Next order
    DictKey,   // index: position
    SeqItem,   // index: list/tuple position
    AttrDict,  // an object's __dict__ (no label of its own)
    Closure,   // index: cell number in __closure__
    Ref,       // generic tp_traverse referent; index: ordinal
    GradFn,
    NextFunction, // index: edge number
    Saved,        // name: "_saved_self"
    SavedList,    // name and index
    CtxSaved,     // index into ctx.saved_tensors
    CtxOf,        // a custom Function node's ctx object (the same thing as grad_fn in Python)
    NodeOf,       // a Python wrapper's C++ node
    Variable,     // AccumulateGrad.variable
    Grad,
    FrameLocal,      // index: the local's slot in its frame (a frame object or a generator's frame)
    NodeHooks,       // the dict of Python hooks a node's C++ hook object keeps; name: which hooks
    SavedPacked,     // what a saved_tensors_hooks pack hook returned for a saved variable; name:
                     // the variable (null: ctx.saved_tensors), index: list position or kNoIndex
    SavedUnpackHook, // the unpack hook of a saved variable packed by saved_tensors_hooks;
                     // name and index as for SavedPacked
    ScriptConstant,  // a tensor constant of a TorchScript graph; name: the function
};
// The last Edge: a new one goes before it or moves this, and path_builder.cpp's label tables
// then refuse to compile until it is labelled.
inline constexpr Edge kLastEdge = Edge::ScriptConstant;

struct WalkNode {
    const void* ptr;
    uint32_t parent;
    uint32_t index;
    const char* name;
    NodeKind kind;
    Edge edge;
};

// Which module a parameter belongs to, by its TensorImpl. Collected by the Python layer from the
// nn.Modules among the roots: a path step at an autograd node whose inputs include one of these
// parameters says which module made the node, and a dict keyed by a parameter
// (optimizer.state) names the entry by the parameter's own path.
struct ParameterOwner {
    std::string module; // "model[7] (Linear)"
    std::string path;   // "model[7].weight"
};
using ParameterOwners = std::unordered_map<const void*, ParameterOwner>;

struct NamedRoot {
    std::string label; // pasteable ("losses", "mymodule.cache", "Out") or "<...>" text
    StepKind kind;     // Root, or Frame for a frame's local
    std::string note;  // "local 'x' in train_step (train.py:12)"
    PyObject* object;  // borrowed: the caller keeps it alive during the walk
};

struct WalkStats {
    size_t pythonObjects = 0;
    size_t tensors = 0;
    size_t autogradNodes = 0;
    size_t reached = 0;
    size_t unreached = 0;
    bool secondPhase = false;
    double seconds = 0.0;
};

constexpr uint32_t kNoParent = UINT32_MAX;
constexpr uint32_t kNoIndex = UINT32_MAX;
// The visited set is insert-only and the walk's main cache cost: a load of up to 3/4 keeps it
// small.
constexpr unsigned kVisitedLoadQuarters = 3;

// The visited set holds tagged pointers: the low two bits are the node kind.
inline uintptr_t tag(const void* p, NodeKind k) {
    return reinterpret_cast<uintptr_t>(p) | static_cast<uintptr_t>(k);
}

// The root a node was reached from.
inline uint32_t rootOf(const std::vector<WalkNode>& nodes, uint32_t i) {
    while (nodes[i].parent != kNoParent) {
        i = nodes[i].parent;
    }
    return i;
}

} // namespace torchleak::python
