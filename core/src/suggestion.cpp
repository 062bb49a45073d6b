#include "torchleak/suggestion.h"

#include "torchleak/display_text.h"
#include "torchleak/retention.h"

#include <algorithm>
#include <cctype>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace torchleak {

namespace {
bool hasKind(const Finding& f, StepKind kind) {
    return std::any_of(f.path.begin(), f.path.end(),
                       [&](const PathStep& s) { return s.kind == kind; });
}

// "in failed_batches" when a holder is known: where the fix goes.
std::string inHolder(const Finding& f) {
    return f.holder ? " in " + shortPath(f.holder->path_text) : "";
}

// Retention through Python's own machinery (exceptions, suspended generators, default
// arguments, partial objects): each has its remedy, whatever container it sits in.
std::optional<std::string> suggestForPythonMachinery(const Finding& f) {
    if (stepStarting(f.path, ".__traceback__")) {
        const PathStep* local = nullptr;
        for (const PathStep& s : f.path) {
            if (s.kind == StepKind::Frame && !s.note.empty()) {
                local = &s;
            }
        }
        return "an exception kept" + inHolder(f) +
               " keeps its traceback, and with it the locals of every frame it unwound" +
               (local ? " (" + local->note + ")" : std::string()) +
               ": keep str(exc) or traceback.format_exception(exc) instead, or drop the frames "
               "with exc.with_traceback(None)";
    }
    for (const char* via : {".gi_frame", ".cr_frame", ".ag_frame"}) {
        if (const PathStep* s = stepStarting(f.path, via)) {
            return "a suspended generator or coroutine" + inHolder(f) +
                   " keeps its frame's locals (" + s->note +
                   ") until it finishes: exhaust it, call .close() on it, or drop it";
        }
    }
    std::string module;
    for (const PathStep& s : f.path) {
        for (const char* hooks : {"._forward_hooks", "._forward_pre_hooks", "._backward_hooks",
                                  "._backward_pre_hooks"}) {
            if (s.label == hooks) {
                return "a hook registered on the module " + module + " (" + s.label.substr(1) +
                       ") keeps what it records: remove it with the handle its register_*_hook "
                       "call returned (handle.remove()) when done, or record only while "
                       "module.training, and store .detach()ed copies";
            }
        }
        module += s.label;
    }
    // A WeakKeyDictionary's entry lives as long as its key: emptying or dropping its `.data`
    // breaks the dictionary, while the keys' other holders are what keep the values.
    // The walker labels such a key `[<weakref to Key key>]` (path_labels.cpp).
    constexpr std::string_view kOpen = "[<weakref to ", kClose = " key>]";
    for (size_t k = 0; k + 2 < f.path.size(); ++k) {
        const std::string_view key = f.path[k + 2].label;
        if (f.path[k].type == "WeakKeyDictionary" && f.path[k + 1].label == ".data" &&
            key.size() > kOpen.size() + kClose.size() && key.substr(0, kOpen.size()) == kOpen &&
            key.substr(key.size() - kClose.size()) == kClose) {
            const std::string referent(
                key.substr(kOpen.size(), key.size() - kOpen.size() - kClose.size()));
            return shortPath(pathText(f.path, k + 1)) +
                   " is a WeakKeyDictionary: each value lives as long as its key, and its keys (" +
                   referent +
                   " objects) outlive the loop, so every value stays. Whatever keeps the keys "
                   "(a list of them, an object the loop holds) keeps the tensors: drop the keys "
                   "when done, or key the entries by objects that end with the iteration";
        }
    }
    if (stepStarting(f.path, "<lru_cache entries>")) {
        return "a functools.lru_cache without a bound (maxsize=None) keeps every result it "
               "returned: bound it (maxsize=N), key it on fewer distinct arguments, or call "
               ".cache_clear()";
    }
    if (stepStarting(f.path, ".__defaults__") || stepStarting(f.path, ".__kwdefaults__")) {
        return "a default argument is made once and lives as long as its function, so what is "
               "added to it accumulates: default to None and create the container in the call";
    }
    std::string prefix;
    for (size_t k = 0; k + 1 < f.path.size(); ++k) {
        prefix += f.path[k].label;
        if (f.path[k].type == "functools.partial" &&
            (f.path[k + 1].label == ".args" || f.path[k + 1].label == ".keywords")) {
            return "the functools.partial " + prefix +
                   " keeps the arguments it was made with: bind .detach()ed or smaller values, "
                   "or make a new partial per use";
        }
    }
    return std::nullopt;
}
// A hook anchor's fix: the edge from the hook to what it captured (a partial's argument, a
// closure variable, a bound method's object) is the one to break.
std::string suggestForHookAnchor(const Finding& f) {
    const std::string& anchor = f.path.front().label;
    std::string edge = anchor;
    std::string what;
    for (size_t k = 1; k < f.path.size(); ++k) {
        edge += f.path[k].label;
        if (f.path[k].label == ".args" || f.path[k].label == ".keywords") {
            continue; // a partial's bound arguments: the argument itself is the edge
        }
        what = f.path[k].note.substr(0, f.path[k].note.find(" (read it as"));
        break;
    }
    return "the hook " + anchor + " keeps " + (what.empty() ? "what it captured" : what) +
           ", which holds tensors whose autograd graph keeps the hook: a cycle through C++ that "
           "gc.collect() cannot free. Break it at " +
           edge +
           ": capture a weakref.ref or only what backward needs, clear it once backward ran, "
           "or remove the hook with the handle register_hook returned (handle.remove())";
}

// TorchScript's compilation unit, torch.compile's caches, autocast's cast cache, a saved-tensor
// hook or checkpoint frame: torch keeps memory in C++ and each has its remedy.
std::optional<std::string> suggestForTorchOwner(const Finding& f) {
    constexpr const char* kTraceOnce =
        "trace once, outside the loop, and reuse the result (pass tensors in as inputs "
        "rather than capturing them)";
    switch (torchOwnerOf(f)) {
    case TorchOwner::TorchScriptUnit:
        if (f.retention == Retention::CppOnly) {
            return std::string("allocated while TorchScript traced or ran a function "
                               "(torch.jit.trace runs it to check the trace): the compiled "
                               "function's executor keeps it in C++ for as long as the function "
                               "stays in TorchScript's global compilation unit, which is for "
                               "good: ") +
                   kTraceOnce;
        }
        return std::string("TorchScript keeps what torch.jit.trace compiled: every trace adds "
                           "its functions (a traced module's methods too), with the tensors it "
                           "captured as constants, to the global compilation unit, which never "
                           "frees them: ") +
               kTraceOnce;
    case TorchOwner::CompileCaches:
        return "torch.compile's compiled-code and guard caches keep what each compiled graph "
               "captured (a graph per recompilation): torch.compiler.reset() frees them, and a "
               "stable input (no new closure, shape or Python value per call) stops the "
               "recompiles; torch._dynamo.utils.counters['stats'] counts them";
    case TorchOwner::AutocastCache:
        return "torch.autocast caches the lower-precision cast of every leaf parameter used "
               "inside its outermost region, and keeps it (and the parameter, through the "
               "cast's graph) until that region exits: open the autocast region per model or "
               "per step, not around a loop that builds models, or pass cache_enabled=False "
               "(torch.clear_autocast_cache() drops the casts now)";
    case TorchOwner::HookOnGraph:
        return suggestForHookAnchor(f);
    case TorchOwner::Checkpoint:
        if (f.holder) {
            break; // the holder's fix frees the graph, and the checkpoint frame with it
        }
        return "non-reentrant torch.utils.checkpoint keeps a checkpointed region's inputs, RNG "
               "state and recomputed tensors in a frame its saved-tensor hooks hold, for as long "
               "as the region's autograd graph lives: run backward (or drop the output) before "
               "the next step, and keep outputs .detach()ed";
    case TorchOwner::SavedTensorsHooks:
        if (f.holder) {
            break;
        }
        return "a torch.autograd.graph.saved_tensors_hooks unpack hook keeps what it captured "
               "for as long as the graph that saved the tensor lives: capture nothing per step "
               "in the hooks, or let the graph go (backward, or drop its outputs)";
    case TorchOwner::None:
        break;
    }
    return std::nullopt;
}

// "3": a holder's growth per iteration, rounded.
std::string growthText(const Holder& h) {
    return std::to_string(static_cast<long long>(h.growth_per_iteration + 0.5));
}

// A library object's private state grows (a copy of the weights per step in an EMA's private
// list): the library's own switch or method stops it. A patch of its internals is no fix: its
// next call may rely on them, and a template ("store loss.item()") has no premise there.
std::string libraryStateFix(const Finding& f) {
    const LibraryObject& lib = *f.holder->library;
    const std::string named = lib.type + " (" + lib.package + ")";
    const bool graph = keepsGraphs(f);
    std::string text =
        shortPath(f.holder->path_text) + " is private state of " + shortPath(lib.object) + " (" +
        lib.type + ", from " + lib.package + ") and gains " + growthText(*f.holder) +
        " per iteration" + (graph ? ", each kept with the autograd graph that made it" : "") +
        ": a setting or method of " + named + " controls this (see its documentation)";
    if (!lib.methods.empty()) {
        text += "; its class's public " + methodCalls(lib.methods) +
                ", which takes no argument, says it releases";
    }
    return text + ". Do not clear its private state yourself: its next call may rely on it";
}

// An nn.Module holder that gains an entry per iteration (a submodule, parameter or buffer
// under a new name, or a ModuleDict/ModuleList entry): removing it is the library's own call.
std::optional<std::string> suggestForModuleRegistry(const Finding& f) {
    auto k = holderEnd(f);
    if (!k || f.path[*k + 1].registry.empty()) {
        return std::nullopt;
    }
    const std::string& registry = f.path[*k + 1].registry;
    const std::string holder = shortPath(f.holder->path_text);
    const std::string type = f.path[*k].type.substr(f.path[*k].type.rfind('.') + 1);
    const char* entry = registry == "_modules"      ? "submodule"
                        : registry == "_parameters" ? "parameter"
                                                    : "buffer";
    std::string removal;
    if (type == "ModuleDict" || type == "ParameterDict") {
        removal = "del " + holder + "[key] (or " + holder + ".pop(key))";
    } else if (type == "ModuleList" || type == "ParameterList" || type == "Sequential") {
        removal = "del " + holder + "[i]";
    } else {
        removal = "delattr(" + holder + ", name) (del " + holder + ".<name>)";
    }
    return holder + " (" + type + ") gains " + growthText(*f.holder) + " " + entry +
           " per iteration, each under a new name in its " + registry +
           ", and keeps their tensors: remove each when done with " + removal +
           ", or reuse one name";
}

} // namespace

const PathStep* entryOf(const Finding& f) {
    auto k = holderEnd(f);
    return k ? &f.path[*k + 1] : nullptr;
}

namespace {
// Bytes per element of a dtype as the walker names it (tensor_index.cpp's dtypeName); 0 unknown.
uint64_t elementBytes(const std::string& dtype) {
    static const std::pair<const char*, uint64_t> kSizes[] = {
        {"float32", 4}, {"float64", 8}, {"float16", 2},   {"bfloat16", 2},
        {"uint8", 1},   {"int8", 1},    {"int16", 2},     {"int32", 4},
        {"int64", 8},   {"bool", 1},    {"complex64", 8}, {"complex128", 16}};
    for (const auto& [name, bytes] : kSizes) {
        if (dtype == name) {
            return bytes;
        }
    }
    return 0;
}
} // namespace

std::optional<PinnedBase> pinnedBase(const Finding& f) {
    const PathStep* entry = entryOf(f);
    if (entry == nullptr || !entry->tensor || entry->note.rfind("a view: ", 0) != 0) {
        return std::nullopt;
    }
    uint64_t own = elementBytes(entry->tensor->dtype);
    for (int64_t d : entry->tensor->shape) {
        own *= static_cast<uint64_t>(std::max<int64_t>(d, 0));
    }
    if (own == 0 || entry->tensor->nbytes < 2 * own) {
        return std::nullopt;
    }
    return PinnedBase{own, entry->tensor->nbytes};
}

std::string boundedForm(const std::string& type) {
    for (const char* dict : {"dict", "OrderedDict", "defaultdict", "collections.OrderedDict",
                             "collections.defaultdict"}) {
        if (type == dict) {
            return "an OrderedDict trimmed with popitem(last=False) past a size, or "
                   "functools.lru_cache(maxsize=...) on the function that fills it";
        }
    }
    if (type == "set") {
        return "a size past which it is cleared";
    }
    return "collections.deque(maxlen=...)";
}

namespace {
// What grows is a dict of hooks: something registers a hook every iteration and drops the
// handle, and each hook keeps what it records. Clearing what one hook keeps frees nothing the
// others keep, so the fix is where the hooks come from.
std::string hookDictFix(const Holder& holder) {
    const std::string& path = holder.path_text;
    const size_t dot = path.rfind('.');
    const std::string dict = dot == std::string::npos ? path : path.substr(dot + 1);
    const std::string owner = dot == std::string::npos ? "" : shortPath(path.substr(0, dot));
    // The method that fills each dict, by the dict's name (nn.Module's and Tensor's own).
    static constexpr std::pair<std::string_view, std::string_view> kRegisteredBy[] = {
        {"_forward_hooks", "register_forward_hook"},
        {"_forward_pre_hooks", "register_forward_pre_hook"},
        {"_backward_hooks", "register_full_backward_hook"},
        {"_backward_pre_hooks", "register_full_backward_pre_hook"},
        {"_state_dict_hooks", "register_state_dict_post_hook"},
        {"_post_accumulate_grad_hooks", "register_post_accumulate_grad_hook"},
    };
    std::string registeredBy = "its register_*_hook call";
    for (const auto& [name, method] : kRegisteredBy) {
        if (dict == name) {
            registeredBy = std::string(method);
        }
    }
    const std::string& newest = holder.hooks->newest;
    // "Explainer._save": a method of the class whose instances register it.
    const size_t method = newest.rfind('.');
    const std::string registrar =
        method == std::string::npos || newest.find("<locals>") != std::string::npos
            ? std::string()
            : newest.substr(0, method);
    return "hooks accumulate: " + (owner.empty() ? path : owner + "." + dict) + " gains " +
           growthText(holder) + " hook per iteration" +
           (newest.empty() ? std::string() : " (the newest: " + newest + ")") +
           ", each keeping what it records, because one is registered every iteration and its "
           "handle dropped. Register it once" +
           (registrar.empty() ? std::string()
                              : " (create the " + registrar + " once, outside the loop)") +
           ", or keep the handle " + registeredBy + " returns and call handle.remove() when done";
}

} // namespace

std::string suggestFix(const Finding& f) {
    return adviseFix(f).text;
}

namespace {
// One remedy: its premise about the finding and the advice it gives when the premise holds,
// together in one function (nullopt: the premise does not hold). Ordered in kRemedyRules: the
// first that holds gives the fix, so a rule for a narrower pattern stands before a wider one.
using Remedy = std::optional<FixAdvice> (*)(const Finding&);
struct RemedyRule {
    const char* name; // written as the finding's fix_rule
    Remedy remedy;
};

bool leakKeptBy(const Finding& f, Retention retention) {
    return f.verdict == Verdict::Leak && f.retention == retention;
}

bool cppOnlyNoted(const Finding& f, std::string_view note) {
    return leakKeptBy(f, Retention::CppOnly) && !f.path.empty() &&
           f.path.front().note.find(note) != std::string::npos;
}

std::string rootOf(const Finding& f) {
    return f.path.empty() ? "" : f.path.front().label;
}

// From here on every rule's finding is a leak held from a named root (kRemedyRules' order).
bool keepsGraph(const Finding& f) {
    return keepsAutogradGraph(f.path);
}

const RemedyRule kRemedyRules[] = {
    {"undecided",
     [](const Finding& f) -> std::optional<FixAdvice> {
         if (f.verdict != Verdict::Undecided) {
             return std::nullopt;
         }
         return "nothing to fix yet: if it grows again it is a leak that steps (at each "
                "evaluation or epoch, say), if it stays flat a cache that filled; a longer run "
                "tells";
     }},
    {"slow-record",
     [](const Finding& f) -> std::optional<FixAdvice> {
         if (f.verdict != Verdict::Growth) {
             return std::nullopt;
         }
         const std::string holder = f.holder ? f.holder->path_text : f.path_text;
         return holder +
                " is a record the program keeps by its own name, of values with no "
                "autograd graph, growing too slowly to matter: nothing to fix. Bound it (" +
                boundedForm(f.holder ? f.holder->type : "") + ") only if the run is to last longer";
     }},
    {"cycle",
     [](const Finding& f) -> std::optional<FixAdvice> {
         if (!leakKeptBy(f, Retention::Cycle)) {
             return std::nullopt;
         }
         return suggestForCycle(f);
     }},
    {"torch-owner",
     [](const Finding& f) -> std::optional<FixAdvice> {
         if (f.verdict != Verdict::Leak) {
             return std::nullopt;
         }
         auto owner = suggestForTorchOwner(f);
         return owner ? std::optional<FixAdvice>(*owner) : std::nullopt;
     }},
    {"saved-view-of-output",
     [](const Finding& f) -> std::optional<FixAdvice> {
         if (!cppOnlyNoted(f, kSavedViewOfOutput)) {
             return std::nullopt;
         }
         return "a custom autograd.Function saved a view of its own output with "
                "ctx.save_for_backward, a cycle through C++ that keeps every output: save the "
                "output itself (autograd saves an output without the cycle) or the inputs you "
                "recompute it from, not a view of the output";
     }},
    {"own-graph-only",
     [](const Finding& f) -> std::optional<FixAdvice> {
         if (!cppOnlyNoted(f, "its grad_fn is ")) {
             return std::nullopt;
         }
         const std::string& note = f.path.front().note;
         return "only its own autograd graph's C++ nodes keep this tensor (" +
                note.substr(note.find("its grad_fn is ")) +
                "): a node that saved it, kept by a graph no Python object reaches; keep outputs "
                ".detach()ed and let graphs go after backward";
     }},
    {"cpp-state",
     [](const Finding& f) -> std::optional<FixAdvice> {
         if (!leakKeptBy(f, Retention::CppOnly)) {
             return std::nullopt;
         }
         return "no Python object, autograd graph, hook or torch cache that torchleak can read "
                "keeps it: C++ state torch does not expose does (an extension's or C++ op's "
                "cache, a graph C++ code holds). Look at what the allocation site calls, and "
                "free or reset that object";
     }},
    {"output-cache",
     [](const Finding& f) -> std::optional<FixAdvice> {
         if (f.verdict != Verdict::Leak || f.path.empty() || !isOutputCacheRoot(f.path.front())) {
             return std::nullopt;
         }
         const std::string root = rootOf(f);
         if (isHiddenOutputCacheRoot(root)) {
             return "IPython's hidden namespace keeps the last outputs (_, __ and ___) that "
                    "%reset -f out leaves behind: run `" +
                    outputCacheFixCode(root) + "`";
         }
         return "the notebook's output cache holds it: end the cell with ';' to not store the "
                "result, or drop it (IPython's %reset -f out leaves copies of _, __ and ___): "
                "run `" +
                outputCacheFixCode(root) + "`";
     }},
    {"last-exception",
     [](const Finding& f) -> std::optional<FixAdvice> {
         if (f.verdict != Verdict::Leak || !isLastExceptionRoot(rootOf(f))) {
             return std::nullopt;
         }
         return "the last exception's traceback keeps the failed frame's locals: run `" +
                lastExceptionFixCode(f) + "`, or re-run the cell successfully";
     }},
    {"graph-hook",
     [](const Finding& f) -> std::optional<FixAdvice> {
         if (f.verdict != Verdict::Leak || f.holder ||
             !(stepStarting(f.path, "<tensor hooks>") || stepStarting(f.path, "<prehooks>") ||
               stepStarting(f.path, "<hooks>"))) {
             return std::nullopt;
         }
         return "a hook on the autograd graph (Tensor.register_hook, Node.register_hook) keeps "
                "what its closure captured for as long as the graph lives: capture .detach()ed "
                "copies or nothing, remove it with handle.remove(), or let the graph go";
     }},
    {"hook-dict",
     [](const Finding& f) -> std::optional<FixAdvice> {
         if (f.verdict != Verdict::Leak || !f.holder || !f.holder->hooks) {
             return std::nullopt;
         }
         return hookDictFix(*f.holder);
     }},
    {"library-state",
     [](const Finding& f) -> std::optional<FixAdvice> {
         if (f.verdict != Verdict::Leak || !f.holder || !f.holder->library) {
             return std::nullopt;
         }
         return libraryStateFix(f);
     }},
    {"python-machinery",
     [](const Finding& f) -> std::optional<FixAdvice> {
         if (f.verdict != Verdict::Leak) {
             return std::nullopt;
         }
         auto machinery = suggestForPythonMachinery(f);
         return machinery ? std::optional<FixAdvice>(*machinery) : std::nullopt;
     }},
    {"ctx-attribute",
     [](const Finding& f) -> std::optional<FixAdvice> {
         const bool ctxAttr = std::any_of(f.path.begin(), f.path.end(), [](const PathStep& s) {
             return s.kind == StepKind::Ctx && s.label.rfind(".saved_tensors", 0) != 0;
         });
         if (f.verdict != Verdict::Leak || !ctxAttr) {
             return std::nullopt;
         }
         return "a custom autograd.Function keeps a tensor as a ctx attribute: use "
                "ctx.save_for_backward() (freed after backward), and keep .detach()ed outputs";
     }},
    {"grad-with-graph",
     [](const Finding& f) -> std::optional<FixAdvice> {
         // create_graph=True: a .grad that itself has a graph.
         bool gradWithGraph = false;
         for (size_t k = 0; k + 1 < f.path.size(); ++k) {
             gradWithGraph = gradWithGraph || (f.path[k].kind == StepKind::Grad &&
                                               f.path[k + 1].kind == StepKind::GradFn);
         }
         if (f.verdict != Verdict::Leak || !gradWithGraph) {
             return std::nullopt;
         }
         return ".grad was built with create_graph=True and keeps its graph: reset it "
                "(param.grad = None / zero_grad(set_to_none=True)) or use torch.autograd.grad";
     }},
    {"kept-with-graph",
     [](const Finding& f) -> std::optional<FixAdvice> {
         if (f.verdict != Verdict::Leak || !f.holder || !keepsGraphs(f)) {
             return std::nullopt;
         }
         return keptWithGraphFix(f);
     }},
    {"recurrent-state",
     [](const Finding& f) -> std::optional<FixAdvice> {
         const std::string root = rootOf(f);
         if (f.verdict != Verdict::Leak || !keepsGraph(f) ||
             (root.find("hidden") == std::string::npos &&
              root.find("state") == std::string::npos)) {
             return std::nullopt;
         }
         return "detach() the recurrent state between iterations (hidden = hidden.detach())";
     }},
    {"graph-of-every-iteration",
     [](const Finding& f) -> std::optional<FixAdvice> {
         if (f.verdict != Verdict::Leak || !keepsGraph(f)) {
             return std::nullopt;
         }
         return "this tensor keeps the autograd graph of every iteration: accumulate "
                ".item() or .detach(), and wrap evaluation in torch.no_grad()";
     }},
    {"module-registry",
     [](const Finding& f) -> std::optional<FixAdvice> {
         if (f.verdict != Verdict::Leak) {
             return std::nullopt;
         }
         auto registry = suggestForModuleRegistry(f);
         return registry ? std::optional<FixAdvice>(*registry) : std::nullopt;
     }},
    {"view-pins-base",
     [](const Finding& f) -> std::optional<FixAdvice> {
         const auto pinned = pinnedBase(f);
         if (f.verdict != Verdict::Leak || !f.holder || !pinned) {
             return std::nullopt;
         }
         // A .detach() shares the storage too: only a copy lets the batch go.
         return "each entry of " + shortPath(f.holder->path_text) +
                " is a view into a bigger tensor: it keeps " +
                formatBytes(static_cast<double>(pinned->storage_bytes)) + ", not its own " +
                formatBytes(static_cast<double>(pinned->own_bytes)) +
                ". Store a .clone() of it (a .detach() shares the storage and frees nothing)";
     }},
    {"owner-reset",
     [](const Finding& f) -> std::optional<FixAdvice> {
         // The object that owns the holder, when its class has its own way to drop the state.
         const auto k = holderEnd(f);
         if (f.verdict != Verdict::Leak || !f.holder || !k || *k == 0 ||
             f.path[*k - 1].note.find(kDefinesResetNote) == std::string::npos) {
             return std::nullopt;
         }
         return shortPath(f.holder->path_text) + " grows by " + growthText(*f.holder) +
                " per iteration: call " + shortPath(pathText(f.path, *k)) +
                ".reset() once its values are used (at each epoch end, for a metric); "
                "its class defines reset() to drop them";
     }},
    {"kept-at-intervals",
     [](const Finding& f) -> std::optional<FixAdvice> {
         const auto& since = f.growth_since;
         if (f.verdict != Verdict::Leak || !f.holder || !since || !since->step_every ||
             *since->step_every < 2 || !isAppendOnlySequence(f.holder->type)) {
             return std::nullopt;
         }
         return keptAtIntervalsFix(f);
     }},
    {"growing-holder",
     [](const Finding& f) -> std::optional<FixAdvice> {
         if (f.verdict != Verdict::Leak || !f.holder) {
             return std::nullopt;
         }
         return FixAdvice(shortPath(f.holder->path_text) + " grows by " + growthText(*f.holder) +
                              " per iteration: .clear() it, bound it (" +
                              boundedForm(f.holder->type) + ") or store smaller copies",
                          true);
     }},
    {"attribute",
     [](const Finding& f) -> std::optional<FixAdvice> {
         if (f.verdict != Verdict::Leak || !hasKind(f, StepKind::Attr)) {
             return std::nullopt;
         }
         return "an attribute keeps the last tensors: set it to None when done, or store "
                ".detach()ed copies";
     }},
    {"backward-buffers",
     [](const Finding& f) -> std::optional<FixAdvice> {
         if (f.verdict != Verdict::Leak || !f.autograd_node) {
             return std::nullopt;
         }
         return "gradients or buffers made by " + *f.autograd_node +
                " in backward stay alive: reset .grad (optimizer.zero_grad(set_to_none=True)) "
                "and do not keep outputs of backward(create_graph=True)";
     }},
    {"kept-reference",
     [](const Finding& f) -> std::optional<FixAdvice> {
         if (f.verdict != Verdict::Leak) {
             return std::nullopt;
         }
         return "tensors allocated here survive every iteration: something keeps a reference "
                "(a list or dict that grows, a tensor kept with its autograd graph); keep "
                ".detach() or .item() copies, or clear the container";
     }},
};
} // namespace

FixAdvice adviseFix(const Finding& f) {
    for (const RemedyRule& rule : kRemedyRules) {
        if (auto advice = rule.remedy(f)) {
            advice->rule = rule.name;
            return *advice;
        }
    }
    return ""; // not a leak: no fix
}

std::vector<std::string> remedyRuleNames() {
    std::vector<std::string> names;
    for (const RemedyRule& rule : kRemedyRules) {
        names.emplace_back(rule.name);
    }
    return names;
}

std::string suggestForSharedNewKey(const std::vector<std::string>& holders,
                                   const std::string& newKey) {
    std::vector<std::string> shortened;
    for (const std::string& holder : holders) {
        shortened.push_back(shortPath(holder));
    }
    const std::string named = listFirst(shortened, 3);
    return "one line adds an entry under a new key (the newest: " + newKey + ") to each of " +
           std::to_string(holders.size()) + " containers every iteration (" + named +
           "): clearing one frees only its share. Delete the key from every one of them once it "
           "is used (del container[key] in each, where the key is added), or reuse one key";
}

} // namespace torchleak
