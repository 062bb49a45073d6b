#include "torchleak/config.h"

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
    throw InvalidArgument(std::string(key) + " needs a number, got '" + std::string(value) + "'");
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
    if (i == 0) {
        throw InvalidArgument("'" + std::string(raw) +
                              "' is not a size (examples: 4096, 1MiB, 100MB)");
    }
    double number = 0;
    try {
        number = std::stod(text.substr(0, i));
    } catch (...) {
        throw InvalidArgument("'" + std::string(raw) + "' is not a size");
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
            if (bytes < 0 || bytes > 1.8e19) {
                throw InvalidArgument("'" + std::string(raw) + "' is out of range");
            }
            return static_cast<uint64_t>(std::llround(bytes));
        }
    }
    throw InvalidArgument("unknown size unit '" + unit + "' in '" + std::string(raw) +
                          "' (use B, KB, MB, GB, KiB, MiB, GiB)");
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

const std::vector<std::string>& AnalysisConfig::keys() {
    static const std::vector<std::string> k = {"min_bytes",
                                               "min_leak_bytes_per_iteration",
                                               "warmup",
                                               "min_confidence",
                                               "critical_bytes",
                                               "warning_bytes",
                                               "fragmentation_ratio",
                                               "allow"};
    return k;
}

void AnalysisConfig::set(std::string_view key, std::string_view value) {
    if (key == "min_bytes") {
        min_bytes = parseSize(value);
    } else if (key == "min_leak_bytes_per_iteration") {
        min_leak_bytes_per_iteration = parseSize(value);
    } else if (key == "warmup") {
        double v = parseNumber(key, value);
        if (v < 0 || v != std::floor(v) || v > 1e9) {
            throw InvalidArgument("warmup must be a whole number >= 0, got '" + std::string(value) +
                                  "'");
        }
        warmup = static_cast<int>(v);
    } else if (key == "min_confidence") {
        double v = parseNumber(key, value);
        if (v < 0.0 || v > 1.0) {
            throw InvalidArgument("min_confidence must be between 0 and 1, got '" +
                                  std::string(value) + "'");
        }
        min_confidence = v;
    } else if (key == "critical_bytes") {
        critical_bytes = parseSize(value);
    } else if (key == "warning_bytes") {
        warning_bytes = parseSize(value);
    } else if (key == "fragmentation_ratio") {
        double v = parseNumber(key, value);
        if (v <= 0.0 || v >= 1.0) {
            throw InvalidArgument("fragmentation_ratio must be between 0 and 1 (exclusive), got '" +
                                  std::string(value) + "'");
        }
        fragmentation_ratio = v;
    } else if (key == "allow") {
        std::string pattern = trim(value);
        if (pattern.empty()) {
            allow.clear(); // `allow=` empties the allow-list
        } else {
            allow.push_back(pattern);
        }
    } else {
        throw InvalidArgument("unknown setting '" + std::string(key) + "'; known: " + joinKeys());
    }
    if (warning_bytes > critical_bytes) {
        throw InvalidArgument("warning_bytes must not exceed critical_bytes");
    }
}

std::string AnalysisConfig::get(std::string_view key) const {
    std::ostringstream out;
    if (key == "min_bytes") {
        out << min_bytes;
    } else if (key == "min_leak_bytes_per_iteration") {
        out << min_leak_bytes_per_iteration;
    } else if (key == "warmup") {
        out << warmup;
    } else if (key == "min_confidence") {
        out << min_confidence;
    } else if (key == "critical_bytes") {
        out << critical_bytes;
    } else if (key == "warning_bytes") {
        out << warning_bytes;
    } else if (key == "fragmentation_ratio") {
        out << fragmentation_ratio;
    } else if (key == "allow") {
        for (size_t i = 0; i < allow.size(); ++i) {
            out << (i ? "," : "") << allow[i];
        }
    } else {
        throw InvalidArgument("unknown setting '" + std::string(key) + "'; known: " + joinKeys());
    }
    return out.str();
}

} // namespace torchleak
