#pragma once
// SettledSites: what one look of watch() leaves for the next, so that a look costs the sites
// that changed since the last one, not the thousands that stopped changing long ago
// (parameters, optimizer state, a cache that filled).
//
// A site is kept here when its verdict was settled (verdict.h: Classification::settled, a
// judged part that never changed, decided by a rule that reads nothing a later boundary can
// move), with the groups it was made of and its verdict (not its whole finding: a look that
// leaves it out writes none of it). At the next look, a kept site none of whose groups is
// at a boundary after `through`, and that no new group joined, has the same finding: the
// builder neither names its groups, nor replays them, nor judges the site again, and the look
// leaves it out of its findings (counted in Report::settled_left_out). A settled verdict is
// never a leak nor undecided, which is all a watch acts on. Anything the builder would add to
// a series from outside the boundaries (an allocator's own view, external stacks, frees after
// the stop, cell runs) turns the keeping off for that look, and other settings empty it. The
// caller empties it when what names a group's site changes (the frame filter).
//
// Owned by the caller that takes the looks (the tracking session); one builder at a time reads
// and refills it.

#include "torchleak/model.h"
#include "torchleak/recorder.h"

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace torchleak {

struct SettledSite {
    std::vector<GroupKey> groups;   // the groups it was made of
    std::optional<Verdict> verdict; // its finding's; none: the site never held min_bytes
    bool changed = false;           // during a look: a group of it is at a later boundary
};

struct SettledSites {
    // The settings the kept verdicts were reached under (warm-up, sampling, the analysis
    // settings but the allow-list, which a kept finding never meets in a look: it is left
    // out): a look under others starts afresh.
    std::string context;
    // The iteration of the last boundary the keeping look saw.
    uint32_t through = 0;
    std::unordered_map<std::string, SettledSite> sites; // by the builder's site key
    // Each kept site's groups, to it (an unordered_map's elements stay where they are).
    std::unordered_map<GroupKey, SettledSite*, GroupKeyHash> byGroup;

    void clear() {
        context.clear();
        through = 0;
        sites.clear();
        byGroup.clear();
    }
};

} // namespace torchleak
