#include "torchleak/config.h"

#include <algorithm>

#include "torchleak/errors.h"

#include <cctype>
#include <cmath>
#include <sstream>

namespace torchleak {

namespace {

std::string trim(std::string_view s) {
    size_t a = 0, b = s.size();
    while (a < b && std::isspace(static_cast<unsigned char>(s[a]))) {
        ++a;
    }
    while (b > a && std::isspace(static_cast<unsigned char>(s[b - 1]))) {
        --b;
    }
    return std::string(s.substr(a, b - a));
}

// A value as an error message shows it: quoted when short, else its length (a 5,000-digit
// warmup was echoed whole, reproducer T13).
std::string quoted(std::string_view value) {
    constexpr size_t kShown = 80;
    if (value.size() <= kShown) {
        return "'" + std::string(value) + "'";
    }
    return "a value of " + std::to_string(value.size()) + " characters";
}

double parseNumber(std::string_view key, std::string_view value) {
    std::string text = trim(value);
    try {
        size_t used = 0;
        double v = std::stod(text, &used);
        if (used == text.size() && std::isfinite(v)) {
            return v;
        }
    } catch (...) {
    }
    throw InvalidArgument(std::string(key) + " needs a number, got " + quoted(value));
}

std::string joinKeys() {
    std::string out;
    for (const auto& k : AnalysisConfig::keys()) {
        out += (out.empty() ? "" : ", ") + k;
    }
    return out;
}

} // namespace

uint64_t parseSize(std::string_view raw) {
    std::string text = trim(raw);
    size_t i = 0;
    while (i < text.size() &&
           (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) {
        ++i;
    }
    if (i == 0 ||
        std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(i), '.') > 1) {
        throw InvalidArgument(quoted(raw) + " is not a size (examples: 4096, 1MiB, 100MB)");
    }
    double number = 0;
    try {
        number = std::stod(text.substr(0, i));
    } catch (...) {
        throw InvalidArgument(quoted(raw) + " is not a size");
    }
    std::string unit = trim(std::string_view(text).substr(i));
    for (char& c : unit) {
        c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    }
    static const std::pair<const char*, double> kUnits[] = {{"", 1},
                                                            {"b", 1},
                                                            {"kb", 1e3},
                                                            {"mb", 1e6},
                                                            {"gb", 1e9},
                                                            {"tb", 1e12},
                                                            {"kib", 1024.0},
                                                            {"mib", 1048576.0},
                                                            {"gib", 1073741824.0},
                                                            {"tib", 1099511627776.0},
                                                            {"k", 1024.0},
                                                            {"m", 1048576.0},
                                                            {"g", 1073741824.0}};
    for (const auto& [name, factor] : kUnits) {
        if (unit == name) {
            double bytes = number * factor;
            // 2^63 is exact in a double; anything at or above it would round to a value
            // llround cannot return (it gave 2^63 for 10^19, a size nobody asked for).
            if (!(bytes >= 0 && bytes < 9223372036854775808.0)) {
                throw InvalidArgument(quoted(raw) + " is out of range (sizes go up to 8 EiB)");
            }
            return static_cast<uint64_t>(std::llround(bytes));
        }
    }
    throw InvalidArgument("unknown size unit " + quoted(unit) + " in " + quoted(raw) +
                          " (use B, KB, MB, GB, KiB, MiB, GiB)");
}

bool globMatch(std::string_view pattern, std::string_view text) {
    size_t p = 0, t = 0, star = std::string_view::npos, mark = 0;
    while (t < text.size()) {
        if (p < pattern.size() && (pattern[p] == '?' || pattern[p] == text[t])) {
            ++p;
            ++t;
        } else if (p < pattern.size() && pattern[p] == '*') {
            star = p++;
            mark = t;
        } else if (star != std::string_view::npos) {
            p = star + 1;
            t = ++mark;
        } else {
            return false;
        }
    }
    while (p < pattern.size() && pattern[p] == '*') {
        ++p;
    }
    return p == pattern.size();
}

namespace {

// The table behind set(), get(), settings() and keys(): a setting's name, its type, what it
// means, and where it lives. Fractions carry their bounds, which differ (a confidence may be
// 0 or 1; a fragmentation ratio may not).
struct SettingEntry {
    SettingSpec spec;
    uint64_t AnalysisConfig::*size = nullptr;
    int AnalysisConfig::*count = nullptr;
    double AnalysisConfig::*fraction = nullptr;
    bool openInterval = false;
};

const SettingEntry kSettings[] = {
    {{"min_bytes", SettingType::Size, "sites that never hold this much are left out"},
     &AnalysisConfig::min_bytes},
    {{"min_leak_bytes_per_iteration", SettingType::Size, "slower growth is not called a leak"},
     &AnalysisConfig::min_leak_bytes_per_iteration},
    {{"warmup", SettingType::Count, "iterations recorded but not judged, when a run gives none"},
     nullptr,
     &AnalysisConfig::warmup},
    {{"min_confidence", SettingType::Fraction, "a noisy trend needs at least this confidence"},
     nullptr,
     nullptr,
     &AnalysisConfig::min_confidence},
    {{"false_alarm_rate", SettingType::Fraction,
      "the chance that memory that does not grow is ever called a leak in one run"},
     nullptr,
     nullptr,
     &AnalysisConfig::false_alarm_rate,
     true},
    {{"critical_bytes", SettingType::Size, "a leak projected to hold this much over the run"},
     &AnalysisConfig::critical_bytes},
    {{"warning_bytes", SettingType::Size, "a leak projected to hold this much is a warning"},
     &AnalysisConfig::warning_bytes},
    {{"fragmentation_ratio", SettingType::Fraction,
      "(reserved - allocated) / reserved above which a flat device is fragmented"},
     nullptr,
     nullptr,
     &AnalysisConfig::fragmentation_ratio,
     true},
    {{"allow", SettingType::Patterns,
      "globs for intentional caches: a site file:line, function, path or holder"}},
};

const SettingEntry& entryFor(std::string_view key) {
    for (const SettingEntry& e : kSettings) {
        if (e.spec.name == key) {
            return e;
        }
    }
    throw InvalidArgument("unknown setting " + quoted(key) + "; known: " + joinKeys());
}

} // namespace

const std::vector<SettingSpec>& AnalysisConfig::settings() {
    static const std::vector<SettingSpec> specs = [] {
        std::vector<SettingSpec> out;
        for (const SettingEntry& e : kSettings) {
            out.push_back(e.spec);
        }
        return out;
    }();
    return specs;
}

const std::vector<std::string>& AnalysisConfig::keys() {
    static const std::vector<std::string> names = [] {
        std::vector<std::string> out;
        for (const SettingEntry& e : kSettings) {
            out.emplace_back(e.spec.name);
        }
        return out;
    }();
    return names;
}

void AnalysisConfig::set(std::string_view key, std::string_view value) {
    const SettingEntry& e = entryFor(key);
    const std::string name(key);
    switch (e.spec.type) {
    case SettingType::Size:
        this->*e.size = parseSize(value);
        break;
    case SettingType::Count: {
        double v = parseNumber(key, value);
        if (v < 0 || v != std::floor(v) || v > 1e9) {
            throw InvalidArgument(name + " must be a whole number >= 0, got " + quoted(value));
        }
        this->*e.count = static_cast<int>(v);
        break;
    }
    case SettingType::Fraction: {
        double v = parseNumber(key, value);
        bool outside = e.openInterval ? (v <= 0.0 || v >= 1.0) : (v < 0.0 || v > 1.0);
        if (outside) {
            throw InvalidArgument(name + " must be between 0 and 1" +
                                  (e.openInterval ? " (exclusive)" : "") + ", got " +
                                  quoted(value));
        }
        this->*e.fraction = v;
        break;
    }
    case SettingType::Patterns: {
        std::string pattern = trim(value);
        if (pattern.empty()) {
            allow.clear(); // `allow=` empties the allow-list
        } else {
            allow.push_back(pattern);
        }
        break;
    }
    }
    if (warning_bytes > critical_bytes) {
        throw InvalidArgument("warning_bytes must not exceed critical_bytes");
    }
}

std::string AnalysisConfig::get(std::string_view key) const {
    const SettingEntry& e = entryFor(key);
    std::ostringstream out;
    switch (e.spec.type) {
    case SettingType::Size:
        out << this->*e.size;
        break;
    case SettingType::Count:
        out << this->*e.count;
        break;
    case SettingType::Fraction:
        out << this->*e.fraction;
        break;
    case SettingType::Patterns:
        for (size_t i = 0; i < allow.size(); ++i) {
            out << (i ? "," : "") << allow[i];
        }
        break;
    }
    return out.str();
}

} // namespace torchleak
