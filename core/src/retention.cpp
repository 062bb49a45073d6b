#include "torchleak/retention.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <set>

namespace torchleak {

std::string_view toString(Retention r) noexcept {
    switch (r) {
    case Retention::Reachable:
        return "reachable";
    case Retention::Cycle:
        return "cycle";
    case Retention::Unnamed:
        return "unnamed";
    case Retention::CppOnly:
        return "cpp_only";
    case Retention::Unknown:
        return "unknown";
    }
    return "unknown";
}

std::string pathText(const std::vector<PathStep>& steps) {
    std::string out;
    for (const PathStep& s : steps) {
        out += s.label;
    }
    return out;
}

bool isGrowableContainer(const std::string& typeName) {
    static const char* const kContainers[] = {"list",        "dict",        "set",     "deque",
                                              "OrderedDict", "defaultdict", "Counter", "ChainMap"};
    std::string base =
        typeName.substr(typeName.rfind('.') == std::string::npos ? 0 : typeName.rfind('.') + 1);
    return std::find(std::begin(kContainers), std::end(kContainers), base) != std::end(kContainers);
}

bool isOutputCacheRoot(const std::string& label) {
    return label.rfind("Out[", 0) == 0 || label == "_" || label == "__" || label == "___" ||
           (label.size() > 1 && label[0] == '_' &&
            std::all_of(label.begin() + 1, label.end(), ::isdigit));
}

bool isLastExceptionRoot(const std::string& label) {
    return label.rfind("<last exception>", 0) == 0;
}

std::optional<Holder> chooseHolder(const std::vector<PathStep>& representative,
                                   const std::vector<const std::vector<PathStep>*>& paths,
                                   double iterations) {
    // For each prefix of a path (as text), the distinct labels that follow it.
    std::map<std::string, std::set<std::string>> fanout;
    for (const auto* p : paths) {
        std::string prefix;
        for (size_t k = 0; k + 1 < p->size(); ++k) {
            prefix += (*p)[k].label;
            fanout[prefix].insert((*p)[k + 1].label);
        }
    }
    // A container whose fan-out does not keep pace with the iterations (a module's two
    // parameters, a dict with one key) is part of the route, not the thing that grows.
    std::string prefix;
    for (size_t k = 0; k + 1 < representative.size(); ++k) {
        prefix += representative[k].label;
        if (!isGrowableContainer(representative[k].type)) {
            continue;
        }
        size_t n = fanout[prefix].size();
        double growth =
            iterations > 0 ? static_cast<double>(n) / iterations : static_cast<double>(n);
        if (n >= 2 && growth >= 0.5) {
            return Holder{prefix, representative[k].type, growth};
        }
    }
    return std::nullopt;
}

std::vector<PathStep> normalizePath(std::vector<PathStep> steps) {
    // nn.Module keeps parameters, buffers and submodules in dicts; users write `model.weight`
    // and `model[0]` (Sequential), so show that.
    std::vector<PathStep> out;
    for (size_t k = 0; k < steps.size(); ++k) {
        const PathStep& s = steps[k];
        bool moduleDict =
            (s.label == "._parameters" || s.label == "._buffers" || s.label == "._modules") &&
            k + 1 < steps.size() && steps[k + 1].kind == "key";
        if (!moduleDict) {
            out.push_back(s);
            continue;
        }
        PathStep next = steps[k + 1];
        const std::string& key = next.label; // ['name']
        if (key.size() > 4 && key.front() == '[' && key[1] == '\'') {
            std::string name = key.substr(2, key.size() - 4);
            bool digits = !name.empty() && std::all_of(name.begin(), name.end(), ::isdigit);
            bool ident = !name.empty() && !std::isdigit(static_cast<unsigned char>(name[0])) &&
                         std::all_of(name.begin(), name.end(), [](char c) {
                             return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
                         });
            if (digits || ident) {
                next.kind = "attr";
                next.label = digits ? "[" + name + "]" : "." + name;
                out.push_back(next);
                ++k;
                continue;
            }
        }
        out.push_back(s);
    }
    return out;
}

namespace {
bool hasKind(const Finding& f, const char* kind) {
    return std::any_of(f.path.begin(), f.path.end(),
                       [&](const PathStep& s) { return s.kind == kind; });
}
} // namespace

std::string suggestFix(const Finding& f) {
    if (f.verdict != Verdict::Leak) {
        return "";
    }
    if (f.retention == Retention::Cycle) {
        return "a reference cycle keeps it until gc.collect() runs" +
               std::string(hasKind(f, "ctx")
                               ? ": save tensors with ctx.save_for_backward() instead "
                                 "of ctx attributes, or call gc.collect()"
                               : ": break the cycle (weakref, or del the back "
                                 "reference), or call gc.collect()");
    }
    if (f.retention == Retention::CppOnly) {
        return "no Python object holds it: C++ keeps it (an autograd graph kept by a hook or "
               "retain_graph, a saved view of an output); free the graph or the hook that owns it";
    }
    const std::string root = f.path.empty() ? "" : f.path.front().label;
    if (isOutputCacheRoot(root)) {
        return "the notebook's output cache holds it: end the cell with ';' to not store the "
               "result, or drop it with %reset -f out";
    }
    if (isLastExceptionRoot(root)) {
        return "the last exception's traceback keeps the failed frame's locals: run "
               "`import sys; sys.last_value = sys.last_traceback = sys.last_exc = None` "
               "or %reset -f, or re-run the cell successfully";
    }
    bool graph = hasKind(f, "grad_fn") || hasKind(f, "next_functions") || hasKind(f, "saved");
    bool ctxAttr = std::any_of(f.path.begin(), f.path.end(), [](const PathStep& s) {
        return s.kind == "ctx" && s.label.rfind(".saved_tensors", 0) != 0;
    });
    if (ctxAttr) {
        return "a custom autograd.Function keeps a tensor as a ctx attribute: use "
               "ctx.save_for_backward() (freed after backward), and keep .detach()ed outputs";
    }
    // create_graph=True: a .grad that itself has a graph.
    bool gradWithGraph = false;
    for (size_t k = 0; k + 1 < f.path.size(); ++k) {
        if (f.path[k].kind == "grad" && f.path[k + 1].kind == "grad_fn") {
            gradWithGraph = true;
        }
    }
    if (gradWithGraph) {
        return ".grad was built with create_graph=True and keeps its graph: reset it "
               "(param.grad = None / zero_grad(set_to_none=True)) or use torch.autograd.grad";
    }
    if (graph) {
        if (f.holder) {
            return "store loss.detach() or loss.item(), not the tensor with its graph, in " +
                   f.holder->path_text;
        }
        if (root.find("hidden") != std::string::npos || root.find("state") != std::string::npos) {
            return "detach() the recurrent state between iterations (hidden = hidden.detach())";
        }
        return "this tensor keeps the autograd graph of every iteration: accumulate "
               ".item() or .detach(), and wrap evaluation in torch.no_grad()";
    }
    if (f.holder) {
        return f.holder->path_text + " grows by " +
               std::to_string(static_cast<long long>(f.holder->growth_per_iteration + 0.5)) +
               " per iteration: .clear() it, bound it (collections.deque(maxlen=...)) or store "
               "smaller copies";
    }
    if (hasKind(f, "attr")) {
        return "an attribute keeps the last tensors: set it to None when done, or store "
               ".detach()ed copies";
    }
    if (f.autograd_node) {
        return "gradients or buffers made by " + *f.autograd_node +
               " in backward stay alive: reset .grad (optimizer.zero_grad(set_to_none=True)) "
               "and do not keep outputs of backward(create_graph=True)";
    }
    return "tensors allocated here survive every iteration: something keeps a reference "
           "(a list or dict that grows, a tensor kept with its autograd graph); keep "
           ".detach() or .item() copies, or clear the container";
}

} // namespace torchleak
