// mergeRankReports: one report for a torch.distributed job, from the ranks' own reports.
#include "torchleak/errors.h"
#include "torchleak/rank_merge.h"
#include "torchleak/report_json.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

using namespace torchleak;

namespace {

Finding finding(Verdict verdict, int line, int64_t perIteration, const std::string& device) {
    Finding f;
    f.verdict = verdict;
    f.site.file = "train.py";
    f.site.line = line;
    f.site.function = "step";
    f.device = device;
    f.bytes_per_iteration = perIteration;
    f.total_bytes = static_cast<uint64_t>(perIteration) * 20 + 100;
    if (verdict == Verdict::Leak) {
        f.holder = Holder{"losses", "list", 1.0, std::nullopt};
        f.path_text = "losses[19]";
    }
    return f;
}

RankInput rank(int r, std::vector<Finding> findings, int64_t peak, int iterations = 20) {
    Report rep;
    rep.torch_version = "2.13.0";
    rep.iterations = iterations;
    rep.boundary = BoundaryKind::OptimizerStep;
    rep.findings = std::move(findings);
    DeviceTimeline d;
    d.device = "cuda:" + std::to_string(r);
    d.allocated = {0, peak / 2, peak};
    d.reserved = d.allocated;
    d.peak = d.allocated;
    rep.devices = {d};
    rep.warnings = {"a <b> \"quoted\" warning"};
    return RankInput{r, toJson(rep), "ok", ""};
}

} // namespace

TEST_CASE("rank merge: a leak on one rank only is one finding naming that rank") {
    std::vector<RankInput> in = {rank(0, {finding(Verdict::Warmup, 10, 0, "cuda:0")}, 1000),
                                 rank(1,
                                      {finding(Verdict::Leak, 42, 4096, "cuda:1"),
                                       finding(Verdict::Warmup, 10, 0, "cuda:1")},
                                      3000),
                                 rank(2, {finding(Verdict::Warmup, 10, 0, "cuda:2")}, 1000)};
    Report m = mergeRankReports(in, 3, AnalysisConfig{});
    REQUIRE(m.findings.size() == 2);
    REQUIRE(m.findings[0].verdict == Verdict::Leak);
    REQUIRE(m.findings[0].ranks == std::vector<int>{1});
    REQUIRE(m.findings[0].device == "cuda:1");
    REQUIRE(m.findings[1].ranks == std::vector<int>{0, 1, 2});
    REQUIRE(m.devices.at(0).device == "cuda:1"); // the lead rank is the one leaking
    REQUIRE(m.causes.size() == 1);
    REQUIRE(m.ranks->world_size == 3);
    REQUIRE(m.ranks->ranks.size() == 3);
    REQUIRE(m.ranks->ranks[1].leaks == 1);
    REQUIRE(m.ranks->ranks[1].leak_bytes_per_iteration == 4096);
    REQUIRE(m.ranks->ranks[1].peak_bytes == 3000);
    REQUIRE(m.warnings.size() == 3);
    REQUIRE(m.warnings[2] == "rank 2: a <b> \"quoted\" warning");

    auto j = nlohmann::json::parse(toJson(m));
    REQUIRE(j["findings"][0]["ranks_text"] == "leaks on rank 1 only");
    REQUIRE(j["findings"][1]["ranks_text"] == "on every rank (3)");
    REQUIRE(j["ranks"]["ranks"][1]["text"] ==
            "rank 1: 20 iterations, 1 leak at 4.0 KiB per iteration, peak 2.9 KiB");
    auto skew = j["ranks"]["skew_text"].get<std::vector<std::string>>();
    REQUIRE(skew.size() == 2);
    REQUIRE(skew[0] == "leak skew: rank 1 grows 4.0 KiB per iteration more than rank 0");
    REQUIRE(skew[1] == "peak skew: rank 1 reached 2.9 KiB, rank 0 1000 B (3.0×)");
}

TEST_CASE("rank merge: the same leak on every rank keeps the fastest rank's finding") {
    std::vector<RankInput> in = {rank(0, {finding(Verdict::Leak, 42, 4096, "cuda:0")}, 1000),
                                 rank(1, {finding(Verdict::Leak, 42, 8192, "cuda:1")}, 1000)};
    Report m = mergeRankReports(in, 2, AnalysisConfig{});
    REQUIRE(m.findings.size() == 1);
    REQUIRE(m.findings[0].ranks == std::vector<int>{0, 1});
    REQUIRE(m.findings[0].bytes_per_iteration == 8192);
    auto j = nlohmann::json::parse(toJson(m));
    REQUIRE(j["findings"][0]["ranks_text"] == "leaks on every rank (2)");
    REQUIRE(j["ranks"]["skew_text"].size() == 1); // leak rates differ; peaks do not
}

TEST_CASE("rank merge: missing, failed and unreadable ranks are named, not dropped") {
    RankInput failed = rank(1, {finding(Verdict::Leak, 42, 4096, "cuda:1")}, 1000, 7);
    failed.status = "failed";
    failed.note = "RuntimeError: boom";
    std::vector<RankInput> in = {rank(0, {}, 1000), failed,
                                 RankInput{2, std::nullopt, "missing", "timed out after 30 s"},
                                 RankInput{3, std::string("{not json"), "ok", ""}};
    Report m = mergeRankReports(in, 5, AnalysisConfig{});
    auto j = nlohmann::json::parse(toJson(m));
    const auto& ranks = j["ranks"]["ranks"];
    REQUIRE(ranks.size() == 5);
    REQUIRE(ranks[1]["status"] == "failed");
    REQUIRE(ranks[1]["text"] == "rank 1: 7 iterations, 1 leak at 4.0 KiB per iteration, peak "
                                "1000 B; the run failed: RuntimeError: boom");
    REQUIRE(ranks[2]["text"] == "rank 2: no report (timed out after 30 s)");
    REQUIRE(ranks[3]["status"] == "missing");
    REQUIRE(ranks[3]["note"].get<std::string>().rfind("its report could not be read", 0) == 0);
    REQUIRE(ranks[4]["text"] == "rank 4: no report (no report arrived)");
    auto skew = j["ranks"]["skew_text"].get<std::vector<std::string>>();
    REQUIRE(skew.back() == "iteration skew: rank 1 ran 7 iterations, rank 0 20");

    // What it writes, it reads back, and the display lines are recomputed the same.
    Report back = reportFromJson(toJson(m));
    REQUIRE(back.ranks->ranks[1].note == "RuntimeError: boom");
    REQUIRE(back.findings[0].ranks == std::vector<int>{1});
    REQUIRE(toJson(back) == toJson(m));
}

TEST_CASE("rank merge: bad input") {
    REQUIRE_THROWS_AS(mergeRankReports({}, 0, AnalysisConfig{}), InvalidArgument);
    REQUIRE_THROWS_AS(mergeRankReports({rank(2, {}, 1)}, 2, AnalysisConfig{}), InvalidArgument);
    // No report at all: still a report, saying every rank is missing.
    Report none = mergeRankReports({}, 2, AnalysisConfig{});
    REQUIRE(none.findings.empty());
    REQUIRE(none.ranks->ranks.size() == 2);
    auto j = nlohmann::json::parse(toJson(none));
    REQUIRE(j["ranks"]["skew_text"].empty());
    // A saved report naming a rank outside its job is not a report.
    j["ranks"]["ranks"][0]["rank"] = 7;
    REQUIRE_THROWS_AS(reportFromJson(j.dump()), SchemaError);
}

TEST_CASE("rank merge: one site's two holders stay two findings, each on every rank") {
    auto heldBy = [](const std::string& holder, int64_t rate, int rank) {
        Finding f = finding(Verdict::Leak, 42, rate, "cuda:" + std::to_string(rank));
        f.holder = Holder{holder, "list", 1.0, std::nullopt};
        f.path_text = holder + "[19]";
        return f;
    };
    std::vector<RankInput> in = {
        rank(0, {heldBy("train_outs", 4096, 0), heldBy("val_outs", 1024, 0)}, 1000),
        rank(1, {heldBy("train_outs", 4096, 1), heldBy("val_outs", 1024, 1)}, 1000)};
    Report m = mergeRankReports(in, 2, AnalysisConfig{});
    REQUIRE(m.findings.size() == 2);
    REQUIRE(m.findings[0].holder->path_text == "train_outs");
    REQUIRE(m.findings[0].ranks == std::vector<int>{0, 1});
    REQUIRE(m.findings[1].holder->path_text == "val_outs");
    REQUIRE(m.findings[1].ranks == std::vector<int>{0, 1});
    REQUIRE(m.causes.size() == 2);
}
