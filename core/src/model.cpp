#include "torchleak/model.h"

#include "torchleak/config.h"
#include "torchleak/errors.h"

#include <utility>

namespace torchleak {

namespace {

// Each enum's schema names, in one table per enum: toString and the parser read the same
// table, so a name cannot be spelled two ways.
template <typename Enum> struct Names;

template <> struct Names<Verdict> {
    static constexpr const char* what = "verdict";
    static constexpr std::pair<Verdict, std::string_view> table[] = {
        {Verdict::Leak, "leak"},
        {Verdict::Warmup, "warmup"},
        {Verdict::Plateau, "plateau"},
        {Verdict::Transient, "transient"},
        {Verdict::Fragmentation, "fragmentation"},
        {Verdict::Allowed, "allowed"},
        {Verdict::Growth, "growth"},
        {Verdict::Undecided, "undecided"}};
};

template <> struct Names<Severity> {
    static constexpr const char* what = "severity";
    static constexpr std::pair<Severity, std::string_view> table[] = {
        {Severity::Critical, "critical"}, {Severity::Warning, "warning"}, {Severity::Info, "info"}};
};

template <> struct Names<BoundaryKind> {
    static constexpr const char* what = "boundary";
    static constexpr std::pair<BoundaryKind, std::string_view> table[] = {
        {BoundaryKind::Explicit, "explicit"},
        {BoundaryKind::OptimizerStep, "optimizer_step"},
        {BoundaryKind::Repeat, "repeat"},
        {BoundaryKind::Cell, "cell"}};
};

template <> struct Names<StepKind> {
    static constexpr const char* what = "path step kind";
    static constexpr std::pair<StepKind, std::string_view> table[] = {
        {StepKind::Root, "root"},
        {StepKind::Frame, "frame"},
        {StepKind::Attr, "attr"},
        {StepKind::Index, "index"},
        {StepKind::Key, "key"},
        {StepKind::GradFn, "grad_fn"},
        {StepKind::NextFunctions, "next_functions"},
        {StepKind::Saved, "saved"},
        {StepKind::Ctx, "ctx"},
        {StepKind::Base, "base"},
        {StepKind::Grad, "grad"},
        {StepKind::Closure, "closure"},
        {StepKind::Ref, "ref"},
        {StepKind::Elided, "elided"}};
};

template <> struct Names<Retention> {
    static constexpr const char* what = "retention";
    static constexpr std::pair<Retention, std::string_view> table[] = {
        {Retention::Reachable, "reachable"},
        {Retention::Cycle, "cycle"},
        {Retention::Unnamed, "unnamed"},
        {Retention::CppOnly, "cpp_only"},
        {Retention::Unknown, "unknown"}};
};

template <> struct Names<SettingType> {
    static constexpr const char* what = "setting type";
    static constexpr std::pair<SettingType, std::string_view> table[] = {
        {SettingType::Size, "size"},
        {SettingType::Count, "count"},
        {SettingType::Fraction, "fraction"},
        {SettingType::Patterns, "patterns"}};
};

template <typename Enum> std::string_view nameOf(Enum value) noexcept {
    for (const auto& [v, name] : Names<Enum>::table) {
        if (v == value) {
            return name;
        }
    }
    return Names<Enum>::table[0].second; // unreachable: every enumerator is in its table
}

template <typename Enum> Enum parse(std::string_view name) {
    for (const auto& [v, n] : Names<Enum>::table) {
        if (n == name) {
            return v;
        }
    }
    throw SchemaError(std::string("unknown ") + Names<Enum>::what + " '" + std::string(name) + "'");
}

} // namespace

std::string_view toString(Verdict v) noexcept {
    return nameOf(v);
}
std::string_view toString(Severity s) noexcept {
    return nameOf(s);
}
std::string_view toString(BoundaryKind b) noexcept {
    return nameOf(b);
}
std::string_view toString(StepKind k) noexcept {
    return nameOf(k);
}
std::string_view toString(Retention r) noexcept {
    return nameOf(r);
}
std::string_view toString(SettingType t) noexcept {
    return nameOf(t);
}

bool isAutogradStep(StepKind k) noexcept {
    return k == StepKind::GradFn || k == StepKind::NextFunctions || k == StepKind::Saved ||
           k == StepKind::Ctx;
}

std::vector<std::string_view> verdictNames() {
    std::vector<std::string_view> out;
    for (const auto& entry : Names<Verdict>::table) {
        out.push_back(entry.second);
    }
    return out;
}

Verdict verdictFromString(std::string_view s) {
    return parse<Verdict>(s);
}
Severity severityFromString(std::string_view s) {
    return parse<Severity>(s);
}
BoundaryKind boundaryFromString(std::string_view s) {
    return parse<BoundaryKind>(s);
}
StepKind stepKindFromString(std::string_view s) {
    return parse<StepKind>(s);
}
Retention retentionFromString(std::string_view s) {
    return parse<Retention>(s);
}

} // namespace torchleak
