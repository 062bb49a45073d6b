#pragma once
// The report as JSON, schema `torchleak.report/1` (design.md). The JSON is an API: fields are
// added, never renamed, and tests parse what we write back with nlohmann and with Python's json.

#include "torchleak/model.h"

#include <string>

namespace torchleak {

inline constexpr const char* kReportSchema = "torchleak.report/1";

std::string toJson(const Report& report, int indent = -1);
// Parses a torchleak.report/1 document; throws SchemaError on anything else.
Report reportFromJson(const std::string& text);

} // namespace torchleak
