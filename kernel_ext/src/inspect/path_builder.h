#pragma once
// PathBuilder: the steps of a retaining path, labelled as a user would write them (`[3]`,
// `.grad_fn`, `._saved_self`, `['key']`, a closure variable's name). Labels are computed only
// for the paths that are reported, from the nodes a Walk recorded, and without running user
// code: names come from dict entries, slots and code objects, never from __repr__.

#include "inspect/class_origin.h"
#include "inspect/frame_capture.h"
#include "inspect/walk_graph.h"

#include <ATen/core/Tensor.h>
#include <Python.h>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace torchleak::python {

// The maxlen of a deque of exactly that type, else (or unbounded) -1. Needs the GIL.
int64_t dequeCapacity(PyObject* deque);

class PathBuilder {
  public:
    PathBuilder(const std::vector<WalkNode>& nodes,
                const std::vector<NamedRoot>& roots,
                const ParameterOwners* owners = nullptr,
                std::optional<uint64_t> firstHookId = std::nullopt,
                ClassOrigins* origins = nullptr)
        : d_nodes(nodes), d_roots(roots), d_owners(owners), d_firstHookId(firstHookId),
          d_origins(origins) {}

    // Steps from the root to node `i`. With `dropRoot`, the root itself is left out.
    std::vector<PathStep> build(uint32_t i, bool dropRoot = false);

  private:
    // A view shares its base's storage: the path ends at the view, and `._base` shows the
    // (often much larger) tensor whose storage the view keeps alive.
    void appendViewBase(const WalkNode& n, std::vector<PathStep>& steps);

    std::string typeName(const WalkNode& n);

    // The tensor a node is (a C++ tensor, or a Python one), or an undefined tensor.
    static at::Tensor tensorOf(const WalkNode& n);

    void describeTensor(const WalkNode& n, PathStep& step);
    // What the object's class offers and where it was written: reset(), its releasing methods,
    // its package.
    void noteClass(const WalkNode& n, PathStep& step);
    void noteModuleOfNode(const WalkNode& n, PathStep& step);
    void noteGraphOfLastTensor(const WalkNode& n, std::vector<PathStep>& steps);

    // The object `parent` refers to `child` through: find the name (dict key, slot) without
    // running user code.
    std::optional<std::string> attributeName(PyObject* parent, PyObject* child);

    // The step node `i` is, by a table of its edge kind (path_builder.cpp): fixed text around
    // the node's name and index, or one of the labellers below.
    PathStep label(uint32_t i);
    PathStep labelRoot(const WalkNode& n);
    PathStep labelDictEntry(const WalkNode& n);
    PathStep labelSequenceItem(const WalkNode& n);
    PathStep labelClosureCell(const WalkNode& n);
    PathStep labelReferent(const WalkNode& n);
    PathStep labelFrameLocal(const WalkNode& n);
    PathStep labelSavedPacked(const WalkNode& n);
    PathStep labelUnpackHook(const WalkNode& n);
    PathStep labelScriptConstant(const WalkNode& n);
    PathStep labelNodeHooks(const WalkNode& n);
    PyObject* parentObject(const WalkNode& n) const;
    std::optional<HookDictGrowth> hookDictGrowth(const std::string& name, PyObject* dict);

    // A dict entry keyed by an object (a parameter keying optimizer.state) is named by the
    // parameter's path through its module, else by the key's own path when the walk reached it.
    std::optional<std::string> keyPath(PyObject* key);
    std::unordered_map<const void*, uint32_t> d_pythonNodes; // built on first use
    std::unordered_set<PyObject*> d_keysInProgress;

    const std::vector<WalkNode>& d_nodes;
    const std::vector<NamedRoot>& d_roots;
    QualifiedNames d_names;
    const ParameterOwners* d_owners;
    std::optional<uint64_t> d_firstHookId;
    ClassOrigins* d_origins; // which package an object's class is from, when known
};

} // namespace torchleak::python
