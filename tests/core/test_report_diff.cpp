// diffReports: leaks followed across two runs by site, by line text, by holder.
#include "torchleak/errors.h"
#include "torchleak/report_diff.h"

#include <catch2/catch.hpp>
#include <limits>
#include <nlohmann/json.hpp>

using namespace torchleak;

namespace {

Finding finding(Verdict verdict,
                const std::string& file,
                int line,
                int64_t perIteration,
                const std::string& holder = "",
                const std::string& source = "") {
    Finding f;
    f.verdict = verdict;
    f.site.file = file;
    f.site.line = line;
    f.site.function = "step";
    if (!source.empty()) {
        f.site.source = source;
    }
    f.device = "cpu";
    f.bytes_per_iteration = perIteration;
    if (!holder.empty()) {
        f.holder = Holder{holder, "list", 1.0, std::nullopt};
    }
    return f;
}

Report run(std::vector<Finding> findings) {
    Report r;
    r.iterations = 20;
    r.boundary = BoundaryKind::Repeat;
    r.findings = std::move(findings);
    return r;
}

const LeakChange& only(const ReportDiff& d, LeakChangeKind kind) {
    const LeakChange* found = nullptr;
    for (const LeakChange& c : d.changes) {
        if (c.kind == kind) {
            REQUIRE(found == nullptr);
            found = &c;
        }
    }
    REQUIRE(found != nullptr);
    return *found;
}

} // namespace

TEST_CASE("diff: a fixed leak, a new one, a worse one and an unchanged one") {
    Report before = run({finding(Verdict::Leak, "train.py", 42, 1 << 20, "losses"),
                         finding(Verdict::Leak, "train.py", 50, 4096),
                         finding(Verdict::Leak, "model.py", 7, 1000)});
    Report after = run({finding(Verdict::Leak, "train.py", 50, 8192),
                        finding(Verdict::Leak, "model.py", 7, 1050),
                        finding(Verdict::Leak, "data.py", 3, 256, "cache")});
    ReportDiff d = diffReports(before, after);
    REQUIRE(d.changes.size() == 4);
    REQUIRE(d.regressed);
    REQUIRE(d.changes[0].kind == LeakChangeKind::New); // new and worse lead
    REQUIRE(d.changes[0].site == "data.py:3");
    REQUIRE(d.changes[0].holder == "cache");
    REQUIRE(d.changes[1].kind == LeakChangeKind::Worse);
    REQUIRE(d.changes[1].before_bytes_per_iteration == 4096);
    REQUIRE(d.changes[1].after_bytes_per_iteration == 8192);
    const LeakChange& fixed = only(d, LeakChangeKind::Fixed);
    REQUIRE(fixed.site == "train.py:42");
    REQUIRE_FALSE(fixed.after);
    REQUIRE(fixed.after_bytes_per_iteration == 0);
    REQUIRE(only(d, LeakChangeKind::Same).matched_by == "site"); // 5% within the 10% tolerance
    REQUIRE(d.before_bytes_per_iteration == (1 << 20) + 4096 + 1000);
    REQUIRE(d.after_bytes_per_iteration == 8192 + 1050 + 256);
    std::string text = diffText(d);
    REQUIRE(text.find("torchleak diff: 3 leak(s) -> 3 leak(s)") == 0);
    REQUIRE(text.find("NEW     data.py:3  256 B per iteration  (held by cache)") !=
            std::string::npos);
    REQUIRE(text.find("FIXED   train.py:42  1.0 MiB per iteration -> none  (held by losses)") !=
            std::string::npos);
    REQUIRE(text.find("result: regression: 1 new, 1 worse, 1 fixed, 0 better, 1 unchanged") !=
            std::string::npos);
}

TEST_CASE("diff: a fix that leaves the site bounded is fixed, with what it became") {
    Report before = run({finding(Verdict::Leak, "train.py", 42, 1 << 20, "losses")});
    Report after = run({finding(Verdict::Plateau, "train.py", 42, 0)});
    ReportDiff d = diffReports(before, after);
    REQUIRE_FALSE(d.regressed);
    const LeakChange& c = only(d, LeakChangeKind::Fixed);
    REQUIRE(c.after == 0);
    REQUIRE(c.after_verdict == "plateau");
    REQUIRE(c.holder == "losses"); // what held it, though nothing holds it now
    REQUIRE(diffText(d).find("now plateau") != std::string::npos);
}

TEST_CASE("diff: an edit above the line moves it, the line's text still recognises it") {
    Report before =
        run({finding(Verdict::Leak, "/a/train.py", 42, 4096, "", "losses.append(loss)")});
    Report after =
        run({finding(Verdict::Leak, "/b/train.py", 45, 4096, "", "losses.append(loss)")});
    ReportDiff d = diffReports(before, after);
    REQUIRE(d.changes.size() == 1);
    REQUIRE(d.changes[0].kind == LeakChangeKind::Same);
    REQUIRE(d.changes[0].matched_by == "source");
    REQUIRE_FALSE(d.regressed);
}

TEST_CASE("diff: the same holder on the same device is one leak when the line changed") {
    Report before = run({finding(Verdict::Leak, "train.py", 42, 4096, "history")});
    Report after = run({finding(Verdict::Leak, "train.py", 60, 1024, "history")});
    ReportDiff d = diffReports(before, after);
    REQUIRE(d.changes.size() == 1);
    REQUIRE(d.changes[0].kind == LeakChangeKind::Better);
    REQUIRE(d.changes[0].matched_by == "holder");
}

TEST_CASE("diff: notebook cells are recognised by their code, not their file") {
    Finding b = finding(Verdict::Leak, "/tmp/ipykernel_11/123.py", 3, 4096, "", "kept.append(x)");
    b.site.cell = 4;
    Finding a = finding(Verdict::Leak, "/tmp/ipykernel_98/777.py", 3, 4096, "", "kept.append(x)");
    a.site.cell = 9;
    Finding unknown = finding(Verdict::Leak, "/tmp/ipykernel_98/1.py", 1, 64);
    unknown.site.cell = 2; // no source text: nothing to recognise it by
    ReportDiff d = diffReports(run({b}), run({a, unknown}));
    REQUIRE(d.changes.size() == 2);
    REQUIRE(only(d, LeakChangeKind::Same).matched_by == "site");
    REQUIRE(only(d, LeakChangeKind::New).after == 1);
}

TEST_CASE("diff: two clean runs, and runs with different boundaries") {
    ReportDiff clean = diffReports(run({}), run({finding(Verdict::Transient, "a.py", 1, 0)}));
    REQUIRE(clean.changes.empty());
    REQUIRE_FALSE(clean.regressed);
    REQUIRE(diffText(clean).find("0 leak(s) -> 0 leak(s); none -> none") != std::string::npos);
    Report cells = run({});
    cells.boundary = BoundaryKind::Cell;
    REQUIRE(diffReports(run({}), cells).warnings.size() == 1);
}

TEST_CASE("diff: a bad tolerance is an InvalidArgument, the JSON parses back") {
    REQUIRE_THROWS_AS(diffReports(run({}), run({}), -0.1), InvalidArgument);
    REQUIRE_THROWS_AS(diffReports(run({}), run({}), std::numeric_limits<double>::quiet_NaN()),
                      InvalidArgument);
    Finding hostile = finding(Verdict::Leak, "<script>\"x\".py", 1, 10, "a['</td>']");
    ReportDiff d = diffReports(run({}), run({hostile}), 0.0);
    auto j = nlohmann::json::parse(diffJson(d));
    REQUIRE(j["schema_version"] == "torchleak.diff/1");
    REQUIRE(j["regressed"] == true);
    REQUIRE(j["changes"][0]["kind"] == "new");
    REQUIRE(j["changes"][0]["before"].is_null());
    REQUIRE(j["changes"][0]["site"] == "<script>\"x\".py:1");
    REQUIRE(j["changes"][0]["holder"] == "a['</td>']");
    REQUIRE(j["text"] == diffText(d));
}
