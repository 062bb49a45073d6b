// Remedies for a holder whose entries are made in the loop and kept: each keeping its autograd
// graph (worded for what it keeps: a scalar loss, a batch of logits, the graph's nodes), or a
// copy kept at intervals (a snapshot at each evaluation), which wants the best or the last few.
#include "torchleak/suggestion.h"

#include "torchleak/display_text.h"
#include "torchleak/retention.h"

#include <string>

namespace torchleak {

bool keepsGraphs(const Finding& f) {
    return keepsAutogradGraph(f.path) ||
           (!f.path.empty() && f.path.back().note.find(kKeepsGraphNote) != std::string::npos);
}

bool isAppendOnlySequence(const std::string& type) {
    return type == "list" || type == "collections.deque" || type == "deque";
}

// A holder keeps tensors with their autograd graphs: the fix is worded for what it keeps (a
// scalar loss, a batch of logits, the graph's nodes themselves).
std::string keptWithGraphFix(const Finding& f) {
    const std::string holder = shortPath(f.holder->path_text);
    const PathStep* entry = entryOf(f);
    // The templates below are for what the user's own line made (a loss, a batch of logits). A
    // tensor a third-party library made and keeps (a copy of the weights per step in its
    // private state) is that library's to stop keeping: "store loss.item()" has no premise.
    if (const auto& inside = f.allocated_inside;
        inside && inside->package && inside->file.find("/torch/") == std::string::npos) {
        return holder + " keeps tensors that " + siteText(*inside) + " (in " + inside->function +
               ", library code) made, each with the autograd graph that made it: a setting or "
               "method of the object that keeps them controls this (see its documentation); "
               "failing that, keep .detach()ed copies where it stores them";
    }
    bool afterBackward =
        !f.path.empty() && f.path.back().note.find(kKeepsGraphNote) != std::string::npos;
    if (entry != nullptr && entry->type != "Tensor" &&
        entry->type.find("Backward") != std::string::npos) {
        return holder + " keeps autograd nodes (" + entry->type +
               ", a grad_fn), and each keeps its whole graph, with the saved tensors of a "
               "backward(retain_graph=True) or of one not yet run: keep what you need from them "
               "(a name, a shape, a value), not the nodes";
    }
    if (entry != nullptr && entry->tensor) {
        int64_t numel = 1;
        for (int64_t d : entry->tensor->shape) {
            numel *= d;
        }
        if (numel > 1) {
            // "the 512 tensors" read as a count: one dimension is said in elements.
            std::string shape;
            for (int64_t d : entry->tensor->shape) {
                shape += (shape.empty() ? "" : "\u00d7") + std::to_string(d);
            }
            if (entry->tensor->shape.size() == 1) {
                shape += "-element";
            }
            return "store .detach()ed copies of the " + shape + " tensors in " + holder +
                   " (t.detach(), or t.detach().cpu() to free the device), not the tensors: each "
                   "one kept has a grad_fn and keeps the autograd graph that made it" +
                   (afterBackward ? " (its nodes, after backward())"
                                  : std::string(" and its saved activations"));
        }
    }
    // The tensor as the loop appends it (`F.cross_entropy(model(xv), yv)`, said once), else "loss".
    const std::string kept = f.appended ? receiver(f.appended->value) : "loss";
    const std::string again = isPythonName(kept) ? kept : "";
    if (afterBackward) {
        return "store " + kept + ".item() (or " + again + ".detach()) in " + holder +
               ", not the tensor: each one kept has a grad_fn and keeps its autograd graph's "
               "nodes alive, and with them anything backward() did not free";
    }
    return "store " + kept + ".detach() or " + again +
           ".item(), not the tensor with its graph, in " + holder;
}

// The last few to keep: as many as a comparison of recent evaluations needs.
constexpr int kSnapshotsKept = 3;

std::string keptAtIntervalsFix(const Finding& f) {
    const std::string holder = shortPath(f.holder->path_text);
    const std::string every = std::to_string(*f.growth_since->step_every);
    const std::string k = std::to_string(kSnapshotsKept);
    return holder + " gains an entry every " + every +
           " iterations (a copy kept at each evaluation, say) and never drops one: keep the "
           "best so far, or the last few (del " +
           holder + "[:-" + k + "] after appending, or a collections.deque(maxlen=" + k +
           ")), not every one";
}

std::string keptAtIntervalsFixCode(const Finding& f) {
    return "del " + f.holder->path_text + "[:-" + std::to_string(kSnapshotsKept) + "]";
}

} // namespace torchleak
