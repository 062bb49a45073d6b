#include "torchleak/display_text.h"
#include "torchleak/errors.h"
#include "torchleak/redaction_fields.h"
#include "torchleak/report_json.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <functional>
#include <nlohmann/json.hpp>
#include <set>

using namespace torchleak;

namespace {

Report hostileReport() {
    Report r;
    r.torch_version = "2.13.0";
    r.python_version = "3.11.7";
    r.iterations = 3;
    r.boundary = BoundaryKind::Repeat;
    Finding f;
    f.verdict = Verdict::Leak;
    f.site = {"dir \"quoted\"/<script>alert('x')</script>.py",
              42,
              "step</td>&amp;",
              std::nullopt,
              true,
              std::nullopt,
              ""};
    f.stack = {
        f.site,
        {"/torch/nn/modules/module.py", 1, "_call_impl", std::nullopt, false, std::nullopt, ""}};
    f.device = "cpu";
    f.dtype = "float32";
    f.shape = std::vector<int64_t>{256, 1024};
    f.count = 3;
    f.total_bytes = 3 << 20;
    f.bytes_per_iteration = 1 << 20;
    f.series = {1 << 20, 2 << 20, 3 << 20};
    PathStep root{StepKind::Root, "losses\n\t\\", "list", "", std::nullopt, "", std::nullopt};
    PathStep item{StepKind::Index, "[2]", "Tensor", "<script>", TensorInfo{}, "", std::nullopt};
    item.tensor->dtype = "float32";
    item.tensor->shape = {4, 4};
    item.tensor->device = "cpu";
    item.tensor->nbytes = 64;
    item.tensor->site = Frame{"a.py", 3, "f", std::nullopt, true, std::nullopt, ""};
    f.path = {root, item};
    f.retention = Retention::Reachable;
    f.path_text = "losses[2]";
    f.holder = Holder{"losses", "list", 1.0, std::nullopt};
    f.suggestion = "store loss.item() — not the tensor \u2714";
    f.severity = Severity::Warning;
    f.trend = {1048576.0, 1.0, 0.0};
    f.confidence = 0.99;
    f.live_blocks = {{0x7f0000001000, 1 << 20, 0, 3}, {0xffffffffffffff00, 1 << 20, 2, 90}};
    f.live_blocks_unlisted = 1;
    f.live_bytes_unlisted = 1 << 20;
    f.growth_since = GrowthSince{1, 1 << 20, std::nullopt, 2 << 20};
    r.findings.push_back(f);
    Finding stopped = f;
    stopped.verdict = Verdict::Plateau;
    stopped.growth_since = GrowthSince{0, 1 << 19, 2, 1 << 20};
    stopped.fix = FixProof{0, "store._by_name", "store", 3 << 20, {"clear", "<reset>"}, 5u << 20};
    stopped.fix_rule = "hook-dict";
    stopped.holder = Holder{"model._forward_hooks", "collections.OrderedDict", 1.0,
                            HookDictGrowth{3, "Explainer.<\"save\">"}};
    stopped.compiled_op = CompiledOp{{"input_<3>"}, {"aten.t", "aten.\"addmm\""}};
    stopped.holder->library = LibraryObject{"trainer.<\"ema\">", "EMA<b>", "ema'lib", {"reset"}};
    r.findings.push_back(stopped);
    Finding stepped = f; // a staircase that grew before, paused, and steps again
    stepped.growth_since = GrowthSince{40, 1 << 18, std::nullopt, 4 << 20};
    stepped.growth_since->step_bytes = 1 << 20;
    stepped.growth_since->step_every = 4;
    stepped.growth_since->earlier = GrowthSince::Earlier{3, 9, 5 << 20};
    r.findings.push_back(stepped);
    Finding filling = f; // a cache of the last 16 requests, 8 in: too soon to call
    filling.verdict = Verdict::Undecided;
    filling.growth_since->settles_at = 24;
    filling.growth_since->bounded = GrowthSince::Bounded{16, 8};
    r.findings.push_back(filling);
    DeviceTimeline d;
    d.device = "cpu";
    d.capacity_bytes = 1ull << 34;
    d.allocated = {1, 2, 3};
    d.reserved = {1, 2, 3};
    d.leak_bytes_per_iteration = 1 << 20;
    d.projected_oom_iteration = 16384;
    r.devices.push_back(d);
    r.summary.score = 80;
    r.summary.grade = "B";
    r.summary.critical_issues = {"<b>bold</b>"};
    r.summary.recommendations = {{"high", "fix \"it\"", {0}}};
    return r;
}

} // namespace

TEST_CASE("JSON has the contract's field names and parses back with nlohmann") {
    std::string text = toJson(hostileReport());
    auto j = nlohmann::json::parse(text);
    REQUIRE(j["schema_version"] == "torchleak.report/1");
    REQUIRE(j["boundary"] == "repeat");
    const auto& f = j["findings"][0];
    REQUIRE(f["verdict"] == "leak");
    REQUIRE(f["growth_since"]["iteration"] == 1);
    REQUIRE(f["growth_since"]["bytes_per_iteration"] == 1 << 20);
    REQUIRE(f["growth_since"]["stopped_at"].is_null());
    REQUIRE(f["growth_since"]["grown_bytes"] == 2 << 20);
    REQUIRE(f["growth_since"]["text"] == "leaking since iteration 2, 1.0 MiB per iteration");
    REQUIRE(j["findings"][1]["growth_since"]["stopped_at"] == 2);
    REQUIRE(j["findings"][1]["growth_since"]["text"] ==
            "grew 1.0 MiB until iteration 3, flat since");
    const auto& stepped = j["findings"][2]["growth_since"];
    REQUIRE(stepped["step_bytes"] == 1 << 20);
    REQUIRE(stepped["step_every"] == 4);
    REQUIRE(stepped["earlier"]["stopped_at"] == 9);
    REQUIRE(stepped["text"] ==
            "1.0 MiB every 4 iterations since iteration 41; before, it grew 5.0 MiB "
            "from iteration 4 to 10 and paused");
    const auto& filling = j["findings"][3]["growth_since"];
    REQUIRE(filling["bounded"]["capacity"] == 16);
    REQUIRE(filling["bounded"]["entries"] == 8);
    REQUIRE(filling["settles_at"] == 24);
    REQUIRE(filling["text"] ==
            "held by a deque of at most 16 entries, 8 of them now: it stops growing when full");
    REQUIRE_FALSE(f["growth_since"].contains("step_bytes"));
    REQUIRE_FALSE(f["growth_since"].contains("earlier"));
    REQUIRE_FALSE(f["growth_since"].contains("bounded"));
    REQUIRE(f["site"]["file"] == "dir \"quoted\"/<script>alert('x')</script>.py");
    REQUIRE(f["site"]["cell"].is_null());
    REQUIRE(f["path"][0]["label"] == "losses\n\t\\");
    REQUIRE(f["holder"]["path_text"] == "losses");
    REQUIRE(f["retention"] == "reachable");
    REQUIRE(f["path"][1]["tensor"]["shape"][0] == 4);
    REQUIRE(f["path"][1]["tensor"]["site"]["line"] == 3);
    REQUIRE(f["path"][1]["note"] == "<script>");
    REQUIRE_FALSE(f["path"][0].contains("tensor"));
    REQUIRE(f["trend"]["slope_bytes_per_iteration"] == 1048576.0);
    REQUIRE(j["devices"][0]["projected_oom_iteration"] == 16384);
    REQUIRE(j["summary"]["recommendations"][0]["findings"][0] == 0);
    REQUIRE(f["live_blocks"][1]["address"] == 0xffffffffffffff00);
    REQUIRE(f["live_blocks"][1]["iteration"] == 2);
    REQUIRE(f["live_blocks"][1]["sequence"] == 90);
    REQUIRE(f["live_blocks_unlisted"]["bytes"] == 1 << 20);
}

TEST_CASE("A finding with no live block writes no listing") {
    Report r = hostileReport();
    r.findings[0].live_blocks.clear();
    r.findings[0].live_blocks_unlisted = 0;
    auto j = nlohmann::json::parse(toJson(r));
    REQUIRE_FALSE(j["findings"][0].contains("live_blocks"));
    REQUIRE_FALSE(j["findings"][0].contains("live_blocks_unlisted"));
    REQUIRE(reportFromJson(j.dump()).findings[0].live_blocks.empty());
}

TEST_CASE("JSON round-trips through reportFromJson unchanged") {
    Report r = hostileReport();
    std::string once = toJson(r);
    Report back = reportFromJson(once);
    REQUIRE(toJson(back) == once);
    REQUIRE(back.findings[0].site.file == r.findings[0].site.file);
    REQUIRE(back.findings[0].suggestion == r.findings[0].suggestion);
    REQUIRE(back.findings[1].holder->hooks->added == 3);
    REQUIRE(back.findings[1].holder->hooks->newest == "Explainer.<\"save\">");
    REQUIRE_FALSE(back.findings[0].holder->hooks);
    REQUIRE(back.findings[1].fix->also_held_by == "store._by_name");
    REQUIRE(back.findings[1].fix_rule == "hook-dict");
    REQUIRE(back.findings[0].fix_rule.empty());
    REQUIRE(back.findings[1].fix->owner_frees_bytes == 3u << 20);
    REQUIRE(back.findings[1].fix->together_frees_bytes == 5u << 20);
    REQUIRE_FALSE(back.findings[0].fix.has_value());
    REQUIRE(back.findings[1].fix->owner_methods == std::vector<std::string>{"clear", "<reset>"});
    REQUIRE(back.findings[1].holder->library->object == "trainer.<\"ema\">");
    REQUIRE(back.findings[1].holder->library->package == "ema'lib");
    REQUIRE_FALSE(back.findings[0].holder->library);
    REQUIRE(back.findings[1].compiled_op->aten_ops ==
            std::vector<std::string>{"aten.t", "aten.\"addmm\""});
    REQUIRE_FALSE(back.findings[0].compiled_op);
}

TEST_CASE("Findings written one at a time lay out as nlohmann's own dump, at every indent") {
    Report r = hostileReport();
    r.findings.push_back(r.findings[0]);
    r.findings[1].site.line = 43;
    // Every optional member, control and bidi characters, a NaN and a negative rate: the
    // finding is written as text, not as nlohmann's tree, and must read the same.
    Finding rich = r.findings[0];
    rich.site.file = "a\x01\x1b[31m\u202e.py";
    rich.site.cell = 7;
    rich.site.runs = {1, 3};
    rich.autograd_node = "MmBackward0 \"x\"";
    rich.allocated_inside = Frame{"lib/\x7f.py", 9, "g", std::nullopt, false, std::nullopt, ""};
    // A stack frame with every member a frame can have: a package's, its source line, a cell.
    rich.stack.push_back(Frame{"site-packages/p\\q.py",
                               3,
                               "<lambda>",
                               4,
                               false,
                               "x = \"y\"\t# \u00e9t\u00e9 \u202e",
                               "g",
                               true,
                               {2, 4}});
    rich.holder_read = HolderRead{12, "prev = kept[-1]  # \"read\"", "other\tmodule.py"};
    rich.ranks = {0, 3};
    rich.role = MemoryRole::UserHeld;
    rich.fix_code = "kept.clear()";
    rich.bytes_per_iteration = -4096;
    rich.trend = {std::nan(""), -0.0, 1e-300};
    rich.confidence = 0.1 + 0.2;
    rich.path[1].tensor->site.reset();
    rich.path[1].note = "local 'x'\n in \u00e9t\u00e9";
    rich.live_blocks.clear();
    rich.live_blocks_unlisted = 5;
    rich.shape.reset();
    rich.dtype.reset();
    r.findings.push_back(rich);
    Report none = hostileReport();
    none.findings.clear();
    const nlohmann::json frame =
        nlohmann::json::parse(toJson(r))["findings"].back()["stack"].back();
    CHECK(frame["file"] == "site-packages/p\\q.py");
    CHECK(frame["line"] == 3);
    CHECK(frame["function"] == "<lambda>");
    CHECK(frame["text"] == siteText(rich.stack.back()));
    CHECK(frame["cell"] == 4);
    CHECK(frame["user"] == false);
    CHECK(frame["package"] == true);
    CHECK(frame["source"] == "x = \"y\"\t# \u00e9t\u00e9 \u202e");
    CHECK(frame["runs"] == std::vector<int>{2, 4});
    CHECK(frame.size() == 9);
    for (const Report* report : {&r, &none}) {
        const auto dom = nlohmann::json::parse(toJson(*report));
        for (int indent : {-1, 0, 1, 2, 4}) {
            INFO("indent " << indent << ", " << report->findings.size() << " findings");
            REQUIRE(toJson(*report, indent) == dom.dump(indent));
        }
    }
}

TEST_CASE("A report read back from a view of its text, any indent, is the same report") {
    const std::string text = toJson(hostileReport(), 2);
    const std::string_view view(text);
    REQUIRE(toJson(reportFromJson(view)) == toJson(hostileReport()));
}

TEST_CASE("Findings that are not objects, or are missing, are schema errors") {
    const auto good = nlohmann::json::parse(toJson(hostileReport()));
    for (const nlohmann::json& findings :
         {nlohmann::json::array({1}), nlohmann::json::object(), nlohmann::json("x"),
          nlohmann::json::array({good["findings"][0], nullptr})}) {
        auto doc = good;
        doc["findings"] = findings;
        INFO(findings.dump().substr(0, 80));
        REQUIRE_THROWS_AS(reportFromJson(doc.dump()), SchemaError);
    }
    auto missing = good;
    missing.erase("findings");
    REQUIRE_THROWS_AS(reportFromJson(missing.dump()), SchemaError);
    auto noVerdict = good;
    noVerdict["findings"][0].erase("verdict");
    REQUIRE_THROWS_WITH(reportFromJson(noVerdict.dump()), Catch::Contains("finding 0"));
    // A member named findings deeper down (a cause's, the oom's) is no finding.
    REQUIRE(reportFromJson(good.dump()).findings.size() == good["findings"].size());
}

TEST_CASE("Invalid UTF-8 in a file name is replaced, not thrown") {
    Report r = hostileReport();
    r.findings[0].site.file = std::string("bad\xff\xfe.py");
    std::string text = toJson(r);
    auto j = nlohmann::json::parse(text);
    REQUIRE(j["findings"][0]["site"]["file"].get<std::string>().find("bad") == 0);
}

TEST_CASE("Documents that are not torchleak.report/1 are rejected with SchemaError") {
    REQUIRE_THROWS_AS(reportFromJson("not json"), SchemaError);
    REQUIRE_THROWS_AS(reportFromJson("{}"), SchemaError);
    REQUIRE_THROWS_AS(reportFromJson(R"({"schema_version": "torchleak.report/2"})"), SchemaError);
    REQUIRE_THROWS_AS(reportFromJson(R"({"schema_version": "torchleak.report/1"})"), SchemaError);
    // A schema_version of the wrong type is the same refusal, not nlohmann's type_error.
    for (const char* text : {R"({"schema_version": 1})", R"({"schema_version": null})",
                             R"({"schema_version": ["torchleak.report/1"]})", R"([1])", "7"}) {
        REQUIRE_THROWS_AS(reportFromJson(text), SchemaError);
    }
    std::string text = toJson(hostileReport());
    auto j = nlohmann::json::parse(text);
    j["findings"][0]["verdict"] = "maybe";
    REQUIRE_THROWS_AS(reportFromJson(j.dump()), SchemaError);
}

TEST_CASE("Out-of-range and mistyped numbers are schema errors, not converted") {
    const std::string text = toJson(hostileReport());
    auto broken = [&](const std::function<void(nlohmann::json&)>& edit) {
        auto j = nlohmann::json::parse(text);
        edit(j);
        return j.dump();
    };
    REQUIRE_NOTHROW(reportFromJson(text));
    REQUIRE_THROWS_AS(reportFromJson(broken([](auto& j) { j["findings"][0]["count"] = -1; })),
                      SchemaError);
    REQUIRE_THROWS_AS(reportFromJson(broken([](auto& j) { j["iterations"] = 2.9; })), SchemaError);
    REQUIRE_THROWS_AS(
        reportFromJson(broken([](auto& j) { j["iterations"] = (uint64_t{1} << 32) + 1; })),
        SchemaError);
    REQUIRE_THROWS_AS(reportFromJson(broken([](auto& j) { j["findings"][0]["series"][0] = "12"; })),
                      SchemaError);
    REQUIRE_THROWS_AS(
        reportFromJson(broken([](auto& j) { j["findings"][0]["site"]["line"] = 1e12; })),
        SchemaError);
    REQUIRE_THROWS_AS(reportFromJson(broken([](auto& j) {
                          j["findings"][0]["live_blocks"] = {{"a", 1}};
                      })),
                      SchemaError);
    REQUIRE_THROWS_AS(
        reportFromJson(broken([](auto& j) { j["findings"][0]["live_blocks"][0]["size"] = -4; })),
        SchemaError);
    std::string huge = text;
    huge.replace(huge.find("\"iterations\":") + 13, 0, "1e400, \"x\":");
    REQUIRE_THROWS_AS(reportFromJson(huge), SchemaError);
}

TEST_CASE("An empty report is valid JSON") {
    Report r;
    auto j = nlohmann::json::parse(toJson(r));
    REQUIRE(j["findings"].empty());
    REQUIRE(j["iterations"] == 0);
}

TEST_CASE("A device that is not one is refused at load with its field named") {
    const std::string text = toJson(hostileReport());
    auto withDevice = [&](const std::string& device) {
        auto j = nlohmann::json::parse(text);
        j["findings"][0]["device"] = device;
        return j.dump();
    };
    for (const char* good : {"cpu", "cuda:0", "cuda:127", "fakegpu:3", "privateuseone:1", "mps"}) {
        INFO(good);
        REQUIRE_NOTHROW(reportFromJson(withDevice(good)));
    }
    // An index that would size per-device structures (the memory-snapshot export built one list
    // per index up to it), a superscript digit, no type, a sign.
    for (const char* bad : {"cuda:2000000000", "cuda:128", "cuda:\u00b2", ":0", "cuda:-1", "cuda:",
                            "cuda:0:1", "", "9cuda:0", "cu da:0", "cuda:+1", "cuda:0001"}) {
        INFO(bad);
        REQUIRE_THROWS_WITH(reportFromJson(withDevice(bad)),
                            Catch::Contains("findings[].device") &&
                                Catch::Contains("is not a device"));
    }
    auto j = nlohmann::json::parse(text);
    j["devices"][0]["device"] = "cuda:99999999999999999999";
    REQUIRE_THROWS_WITH(reportFromJson(j.dump()), Catch::Contains("devices[].device"));
}

TEST_CASE("In cell watch a device carries its curve's least-squares slope for the trend line") {
    Report r;
    r.boundary = BoundaryKind::Cell;
    r.iterations = 7;
    r.series_iterations = {0, 2, 4, 6};
    DeviceTimeline d;
    d.device = "cpu";
    d.allocated = {0, 10, 20, 30};
    d.reserved = d.allocated;
    d.peak = d.allocated;
    r.devices = {d};
    const nlohmann::json cell = nlohmann::json::parse(toJson(r));
    REQUIRE(cell["devices"][0]["allocated_trend_per_iteration"].get<double>() == Approx(5.0));
    r.boundary = BoundaryKind::Explicit; // the leak's own rate is the curve's slope there
    REQUIRE_FALSE(
        nlohmann::json::parse(toJson(r))["devices"][0].contains("allocated_trend_per_iteration"));
}

TEST_CASE("Redaction's table names each string field once, with one of its rules") {
    std::set<std::string_view> places;
    for (const RedactionField& f : redactionFields()) {
        REQUIRE(places.insert(f.place).second);
        REQUIRE_FALSE(toString(f.rule).empty());
    }
    auto ruleOf = [](std::string_view place) {
        for (const RedactionField& f : redactionFields()) {
            if (f.place == place) {
                return toString(f.rule);
            }
        }
        return std::string_view("none");
    };
    REQUIRE(ruleOf("findings[].site.file") == "file");
    REQUIRE(ruleOf("findings[].fix_code") == "dropped");
    REQUIRE(ruleOf("findings[].path[].label") == "key");
    REQUIRE(ruleOf("oom.message") == "free text");
    REQUIRE(ruleOf("ranks.ranks[].devices[].spikes[].site.file") == "file");
}
