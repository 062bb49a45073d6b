#include "torchleak/report_json.h"

#include "torchleak/display_text.h"
#include "torchleak/errors.h"

#include <nlohmann/json.hpp>

namespace torchleak {

using nlohmann::json;

namespace {

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
    f.line = j.at("line").get<int>();
    f.function = j.at("function").get<std::string>();
    if (j.contains("cell") && !j["cell"].is_null()) {
        f.cell = j["cell"].get<int>();
    }
    f.user = j.value("user", true);
    f.package = j.value("package", false);
    if (j.contains("source") && j["source"].is_string()) {
        f.source = j["source"].get<std::string>();
    }
    if (j.contains("runs")) {
        f.runs = j["runs"].get<std::vector<int>>();
    }
    return f;
}

json holderJson(const std::optional<Holder>& h) {
    if (!h) {
        return nullptr;
    }
    return {{"path_text", h->path_text},
            {"type", h->type},
            {"growth_per_iteration", h->growth_per_iteration}};
}

// The "holder" member of a finding or a cause.
std::optional<Holder> holderFrom(const json& owner) {
    if (!owner.contains("holder") || owner["holder"].is_null()) {
        return std::nullopt;
    }
    const json& h = owner["holder"];
    return Holder{h.at("path_text").get<std::string>(), h.value("type", ""),
                  h.value("growth_per_iteration", 0.0)};
}

template <typename T> json optionalJson(const std::optional<T>& v) {
    return v ? json(*v) : json(nullptr);
}

} // namespace

std::string toJson(const Report& r, int indent) {
    json j;
    j["schema_version"] = kReportSchema;
    j["torch_version"] = r.torch_version;
    j["python_version"] = r.python_version;
    j["iterations"] = r.iterations;
    j["warmup"] = r.warmup;
    j["boundary"] = toString(r.boundary);
    // The word every rate is per ("iteration", "cell run"): the views say it, not derive it.
    j["iteration_unit"] = iterationNoun(r.boundary);
    j["events_recorded"] = r.events_recorded;
    j["warnings"] = r.warnings;
    j["devices"] = json::array();
    for (const DeviceTimeline& d : r.devices) {
        j["devices"].push_back(
            {{"device", d.device},
             {"capacity_bytes", d.capacity_bytes},
             {"allocated", d.allocated},
             {"reserved", d.reserved},
             {"peak", d.peak},
             {"leak_bytes_per_iteration", d.leak_bytes_per_iteration},
             {"projected_oom_iteration", optionalJson(d.projected_oom_iteration)},
             {"verdict", d.verdict},
             {"fragmentation_ratio", d.fragmentation_ratio},
             {"projection_text", projectionText(d, r.iterations, r.boundary)}});
    }
    j["findings"] = json::array();
    for (const Finding& f : r.findings) {
        json fj;
        fj["verdict"] = toString(f.verdict);
        fj["site"] = frameJson(f.site, true);
        fj["stack"] = json::array();
        for (const Frame& fr : f.stack) {
            fj["stack"].push_back(frameJson(fr, false));
        }
        fj["device"] = f.device;
        fj["dtype"] = optionalJson(f.dtype);
        fj["shape"] = optionalJson(f.shape);
        fj["autograd_node"] = optionalJson(f.autograd_node);
        if (f.allocated_inside) {
            fj["allocated_inside"] = frameJson(*f.allocated_inside, false);
        }
        fj["count"] = f.count;
        fj["total_bytes"] = f.total_bytes;
        fj["bytes_per_iteration"] = f.bytes_per_iteration;
        fj["series"] = f.series;
        fj["path"] = json::array();
        for (const PathStep& p : f.path) {
            json step = {{"kind", toString(p.kind)}, {"label", p.label}, {"type", p.type}};
            if (!p.note.empty()) {
                step["note"] = p.note;
            }
            if (p.tensor) {
                step["tensor"] = {
                    {"dtype", p.tensor->dtype},
                    {"shape", p.tensor->shape},
                    {"device", p.tensor->device},
                    {"nbytes", p.tensor->nbytes},
                    {"site", p.tensor->site ? frameJson(*p.tensor->site, true) : json(nullptr)}};
            }
            fj["path"].push_back(std::move(step));
        }
        fj["retention"] = toString(f.retention);
        fj["released_periodically"] = f.released_periodically;
        fj["path_text"] = f.path_text;
        fj["holder"] = holderJson(f.holder);
        fj["suggestion"] = f.suggestion;
        fj["severity"] = toString(f.severity);
        fj["trend"] = {{"slope_bytes_per_iteration", f.trend.slope_bytes_per_iteration},
                       {"r2", f.trend.r2},
                       {"p_value", f.trend.p_value}};
        fj["confidence"] = f.confidence;
        j["findings"].push_back(std::move(fj));
    }
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
        cj["holder"] = holderJson(c.holder);
        j["causes"].push_back(std::move(cj));
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
    // Replace invalid UTF-8 (a file name from a foreign file system) rather than throwing.
    return j.dump(indent, ' ', false, json::error_handler_t::replace);
}

Report reportFromJson(const std::string& text) {
    json j;
    try {
        j = json::parse(text);
    } catch (const json::parse_error& e) {
        throw SchemaError(std::string("report is not JSON: ") + e.what());
    }
    if (!j.is_object() || j.value("schema_version", "") != kReportSchema) {
        throw SchemaError("not a torchleak.report/1 document (schema_version missing or "
                          "different)");
    }
    try {
        Report r;
        r.torch_version = j.value("torch_version", "");
        r.python_version = j.value("python_version", "");
        r.iterations = j.at("iterations").get<int>();
        r.warmup = j.value("warmup", 0);
        r.boundary = boundaryFromString(j.at("boundary").get<std::string>());
        r.events_recorded = j.value("events_recorded", uint64_t{0});
        r.warnings = j.value("warnings", std::vector<std::string>{});
        for (const json& d : j.at("devices")) {
            DeviceTimeline t;
            t.device = d.at("device").get<std::string>();
            t.capacity_bytes = d.value("capacity_bytes", uint64_t{0});
            t.allocated = d.at("allocated").get<std::vector<int64_t>>();
            t.reserved = d.at("reserved").get<std::vector<int64_t>>();
            t.peak = d.value("peak", std::vector<int64_t>{});
            t.leak_bytes_per_iteration = d.value("leak_bytes_per_iteration", int64_t{0});
            if (d.contains("projected_oom_iteration") && !d["projected_oom_iteration"].is_null()) {
                t.projected_oom_iteration = d["projected_oom_iteration"].get<int64_t>();
            }
            t.verdict = d.value("verdict", "ok");
            t.fragmentation_ratio = d.value("fragmentation_ratio", 0.0);
            r.devices.push_back(std::move(t));
        }
        for (const json& fj : j.at("findings")) {
            Finding f;
            f.verdict = verdictFromString(fj.at("verdict").get<std::string>());
            f.site = frameFrom(fj.at("site"));
            for (const json& s : fj.at("stack")) {
                f.stack.push_back(frameFrom(s));
            }
            f.device = fj.at("device").get<std::string>();
            if (!fj.at("dtype").is_null()) {
                f.dtype = fj["dtype"].get<std::string>();
            }
            if (!fj.at("shape").is_null()) {
                f.shape = fj["shape"].get<std::vector<int64_t>>();
            }
            if (fj.contains("autograd_node") && !fj["autograd_node"].is_null()) {
                f.autograd_node = fj["autograd_node"].get<std::string>();
            }
            if (fj.contains("allocated_inside") && !fj["allocated_inside"].is_null()) {
                f.allocated_inside = frameFrom(fj["allocated_inside"]);
            }
            f.count = fj.at("count").get<uint64_t>();
            f.total_bytes = fj.at("total_bytes").get<uint64_t>();
            f.bytes_per_iteration = fj.at("bytes_per_iteration").get<int64_t>();
            f.series = fj.at("series").get<std::vector<int64_t>>();
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
                    info.shape = t.value("shape", std::vector<int64_t>{});
                    info.device = t.value("device", "");
                    info.nbytes = t.value("nbytes", uint64_t{0});
                    if (t.contains("site") && !t["site"].is_null()) {
                        info.site = frameFrom(t["site"]);
                    }
                    step.tensor = info;
                }
                f.path.push_back(std::move(step));
            }
            f.retention = retentionFromString(fj.value("retention", "unknown"));
            f.released_periodically = fj.value("released_periodically", false);
            f.path_text = fj.value("path_text", "");
            f.holder = holderFrom(fj);
            f.suggestion = fj.value("suggestion", "");
            f.severity = severityFromString(fj.at("severity").get<std::string>());
            const json& t = fj.at("trend");
            f.trend = {t.at("slope_bytes_per_iteration").get<double>(), t.at("r2").get<double>(),
                       t.at("p_value").get<double>()};
            f.confidence = fj.at("confidence").get<double>();
            r.findings.push_back(std::move(f));
        }
        for (const json& cj : j.value("causes", json::array())) {
            Cause c;
            c.verdict = verdictFromString(cj.at("verdict").get<std::string>());
            c.keeper = cj.value("keeper", "");
            c.bytes_per_iteration = cj.at("bytes_per_iteration").get<int64_t>();
            c.total_bytes = cj.value("total_bytes", uint64_t{0});
            c.findings = cj.at("findings").get<std::vector<int>>();
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
                c.projected_oom_iteration = cj["projected_oom_iteration"].get<int64_t>();
            }
            c.holder = holderFrom(cj);
            r.causes.push_back(std::move(c));
        }
        const json& s = j.at("summary");
        r.summary.score = s.at("score").get<int>();
        r.summary.grade = s.at("grade").get<std::string>();
        r.summary.critical_issues = s.at("critical_issues").get<std::vector<std::string>>();
        for (const json& rec : s.at("recommendations")) {
            r.summary.recommendations.push_back({rec.at("priority").get<std::string>(),
                                                 rec.at("text").get<std::string>(),
                                                 rec.value("findings", std::vector<int>{})});
        }
        return r;
    } catch (const json::exception& e) {
        throw SchemaError(std::string("malformed torchleak.report/1 document: ") + e.what());
    }
}

} // namespace torchleak
