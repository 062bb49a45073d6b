#pragma once
// The report as JSON, schema `torchleak.report/1`. The JSON is an API that code outside this
// repository reads: fields are added, never renamed, and tests parse what we write back with
// nlohmann and with Python's json. Display strings the core knows (display_text.h) are written
// beside the data (`site.text`, `projection_text`, `summary.headline`,
// `summary.empty_text`) and recomputed, never
// read back, when a report is loaded.

#include "torchleak/model.h"

#include <string>
#include <string_view>

namespace torchleak {

// The one spelling of the schema version; Python reads it as torchleak._core.SCHEMA_VERSION.
inline constexpr const char* kReportSchema = "torchleak.report/1";

std::string toJson(const Report& report, int indent = -1);
// A look's verdicts (ReportInputs::verdicts_only), schema `torchleak.verdicts/1`: torchleak's
// own watch() reads it, nothing outside; per finding its site, device, verdict, bytes and
// growth (with the core's sentence for it), and its path and holder when the look explained
// them, in the report's own spellings; `settled_left_out` counts the findings a look that keeps
// settled sites left out (settled_sites.h: never a leak, nor undecided).
inline constexpr const char* kVerdictsSchema = "torchleak.verdicts/1";
std::string verdictsJson(const Report& report);
// Parses a torchleak.report/1 document; throws SchemaError on anything else.
Report reportFromJson(std::string_view text);

} // namespace torchleak
