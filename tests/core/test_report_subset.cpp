// keepFindings: the part of a report a rank sends when the whole is too big, renumbered so it
// reads back like any report.
#include "torchleak/errors.h"
#include "torchleak/report_json.h"
#include "torchleak/report_subset.h"

#include <catch2/catch.hpp>

using namespace torchleak;

namespace {

Finding leakAt(int line, int64_t perIteration) {
    Finding f;
    f.verdict = Verdict::Leak;
    f.site.file = "train.py";
    f.site.line = line;
    f.site.function = "step";
    f.device = "cpu";
    f.bytes_per_iteration = perIteration;
    f.total_bytes = static_cast<uint64_t>(perIteration) * 10;
    return f;
}

// Five leaks; causes, recommendations and an out-of-memory section naming them.
Report fiveLeaks() {
    Report r;
    r.iterations = 10;
    r.boundary = BoundaryKind::Explicit;
    for (int i = 0; i < 5; ++i) {
        r.findings.push_back(leakAt(10 + i, 1000 * (i + 1)));
    }
    r.causes = {
        Cause{Verdict::Leak,
              "losses",
              std::nullopt,
              3000,
              0,
              {0, 2},
              "",
              Severity::Critical,
              {},
              {},
              ""},
        Cause{
            Verdict::Leak, "cache", std::nullopt, 2000, 0, {1}, "", Severity::Warning, {}, {}, ""},
        Cause{Verdict::Leak,
              "acts",
              std::nullopt,
              5000,
              0,
              {4, 3},
              "",
              Severity::Warning,
              {},
              {},
              ""}};
    r.summary.recommendations = {{"high", "store loss.item()", {0, 1}},
                                 {"low", "about the whole run", {}},
                                 {"medium", "clear the cache", {1}}};
    OutOfMemoryReport oom;
    oom.device = "cpu";
    oom.findings = {4, 1};
    oom.by_site = {OutOfMemorySite{4, "train.py:14", 50, 1, 5000},
                   OutOfMemorySite{1, "train.py:11", 20, 1, 2000}};
    oom.by_holder = {OutOfMemoryHolder{"acts", 50, {4}}, OutOfMemoryHolder{"cache", 20, {1}}};
    r.oom = oom;
    r.warnings = {"an earlier warning"};
    return r;
}

} // namespace

TEST_CASE("keeping findings renumbers every section that names them and drops what named none") {
    Report part = keepFindings(fiveLeaks(), {4, 0, 2}, "rank 1 sent a summary");
    REQUIRE(part.findings.size() == 3);
    CHECK(part.findings[0].site.line == 14);
    CHECK(part.findings[1].site.line == 10);
    CHECK(part.findings[2].site.line == 12);
    REQUIRE(part.causes.size() == 2); // "cache" named only finding 1
    CHECK(part.causes[0].findings == std::vector<int>{1, 2});
    CHECK(part.causes[1].keeper == "acts");
    CHECK(part.causes[1].findings == std::vector<int>{0});
    REQUIRE(part.summary.recommendations.size() == 2);
    CHECK(part.summary.recommendations[0].findings == std::vector<int>{1});
    CHECK(part.summary.recommendations[1].text == "about the whole run");
    REQUIRE(part.oom);
    CHECK(part.oom->findings == std::vector<int>{0});
    REQUIRE(part.oom->by_site.size() == 1);
    CHECK(part.oom->by_site[0].finding == 0);
    REQUIRE(part.oom->by_holder.size() == 1);
    CHECK(part.oom->by_holder[0].holder == "acts");
    CHECK(part.warnings == std::vector<std::string>{"an earlier warning", "rank 1 sent a summary"});
    // What the rank's old summary could not do: be read back.
    Report back = reportFromJson(toJson(part));
    CHECK(back.findings.size() == 3);
    CHECK(back.causes.size() == 2);
}

TEST_CASE("keeping no findings leaves a report of its curves") {
    Report part = keepFindings(fiveLeaks(), {}, "");
    CHECK(part.findings.empty());
    CHECK(part.causes.empty());
    CHECK(part.warnings.size() == 1);
    CHECK_NOTHROW(reportFromJson(toJson(part)));
}

TEST_CASE("keeping a finding the report lacks, or one twice, is refused") {
    CHECK_THROWS_AS(keepFindings(fiveLeaks(), {5}, ""), InvalidArgument);
    CHECK_THROWS_AS(keepFindings(fiveLeaks(), {-1}, ""), InvalidArgument);
    CHECK_THROWS_AS(keepFindings(fiveLeaks(), {1, 1}, ""), InvalidArgument);
}
