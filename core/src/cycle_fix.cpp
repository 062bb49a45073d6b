// The fix for a reference cycle only gc.collect() frees: the cycle by its entry and the way
// around it, and the edge of it that the user's code owns.

#include "torchleak/retention.h"
#include "torchleak/suggestion.h"

#include <algorithm>
#include <string>

namespace torchleak {

// The fix names the cycle (its entry and the way around it) and the edge to break there.
std::string suggestForCycle(const Finding& f) {
    size_t closing = 0; // the step that leads back to the entry
    for (size_t k = 1; k < f.path.size(); ++k) {
        if (f.path[k].note.find("back to the ") != std::string::npos) {
            closing = k;
            break;
        }
    }
    std::string loop;
    for (size_t k = 1; k <= closing; ++k) {
        loop += f.path[k].label;
    }
    std::string cycle = f.path.empty() ? std::string("a reference cycle")
                                       : "a reference cycle (" + f.path.front().label +
                                             (loop.empty() ? "" : " \u21c4 " + loop) + ")";
    std::string hint;
    bool ctx = std::any_of(f.path.begin(), f.path.end(),
                           [](const PathStep& s) { return s.kind == StepKind::Ctx; });
    for (size_t k = 1; k <= closing && hint.empty(); ++k) {
        const PathStep& s = f.path[k];
        // An attribute of the entry holding a tensor whose graph leads back to it (a module's
        // `self.last_out = out`, the out's node keeping the module): that attribute, the
        // user's own, closes the cycle through autograd, not the node that keeps the module.
        if (k == 1 && s.kind == StepKind::Attr && s.tensor && k + 1 <= closing &&
            f.path[k + 1].kind == StepKind::GradFn) {
            hint = "its own attribute " + s.label + " keeps a tensor with its autograd graph, " +
                   "and the graph's node " + f.path[k + 1].type +
                   " keeps it back: store a .detach()ed tensor there (self" + s.label +
                   " = out.detach())";
            break;
        }
        if (s.label == ".__self__") {
            hint = "it stores a bound method of itself (" + loop.substr(0, loop.find(".__self__")) +
                   "): keep a weakref.WeakMethod, a staticmethod or a plain function there";
        } else if (s.kind == StepKind::Closure) {
            hint = "a closure refers back to it (" + s.note.substr(0, s.note.find("; back to")) +
                   "): pass the object in as an argument, or capture a weakref.ref";
        }
    }
    if (hint.empty() && ctx) {
        hint = "save tensors with ctx.save_for_backward() instead of ctx attributes";
    }
    if (hint.empty()) {
        hint = "break it at " + (loop.empty() ? std::string("one edge") : loop) +
               " (a weakref, or del the back reference when done)";
    }
    return cycle + " keeps it until gc.collect() runs: " + hint + ", or call gc.collect()";
}

} // namespace torchleak
