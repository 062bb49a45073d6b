#include "torchleak/retention.h"
#include "torchleak/suggestion.h"

#include <catch2/catch.hpp>

using namespace torchleak;

namespace {
PathStep step(const char* kind, const char* label, const char* type) {
    return PathStep{stepKindFromString(kind), label, type, "", std::nullopt, "", std::nullopt};
}
std::vector<PathStep> lossPath(int i) {
    return {step("root", "losses", "list"),
            step("index", ("[" + std::to_string(i) + "]").c_str(), "Tensor"),
            step("grad_fn", ".grad_fn", "MeanBackward0"),
            step("next_functions", ".next_functions[0][0]", "MmBackward0"),
            step("saved", "._saved_self", "Tensor")};
}
} // namespace

TEST_CASE("pathText joins labels into pasteable Python") {
    REQUIRE(pathText(lossPath(7)) == "losses[7].grad_fn.next_functions[0][0]._saved_self");
    REQUIRE(pathText({}).empty());
}

TEST_CASE("The holder is the list that gains one element per iteration") {
    std::vector<std::vector<PathStep>> all;
    for (int i = 0; i < 10; ++i) {
        all.push_back(lossPath(i));
    }
    std::vector<const std::vector<PathStep>*> ptrs;
    for (auto& p : all) {
        ptrs.push_back(&p);
    }
    auto h = chooseHolder(all.back(), ptrs, 10.0);
    REQUIRE(h);
    REQUIRE(h->path_text == "losses");
    REQUIRE(h->type == "list");
    REQUIRE(h->growth_per_iteration == 1.0);
}

TEST_CASE("A dict of lists: the holder is the list, not the dict with one key") {
    std::vector<std::vector<PathStep>> all;
    for (int i = 0; i < 4; ++i) {
        all.push_back({step("frame", "state", "Trainer"), step("attr", ".metrics", "dict"),
                       step("key", "['loss']", "list"),
                       step("index", ("[" + std::to_string(i) + "]").c_str(), "Tensor")});
    }
    std::vector<const std::vector<PathStep>*> ptrs;
    for (auto& p : all) {
        ptrs.push_back(&p);
    }
    auto h = chooseHolder(all[0], ptrs, 4.0);
    REQUIRE(h);
    REQUIRE(h->path_text == "state.metrics['loss']");
    REQUIRE(h->growth_per_iteration == 1.0);
}

TEST_CASE("From a sample of paths, a list whose samples never share an element still grows") {
    // 10 sampled paths standing for 1,000 blocks over 100 iterations: 10 elements seen, each
    // once, read as 1,000 elements, 10 per iteration. A module's dict sampled the same way
    // repeats its two keys and stays part of the route.
    std::vector<std::vector<PathStep>> all;
    for (int i = 0; i < 10; ++i) {
        all.push_back({step("frame", "model", "Net"), step("attr", "._buffers", "dict"),
                       step("key", (i % 2 ? "['a']" : "['b']"), "list"),
                       step("index", ("[" + std::to_string(i * 100) + "]").c_str(), "Tensor")});
    }
    std::vector<const std::vector<PathStep>*> ptrs;
    for (auto& p : all) {
        ptrs.push_back(&p);
    }
    REQUIRE_FALSE(chooseHolder(all[0], ptrs, 100.0, 1.0)); // 10 elements in 100 iterations
    auto h = chooseHolder(all[0], ptrs, 100.0, 100.0);
    REQUIRE(h);
    REQUIRE(h->path_text == "model._buffers['b']");
    REQUIRE(h->growth_per_iteration == Approx(5.0)); // five sampled elements of this list
}

TEST_CASE("No container on the path: no holder") {
    std::vector<PathStep> p = {step("root", "val_loss", "Tensor"),
                               step("grad_fn", ".grad_fn", "AddBackward0")};
    std::vector<const std::vector<PathStep>*> ptrs = {&p};
    REQUIRE_FALSE(chooseHolder(p, ptrs, 5.0));
}

TEST_CASE("A holder that bounds its entries is filling until it holds them all") {
    Finding f;
    f.verdict = Verdict::Leak;
    f.path = {step("root", "cache", "collections.deque"), step("index", "[7]", "tuple"),
              step("index", "[0]", "Tensor")};
    f.holder = Holder{"cache", "collections.deque", 1.0, std::nullopt};
    REQUIRE_FALSE(fillingBoundedHolder(f)); // no bound read: an unbounded deque, or a subclass
    f.path[0].entries = 8;
    f.path[0].capacity = 16;
    const auto bound = fillingBoundedHolder(f);
    REQUIRE(bound);
    CHECK(bound->capacity == 16);
    CHECK(bound->entries == 8);
    f.path[0].entries = 16;
    CHECK_FALSE(fillingBoundedHolder(f)); // full: growth through it is its entries' own
    f.path[0].entries = 8;
    f.holder.reset();
    CHECK_FALSE(fillingBoundedHolder(f)); // not the holder: nothing says what grows
}

TEST_CASE("Suggestions follow the pattern of the path") {
    Finding f;
    f.verdict = Verdict::Leak;
    f.retention = Retention::Reachable;
    f.path = lossPath(3);
    f.holder = Holder{"losses", "list", 1.0, std::nullopt};
    REQUIRE(suggestFix(f).find("loss.detach() or loss.item()") != std::string::npos);

    f.holder.reset();
    f.path = {step("root", "model", "Net"), step("attr", ".last_hidden", "Tensor")};
    REQUIRE(suggestFix(f).find("attribute") != std::string::npos);

    f.path = {step("root", "Out[7]", "Tensor")};
    REQUIRE(suggestFix(f).find("%reset -f out") != std::string::npos);

    f.retention = Retention::Cycle;
    f.path = {step("root", "<reference cycle>", "Tensor"),
              step("grad_fn", ".grad_fn", "FnBackward"), step("ctx", ".out", "Tensor")};
    REQUIRE(suggestFix(f).find("save_for_backward") != std::string::npos);

    f.verdict = Verdict::Warmup;
    REQUIRE(suggestFix(f).empty());
}

TEST_CASE("A module's parameter dict is not a growing holder, and reads as model.weight") {
    std::vector<std::vector<PathStep>> all;
    for (const char* name : {"['weight']", "['bias']"}) {
        all.push_back(
            normalizePath({step("root", "model", "Linear"), step("attr", "._parameters", "dict"),
                           step("key", name, "Parameter"), step("grad", ".grad", "Tensor")}));
    }
    REQUIRE(pathText(all[0]) == "model.weight.grad");
    REQUIRE(toString(all[0][1].kind) == "attr");
    std::vector<const std::vector<PathStep>*> ptrs = {&all[0], &all[1]};
    auto raw =
        std::vector<PathStep>{step("root", "model", "Linear"), step("attr", "._parameters", "dict"),
                              step("key", "['w']", "Tensor")};
    REQUIRE_FALSE(chooseHolder(raw, ptrs, 20.0));
    auto seq = normalizePath({step("root", "net", "Sequential"), step("attr", "._modules", "dict"),
                              step("key", "['0']", "Linear"), step("attr", ".out", "Tensor")});
    REQUIRE(pathText(seq) == "net[0].out");
}

TEST_CASE("create_graph suggestion needs a .grad that has a graph") {
    Finding f;
    f.verdict = Verdict::Leak;
    f.retention = Retention::Reachable;
    f.path = {step("root", "w", "Parameter"), step("grad", ".grad", "Tensor"),
              step("grad_fn", ".grad_fn", "MmBackward0")};
    REQUIRE(suggestFix(f).find("create_graph") != std::string::npos);
    f.path = {step("root", "outs", "list"), step("index", "[3]", "Tensor"),
              step("grad_fn", ".grad_fn", "X"), step("attr", ".variable", "Tensor"),
              step("grad", ".grad", "Tensor")};
    f.holder = Holder{"outs", "list", 1.0, std::nullopt};
    REQUIRE(suggestFix(f).find("loss.detach()") != std::string::npos);
}

TEST_CASE("A dict of hooks that gains one per iteration is the holder, above the lists below it") {
    // Every explainer's hook records every later output, so the paths all run through the
    // oldest hook and fan out in its list: the list looked like the holder.
    auto hookPath = [](int i) {
        std::vector<PathStep> p = {
            step("root", "model", "Sequential"),
            step("attr", "[0]", "Linear"),
            step("attr", "._forward_hooks", "collections.OrderedDict"),
            step("key", "[2]", "method"),
            step("attr", ".__self__", "Explainer"),
            step("attr", ".acts", "list"),
            step("index", ("[" + std::to_string(i) + "]").c_str(), "Tensor")};
        p[2].hooks = HookDictGrowth{8, "Explainer._save"};
        return p;
    };
    std::vector<std::vector<PathStep>> all;
    for (int i = 0; i < 8; ++i) {
        all.push_back(hookPath(i));
    }
    std::vector<const std::vector<PathStep>*> ptrs;
    for (const auto& p : all) {
        ptrs.push_back(&p);
    }
    auto h = chooseHolder(all[3], ptrs, 8.0);
    REQUIRE(h);
    CHECK(h->path_text == "model[0]._forward_hooks");
    CHECK(h->growth_per_iteration == Approx(1.0));
    REQUIRE(h->hooks);
    CHECK(h->hooks->newest == "Explainer._save");

    Finding f;
    f.verdict = Verdict::Leak;
    f.retention = Retention::Reachable;
    f.path = all[3];
    f.holder = h;
    const std::string fix = suggestFix(f);
    CHECK(fix.find("model[0]._forward_hooks gains 1 hook per iteration (the newest: "
                   "Explainer._save)") != std::string::npos);
    CHECK(fix.find("create the Explainer once") != std::string::npos);
    CHECK(fix.find("register_forward_hook returns and call handle.remove()") != std::string::npos);
    CHECK(suggestFixCode(f).empty()); // no `.clear()` on torch's own dict

    // One hook registered during the run (a lazy first-iteration setup) is no growth: the list
    // below it is what grows.
    for (auto& p : all) {
        p[2].hooks = HookDictGrowth{1, "Explainer._save"};
    }
    h = chooseHolder(all[3], ptrs, 8.0);
    REQUIRE(h);
    CHECK(h->path_text == "model[0]._forward_hooks[2].__self__.acts");
    CHECK_FALSE(h->hooks);
}

TEST_CASE("The loss template is offered only where the user's line made the tensor") {
    Finding f;
    f.verdict = Verdict::Leak;
    f.retention = Retention::Reachable;
    f.path = {step("root", "trainer", "Trainer"), step("attr", "._ema", "EMA"),
              step("attr", "._history", "list"), step("index", "[3]", "Tensor"),
              step("grad_fn", ".grad_fn", "CloneBackward0")};
    f.holder = Holder{"trainer._ema._history", "list", 1.0, std::nullopt};
    REQUIRE(suggestFix(f).find("loss.detach() or loss.item()") != std::string::npos);
    // Made inside an installed package (not torch's own ops): that library's setting, not a loss.
    f.allocated_inside = Frame{"/venv/site-packages/emalib/core.py",
                               41,
                               "EMA.update",
                               std::nullopt,
                               false,
                               std::nullopt,
                               ""};
    f.allocated_inside->package = true;
    const std::string fix = suggestFix(f);
    CHECK(fix.find("loss") == std::string::npos);
    CHECK(fix.find("a setting or method of the object that keeps them controls this") !=
          std::string::npos);
    CHECK(fix.find("in EMA.update, library code") != std::string::npos);
    // torch's own ops inside the user's line are still the user's computation.
    f.allocated_inside->file = "/venv/site-packages/torch/nn/functional.py";
    CHECK(suggestFix(f).find("loss.detach() or loss.item()") != std::string::npos);
}

TEST_CASE("A library object's private state is named with its type, package and methods") {
    Finding f;
    f.verdict = Verdict::Leak;
    f.retention = Retention::Reachable;
    f.path = {step("root", "trainer", "Trainer"), step("attr", ".ema", "EMA"),
              step("attr", "._history", "list"), step("index", "[3]", "Tensor"),
              step("grad_fn", ".grad_fn", "MulBackward0")};
    f.path[1].package = "emalib";
    f.path[1].release_methods = {"reset", "clear"};
    f.holder = Holder{"trainer.ema._history", "list", 1.0, std::nullopt};
    const auto lib = libraryOwnerOf(f);
    REQUIRE(lib);
    CHECK(lib->object == "trainer.ema");
    CHECK(lib->type == "EMA");
    CHECK(lib->package == "emalib");
    CHECK(lib->methods == std::vector<std::string>{"reset", "clear"});
    f.holder->library = lib;
    const std::string fix = suggestFix(f);
    CHECK(fix.rfind("trainer.ema._history is private state of trainer.ema (EMA, from emalib) "
                    "and gains 1 per iteration, each kept with the autograd graph that made it",
                    0) == 0);
    CHECK(fix.find("a setting or method of EMA (emalib) controls this") != std::string::npos);
    CHECK(fix.find("public reset() or clear(), which takes no argument") != std::string::npos);
    CHECK(fix.find("loss") == std::string::npos);
    CHECK(suggestFixCode(f).empty()); // never a patch of its internals

    // A public attribute is the library's interface: no library owner, the ordinary fix.
    f.path[2].label = ".history";
    f.holder = Holder{"trainer.ema.history", "list", 1.0, std::nullopt};
    CHECK_FALSE(libraryOwnerOf(f));
    // The user's own class (no package) is never a library object.
    f.path[1].package.clear();
    f.path[2].label = "._history";
    f.holder = Holder{"trainer.ema._history", "list", 1.0, std::nullopt};
    CHECK_FALSE(libraryOwnerOf(f));
}

TEST_CASE("_ is the output cache only where the notebook's roots say it is the displayhook's") {
    PathStep cache = step("root", "_", "Tensor");
    cache.note = kOutputCacheNote;
    REQUIRE(isOutputCacheRoot(cache));
    // `xb, _ = get_batch()` in a cell, or `_` in a script: the user's own name.
    for (const char* own : {"_", "__", "___"}) {
        REQUIRE_FALSE(isOutputCacheRoot(step("root", own, "Tensor")));
    }
    REQUIRE(isOutputCacheRoot(step("root", "Out[3]", "Tensor")));
    REQUIRE(isOutputCacheRoot(step("root", "_12", "Tensor")));
    REQUIRE(isOutputCacheRoot(step("root", "get_ipython().user_ns_hidden['_']", "Tensor")));
    REQUIRE_FALSE(isOutputCacheRoot(step("root", "_tmp", "Tensor")));
    BlockPath path;
    path.steps = {step("root", "_", "list"), step("index", "[0]", "Tensor")};
    REQUIRE(holderName(path, std::nullopt) == "_");
    path.steps[0].note = kOutputCacheNote;
    REQUIRE(holderName(path, std::nullopt) == "Out");
}
