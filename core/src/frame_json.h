#pragma once
// A stack frame in the report's JSON (report_json.cpp), shared with the sections written
// beside it (roles_json.cpp's spikes).

#include "torchleak/model.h"

#include <nlohmann/json.hpp>

namespace torchleak {

// {"file", "line", "function", "text", "user", ...}; `withCell` writes "cell": null for a frame
// outside a notebook (a site always has the member).
nlohmann::json frameJson(const Frame& frame, bool withCell);
Frame frameFrom(const nlohmann::json& j);

} // namespace torchleak
