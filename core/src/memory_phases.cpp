// The builder's phases over memory rather than sites (report_assembly.h): each finding's role
// and live block list, each device's spikes, memory that grew outside tensors, and the
// out-of-memory forensics.

#include "report_assembly.h"
#include "torchleak/display_text.h"
#include "torchleak/peak_spikes.h"
#include "torchleak/resident_memory.h"
#include "torchleak/site_rule.h"

#include <algorithm>

namespace torchleak::assembly {

// The findings leave their drafts for the report; the blocks stay for the OOM forensics.
void ReportBuilder::publishFindings() {
    d_report.findings.reserve(d_drafts.size());
    for (FindingDraft& draft : d_drafts) {
        // The role most of its live bytes have: where a chart by role shows this finding.
        RoleBytes bytes{};
        for (const FindingBlock& b : draft.blocks) {
            bytesOf(bytes, b.role) += static_cast<int64_t>(b.weight);
        }
        const auto most = std::max_element(bytes.begin(), bytes.end());
        if (*most > 0) {
            draft.finding.role = static_cast<MemoryRole>(most - bytes.begin());
        }
        d_report.findings.push_back(std::move(draft.finding));
    }
}

// Each device's spikes (peak_spikes.h), each with the site of the biggest block born in its
// iteration and alive at its peak.
void ReportBuilder::findPeakSpikes() {
    for (DeviceTimeline& t : d_report.devices) {
        for (const SpikePoint& s : torchleak::findPeakSpikes(t.peak, t.roles_at_peak)) {
            PeakSpike spike;
            spike.iteration = d_at[s.point];
            spike.peak_bytes = t.peak[s.point];
            spike.typical_peak_bytes = s.typical;
            if (s.roleRise > 0) {
                spike.role = s.role;
                spike.role_rise_bytes = s.roleRise;
            }
            for (const DeviceSample& d : d_boundaries[s.point].devices) {
                const BlockBrief& biggest = d.biggestAtPeak;
                if (biggest.size > 0 &&
                    deviceName(d.device, d_inputs.privateuse1_backend) == t.device) {
                    const std::string node =
                        biggest.node ? d_recorder.nodeName(biggest.node) : std::string();
                    spike.block_bytes = biggest.size;
                    spike.site = siteOfGroup(framesOf(biggest.stack), node);
                }
            }
            t.spikes.push_back(std::move(spike));
        }
    }
}

// Each finding's live blocks in allocation order, for the memory viewer's export. Past
// kLiveBlocksListed an even spread is listed (the growth's shape survives) and the rest
// counted.
void ReportBuilder::listLiveBlocks() {
    for (FindingDraft& draft : d_drafts) {
        // Sorted in place: a finding of 10^6 blocks must not cost a second copy of them
        // (the OOM forensics, after this, only sum them).
        std::vector<FindingBlock>& blocks = draft.blocks;
        std::sort(blocks.begin(), blocks.end(), [](const FindingBlock& a, const FindingBlock& b) {
            return a.sequence < b.sequence;
        });
        Finding& f = draft.finding;
        const size_t n = blocks.size();
        const size_t listed = std::min(n, kLiveBlocksListed);
        f.live_blocks.reserve(listed);
        size_t next = 0; // the next index of `blocks` to list
        for (size_t k = 0; k < n; ++k) {
            const FindingBlock& b = blocks[k];
            if (f.live_blocks.size() < listed && k == next) {
                f.live_blocks.push_back(
                    {static_cast<uint64_t>(b.block), b.size, b.birth, b.sequence});
                next = (f.live_blocks.size() * n) / listed;
            } else {
                f.live_blocks_unlisted += 1;
                f.live_bytes_unlisted += b.size;
            }
        }
    }
}

// What each finding has alive now, the blocks of an iteration no boundary ended included
// (an out-of-memory error stops the run in the middle of one).
std::vector<LiveNow> ReportBuilder::liveNowByFinding() const {
    std::vector<LiveNow> live(d_drafts.size());
    for (size_t i = 0; i < d_drafts.size(); ++i) {
        for (const FindingBlock& b : d_drafts[i].blocks) {
            live[i].bytes += b.size;
            live[i].count += 1;
        }
    }
    return live;
}

// The report stands without its forensics: a failure here becomes a warning.
void ReportBuilder::addOutOfMemoryForensics() {
    try {
        OutOfMemoryContext context;
        context.event = d_recorder.currentOutOfMemory();
        context.current_iteration = d_recorder.iteration();
        const DeviceKey failed =
            failingDevice(context.event, *d_inputs.out_of_memory, d_inputs.privateuse1_backend);
        context.tracked_bytes = d_recorder.trackedBytes(failed);
        context.origins = context.event ? context.event->live : d_recorder.liveOrigins(failed);
        d_report.oom =
            buildOutOfMemoryReport(d_report, liveNowByFinding(), *d_inputs.out_of_memory, context,
                                   d_inputs.devices, d_inputs.privateuse1_backend);
    } catch (const std::exception& e) {
        d_report.warnings.push_back(std::string("the out-of-memory forensics could not be "
                                                "built (") +
                                    e.what() + "); the report covers the iterations seen");
    }
}

// Resident memory that grew while the tracked CPU memory did not: a warning, so that every
// view says so beside (or instead of) the leaks.
void ReportBuilder::warnAboutUntrackedGrowth() {
    const DeviceTimeline* cpu = nullptr;
    for (const DeviceTimeline& d : d_report.devices) {
        if (d.device == "cpu") {
            cpu = &d;
        }
    }
    if (const auto growth = findUntrackedGrowth(d_inputs.resident, cpu, d_report.series_iterations,
                                                d_inputs.warmup)) {
        d_report.warnings.push_back(untrackedGrowthText(*growth, d_inputs.boundary));
    }
}

} // namespace torchleak::assembly
