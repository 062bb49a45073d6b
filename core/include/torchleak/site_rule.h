#pragma once
// Which line a block is blamed on: the site rule. A site is the innermost frame of the user's
// own code on the allocation's stack; the fall-backs say where else to look when there is none
// (a gradient formula inside backward, a third-party package, torch itself).

#include "torchleak/model.h"

#include <optional>
#include <string>
#include <vector>

namespace torchleak {

// The innermost frame of the user's code, or nullptr.
const Frame* innermostUserFrame(const std::vector<Frame>& frames);

// The site of a block that autograd's engine allocated for `node` with no Python frame.
Frame backwardFrame(const std::string& node);

// The innermost frame of an installed package below the site (the innermost user frame):
// where in a third-party library the user's line allocated.
std::optional<Frame> packageFrameBelowSite(const std::vector<Frame>& stack);

// The site of a group of blocks recorded with one stack (innermost first) and, inside
// backward, the autograd node that ran.
Frame siteOfGroup(const std::vector<Frame>& frames, const std::string& node);

} // namespace torchleak
