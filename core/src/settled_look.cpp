// The builder's phase that keeps watch's settled sites from one look to the next
// (settled_sites.h): which looks may keep them, under which settings, which kept sites changed
// since the last look, and what the next look may keep.

#include "report_assembly.h"

namespace torchleak::assembly {

// Only a look may keep settled sites, and only where every point of a series comes from the
// boundaries: the allocator's own view, external stacks and frees after the stop change points
// no boundary recorded, and in cell watch a site is judged per run of its cell.
bool ReportBuilder::lookKeepsSettledSites(bool lookOnly) const {
    return lookOnly && d_inputs.boundary != BoundaryKind::Cell &&
           d_inputs.allocator_view_devices.empty() && d_inputs.external_stacks.empty() &&
           d_inputs.freed_after_stop.empty() && !d_inputs.freed_after_stop_incomplete;
}

// What a settled verdict was reached under. The allow-list is not in it: a kept finding is left
// out of the look, where the list could only have called it allowed.
std::string ReportBuilder::settledContext() const {
    std::string context =
        std::to_string(d_inputs.warmup) + '\x1f' + std::to_string(d_recorder.sampler().threshold());
    for (const std::string& key : AnalysisConfig::keys()) {
        if (key != "allow") {
            context += '\x1f' + key + '=' + d_inputs.config.get(key);
        }
    }
    return context;
}

// The kept sites that changed since the last look: a group of theirs is at a later boundary
// (thinning moves a group's sample only to a later boundary, so a site it moves is counted
// changed, never the other way), or a new group is named as one of them. Only the groups at
// later boundaries are looked at: what a look costs is what changed.
void ReportBuilder::markChangedSettledSites() {
    for (auto snap = d_boundaries.rbegin();
         snap != d_boundaries.rend() && snap->iteration > d_settled->through; ++snap) {
        for (const GroupSample& g : snap->groups) {
            if (auto kept = d_settled->byGroup.find(g.key); kept != d_settled->byGroup.end()) {
                kept->second->changed = true;
            } else if (auto joined = d_settled->sites.find(*replayOf(g.key).site->key);
                       joined != d_settled->sites.end()) {
                joined->second.changed = true;
            }
        }
    }
}

bool ReportBuilder::settledUnchanged(const GroupKey& key) const {
    auto kept = d_settled->byGroup.find(key);
    return kept != d_settled->byGroup.end() && !kept->second->changed;
}

// What the next look may keep: the sites kept from the last one that did not change, and those
// settled now; how many findings this look left out for being kept.
void ReportBuilder::keepSettledSites(std::vector<SettledNow> now) {
    SettledSites& kept = *d_settled;
    for (auto site = kept.sites.begin(); site != kept.sites.end();) {
        if (site->second.changed) {
            for (const GroupKey& k : site->second.groups) {
                kept.byGroup.erase(k);
            }
            site = kept.sites.erase(site);
        } else {
            d_report.settled_left_out += site->second.verdict ? 1 : 0;
            ++site;
        }
    }
    for (SettledNow& settled : now) {
        auto [site, fresh] = kept.sites.try_emplace(*settled.site->key);
        if (!fresh) {
            continue; // not met: an unchanged kept site has no group replayed, so is not judged
        }
        site->second.groups = settled.site->groups;
        site->second.verdict = settled.verdict;
        for (const GroupKey& k : site->second.groups) {
            kept.byGroup[k] = &site->second;
        }
    }
    kept.through = d_n > 0 ? d_boundaries.back().iteration : 0;
}

} // namespace torchleak::assembly
