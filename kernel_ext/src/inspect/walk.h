#pragma once
// Walk: one breadth-first walk over the Python heap and the autograd graph from a set of roots,
// recording every object it reaches (walk_graph.h) and the first node that reaches each target
// block. RetainingPathFinder (heap_walker.h) runs one per phase; PathBuilder labels the chains.
//
// Rules (heap_walker.h's): the GIL is held, no user code runs, references are taken only on
// objects the walk makes itself (kept until it ends).

#include "inspect/walk_graph.h"
#include "torchleak/pointer_table.h"

#include <ATen/core/Tensor.h>
#include <Python.h>
#include <cstdint>
#include <deque>
#include <string>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/saved_variable.h>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace torchleak::python {

class Walk {
  public:
    Walk(const std::unordered_set<uintptr_t>& targets, PointerSet& visited, WalkStats& stats);
    ~Walk();
    Walk(const Walk&) = delete;
    Walk& operator=(const Walk&) = delete;

    void addRoots(const std::vector<NamedRoot>& roots);
    void addRoot(PyObject* obj, uint32_t rootIndex);

    // Stops early when every target is found (or, with a goal object, when it is reached, or
    // after maxNodes nodes).
    void run(PyObject* goal = nullptr, size_t maxNodes = SIZE_MAX);

    const std::unordered_map<uintptr_t, uint32_t>& found() const { return d_found; }
    const std::vector<WalkNode>& nodes() const { return d_nodes; }
    uint32_t goalNode() const { return d_goalNode; }

    // A ctx and its own autograd node refer to each other in C++: a loop search that took that
    // edge would find only that unlabelled two-member loop, never the user's.
    void skipCtxNode() { d_followCtxNode = false; }

    // Python objects this walk made (custom Function ctx objects) stay alive until it ends.
    PyObject* keep(PyObject* o) {
        d_temporaries.push_back(o);
        return o;
    }

  private:
    void push(const void* ptr,
              NodeKind kind,
              uint32_t parent,
              Edge edge,
              uint32_t index,
              const char* name);
    void expand(uint32_t i);
    void checkTarget(uint32_t i, const at::Tensor& t);
    void checkBlock(uint32_t i, uintptr_t ptr);

    // What C++ objects refer to: a tensor's parts, an autograd node's edges and saved state.
    void expandTensor(uint32_t i, const at::Tensor& t);
    void pushSparseParts(uint32_t i, const at::Tensor& t);
    void pushMember(uint32_t i, const at::Tensor& member, const char* name);
    void pushSaved(uint32_t i,
                   const torch::autograd::SavedVariable& sv,
                   Edge edge,
                   uint32_t index,
                   const char* name);
    void expandAutograd(uint32_t i, torch::autograd::Node* node);

    // A Python object's referents, by kind: expandPython picks the expander.
    void expandPython(uint32_t i, PyObject* obj);
    void expandDict(uint32_t i, PyObject* dict);
    void expandSequence(uint32_t i, PyObject* listOrTuple);
    void expandPythonTensor(uint32_t i, PyObject* obj);
    void expandStorage(uint32_t i, PyObject* storage);
    void expandCustomFunctionCtx(uint32_t i, PyObject* ctx);
    void expandFunction(uint32_t i, PyObject* function);
    void expandScriptObject(uint32_t i, PyObject* obj);
    void expandFrameLocals(uint32_t i, PyObject* owner);
    void expandException(uint32_t i, PyObject* exception);
    void expandTraceback(uint32_t i, PyObject* traceback);
    void pushInstanceDict(uint32_t i, PyObject* obj);
    void traverseGeneric(uint32_t i, PyObject* obj);

    const std::unordered_set<uintptr_t>& d_targets;
    bool d_followCtxNode = true;
    PointerSet& d_visited;
    WalkStats& d_stats;
    std::vector<WalkNode> d_nodes;
    std::unordered_map<uintptr_t, uint32_t> d_found;
    std::vector<PyObject*> d_temporaries;
    std::deque<std::string> d_names; // edge names the walk made; a deque never moves them
    struct DeferredKey {
        PyObject* key;
        uint32_t parent;
        uint32_t ordinal;
    };
    std::vector<DeferredKey> d_deferredKeys;
    PyObject* d_goal = nullptr;
    uint32_t d_goalNode = kNoParent;
};

} // namespace torchleak::python
