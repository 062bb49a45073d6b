#pragma once
// Causes that are one pattern, grouped for the views and the recommendations (model.h's
// CauseGroup): apart from causes.h, which makes the causes, because scoring (which causes.h
// needs for severities) writes its recommendations by group.

#include "torchleak/model.h"

#include <string>
#include <vector>

namespace torchleak {

// The report's causes as groups, biggest group first; every cause is in exactly one.
std::vector<CauseGroup> groupRelatedCauses(const Report& report);

// The code that frees the whole group, one line per cause (`holders[8].clear()` frees one list
// of nine): each cause's proven fix_code, in the group's order. "" when a cause has none, since
// a fix that frees part of a group reads as if it freed all of it; "" for a cause alone, whose
// finding carries its own.
std::string causeGroupFixCode(const CauseGroup& group, const Report& report);

// The container a cause's keeper is an element or attribute of ("obj" for `obj.l7`), or "".
std::string keeperContainer(const Cause& cause, const Report& report);

} // namespace torchleak
