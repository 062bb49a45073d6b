#pragma once
// The fix for a leak, worded for the pattern its retaining path shows (a loss kept with its
// graph, a ctx attribute, a notebook's output cache, a cycle ...), or a general one.

#include "torchleak/model.h"

#include <string>

namespace torchleak {

// Empty for a finding that is not a leak.
std::string suggestFix(const Finding& finding);

} // namespace torchleak
