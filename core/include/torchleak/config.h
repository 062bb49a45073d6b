#pragma once
// AnalysisConfig: the thresholds and the allow-list behind every verdict. Values are set by
// name from text (`torchleak.config.set(...)`, `%leakconfig KEY=VALUE`) and validated here, so
// every interface reports the same clear error for an unknown key or a bad value.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace torchleak {

// What a setting's value is: how its text is parsed and what Python type it reads back as.
enum class SettingType {
    Size,     // bytes, with units ("1MiB", "100MB", "4096"); Python int
    Count,    // a whole number >= 0; Python int
    Fraction, // a number between 0 and 1; Python float
    Patterns, // glob patterns: each set() adds one, an empty value clears them; Python list
};
std::string_view toString(SettingType type) noexcept; // model.cpp, with the other enums' names

struct SettingSpec {
    std::string_view name;
    SettingType type;
    std::string_view description;
};

struct AnalysisConfig {
    uint64_t min_bytes = 0;                    // sites that never hold this much are left out
    uint64_t min_leak_bytes_per_iteration = 1; // slower growth is not called a leak
    int warmup = 0;                            // default warm-up iterations when a run gives none
    double min_confidence = 0.5;               // a noisy trend needs at least this confidence
    // The chance that a site that does not grow is ever called a leak in one run, however
    // often it is judged (verdict.h: falseAlarmBudget).
    double false_alarm_rate = 1e-3;
    uint64_t critical_bytes = 1ull << 30; // projected over the run
    uint64_t warning_bytes = 100ull * 1000 * 1000;
    double fragmentation_ratio = 0.3; // (reserved - allocated) / reserved
    std::vector<std::string> allow;   // glob patterns: site "file:line", function,
                                      // path_text or holder (an intentional cache)

    // Sets one key from text; throws InvalidArgument naming the key, the value and what is
    // accepted. Sizes take units ("1MiB", "100MB", "4096").
    void set(std::string_view key, std::string_view value);
    std::string get(std::string_view key) const;
    // The one table of settings (config.cpp): every interface (torchleak.config, %leakconfig)
    // asks it for the names and types instead of spelling them again.
    static const std::vector<SettingSpec>& settings();
    static const std::vector<std::string>& keys();
};

// "1MiB" -> 1048576, "100MB" -> 100000000, "512" -> 512. Throws InvalidArgument.
uint64_t parseSize(std::string_view text);
// Shell-style glob: `*` any run, `?` one character.
bool globMatch(std::string_view pattern, std::string_view text);

} // namespace torchleak
