// One leak, one entry: grouping leak findings into causes, their severity and their text.
#include "torchleak/cause_groups.h"
#include "torchleak/causes.h"
#include "torchleak/display_text.h"
#include "torchleak/errors.h"
#include "torchleak/report_json.h"
#include "torchleak/retention.h"
#include "torchleak/scoring.h"
#include "torchleak/suggestion.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

using namespace torchleak;

namespace {
constexpr int64_t MiB = 1 << 20;

PathStep step(StepKind kind, std::string label) {
    PathStep s;
    s.kind = kind;
    s.label = std::move(label);
    return s;
}

Finding leakAt(int line, int64_t rate, std::vector<PathStep> path, std::optional<Holder> holder) {
    Finding f;
    f.verdict = Verdict::Leak;
    f.site.file = "train.py";
    f.site.line = line;
    f.device = "cpu";
    f.bytes_per_iteration = rate;
    f.total_bytes = static_cast<uint64_t>(rate) * 12;
    f.path = std::move(path);
    f.holder = std::move(holder);
    f.retention = Retention::Reachable;
    f.suggestion = "fix for line " + std::to_string(line);
    return f;
}

Report reportWith(std::vector<Finding> findings, uint64_t capacity = 24ull << 30) {
    Report r;
    r.iterations = 12;
    r.findings = std::move(findings);
    DeviceTimeline cpu;
    cpu.device = "cpu";
    cpu.capacity_bytes = capacity;
    cpu.allocated = {0, 38 * MiB};
    r.devices = {cpu};
    return r;
}

std::vector<PathStep> graphPath(const std::string& root) {
    return {step(StepKind::Root, root), step(StepKind::Index, "[10]"),
            step(StepKind::GradFn, ".grad_fn"), step(StepKind::Saved, "._saved_mat1")};
}
} // namespace

TEST_CASE("one holder, four sites: one cause, biggest site first, rates summed") {
    Holder losses{"loss_history", "list", 0.92, std::nullopt};
    Report r = reportWith({leakAt(17, 10 * 1024, graphPath("loss_history"), losses),
                           leakAt(16, 2 * MiB, graphPath("loss_history"), losses),
                           leakAt(14, MiB / 2, graphPath("loss_history"), losses),
                           leakAt(15, 2048, graphPath("loss_history"), losses)});
    Finding warm;
    warm.verdict = Verdict::Warmup;
    r.findings.push_back(warm);
    r.causes = groupCauses(r, AnalysisConfig{});
    REQUIRE(r.causes.size() == 1);
    const Cause& c = r.causes[0];
    REQUIRE(c.keeper == "loss_history");
    REQUIRE(c.findings == std::vector<int>{1, 2, 0, 3});
    REQUIRE(c.bytes_per_iteration == 2 * MiB + MiB / 2 + 10 * 1024 + 2048);
    REQUIRE(c.suggestion == "fix for line 16"); // the biggest site's
    REQUIRE(c.severity == Severity::Critical);  // 24 GiB full in under 10,000 iterations
    for (int i : c.findings) {
        REQUIRE(r.findings[i].severity == Severity::Critical);
    }
    REQUIRE(causeText(c, r) == "2.5 MiB per iteration: loss_history keeps every iteration's "
                               "autograd graph, across 4 allocation sites");
    REQUIRE(headline(r) == "1 leak (4 allocation sites), 1 other finding(s)");
}

TEST_CASE("without a holder, the tensor that keeps the graph is the cause") {
    auto hidden = [](const std::string& saved) {
        return std::vector<PathStep>{step(StepKind::Root, "hidden"),
                                     step(StepKind::GradFn, ".grad_fn"),
                                     step(StepKind::Saved, saved)};
    };
    Report r =
        reportWith({leakAt(20, MiB, hidden("._saved_self"), std::nullopt),
                    leakAt(21, MiB, hidden("._saved_result"), std::nullopt),
                    leakAt(30, MiB, {step(StepKind::Root, "cache"), step(StepKind::Key, "['a']")},
                           std::nullopt)});
    r.causes = groupCauses(r, AnalysisConfig{});
    REQUIRE(r.causes.size() == 2);
    REQUIRE(r.causes[0].keeper == "hidden");
    REQUIRE(r.causes[0].findings.size() == 2);
    REQUIRE(r.causes[1].keeper == "cache");
    REQUIRE(causeText(r.causes[0], r) ==
            "2.0 MiB per iteration: hidden keeps the autograd graph of every iteration, across 2 "
            "allocation sites");
    REQUIRE(headline(r) == "2 leaks (3 allocation sites), 0 other finding(s)");
}

TEST_CASE("an owner in torch's C++ is named only from evidence, and is one cause") {
    auto allocatedIn = [](int line, const std::string& libraryFile) {
        Finding f = leakAt(line, 8, {step(StepKind::Root, "<held only from C++>")}, std::nullopt);
        f.retention = Retention::CppOnly;
        f.device = "cpu";
        Frame inside;
        inside.file = libraryFile;
        f.stack = {inside, f.site};
        return f;
    };
    auto named = [](Finding f, const TorchCacheState& state) {
        if (auto owner = namedCppOwner(f, state)) {
            f.path.front().label = owner->label;
            f.path.front().note = owner->note;
        }
        return f;
    };
    Finding constant = leakAt(4, MiB,
                              {step(StepKind::Root, kTorchScriptUnitRoot),
                               step(StepKind::Ref, "<TorchScript constant of M.forward>")},
                              std::nullopt);
    Finding ranInTrace = allocatedIn(7, "/venv/site-packages/torch/jit/_trace.py");
    Finding compiled = allocatedIn(9, "/venv/site-packages/torch/_dynamo/eval_frame.py");
    Finding elsewhere = allocatedIn(11, "/venv/site-packages/torch/nn/functional.py");

    // Frames alone prove nothing: torch wraps optimizer.step in dynamo-disable frames.
    TorchCacheState nothing;
    REQUIRE_FALSE(namedCppOwner(ranInTrace, nothing));
    REQUIRE_FALSE(namedCppOwner(compiled, nothing));
    REQUIRE(torchOwnerOf(named(compiled, nothing)) == TorchOwner::None);
    REQUIRE(suggestFix(named(compiled, nothing)).find("torch.compiler.reset()") ==
            std::string::npos);

    TorchCacheState evidence;
    evidence.dynamo_compiled_frames = 3;
    evidence.torchscript_functions = 2;
    ranInTrace = named(ranInTrace, evidence);
    compiled = named(compiled, evidence);
    elsewhere = named(elsewhere, evidence);
    REQUIRE(compiled.path.front().label == kCompileCachesRoot);
    REQUIRE(compiled.path.front().note.find("compiled 3 frame(s)") != std::string::npos);
    REQUIRE(torchOwnerOf(constant) == TorchOwner::TorchScriptUnit);
    REQUIRE(torchOwnerOf(ranInTrace) == TorchOwner::TorchScriptUnit);
    REQUIRE(torchOwnerOf(compiled) == TorchOwner::CompileCaches);
    REQUIRE(torchOwnerOf(elsewhere) == TorchOwner::None);
    REQUIRE(suggestFix(constant).find("trace once, outside the loop") != std::string::npos);
    REQUIRE(suggestFix(ranInTrace).find("executor keeps it") != std::string::npos);
    REQUIRE(suggestFix(compiled).find("torch.compiler.reset()") != std::string::npos);
    REQUIRE(suggestFix(elsewhere).find("C++ state torch does not expose") != std::string::npos);

    Report r = reportWith({constant, ranInTrace, compiled, elsewhere});
    r.causes = groupCauses(r, AnalysisConfig{});
    REQUIRE(r.causes.size() == 3);
    REQUIRE(r.causes[0].keeper == kTorchScriptUnitRoot);
    REQUIRE(r.causes[0].findings == std::vector<int>{0, 1});
    REQUIRE(r.causes[1].keeper == kCompileCachesRoot);
}

TEST_CASE("autocast's cast cache is named only while a region is open on the block's device") {
    Finding f = leakAt(5, MiB, {step(StepKind::Root, "<Tensor held only from C++>")}, std::nullopt);
    f.retention = Retention::CppOnly;
    f.device = "cuda:1";
    TorchCacheState cpuOnly;
    cpuOnly.autocast_devices = {"cpu"};
    REQUIRE_FALSE(namedCppOwner(f, cpuOnly));
    TorchCacheState onCuda;
    onCuda.autocast_devices = {"cpu", "cuda"};
    auto owner = namedCppOwner(f, onCuda);
    REQUIRE(owner);
    REQUIRE(owner->label == kAutocastCacheRoot);
    f.path.front() = *owner;
    REQUIRE(torchOwnerOf(f) == TorchOwner::AutocastCache);
    REQUIRE(suggestFix(f).find("cache_enabled=False") != std::string::npos);
}

TEST_CASE("a hook anchor's fix names the edge from the hook to what it captured") {
    Finding f = leakAt(3, MiB,
                       {step(StepKind::Root, "<hook on MulBackward0: partial(on_backward, owner)>"),
                        step(StepKind::Attr, ".args"), step(StepKind::Index, "[0]"),
                        step(StepKind::Attr, ".cache"), step(StepKind::Index, "[0]")},
                       std::nullopt);
    f.retention = Retention::CppOnly;
    f.path[2].note = "argument 'owner' of partial(on_backward, owner)";
    REQUIRE(torchOwnerOf(f) == TorchOwner::HookOnGraph);
    std::string fix = suggestFix(f);
    REQUIRE(fix.find("keeps argument 'owner' of partial(on_backward, owner)") != std::string::npos);
    REQUIRE(fix.find("Break it at <hook on MulBackward0: partial(on_backward, owner)>.args[0]:") !=
            std::string::npos);
    REQUIRE(fix.find("handle.remove()") != std::string::npos);
    Report r = reportWith({f});
    r.causes = groupCauses(r, AnalysisConfig{});
    REQUIRE(r.causes.at(0).keeper == "<hook on MulBackward0: partial(on_backward, owner)>");
}

TEST_CASE("a cause's severity follows its rate and the time its device has left") {
    auto severityAt = [](int64_t rate) {
        Report r = reportWith({leakAt(1, rate, {}, std::nullopt)});
        r.causes = groupCauses(r, AnalysisConfig{});
        return r.causes.at(0).severity;
    };
    REQUIRE(severityAt(3 * MiB) == Severity::Critical); // full in ~8,000 iterations
    REQUIRE(severityAt(MiB) == Severity::Warning);      // ~24,500 iterations
    REQUIRE(severityAt(4) == Severity::Info);           // billions of iterations
}

TEST_CASE("the score counts causes, not allocation sites") {
    Holder h{"kept", "list", 1.0, std::nullopt};
    std::vector<Finding> many;
    for (int line = 1; line <= 30; ++line) {
        many.push_back(leakAt(line, 64, {step(StepKind::Root, "kept")}, h));
    }
    Report r = reportWith(many);
    r.causes = groupCauses(r, AnalysisConfig{});
    REQUIRE(r.causes.size() == 1);
    REQUIRE(r.causes[0].severity == Severity::Info);
    Summary s = summarize(r);
    REQUIRE(s.score == 85);
    REQUIRE(s.recommendations.size() == 1);
    REQUIRE(s.recommendations[0].findings.size() == 30);
}

TEST_CASE("causes round-trip through the JSON, a bad finding index is a schema error") {
    Holder h{"losses", "list", 1.0, std::nullopt};
    Report r = reportWith({leakAt(3, MiB, graphPath("losses"), h)});
    r.causes = groupCauses(r, AnalysisConfig{});
    std::string text = toJson(r);
    auto j = nlohmann::json::parse(text);
    REQUIRE(j["causes"][0]["keeper"] == "losses");
    REQUIRE(j["causes"][0]["text"] ==
            "1.0 MiB per iteration: losses keeps every iteration's autograd graph, at train.py:3");
    Report back = reportFromJson(text);
    REQUIRE(back.causes.size() == 1);
    REQUIRE(back.causes[0].findings == std::vector<int>{0});
    REQUIRE(toJson(back) == text);
    j["causes"][0]["findings"] = {7};
    REQUIRE_THROWS_AS(reportFromJson(j.dump()), SchemaError);
}

namespace {
// Fifty lists side by side in `obj` (obj.l0 ... obj.l49), each its own leak, a 10 KiB tensor
// per iteration from one line.
Report fiftyLists(const std::string& container) {
    std::vector<Finding> findings;
    for (int k = 0; k < 50; ++k) {
        std::string name = ".l" + std::to_string(k);
        std::vector<PathStep> path = {step(StepKind::Root, container), step(StepKind::Attr, name),
                                      step(StepKind::Index, "[7]")};
        findings.push_back(
            leakAt(3, 10 * 1024 + k, path, Holder{container + name, "list", 1.0, std::nullopt}));
    }
    return reportWith(std::move(findings));
}
} // namespace

TEST_CASE("fifty lists in one object are one group of fifty causes, named once") {
    Report r = fiftyLists("obj");
    Holder big{"losses", "list", 1.0, std::nullopt};
    r.findings.push_back(leakAt(9, MiB, graphPath("losses"), big));
    r.causes = groupCauses(r, AnalysisConfig{});
    REQUIRE(r.causes.size() == 51);
    auto groups = groupRelatedCauses(r);
    REQUIRE(groups.size() == 2);
    REQUIRE(groups[0].causes == std::vector<int>{0}); // losses alone, 1 MiB, is bigger
    REQUIRE(groups[0].container.empty());
    REQUIRE(causeGroupText(groups[0], r) == causeText(r.causes[0], r));
    const CauseGroup& lists = groups[1];
    REQUIRE(lists.container == "obj");
    REQUIRE(lists.causes.size() == 50);
    REQUIRE(lists.causes.front() == 1); // the biggest list first, as the causes are ordered
    REQUIRE(lists.bytes_per_iteration == 50 * 10 * 1024 + 49 * 50 / 2);
    REQUIRE(causeGroupText(lists, r) ==
            "501.2 KiB per iteration: 50 lists in obj grow every iteration (obj.l49, obj.l48, "
            "obj.l47 and 47 more), 10.0 KiB each, at train.py:3");
    // Every cause is in exactly one group.
    std::vector<int> seen;
    for (const CauseGroup& g : groups) {
        seen.insert(seen.end(), g.causes.begin(), g.causes.end());
    }
    std::sort(seen.begin(), seen.end());
    REQUIRE(seen.size() == r.causes.size());
    REQUIRE(std::adjacent_find(seen.begin(), seen.end()) == seen.end());
    // The score weighs the fifty as one leak: two recommendations, not 51.
    Summary s = summarize(r);
    REQUIRE(s.recommendations.size() == 2);
    REQUIRE(s.recommendations[1].findings.size() == 50);
}

TEST_CASE("a group's fix code frees every member, or there is none") {
    Report r = fiftyLists("obj");
    r.findings.resize(9);
    for (size_t k = 0; k < r.findings.size(); ++k) {
        r.findings[k].fix_code = "obj.l" + std::to_string(k) + ".clear()";
    }
    r.causes = groupCauses(r, AnalysisConfig{});
    auto groups = groupRelatedCauses(r);
    REQUIRE(groups.size() == 1);
    const std::string code = causeGroupFixCode(groups[0], r);
    // One line per cause, biggest first; freeing one list of nine is not the group's fix.
    REQUIRE(code.rfind("obj.l8.clear()\nobj.l7.clear()\n", 0) == 0);
    REQUIRE(std::count(code.begin(), code.end(), '\n') == 8);
    nlohmann::json j = nlohmann::json::parse(toJson(r));
    REQUIRE(j["cause_groups"][0]["fix_code"] == code);
    // One member without proven code: no code for the group, rather than a partial one.
    r.findings[4].fix_code.clear();
    REQUIRE(causeGroupFixCode(groups[0], r).empty());
    REQUIRE(!nlohmann::json::parse(toJson(r))["cause_groups"][0].contains("fix_code"));
}

TEST_CASE("three side by side stay three causes, names without a container group by site") {
    Report r = fiftyLists("obj");
    r.findings.resize(3);
    r.causes = groupCauses(r, AnalysisConfig{});
    REQUIRE(groupRelatedCauses(r).size() == 3); // train_outs and val_outs are two leaks
    // Fifty globals g0 ... g49 filled from one line: one group by that site, no container.
    std::vector<Finding> globals;
    for (int k = 0; k < 50; ++k) {
        std::string name = "g" + std::to_string(k);
        globals.push_back(leakAt(3, 10 * 1024,
                                 {step(StepKind::Root, name), step(StepKind::Index, "[2]")},
                                 Holder{name, "list", 1.0, std::nullopt}));
    }
    Report g = reportWith(std::move(globals));
    g.causes = groupCauses(g, AnalysisConfig{});
    auto groups = groupRelatedCauses(g);
    REQUIRE(groups.size() == 1);
    REQUIRE(groups[0].container.empty());
    REQUIRE(causeGroupText(groups[0], g).find("50 lists grow every iteration (g") !=
            std::string::npos);
    REQUIRE(causeGroupText(groups[0], g).find(", 10.0 KiB each, at train.py:3") !=
            std::string::npos);
}

TEST_CASE("cause groups are written into the JSON, with HTML and quotes in names kept as text") {
    Report r = fiftyLists("<b>\"o\"</b>");
    r.causes = groupCauses(r, AnalysisConfig{});
    auto j = nlohmann::json::parse(toJson(r));
    REQUIRE(j["cause_groups"].size() == 1);
    REQUIRE(j["cause_groups"][0]["container"] == "<b>\"o\"</b>");
    REQUIRE(j["cause_groups"][0]["causes"].size() == 50);
    REQUIRE(j["cause_groups"][0]["severity"] == toString(r.causes[0].severity));
    REQUIRE(j["cause_groups"][0]["text"].get<std::string>().find("50 lists in <b>\"o\"</b> grow") !=
            std::string::npos);
    // Read back and written again: the same groups.
    REQUIRE(nlohmann::json::parse(toJson(reportFromJson(j.dump())))["cause_groups"] ==
            j["cause_groups"]);
    Report empty = reportWith({});
    REQUIRE(nlohmann::json::parse(toJson(empty))["cause_groups"].empty());
}

TEST_CASE("Re-running without the profiler is recommended only when a profiler hid events") {
    Report r;
    r.warnings = {"stopped in iteration 3 of 8 by RuntimeError: bad batch",
                  "the process's resident memory grew 200.0 MiB from iteration 1 to 6 while ..."};
    auto mentionsProfiler = [](const Summary& s) {
        return std::any_of(s.recommendations.begin(), s.recommendations.end(),
                           [](const Recommendation& rec) {
                               return rec.text.find("torch.profiler") != std::string::npos;
                           });
    };
    REQUIRE_FALSE(mentionsProfiler(summarize(r)));
    r.warnings.push_back("another profiler (torch.profiler) was on top of torchleak's hook during "
                         "2 iteration(s); allocations and frees on this thread were not seen");
    REQUIRE(mentionsProfiler(summarize(r)));
}

namespace {
// One line adds `name` to the adapters dict of each of `layers` wrapped layers (#47 item 5).
Report adaptersPerLayer(int layers, int line = 13) {
    std::vector<Finding> findings;
    for (int k = 0; k < layers; ++k) {
        const std::string layer = "[" + std::to_string(k) + "]";
        std::vector<PathStep> path = {step(StepKind::Root, "layers"), step(StepKind::Index, layer),
                                      step(StepKind::Attr, ".adapters"),
                                      step(StepKind::Key, "['task7']")};
        findings.push_back(
            leakAt(line, 16 * 1024 + k, path,
                   Holder{"layers" + layer + ".adapters", "dict", 1.0, std::nullopt}));
        findings.back().fix_code = "layers" + layer + ".adapters.clear()";
    }
    return reportWith(std::move(findings));
}
} // namespace

TEST_CASE("one line adding the same new key to several dicts is one cause with one fix") {
    Report r = adaptersPerLayer(4);
    r.causes = groupCauses(r, AnalysisConfig{});
    REQUIRE(r.causes.size() == 1);
    const Cause& c = r.causes[0];
    REQUIRE(c.findings.size() == 4);
    REQUIRE(c.new_key == "['task7']");
    REQUIRE(c.holders == std::vector<std::string>{"layers[3].adapters", "layers[2].adapters",
                                                  "layers[1].adapters", "layers[0].adapters"});
    REQUIRE(c.keeper == "layers[3].adapters"); // the biggest
    CHECK(c.suggestion.find("to each of 4 containers every iteration (layers[3].adapters, "
                            "layers[2].adapters, layers[1].adapters and 1 more)") !=
          std::string::npos);
    CHECK(c.suggestion.find("clearing one frees only its share") != std::string::npos);
    for (const Finding& f : r.findings) {
        CHECK(f.suggestion == c.suggestion); // one fix for all, none that frees a quarter
        CHECK(f.fix_code.empty());
    }
    CHECK(causeText(c, r) == "64.0 KiB per iteration: one line adds an entry under a new key to 4 "
                             "containers every iteration (layers[3].adapters and 3 more), at "
                             "train.py:13");
    CHECK(headline(r) == "1 leak (1 allocation site), 0 other finding(s)");
    // Written and read back: the same cause.
    Report back = reportFromJson(toJson(r));
    REQUIRE(back.causes[0].holders == c.holders);
    REQUIRE(back.causes[0].new_key == c.new_key);
    REQUIRE(toJson(back) == toJson(r));
}

TEST_CASE("dicts filled by different lines stay different causes, and a lone dict is itself") {
    Report r = adaptersPerLayer(1, 13);
    Report other = adaptersPerLayer(1, 20);
    r.findings.push_back(other.findings[0]);
    r.findings.back().holder->path_text = "cache";
    r.causes = groupCauses(r, AnalysisConfig{});
    REQUIRE(r.causes.size() == 2);
    for (const Cause& c : r.causes) {
        CHECK(c.holders.empty());
        CHECK(c.new_key.empty());
    }
    CHECK(r.findings[0].fix_code == "layers[0].adapters.clear()");
}
