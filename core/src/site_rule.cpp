#include "torchleak/site_rule.h"

#include <algorithm>

namespace torchleak {

const Frame* innermostUserFrame(const std::vector<Frame>& frames) {
    auto user = std::find_if(frames.begin(), frames.end(), [](const Frame& f) { return f.user; });
    return user != frames.end() ? &*user : nullptr;
}

Frame backwardFrame(const std::string& node) {
    Frame f;
    f.file = "<backward>";
    f.function = node;
    f.user = false;
    return f;
}

std::optional<Frame> packageFrameBelowSite(const std::vector<Frame>& stack) {
    const Frame* package = nullptr;
    for (const Frame& f : stack) {
        if (f.user) {
            return package ? std::optional<Frame>(*package) : std::nullopt;
        }
        if (f.package && package == nullptr) {
            package = &f;
        }
    }
    return std::nullopt; // no user frame: the package frame is the site itself
}

// Inside backward the node says which gradient formula allocated (custom Functions, PyNode,
// keep their own frame); with no user frame, the innermost installed-package frame (a
// third-party library's line says more than torch's internals), then any library frame, then
// "<unknown>".
Frame siteOfGroup(const std::vector<Frame>& frames, const std::string& node) {
    if (const Frame* user = innermostUserFrame(frames)) {
        Frame site = *user;
        if (!node.empty() && node != "PyNode") {
            site.function = node;
        }
        return site;
    }
    if (!node.empty()) {
        return backwardFrame(node);
    }
    auto package =
        std::find_if(frames.begin(), frames.end(), [](const Frame& f) { return f.package; });
    if (package != frames.end()) {
        return *package;
    }
    if (!frames.empty()) {
        return frames.front();
    }
    Frame unknown;
    unknown.file = kNoStackFile;
    unknown.function = "<no Python stack>";
    unknown.user = false;
    return unknown;
}

} // namespace torchleak
