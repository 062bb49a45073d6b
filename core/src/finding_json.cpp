// A finding's member of the report, written as text while it is built. At 2,000 findings the
// JSON was 28% of the core's report time (39% of the live view's) in perf, most of it building
// nlohmann trees of the findings (a map node and a key string per member, about 110 a finding)
// only to dump each tree at once. The members are kept as (key, text) and written in key
// order, each value as nlohmann writes it, so the text is the same as the tree's dump
// (test_report_json parses it back and dumps it again).

#include "finding_json.h"

#include "frame_json.h"
#include "growth_json.h"
#include "torchleak/compiled_op.h"
#include "torchleak/display_text.h"

#include <algorithm>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace torchleak {

using nlohmann::json;

namespace {

// A string as nlohmann writes it: printable ASCII as it is, anything else (an escape, UTF-8,
// an invalid byte) by nlohmann itself.
void appendString(std::string& out, std::string_view s) {
    const bool plain = std::all_of(
        s.begin(), s.end(), [](char c) { return c >= 0x20 && c < 0x7f && c != '"' && c != '\\'; });
    if (!plain) {
        out += dumped(json(std::string(s)), -1);
        return;
    }
    out += '"';
    out += s;
    out += '"';
}

std::string jsonString(std::string_view s) {
    std::string out;
    appendString(out, s);
    return out;
}

template <typename T> std::string integersText(const std::vector<T>& values) {
    static_assert(std::is_integral_v<T>);
    std::string out = "[";
    for (size_t i = 0; i < values.size(); ++i) {
        out += i ? "," : "";
        out += std::to_string(values[i]);
    }
    return out + "]";
}

// An object's members as they are added; text() writes them in key order (nlohmann's objects
// are std::maps). A key is added once.
class ObjectText {
  public:
    ObjectText& raw(std::string_view key, std::string text) {
        d_members.emplace_back(key, std::move(text));
        return *this;
    }
    ObjectText& string(std::string_view key, std::string_view value) {
        return raw(key, jsonString(value));
    }
    template <typename T> ObjectText& integer(std::string_view key, T value) {
        static_assert(std::is_integral_v<T>);
        return raw(key, std::to_string(value));
    }
    ObjectText& real(std::string_view key, double value) {
        return raw(key, dumped(json(value), -1));
    }
    ObjectText& boolean(std::string_view key, bool value) {
        return raw(key, value ? "true" : "false");
    }
    ObjectText& tree(std::string_view key, const json& value) {
        return raw(key, dumped(value, -1));
    }
    std::string text() {
        std::sort(d_members.begin(), d_members.end(),
                  [](const auto& a, const auto& b) { return a.first < b.first; });
        std::string out = "{";
        for (size_t i = 0; i < d_members.size(); ++i) {
            out += i ? "," : "";
            appendString(out, d_members[i].first);
            out += ':';
            out += d_members[i].second;
        }
        return out + "}";
    }

  private:
    std::vector<std::pair<std::string_view, std::string>> d_members;
};

std::string stepText(const PathStep& p) {
    ObjectText step;
    step.string("kind", toString(p.kind)).string("label", p.label).string("type", p.type);
    if (!p.note.empty()) {
        step.string("note", p.note);
    }
    if (p.tensor) {
        ObjectText tensor;
        tensor.string("dtype", p.tensor->dtype)
            .raw("shape", integersText(p.tensor->shape))
            .string("device", p.tensor->device)
            .integer("nbytes", p.tensor->nbytes)
            .raw("site", p.tensor->site ? dumped(frameJson(*p.tensor->site, true), -1) : "null")
            .string("text", pathTensorText(*p.tensor));
        step.raw("tensor", tensor.text());
    }
    return step.text();
}

// {"address", "iteration", "sequence", "size"}: the keys in order by hand, a report may list
// 10^5 blocks.
std::string liveBlocksText(const std::vector<LiveBlockEntry>& blocks) {
    std::string out = "[";
    for (size_t i = 0; i < blocks.size(); ++i) {
        const LiveBlockEntry& b = blocks[i];
        out += i ? ",{\"address\":" : "{\"address\":";
        out += std::to_string(b.address);
        out += ",\"iteration\":";
        out += std::to_string(b.iteration);
        out += ",\"sequence\":";
        out += std::to_string(b.sequence);
        out += ",\"size\":";
        out += std::to_string(b.size);
        out += '}';
    }
    return out + "]";
}

} // namespace

std::string dumped(const json& value, int indent) {
    // Replace invalid UTF-8 (a file name from a foreign file system) rather than throwing.
    return value.dump(indent, ' ', false, json::error_handler_t::replace);
}

json holderJson(const std::optional<Holder>& h, BoundaryKind boundary) {
    if (!h) {
        return nullptr;
    }
    json out = {{"path_text", h->path_text},
                {"path_short", shortPath(h->path_text)},
                {"type", h->type},
                {"growth_per_iteration", h->growth_per_iteration},
                {"growth_text", holderGrowthText(*h, boundary)}};
    if (h->entries_per_iteration > 0) {
        out["entries_per_iteration"] = h->entries_per_iteration;
    }
    if (h->hooks) {
        out["hooks"] = {{"added", h->hooks->added}, {"newest", h->hooks->newest}};
    }
    if (h->library) {
        out["library"] = {{"object", h->library->object},
                          {"type", h->library->type},
                          {"package", h->library->package},
                          {"methods", h->library->methods}};
    }
    return out;
}

std::string findingText(const Finding& f, const Report& r) {
    ObjectText fj;
    fj.string("verdict", toString(f.verdict));
    fj.tree("site", frameJson(f.site, true));
    std::string stack = "[";
    for (size_t i = 0; i < f.stack.size(); ++i) {
        stack += i ? "," : "";
        stack += dumped(frameJson(f.stack[i], false), -1);
    }
    fj.raw("stack", stack + "]");
    fj.string("device", f.device);
    fj.raw("dtype", f.dtype ? jsonString(*f.dtype) : "null");
    fj.raw("shape", f.shape ? integersText(*f.shape) : "null");
    if (f.shape) {
        fj.string("tensor_text", tensorText(f.dtype.value_or(""), *f.shape));
    }
    fj.string("block_label", blockLabel(f));
    fj.raw("autograd_node", f.autograd_node ? jsonString(*f.autograd_node) : "null");
    if (f.allocated_inside) {
        fj.tree("allocated_inside", frameJson(*f.allocated_inside, false));
    }
    if (f.compiled_op) {
        fj.tree("compiled_op", {{"source_nodes", f.compiled_op->source_nodes},
                                {"aten_ops", f.compiled_op->aten_ops},
                                {"text", compiledOpText(*f.compiled_op)}});
    }
    if (f.holder_read) {
        json read = {{"line", f.holder_read->line}, {"source", f.holder_read->source}};
        if (!f.holder_read->file.empty()) {
            read["file"] = f.holder_read->file;
        }
        fj.tree("holder_read", read);
    }
    fj.integer("count", f.count)
        .integer("total_bytes", f.total_bytes)
        .integer("bytes_per_iteration", f.bytes_per_iteration);
    fj.string("rate_text", rateText(f));
    fj.raw("series", integersText(f.series));
    std::string path = "[";
    for (size_t i = 0; i < f.path.size(); ++i) {
        path += i ? "," : "";
        path += stepText(f.path[i]);
    }
    fj.raw("path", path + "]");
    fj.string("retention", toString(f.retention));
    fj.boolean("released_periodically", f.released_periodically);
    if (f.growth_since) {
        fj.tree("growth_since", growthSinceJson(f, r.boundary));
    }
    if (!f.live_blocks.empty() || f.live_blocks_unlisted > 0) {
        fj.raw("live_blocks", liveBlocksText(f.live_blocks));
        if (f.live_blocks_unlisted > 0) {
            fj.tree("live_blocks_unlisted",
                    {{"count", f.live_blocks_unlisted}, {"bytes", f.live_bytes_unlisted}});
        }
    }
    fj.string("path_text", f.path_text);
    fj.string("path_short", shortPath(f.path_text));
    fj.tree("holder", holderJson(f.holder, r.boundary));
    fj.string("suggestion", f.suggestion);
    if (!f.fix_code.empty()) {
        fj.string("fix_code", f.fix_code);
    }
    // Beside `fix`, not in it: a finding's `fix` object says its fix was checked on the heap.
    if (!f.fix_rule.empty()) {
        fj.string("fix_rule", f.fix_rule);
    }
    if (f.fix) {
        json fix = {{"frees_bytes", f.fix->frees_bytes}, {"also_held_by", f.fix->also_held_by}};
        if (!f.fix->owner.empty()) {
            fix["owner"] = f.fix->owner;
            fix["owner_frees_bytes"] = f.fix->owner_frees_bytes;
            fix["owner_methods"] = f.fix->owner_methods;
        }
        if (f.fix->together_frees_bytes) {
            fix["together_frees_bytes"] = *f.fix->together_frees_bytes;
        }
        fj.tree("fix", fix);
    }
    if (f.role) {
        fj.string("role", toString(*f.role));
    }
    fj.string("severity", toString(f.severity));
    ObjectText trend;
    trend.real("slope_bytes_per_iteration", f.trend.slope_bytes_per_iteration)
        .real("r2", f.trend.r2)
        .real("p_value", f.trend.p_value);
    fj.raw("trend", trend.text());
    fj.real("confidence", f.confidence);
    if (!f.ranks.empty()) {
        fj.raw("ranks", integersText(f.ranks));
        fj.string("ranks_text", rankScopeText(f, r));
    }
    return fj.text();
}

std::string verdictText(const Finding& f, BoundaryKind boundary) {
    ObjectText fj;
    fj.string("verdict", toString(f.verdict));
    fj.tree("site", frameJson(f.site, true));
    fj.string("device", f.device);
    fj.integer("total_bytes", f.total_bytes).integer("bytes_per_iteration", f.bytes_per_iteration);
    if (f.growth_since) {
        const GrowthSince& g = *f.growth_since;
        ObjectText since;
        since.integer("iteration", g.iteration)
            .raw("stopped_at", g.stopped_at ? std::to_string(*g.stopped_at) : "null")
            .raw("settles_at", g.settles_at ? std::to_string(*g.settles_at) : "null")
            .string("text", growthText(f, boundary));
        fj.raw("growth_since", since.text());
    }
    // Only a look asked with paths has them: what watch's log lines name as the holder.
    if (!f.path_text.empty()) {
        fj.string("path_text", f.path_text);
    }
    if (f.holder) {
        ObjectText holder;
        holder.string("path_text", f.holder->path_text);
        fj.raw("holder", holder.text());
    }
    return fj.text();
}

} // namespace torchleak
