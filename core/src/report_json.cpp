#include "torchleak/report_json.h"

#include "device_json.h"
#include "finding_json.h"
#include "frame_json.h"
#include "growth_json.h"
#include "json_numbers.h"
#include "roles_json.h"
#include "torchleak/cause_groups.h"
#include "torchleak/compiled_op.h"
#include "torchleak/devices.h"
#include "torchleak/display_text.h"
#include "torchleak/errors.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <nlohmann/json.hpp>

namespace torchleak {

using nlohmann::json;
using namespace json_numbers;

json frameJson(const Frame& f, bool withCell) {
    json j = {{"file", f.file}, {"line", f.line}, {"function", f.function}, {"text", siteText(f)}};
    if (withCell) {
        j["cell"] = f.cell ? json(*f.cell) : json(nullptr);
    } else if (f.cell) {
        j["cell"] = *f.cell;
    }
    j["user"] = f.user;
    if (f.package) {
        j["package"] = true;
    }
    if (f.source) {
        j["source"] = *f.source;
    }
    if (!f.runs.empty()) {
        j["runs"] = f.runs;
    }
    return j;
}

Frame frameFrom(const json& j) {
    Frame f;
    f.file = j.at("file").get<std::string>();
    f.line = integerAt<int>(j, "line");
    f.function = j.at("function").get<std::string>();
    if (j.contains("cell") && !j["cell"].is_null()) {
        f.cell = integerFrom<int>(j["cell"], "cell");
    }
    f.user = j.value("user", true);
    f.package = j.value("package", false);
    if (j.contains("source") && j["source"].is_string()) {
        f.source = j["source"].get<std::string>();
    }
    f.runs = integersOr<int>(j, "runs");
    return f;
}

namespace {

// Each role of a device's chart says whether a leak on that device has that role (`leaks`):
// the views outline those areas instead of each deriving the set from the findings.
void markLeakingRoles(json& roles, const Report& r, const std::string& device) {
    for (json& entry : roles) {
        entry["leaks"] = std::any_of(r.findings.begin(), r.findings.end(), [&](const Finding& f) {
            return f.verdict == Verdict::Leak && f.device == device && f.role &&
                   toString(*f.role) == entry["role"].get<std::string>();
        });
    }
}

// The "holder" member of a finding or a cause.
std::optional<Holder> holderFrom(const json& owner) {
    if (!owner.contains("holder") || owner["holder"].is_null()) {
        return std::nullopt;
    }
    const json& h = owner["holder"];
    Holder holder{h.at("path_text").get<std::string>(), h.value("type", ""),
                  realOr(h, "growth_per_iteration", 0.0), std::nullopt};
    holder.entries_per_iteration = realOr(h, "entries_per_iteration", 0.0);
    if (h.contains("hooks") && h["hooks"].is_object()) {
        const json& hooks = h["hooks"];
        holder.hooks = HookDictGrowth{hooks.value("added", 0u), hooks.value("newest", "")};
    }
    if (h.contains("library") && h["library"].is_object()) {
        const json& lib = h["library"];
        holder.library =
            LibraryObject{lib.value("object", ""), lib.value("type", ""), lib.value("package", ""),
                          lib.value("methods", std::vector<std::string>{})};
    }
    return holder;
}

json outOfMemoryJson(const OutOfMemoryReport& oom, const Report& r) {
    json sites = json::array();
    for (const OutOfMemorySite& s : oom.by_site) {
        sites.push_back({{"finding", s.finding},
                         {"site", s.site},
                         {"live_bytes", s.live_bytes},
                         {"count", s.count},
                         {"bytes_per_iteration", s.bytes_per_iteration},
                         {"size_text", formatBytes(static_cast<double>(s.live_bytes)) + " in " +
                                           std::to_string(s.count) + " block(s)"}});
    }
    json holders = json::array();
    for (const OutOfMemoryHolder& h : oom.by_holder) {
        holders.push_back({{"holder", h.holder},
                           {"live_bytes", h.live_bytes},
                           {"findings", h.findings},
                           {"size_text", formatBytes(static_cast<double>(h.live_bytes))}});
    }
    json j = {{"device", oom.device},
              {"error", oom.error},
              {"message", oom.message},
              {"iteration", oom.iteration},
              {"requested_bytes", optionalJson(oom.requested_bytes)},
              {"allocated_bytes", oom.allocated_bytes},
              {"reserved_bytes", oom.reserved_bytes},
              {"capacity_bytes", oom.capacity_bytes},
              {"totals_from", oom.totals_from},
              {"live_bytes", oom.live_bytes},
              {"findings", oom.findings},
              {"by_site", sites},
              {"by_holder", holders},
              {"text", outOfMemoryText(oom, r)}};
    if (oom.roles) {
        j["roles"] = roleBytesJson(*oom.roles);
        j["roles_text"] = outOfMemoryRolesText(oom);
    }
    return j;
}

OutOfMemoryReport outOfMemoryFrom(const json& j, size_t findings) {
    OutOfMemoryReport oom;
    oom.device = deviceAt(j, "oom.device");
    oom.error = j.value("error", "");
    oom.message = j.value("message", "");
    oom.iteration = integerAt<int64_t>(j, "iteration");
    if (j.contains("requested_bytes") && !j["requested_bytes"].is_null()) {
        oom.requested_bytes = integerAt<int64_t>(j, "requested_bytes");
    }
    oom.allocated_bytes = integerAt<int64_t>(j, "allocated_bytes");
    oom.reserved_bytes = integerAt<int64_t>(j, "reserved_bytes");
    oom.capacity_bytes = integerOr<uint64_t>(j, "capacity_bytes", 0);
    oom.totals_from = j.value("totals_from", "");
    oom.live_bytes = integerOr<uint64_t>(j, "live_bytes", 0);
    oom.findings = findingIndices(j, "findings", findings);
    for (const json& s : j.value("by_site", json::array())) {
        OutOfMemorySite site;
        site.finding = integerAt<int>(s, "finding");
        if (site.finding < 0 || static_cast<size_t>(site.finding) >= findings) {
            throw SchemaError("oom.by_site names finding " + std::to_string(site.finding) +
                              ", which the report does not have");
        }
        site.site = s.value("site", "");
        site.live_bytes = integerAt<uint64_t>(s, "live_bytes");
        site.count = integerOr<uint64_t>(s, "count", 0);
        site.bytes_per_iteration = integerOr<int64_t>(s, "bytes_per_iteration", 0);
        oom.by_site.push_back(std::move(site));
    }
    for (const json& h : j.value("by_holder", json::array())) {
        oom.by_holder.push_back({h.at("holder").get<std::string>(),
                                 integerAt<uint64_t>(h, "live_bytes"),
                                 findingIndices(h, "findings", findings)});
    }
    oom.roles = roleBytesFrom(j);
    return oom;
}

// `value` as nlohmann writes it when it sits `level` levels deep: every line after the first
// indented by level * indent (a newline inside a JSON string is written escaped, so each raw
// one is a line break of the layout).
void appendNested(std::string& out, const json& value, int indent, int level) {
    const std::string text = dumped(value, indent);
    if (indent < 0) {
        out += text;
        return;
    }
    const std::string pad(static_cast<size_t>(indent * level), ' ');
    for (char c : text) {
        out += c;
        if (c == '\n') {
            out += pad;
        }
    }
}

Finding findingFrom(const json& fj) {
    Finding f;
    f.verdict = verdictFromString(fj.at("verdict").get<std::string>());
    f.site = frameFrom(fj.at("site"));
    for (const json& s : fj.at("stack")) {
        f.stack.push_back(frameFrom(s));
    }
    f.device = deviceAt(fj, "findings[].device");
    if (!fj.at("dtype").is_null()) {
        f.dtype = fj["dtype"].get<std::string>();
    }
    if (!fj.at("shape").is_null()) {
        f.shape = integersAt<int64_t>(fj, "shape");
    }
    if (fj.contains("autograd_node") && !fj["autograd_node"].is_null()) {
        f.autograd_node = fj["autograd_node"].get<std::string>();
    }
    if (fj.contains("allocated_inside") && !fj["allocated_inside"].is_null()) {
        f.allocated_inside = frameFrom(fj["allocated_inside"]);
    }
    if (fj.contains("holder_read") && fj["holder_read"].is_object()) {
        f.holder_read =
            HolderRead{fj["holder_read"].value("line", 0), fj["holder_read"].value("source", ""),
                       fj["holder_read"].value("file", "")};
    }
    if (fj.contains("compiled_op") && fj["compiled_op"].is_object()) {
        const json& op = fj["compiled_op"];
        f.compiled_op = CompiledOp{op.value("source_nodes", std::vector<std::string>{}),
                                   op.value("aten_ops", std::vector<std::string>{})};
    }
    f.count = integerAt<uint64_t>(fj, "count");
    f.total_bytes = integerAt<uint64_t>(fj, "total_bytes");
    f.bytes_per_iteration = integerAt<int64_t>(fj, "bytes_per_iteration");
    f.series = integersAt<int64_t>(fj, "series");
    for (const json& p : fj.at("path")) {
        PathStep step;
        step.kind = stepKindFromString(p.at("kind").get<std::string>());
        step.label = p.at("label").get<std::string>();
        step.type = p.value("type", "");
        step.note = p.value("note", "");
        if (p.contains("tensor") && !p["tensor"].is_null()) {
            const json& t = p["tensor"];
            TensorInfo info;
            info.dtype = t.value("dtype", "");
            info.shape = integersOr<int64_t>(t, "shape");
            info.device = deviceAt(t, "findings[].path[].tensor.device", true);
            info.nbytes = integerOr<uint64_t>(t, "nbytes", 0);
            if (t.contains("site") && !t["site"].is_null()) {
                info.site = frameFrom(t["site"]);
            }
            step.tensor = info;
        }
        f.path.push_back(std::move(step));
    }
    f.retention = retentionFromString(fj.value("retention", "unknown"));
    f.released_periodically = fj.value("released_periodically", false);
    if (auto g = fj.find("growth_since"); g != fj.end() && g->is_object()) {
        f.growth_since = growthSinceFrom(*g);
    }
    if (fj.contains("live_blocks") && !fj["live_blocks"].is_null()) {
        if (!fj["live_blocks"].is_array()) {
            throw SchemaError("live_blocks must be a list of blocks");
        }
        for (const json& b : fj["live_blocks"]) {
            f.live_blocks.push_back(
                {integerAt<uint64_t>(b, "address"), integerAt<uint64_t>(b, "size"),
                 integerAt<uint32_t>(b, "iteration"), integerAt<uint64_t>(b, "sequence")});
        }
    }
    if (fj.contains("live_blocks_unlisted") && !fj["live_blocks_unlisted"].is_null()) {
        f.live_blocks_unlisted = integerAt<uint64_t>(fj["live_blocks_unlisted"], "count");
        f.live_bytes_unlisted = integerAt<uint64_t>(fj["live_blocks_unlisted"], "bytes");
    }
    f.path_text = fj.value("path_text", "");
    f.holder = holderFrom(fj);
    f.suggestion = fj.value("suggestion", "");
    f.fix_rule = fj.value("fix_rule", "");
    f.fix_code = fj.value("fix_code", "");
    if (fj.contains("fix") && fj["fix"].is_object()) {
        const json& fix = fj["fix"];
        f.fix = FixProof{integerOr<uint64_t>(fix, "frees_bytes", 0),
                         fix.value("also_held_by", ""),
                         fix.value("owner", ""),
                         integerOr<uint64_t>(fix, "owner_frees_bytes", 0),
                         fix.value("owner_methods", std::vector<std::string>{}),
                         std::nullopt};
        if (fix.contains("together_frees_bytes")) {
            f.fix->together_frees_bytes = integerOr<uint64_t>(fix, "together_frees_bytes", 0);
        }
    }
    if (fj.contains("role") && fj["role"].is_string()) {
        f.role = memoryRoleFromString(fj["role"].get<std::string>());
    }
    f.severity = severityFromString(fj.at("severity").get<std::string>());
    const json& t = fj.at("trend");
    f.trend = {realFrom(t.at("slope_bytes_per_iteration"), "slope_bytes_per_iteration"),
               realFrom(t.at("r2"), "r2"), realFrom(t.at("p_value"), "p_value")};
    f.confidence = realFrom(fj.at("confidence"), "confidence");
    f.ranks = integersOr<int>(fj, "ranks");
    return f;
}

} // namespace

std::string toJson(const Report& r, int indent) {
    json j;
    j["schema_version"] = kReportSchema;
    j["torch_version"] = r.torch_version;
    j["python_version"] = r.python_version;
    j["iterations"] = r.iterations;
    if (!r.series_iterations.empty()) {
        j["series_iterations"] = r.series_iterations;
    }
    j["warmup"] = r.warmup;
    j["boundary"] = toString(r.boundary);
    // The word every rate is per ("iteration", "cell run"): the views say it, not derive it.
    j["iteration_unit"] = iterationNoun(r.boundary);
    j["events_recorded"] = r.events_recorded;
    j["warnings"] = r.warnings;
    j["devices"] = json::array();
    for (const DeviceTimeline& d : r.devices) {
        json dj = deviceJson(d, r.iterations, r.boundary, r.series_iterations);
        if (dj.contains("roles")) {
            markLeakingRoles(dj["roles"], r, d.device);
        }
        j["devices"].push_back(std::move(dj));
    }
    j["findings"] = nullptr; // written one at a time below
    j["causes"] = json::array();
    for (const Cause& c : r.causes) {
        json cj = {{"verdict", toString(c.verdict)},
                   {"keeper", c.keeper},
                   {"bytes_per_iteration", c.bytes_per_iteration},
                   {"total_bytes", c.total_bytes},
                   {"findings", c.findings},
                   {"suggestion", c.suggestion},
                   {"severity", toString(c.severity)},
                   {"projected_oom_iteration", optionalJson(c.projected_oom_iteration)},
                   {"text", causeText(c, r)}};
        cj["holder"] = holderJson(c.holder, r.boundary);
        if (!c.holders.empty()) {
            cj["holders"] = c.holders;
            cj["new_key"] = c.new_key;
        }
        j["causes"].push_back(std::move(cj));
    }
    // Derived from the causes whenever a report is written, so a report read back (or from an
    // older version) gets them too.
    j["cause_groups"] = json::array();
    for (const CauseGroup& g : groupRelatedCauses(r)) {
        json gj = {{"container", g.container.empty() ? json(nullptr) : json(g.container)},
                   {"causes", g.causes},
                   {"bytes_per_iteration", g.bytes_per_iteration},
                   {"total_bytes", g.total_bytes},
                   {"severity", toString(g.severity)},
                   {"text", causeGroupText(g, r)}};
        if (const std::string code = causeGroupFixCode(g, r); !code.empty()) {
            gj["fix_code"] = code;
        }
        j["cause_groups"].push_back(std::move(gj));
    }
    if (r.oom) {
        j["oom"] = outOfMemoryJson(*r.oom, r);
    }
    if (r.ranks) {
        j["ranks"] = ranksJson(*r.ranks, r.boundary);
    }
    if (r.sample_bytes > 0) {
        j["sampling"] = {{"sample_bytes", r.sample_bytes}, {"text", samplingText(r.sample_bytes)}};
    }
    json recs = json::array();
    for (const Recommendation& rec : r.summary.recommendations) {
        recs.push_back(
            {{"priority", rec.priority}, {"text", rec.text}, {"findings", rec.findings}});
    }
    j["summary"] = {{"score", r.summary.score},
                    {"grade", r.summary.grade},
                    {"headline", headline(r)},
                    {"empty_text", r.findings.empty() ? json(emptyReportText(r)) : json(nullptr)},
                    {"critical_issues", r.summary.critical_issues},
                    {"recommendations", recs}};
    // Written member by member, the findings one at a time, exactly as j.dump(indent) would:
    // the findings are nearly all of a report, and a DOM of them beside the text it becomes
    // doubled what loading a large report took.
    const bool pretty = indent >= 0;
    const std::string newline = pretty ? "\n" : "";
    const std::string pad1(pretty ? static_cast<size_t>(indent) : 0, ' ');
    const std::string pad2(pretty ? static_cast<size_t>(2 * indent) : 0, ' ');
    std::string out = "{" + newline;
    for (auto it = j.begin(); it != j.end(); ++it) {
        if (it != j.begin()) {
            out += "," + newline;
        }
        out += pad1 + dumped(json(it.key()), -1) + (pretty ? ": " : ":");
        if (it.key() != "findings") {
            appendNested(out, it.value(), indent, 1);
        } else if (r.findings.empty()) {
            out += "[]";
        } else {
            out += "[" + newline;
            for (size_t i = 0; i < r.findings.size(); ++i) {
                out += (i ? "," + newline : "") + pad2;
                if (pretty) { // read back to be laid out: only a saved report is pretty
                    appendNested(out, json::parse(findingText(r.findings[i], r)), indent, 2);
                } else {
                    out += findingText(r.findings[i], r);
                }
            }
            out += newline + pad1 + "]";
        }
    }
    return out + newline + "}";
}

std::string verdictsJson(const Report& r) {
    // Written as text, the members in key order as nlohmann writes them (finding_json.cpp): a
    // watch looks at every site at every check, and needs no tree of map nodes per finding.
    std::string out = "{\"boundary\":" + dumped(json(toString(r.boundary)), -1) + ",\"findings\":[";
    for (size_t i = 0; i < r.findings.size(); ++i) {
        out += i ? "," : "";
        out += verdictText(r.findings[i], r.boundary);
    }
    out += "],\"iterations\":" + std::to_string(r.iterations);
    out += ",\"schema_version\":" + dumped(json(kVerdictsSchema), -1);
    out += ",\"settled_left_out\":" + std::to_string(r.settled_left_out) + "}";
    return out;
}

Report reportFromJson(std::string_view text) {
    // The findings are read as the parser finishes each one and never kept in the DOM: they
    // are nearly all of a report, and a DOM of them all cost several times the text's size.
    std::vector<Finding> findings;
    std::exception_ptr badFinding; // thrown after the schema check, which speaks first
    std::string member;            // the top-level member being parsed
    json::parser_callback_t readFinding = [&](int depth, json::parse_event_t event, json& parsed) {
        if (event == json::parse_event_t::key && depth == 1) {
            member = parsed.get<std::string>();
        } else if (event == json::parse_event_t::object_end && depth == 2 && member == "findings") {
            if (!badFinding) {
                try {
                    findings.push_back(findingFrom(parsed));
                } catch (const json::exception& e) {
                    badFinding = std::make_exception_ptr(
                        SchemaError("malformed torchleak.report/1 document: finding " +
                                    std::to_string(findings.size()) + ": " + e.what()));
                } catch (...) {
                    badFinding = std::current_exception();
                }
            }
            return false;
        }
        return true;
    };
    json j;
    try {
        j = json::parse(text, readFinding);
    } catch (const json::exception& e) { // a syntax error, or a number out of range (1e400)
        throw SchemaError(std::string("report is not JSON: ") + e.what());
    }
    // Looked at before value(): a schema_version that is not a string would throw
    // nlohmann's type_error, which is no SchemaError.
    const auto version = j.is_object() ? j.find("schema_version") : j.end();
    if (version == j.end() || !version->is_string() || *version != kReportSchema) {
        throw SchemaError("not a torchleak.report/1 document (schema_version missing or "
                          "different)");
    }
    if (badFinding) {
        std::rethrow_exception(badFinding);
    }
    // What the parser left in the findings array is what was not an object.
    if (!j.contains("findings") || !j["findings"].is_array() || !j["findings"].empty()) {
        throw SchemaError("malformed torchleak.report/1 document: findings must be a list of "
                          "objects");
    }
    try {
        Report r;
        r.torch_version = j.value("torch_version", "");
        r.python_version = j.value("python_version", "");
        r.iterations = integerAt<int>(j, "iterations");
        r.warmup = integerOr<int>(j, "warmup", 0);
        r.series_iterations = integersOr<int64_t>(j, "series_iterations");
        for (size_t i = 0; i < r.series_iterations.size(); ++i) {
            int64_t it = r.series_iterations[i];
            if (it < 0 || it >= r.iterations || (i > 0 && it <= r.series_iterations[i - 1])) {
                throw SchemaError("series_iterations must be increasing iterations below "
                                  "iterations");
            }
        }
        r.boundary = boundaryFromString(j.at("boundary").get<std::string>());
        r.events_recorded = integerOr<uint64_t>(j, "events_recorded", 0);
        r.warnings = j.value("warnings", std::vector<std::string>{});
        for (const json& d : j.at("devices")) {
            r.devices.push_back(deviceFrom(d));
        }
        r.findings = std::move(findings);
        for (const json& cj : j.value("causes", json::array())) {
            Cause c;
            c.verdict = verdictFromString(cj.at("verdict").get<std::string>());
            c.keeper = cj.value("keeper", "");
            c.bytes_per_iteration = integerAt<int64_t>(cj, "bytes_per_iteration");
            c.total_bytes = integerOr<uint64_t>(cj, "total_bytes", 0);
            c.findings = integersAt<int>(cj, "findings");
            for (int i : c.findings) {
                if (i < 0 || static_cast<size_t>(i) >= r.findings.size()) {
                    throw SchemaError("a cause names finding " + std::to_string(i) +
                                      ", which the report does not have");
                }
            }
            if (c.findings.empty()) {
                throw SchemaError("a cause without findings");
            }
            c.suggestion = cj.value("suggestion", "");
            c.severity = severityFromString(cj.at("severity").get<std::string>());
            if (cj.contains("projected_oom_iteration") &&
                !cj["projected_oom_iteration"].is_null()) {
                c.projected_oom_iteration = integerAt<int64_t>(cj, "projected_oom_iteration");
            }
            c.holder = holderFrom(cj);
            if (cj.contains("holders") && cj["holders"].is_array()) {
                c.holders = cj["holders"].get<std::vector<std::string>>();
                c.new_key = cj.value("new_key", "");
            }
            r.causes.push_back(std::move(c));
        }
        if (j.contains("oom") && !j["oom"].is_null()) {
            r.oom = outOfMemoryFrom(j["oom"], r.findings.size());
        }
        if (j.contains("sampling") && !j["sampling"].is_null()) {
            r.sample_bytes = integerAt<uint64_t>(j["sampling"], "sample_bytes");
        }
        if (j.contains("ranks") && !j["ranks"].is_null()) {
            r.ranks = ranksFrom(j["ranks"]);
            for (const Finding& f : r.findings) {
                for (int rank : f.ranks) {
                    if (rank < 0 || rank >= r.ranks->world_size) {
                        throw SchemaError("a finding names rank " + std::to_string(rank) +
                                          ", which is outside the job");
                    }
                }
            }
        }
        const json& s = j.at("summary");
        r.summary.score = integerAt<int>(s, "score");
        r.summary.grade = s.at("grade").get<std::string>();
        r.summary.critical_issues = s.at("critical_issues").get<std::vector<std::string>>();
        for (const json& rec : s.at("recommendations")) {
            r.summary.recommendations.push_back({rec.at("priority").get<std::string>(),
                                                 rec.at("text").get<std::string>(),
                                                 integersOr<int>(rec, "findings")});
        }
        return r;
    } catch (const json::exception& e) {
        throw SchemaError(std::string("malformed torchleak.report/1 document: ") + e.what());
    }
}

} // namespace torchleak
