// The remedy table (suggestion.cpp: kRemedyRules): every rule reached by a finding of its
// pattern, named in the advice, and the first rule whose premise holds wins.
#include "torchleak/retention.h"
#include "torchleak/suggestion.h"

#include "path_steps.h"

#include <catch2/catch.hpp>
#include <map>
#include <set>

using namespace torchleak;
using torchleak::testing::step;

namespace {

Finding leak(std::vector<PathStep> path, Retention retention = Retention::Reachable) {
    Finding f;
    f.verdict = Verdict::Leak;
    f.retention = retention;
    f.path = std::move(path);
    return f;
}

// `root` holds the tensor through a list: `root[3]`.
Finding heldBy(const std::string& root, std::vector<PathStep> below = {}) {
    std::vector<PathStep> path = {step(StepKind::Root, root, "list"),
                                  step(StepKind::Index, "[3]", "Tensor")};
    path.insert(path.end(), below.begin(), below.end());
    Finding f = leak(std::move(path));
    f.holder = Holder{root, "list", 1.0, std::nullopt};
    return f;
}

// `trainer.snapshots` gains a copy of the weights every `every` iterations (a staircase).
Finding snapshotsEvery(int64_t every) {
    Finding f = heldBy("trainer.snapshots");
    f.growth_since = GrowthSince{};
    f.growth_since->iteration = 1;
    f.growth_since->step_every = every;
    f.growth_since->step_bytes = 273448;
    return f;
}

// `cache['<text>']` holds a 1024-float row of a 192-row batch: a view that keeps 768 KiB.
Finding rowOfBatch(const std::string& source) {
    Finding f = heldBy("cache");
    f.path[0].type = "dict";
    f.holder->type = "dict";
    f.path[1].note = "a view: its ._base storage (786432 bytes) stays alive with it";
    f.path[1].tensor = TensorInfo{};
    f.path[1].tensor->dtype = "float32";
    f.path[1].tensor->shape = {1024};
    f.path[1].tensor->nbytes = 192 * 4096;
    f.site.source = source;
    return f;
}

// One finding of each rule's pattern, by rule name.
std::map<std::string, Finding> patterns() {
    std::map<std::string, Finding> p;
    Finding undecided = leak({});
    undecided.verdict = Verdict::Undecided;
    p["undecided"] = undecided;
    Finding record = heldBy("history");
    record.verdict = Verdict::Growth;
    p["slow-record"] = record;
    p["cycle"] = leak({step(StepKind::Root, "<cycle>")}, Retention::Cycle);
    p["torch-owner"] = leak({step(StepKind::Root, kTorchScriptUnitRoot),
                             step(StepKind::Ref, "<TorchScript constant of M.forward>")});
    p["saved-view-of-output"] =
        leak({step(StepKind::Root, "<C++>", "", std::string(kSavedViewOfOutput) + " out")},
             Retention::CppOnly);
    p["own-graph-only"] = leak({step(StepKind::Root, "<C++>", "", "its grad_fn is MulBackward0")},
                               Retention::CppOnly);
    p["cpp-state"] = leak({}, Retention::CppOnly);
    p["output-cache"] = leak({step(StepKind::Root, "Out[3]", "Tensor")});
    p["last-exception"] = leak({step(StepKind::Root, "<last exception>", "ValueError")});
    p["graph-hook"] = leak({step(StepKind::Root, "loss"), step(StepKind::Ref, "<tensor hooks>")});
    Finding hooks = heldBy("model._forward_hooks");
    hooks.holder->hooks = HookDictGrowth{3, "Recorder.save"};
    p["hook-dict"] = hooks;
    Finding library = heldBy("ema._shadow");
    library.holder->library = LibraryObject{"ema", "EMA", "trainpkg", {}};
    p["library-state"] = library;
    p["python-machinery"] = heldBy("errors", {step(StepKind::Attr, ".__traceback__")});
    p["ctx-attribute"] = leak({step(StepKind::Root, "out"), step(StepKind::GradFn, ".grad_fn"),
                               step(StepKind::Ctx, ".cache")});
    p["grad-with-graph"] = leak({step(StepKind::Root, "w"), step(StepKind::Grad, ".grad"),
                                 step(StepKind::GradFn, ".grad_fn")});
    p["kept-with-graph"] = heldBy("losses", {step(StepKind::GradFn, ".grad_fn")});
    p["recurrent-state"] =
        leak({step(StepKind::Root, "hidden"), step(StepKind::GradFn, ".grad_fn")});
    p["graph-of-every-iteration"] =
        leak({step(StepKind::Root, "total"), step(StepKind::GradFn, ".grad_fn")});
    Finding registry = heldBy("model.blocks");
    registry.path[0].type = "torch.nn.ModuleList";
    registry.path[1].registry = "_modules";
    registry.holder->type = "ModuleList";
    p["module-registry"] = registry;
    Finding metric =
        leak({step(StepKind::Root, "metric", "Accuracy", kDefinesResetNote),
              step(StepKind::Attr, ".preds", "list"), step(StepKind::Index, "[3]", "Tensor")});
    metric.holder = Holder{"metric.preds", "list", 1.0, std::nullopt};
    p["owner-reset"] = metric;
    p["view-pins-base"] = rowOfBatch("cache[text] = embeddings[i]");
    p["kept-at-intervals"] = snapshotsEvery(4);
    p["growing-holder"] = heldBy("cache");
    p["attribute"] = leak({step(StepKind::Root, "model"), step(StepKind::Attr, ".last")});
    Finding buffers = leak({});
    buffers.autograd_node = "MmBackward0";
    p["backward-buffers"] = buffers;
    p["kept-reference"] = leak({});
    return p;
}

} // namespace

TEST_CASE("Every remedy rule is reached by its pattern and named in its advice") {
    const std::map<std::string, Finding> cases = patterns();
    std::set<std::string> reached;
    for (const auto& [rule, finding] : cases) {
        INFO(rule);
        const FixAdvice advice = adviseFix(finding);
        CHECK(advice.rule == rule);
        CHECK_FALSE(advice.text.empty());
        reached.insert(advice.rule);
    }
    // A rule added to the table without a pattern here fails, and so does a pattern of no rule.
    const std::vector<std::string> names = remedyRuleNames();
    CHECK(std::set<std::string>(names.begin(), names.end()) == reached);
    CHECK(names.size() == cases.size());
}

TEST_CASE("A view that pins its batch is copied, not detached, and says what it keeps") {
    const Finding row = rowOfBatch("cache[text] = embeddings[i]");
    const FixAdvice advice = adviseFix(row);
    CHECK(advice.text.find("it keeps 768.0 KiB, not its own 4.0 KiB") != std::string::npos);
    CHECK(advice.text.find(".clone()") != std::string::npos);
    CHECK_FALSE(advice.clears_holder);
    CHECK(suggestFixCode(row) == "cache[text] = embeddings[i].clone()");
    CHECK(suggestFixCode(rowOfBatch("cache.append(out[0] * 2)")) ==
          "cache.append((out[0] * 2).clone())");
    CHECK(suggestFixCode(rowOfBatch("other[text] = embeddings[i]")).empty()); // not its holder
    CHECK(suggestFixCode(rowOfBatch("cache[k] = v = rows[0]")).empty());
    CHECK(suggestFixCode(rowOfBatch("cache[text] = embeddings[i]  # a row")).empty());
    // No longer a view (or a view of its whole storage): the holder's own rule.
    Finding whole = rowOfBatch("cache[text] = embeddings[i]");
    whole.path[1].tensor->nbytes = 4096;
    CHECK(adviseFix(whole).rule == "growing-holder");
}

TEST_CASE("The first rule whose premise holds gives the fix; no rule for what is not a leak") {
    // A list that grows and keeps graphs: kept-with-graph stands before growing-holder.
    CHECK(adviseFix(heldBy("losses", {step(StepKind::GradFn, ".grad_fn")})).rule ==
          "kept-with-graph");
    // The output cache stands before a holder's rules.
    Finding out = heldBy("Out[3]");
    CHECK(adviseFix(out).rule == "output-cache");
    // Only growing-holder asks to clear the holder (the loop-read check follows it).
    CHECK(adviseFix(heldBy("cache")).clears_holder);
    CHECK_FALSE(adviseFix(heldBy("losses", {step(StepKind::GradFn, ".grad_fn")})).clears_holder);
    for (Verdict v : {Verdict::Transient, Verdict::Plateau, Verdict::Allowed}) {
        Finding f = heldBy("cache");
        f.verdict = v;
        const FixAdvice advice = adviseFix(f);
        CHECK(advice.text.empty());
        CHECK(advice.rule.empty());
    }
}

TEST_CASE("A list that gains a copy at intervals keeps the best or the last few, not nothing") {
    const Finding snapshots = snapshotsEvery(4);
    const FixAdvice advice = adviseFix(snapshots);
    CHECK(advice.text.find("trainer.snapshots gains an entry every 4 iterations") == 0);
    CHECK(advice.text.find("keep the best so far, or the last few") != std::string::npos);
    CHECK_FALSE(advice.clears_holder); // what reads the newest entries still works
    Finding applied = snapshots;
    applied.fix_rule = advice.rule;
    CHECK(suggestFixCode(applied) == "del trainer.snapshots[:-3]");
    // A step every iteration is a list that grows: its own rule; a dict is bounded otherwise.
    CHECK(adviseFix(snapshotsEvery(1)).rule == "growing-holder");
    Finding keyed = snapshotsEvery(4);
    keyed.holder->type = "dict";
    CHECK(adviseFix(keyed).rule == "growing-holder");
    // Copies kept with their graphs: the graph is the fix, whatever the rhythm.
    Finding graphs = snapshotsEvery(4);
    graphs.path.push_back(step(StepKind::GradFn, ".grad_fn"));
    CHECK(adviseFix(graphs).rule == "kept-with-graph");
}
