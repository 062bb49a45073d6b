#include "torchleak/retention.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <set>

namespace torchleak {

std::string pathText(const std::vector<PathStep>& steps) {
    return pathText(steps, steps.size());
}

std::string pathText(const std::vector<PathStep>& steps, size_t count) {
    std::string out;
    for (size_t k = 0; k < count && k < steps.size(); ++k) {
        out += steps[k].label;
    }
    return out;
}

std::optional<size_t> holderEnd(const Finding& f) {
    if (!f.holder) {
        return std::nullopt;
    }
    std::string prefix;
    for (size_t k = 0; k + 1 < f.path.size(); ++k) {
        prefix += f.path[k].label;
        if (prefix == f.holder->path_text) {
            return k;
        }
    }
    return std::nullopt;
}

std::optional<GrowthSince::Bounded> fillingBoundedHolder(const Finding& f) {
    const auto end = holderEnd(f);
    if (!end) {
        return std::nullopt;
    }
    const PathStep& holder = f.path[*end];
    if (holder.capacity <= 0 || holder.entries < 0 || holder.entries >= holder.capacity) {
        return std::nullopt;
    }
    return GrowthSince::Bounded{holder.capacity, holder.entries};
}

std::optional<size_t> libraryOwnerStep(const Finding& f) {
    const auto end = holderEnd(f);
    if (!end) {
        return std::nullopt;
    }
    for (size_t j = *end; j-- > 0;) {
        if (f.path[j].package.empty()) {
            continue;
        }
        // Its private state: what its own methods fill and empty. A public attribute is the
        // library's interface, which the holder's own fix may use.
        if (f.path[j + 1].label.rfind("._", 0) != 0) {
            return std::nullopt;
        }
        return j;
    }
    return std::nullopt;
}

std::optional<LibraryObject> libraryOwnerOf(const Finding& f) {
    const auto j = libraryOwnerStep(f);
    if (!j) {
        return std::nullopt;
    }
    const PathStep& owner = f.path[*j];
    return LibraryObject{pathText(f.path, *j + 1), owner.type, owner.package,
                         owner.release_methods};
}

const PathStep* stepStarting(const std::vector<PathStep>& path, std::string_view prefix) {
    for (const PathStep& s : path) {
        if (std::string_view(s.label).substr(0, prefix.size()) == prefix) {
            return &s;
        }
    }
    return nullptr;
}

bool isHookAnchorRoot(const std::string& label) {
    for (const char* kind : {"<hook on ", "<prehook on ", "<tensor hook on "}) {
        if (label.rfind(kind, 0) == 0) {
            return true;
        }
    }
    return false;
}

bool isAnonymousCppRoot(const std::string& label) {
    return label == "<held only from C++>" || label == "<Tensor held only from C++>";
}

TorchOwner torchOwnerOf(const Finding& f) {
    if (f.path.empty()) {
        return TorchOwner::None;
    }
    const std::string& root = f.path.front().label;
    if (root == kTorchScriptUnitRoot || root == kTorchScriptExecutorRoot) {
        return TorchOwner::TorchScriptUnit;
    }
    if (root == kCompileCachesRoot) {
        return TorchOwner::CompileCaches;
    }
    if (root == kAutocastCacheRoot) {
        return TorchOwner::AutocastCache;
    }
    if (isHookAnchorRoot(root)) {
        return TorchOwner::HookOnGraph;
    }
    for (const PathStep& s : f.path) {
        if (s.type == kCheckpointFrameType) {
            return TorchOwner::Checkpoint;
        }
    }
    if (stepStarting(f.path, "<unpack hook of ")) {
        return TorchOwner::SavedTensorsHooks;
    }
    return TorchOwner::None;
}

std::optional<PathStep> namedCppOwner(const Finding& f, const TorchCacheState& state) {
    auto inside = [&](std::string_view dir) {
        return std::any_of(f.stack.begin(), f.stack.end(),
                           [&](const Frame& fr) { return fr.file.find(dir) != std::string::npos; });
    };
    PathStep root;
    root.kind = StepKind::Root;
    if (state.torchscript_functions > 0 && inside("/torch/jit/")) {
        root.label = kTorchScriptExecutorRoot;
        root.note = "allocated while TorchScript traced or ran a function, and its global "
                    "compilation unit holds " +
                    std::to_string(state.torchscript_functions) +
                    " function(s): their executors keep what they computed in C++";
        return root;
    }
    if (state.dynamo_compiled_frames > 0 &&
        (inside("/torch/_dynamo/") || inside("/torch/_inductor/"))) {
        root.label = kCompileCachesRoot;
        root.note = "torch._dynamo compiled " + std::to_string(state.dynamo_compiled_frames) +
                    " frame(s) in this process (its counters) and this was allocated while "
                    "compiled code ran: its compiled-code and guard caches keep what the graphs "
                    "captured in C++";
        return root;
    }
    std::string deviceType = f.device.substr(0, f.device.find(':'));
    if (std::find(state.autocast_devices.begin(), state.autocast_devices.end(), deviceType) !=
        state.autocast_devices.end()) {
        root.label = kAutocastCacheRoot;
        root.note = "a torch.autocast region is open on " + deviceType +
                    " with its cast cache on: the lower-precision casts of leaf parameters made "
                    "inside it (and, through their graphs, the parameters) stay cached until the "
                    "outermost region exits";
        return root;
    }
    return std::nullopt;
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

bool isHiddenOutputCacheRoot(const std::string& label) {
    return label.rfind(kHiddenOutputCachePrefix, 0) == 0;
}

bool isOutputCacheRoot(const PathStep& root) {
    const std::string& label = root.label;
    if (label == "_" || label == "__" || label == "___") {
        return root.note == kOutputCacheNote;
    }
    return label.rfind("Out[", 0) == 0 || isHiddenOutputCacheRoot(label) ||
           (label.size() > 1 && label[0] == '_' &&
            std::all_of(label.begin() + 1, label.end(), ::isdigit));
}

bool isLastExceptionRoot(const std::string& label) {
    return label.rfind("<last exception>", 0) == 0;
}

PathFanout::PathFanout(const std::vector<const std::vector<PathStep>*>& paths,
                       const std::vector<uint32_t>& births)
    : d_nodes(1) {
    const bool born = births.size() == paths.size();
    for (size_t i = 0; i < paths.size(); ++i) {
        const std::vector<PathStep>& p = *paths[i];
        size_t at = 0;
        for (size_t k = 0; k < p.size(); ++k) {
            auto [edge, added] = d_edges.try_emplace(Edge{at, p[k].label}, d_nodes.size());
            if (added) {
                d_nodes[at].next.push_back(d_nodes.size());
                d_nodes.emplace_back();
            }
            if (k > 0) {
                d_nodes[at].paths += 1;
            }
            at = edge->second;
            if (born && k > 0) {
                d_nodes[at].births.push_back(births[i]);
            }
        }
    }
    for (Node& n : d_nodes) {
        std::sort(n.births.begin(), n.births.end());
        n.births.erase(std::unique(n.births.begin(), n.births.end()), n.births.end());
    }
    if (born) {
        for (Node& n : d_nodes) {
            decide(n);
        }
    }
}

size_t PathFanout::stepFrom(size_t node, std::string_view label) const {
    if (node == kNone) {
        return kNone;
    }
    auto it = d_edges.find(Edge{node, label});
    return it == d_edges.end() ? kNone : it->second;
}

// A route: most of the node's elements each hold blocks born in several iterations (at least
// 3, and at least half of those the node holds): elements that were there before the growth and
// gain something each iteration. An element added per iteration holds that iteration's blocks.
// Gains in steps: a container that gains an element at intervals (a snapshot at every
// evaluation, every 4th iteration) grows as one that gains an element a step does, only slower:
// three or more elements, each holding the blocks of one iteration, each of another iteration.
void PathFanout::decide(Node& n) const {
    if (n.next.size() < 2) {
        return;
    }
    std::vector<uint32_t> all;
    bool single = true;
    for (size_t c : n.next) {
        const std::vector<uint32_t>& b = d_nodes[c].births;
        all.insert(all.end(), b.begin(), b.end());
        single = single && b.size() == 1;
    }
    std::sort(all.begin(), all.end());
    const size_t withOne = all.size();
    all.erase(std::unique(all.begin(), all.end()), all.end());
    const size_t many = std::max<size_t>(3, (all.size() + 1) / 2);
    const auto spanning = std::count_if(n.next.begin(), n.next.end(),
                                        [&](size_t c) { return d_nodes[c].births.size() >= many; });
    n.route = 2 * static_cast<size_t>(spanning) > n.next.size();
    n.gainsInSteps = n.next.size() >= 3 && single && all.size() == withOne;
}

std::optional<Holder> PathFanout::holderOn(const std::vector<PathStep>& path,
                                           double iterations,
                                           double sampleScale) const {
    // A container whose fan-out does not keep pace with the iterations (a module's two
    // parameters, a dict with one key) is part of the route, not the thing that grows.
    size_t at = 0;
    for (size_t k = 0; k + 1 < path.size(); ++k) {
        at = stepFrom(at, path[k].label);
        // A dict of hooks that gained about one hook per iteration is what grows, however the
        // paths fan out below it: each hook keeps what it records, so every path may run
        // through the oldest hook (which records every later iteration too) and clearing
        // what one hook keeps frees nothing the others keep.
        if (const auto& hooks = path[k].hooks; hooks && hooks->added >= 2) {
            const double growth = static_cast<double>(hooks->added) / std::max(iterations, 1.0);
            if (growth >= 0.5) {
                return Holder{pathText(path, k + 1), path[k].type, growth, hooks};
            }
        }
        // A module that gains a submodule, parameter or buffer per iteration grows too: the
        // path then ends at a parameter or buffer of its new entry (a static model's layers are
        // only a route, to .grad or a graph made in the loop).
        bool registryToTensor =
            std::all_of(path.begin() + static_cast<std::ptrdiff_t>(k) + 1, path.end(),
                        [](const PathStep& s) { return !s.registry.empty(); });
        if (at == kNone || (!isGrowableContainer(path[k].type) && !registryToTensor)) {
            continue;
        }
        const Node& b = d_nodes[at];
        if (b.route) {
            continue;
        }
        double n = static_cast<double>(b.next.size());
        if (b.next.size() >= 2 && b.next.size() == b.paths) {
            n *= std::max(sampleScale, 1.0); // no two samples shared an element
        }
        double growth = iterations > 0 ? n / iterations : n;
        if (b.next.size() >= 2 && (growth >= 0.5 || b.gainsInSteps)) {
            Holder h{pathText(path, k + 1), path[k].type, growth, std::nullopt};
            // Entries that share storages (rows of one batch) outnumber what the paths count.
            const double entries = static_cast<double>(path[k].entries) / std::max(iterations, 1.0);
            if (path[k].entries >= 0 && entries >= 2 * growth) {
                h.entries_per_iteration = entries;
            }
            return h;
        }
    }
    return std::nullopt;
}

std::optional<Holder> chooseHolder(const std::vector<PathStep>& representative,
                                   const std::vector<const std::vector<PathStep>*>& paths,
                                   double iterations,
                                   double sampleScale,
                                   const std::vector<uint32_t>& births) {
    return PathFanout(paths, births).holderOn(representative, iterations, sampleScale);
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
    if (isOutputCacheRoot(path.steps.front())) {
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
                next.registry = s.label.substr(1);
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
