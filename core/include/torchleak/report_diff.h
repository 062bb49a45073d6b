#pragma once
// Two runs compared: which leaks a change fixed, which it introduced, which grew. The CLI's
// `python -m torchleak diff before.json after.json` prints the text and exits on `regressed`;
// the JSON (`torchleak.diff/1`) is for CI dashboards and, like the report's, only grows.

#include "torchleak/model.h"

#include <optional>
#include <string>
#include <vector>

namespace torchleak {

inline constexpr const char* kDiffSchema = "torchleak.diff/1";

enum class LeakChangeKind { Fixed, New, Worse, Better, Same };
std::string_view toString(LeakChangeKind k) noexcept;

// One leak followed across the two runs.
struct LeakChange {
    LeakChangeKind kind = LeakChangeKind::Same;
    std::optional<int> before; // index into the first report's findings
    std::optional<int> after;  // index into the second's
    // How the two findings were recognised as one: "site" (same file, line, function, device),
    // "source" (same function and line text: the file was edited above it), "holder" (same
    // holder path on the same device); "" when only one side has it.
    std::string matched_by;
    std::string site;   // the site's text, from the newer side when both have it
    std::string holder; // its holder's path, or ""
    int64_t before_bytes_per_iteration = 0;
    int64_t after_bytes_per_iteration = 0;
    // What became of a fixed leak's site in the second run ("plateau", "transient", ...), ""
    // when the site is gone.
    std::string after_verdict;
};

struct ReportDiff {
    std::vector<LeakChange> changes; // new, worse, fixed, better, same; biggest first in each
    int before_iterations = 0;
    int after_iterations = 0;
    int64_t before_bytes_per_iteration = 0; // all leaks
    int64_t after_bytes_per_iteration = 0;
    double tolerance = 0.1;            // a rate within this fraction of the old one is the same
    bool regressed = false;            // a new leak, or one that grew past the tolerance
    std::vector<std::string> warnings; // e.g. the runs count iterations differently
};

// `tolerance` >= 0: the relative change of a leak's rate that still counts as the same.
// Throws InvalidArgument for a negative or non-finite tolerance.
ReportDiff diffReports(const Report& before, const Report& after, double tolerance = 0.1);

// The text every view prints: a headline, one line per change, the result.
std::string diffText(const ReportDiff& diff);
std::string diffJson(const ReportDiff& diff, int indent = -1);

} // namespace torchleak
