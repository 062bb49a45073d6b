#include "inspect/unreached.h"

#include "inspect/torch_objects.h"
#include "inspect/walk_graph.h"

#include <deque>
#include <unordered_map>
#include <unordered_set>

namespace torchleak::python {

// gc's own computation, restricted to the objects the first walk did not reach: those whose
// reference count exceeds the references held by other such objects are held from outside
// (C code, library state); everything they reach is alive; the rest is cyclic garbage.
Unreached classifyUnreached(PyObject* objects, const PointerSet& visited) {
    Unreached out;
    std::unordered_map<PyObject*, Py_ssize_t> refs;
    std::vector<PyObject*> candidates;
    Py_ssize_t n = PyList_GET_SIZE(objects);
    for (Py_ssize_t k = 0; k < n; ++k) {
        PyObject* o = PyList_GET_ITEM(objects, k);
        if (!visited.contains(tag(o, NodeKind::Python))) {
            candidates.push_back(o);
            refs.emplace(o, Py_REFCNT(o) - 1); // minus the list gc.get_objects() returned
            if (isTensor(o)) {
                out.tensors.push_back(o);
            }
        }
    }
    for (PyObject* o : candidates) {
        traverseproc traverse = Py_TYPE(o)->tp_traverse;
        if (traverse == nullptr) {
            continue;
        }
        traverse(
            o,
            [](PyObject* child, void* arg) -> int {
                auto* r = static_cast<std::unordered_map<PyObject*, Py_ssize_t>*>(arg);
                auto it = r->find(child);
                if (it != r->end()) {
                    --it->second;
                }
                return 0;
            },
            &refs);
    }
    std::unordered_set<PyObject*> alive;
    std::deque<PyObject*> queue;
    for (PyObject* o : candidates) {
        if (refs[o] > 0) {
            out.external.push_back(o);
            alive.insert(o);
            queue.push_back(o);
        }
    }
    while (!queue.empty()) {
        PyObject* o = queue.front();
        queue.pop_front();
        traverseproc traverse = Py_TYPE(o)->tp_traverse;
        if (traverse == nullptr) {
            continue;
        }
        struct Ctx {
            std::unordered_map<PyObject*, Py_ssize_t>* refs;
            std::unordered_set<PyObject*>* alive;
            std::deque<PyObject*>* queue;
        } ctx{&refs, &alive, &queue};
        traverse(
            o,
            [](PyObject* child, void* arg) -> int {
                auto* c = static_cast<Ctx*>(arg);
                if (c->refs->count(child) && c->alive->insert(child).second) {
                    c->queue->push_back(child);
                }
                return 0;
            },
            &ctx);
    }
    for (PyObject* o : candidates) {
        if (!alive.count(o)) {
            out.garbage.push_back(o);
        }
    }
    return out;
}

} // namespace torchleak::python
