#include "torchleak/retention.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <set>

namespace torchleak {

std::string pathText(const std::vector<PathStep>& steps) {
    std::string out;
    for (const PathStep& s : steps) {
        out += s.label;
    }
    return out;
}

const PathStep* stepStarting(const std::vector<PathStep>& path, std::string_view prefix) {
    for (const PathStep& s : path) {
        if (std::string_view(s.label).substr(0, prefix.size()) == prefix) {
            return &s;
        }
    }
    return nullptr;
}

TorchOwner torchOwnerOf(const Finding& f) {
    if (!f.path.empty() && f.path.front().label == kTorchScriptUnitRoot) {
        return TorchOwner::TorchScriptUnit;
    }
    if (f.retention != Retention::CppOnly) {
        return TorchOwner::None;
    }
    auto inside = [&](std::string_view dir) {
        return std::any_of(f.stack.begin(), f.stack.end(),
                           [&](const Frame& fr) { return fr.file.find(dir) != std::string::npos; });
    };
    if (inside("/torch/jit/")) {
        return TorchOwner::TorchScriptUnit;
    }
    if (inside("/torch/_dynamo/") || inside("/torch/_inductor/")) {
        return TorchOwner::CompileCaches;
    }
    return TorchOwner::None;
}

bool keepsAutogradGraph(const std::vector<PathStep>& path) {
    return std::any_of(path.begin(), path.end(), [](const PathStep& s) {
        return s.kind == StepKind::GradFn || s.kind == StepKind::NextFunctions ||
               s.kind == StepKind::Saved;
    });
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

PathFanout::PathFanout(const std::vector<const std::vector<PathStep>*>& paths) {
    for (const auto* p : paths) {
        std::string prefix;
        for (size_t k = 0; k + 1 < p->size(); ++k) {
            prefix += (*p)[k].label;
            Branch& b = d_branches[prefix];
            b.paths += 1;
            b.next.insert((*p)[k + 1].label);
        }
    }
}

std::optional<Holder> PathFanout::holderOn(const std::vector<PathStep>& path,
                                           double iterations,
                                           double sampleScale) const {
    // A container whose fan-out does not keep pace with the iterations (a module's two
    // parameters, a dict with one key) is part of the route, not the thing that grows.
    std::string prefix;
    for (size_t k = 0; k + 1 < path.size(); ++k) {
        prefix += path[k].label;
        if (!isGrowableContainer(path[k].type)) {
            continue;
        }
        auto it = d_branches.find(prefix);
        if (it == d_branches.end()) {
            continue;
        }
        const Branch& b = it->second;
        double n = static_cast<double>(b.next.size());
        if (b.next.size() >= 2 && b.next.size() == b.paths) {
            n *= std::max(sampleScale, 1.0); // no two samples shared an element
        }
        double growth = iterations > 0 ? n / iterations : n;
        if (b.next.size() >= 2 && growth >= 0.5) {
            return Holder{prefix, path[k].type, growth};
        }
    }
    return std::nullopt;
}

std::optional<Holder> chooseHolder(const std::vector<PathStep>& representative,
                                   const std::vector<const std::vector<PathStep>*>& paths,
                                   double iterations,
                                   double sampleScale) {
    return PathFanout(paths).holderOn(representative, iterations, sampleScale);
}

std::string holderName(const BlockPath& path, const std::optional<Holder>& holder) {
    if (holder) {
        return holder->path_text;
    }
    if (path.steps.empty()) {
        return "";
    }
    // The output cache and the last exception each keep many roots (Out[3], Out[4], _; one
    // per failed frame's local): one holder each, however many roots.
    const std::string& root = path.steps.front().label;
    if (isOutputCacheRoot(root)) {
        return "Out";
    }
    if (isLastExceptionRoot(root)) {
        return "<last exception>";
    }
    return root;
}

std::vector<PathStep> normalizePath(std::vector<PathStep> steps) {
    // nn.Module keeps parameters, buffers and submodules in dicts; users write `model.weight`
    // and `model[0]` (Sequential), so show that.
    std::vector<PathStep> out;
    for (size_t k = 0; k < steps.size(); ++k) {
        const PathStep& s = steps[k];
        bool moduleDict =
            (s.label == "._parameters" || s.label == "._buffers" || s.label == "._modules") &&
            k + 1 < steps.size() && steps[k + 1].kind == StepKind::Key;
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
                next.kind = StepKind::Attr;
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

} // namespace torchleak
