#include "torchleak/report_builder.h"

#include "report_assembly.h"
#include "torchleak/causes.h"
#include "torchleak/compiled_op.h"
#include "torchleak/display_text.h"
#include "torchleak/loop_reads.h"
#include "torchleak/report_subset.h"
#include "torchleak/scoring.h"
#include "torchleak/site_rule.h"
#include "torchleak/suggestion.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <sstream>

namespace torchleak {

namespace assembly {

namespace {

std::string siteKey(const Frame& f, const std::string& device, const std::string& node) {
    std::string key = f.group.empty() ? f.file : f.group;
    for (const std::string& part : {std::to_string(f.line), f.function, device, node}) {
        key += '\x1f';
        key += part;
    }
    return key;
}

bool grewLastIteration(const Finding& f) {
    const std::vector<int64_t>& s = f.series;
    return !s.empty() && s.back() > (s.size() > 1 ? s[s.size() - 2] : 0);
}

constexpr const char* kFreedAfterStopIncomplete =
    "more blocks were freed after tracking stopped than torchleak could note: a path that "
    "reads \"held only from C++\" may be one of them";

} // namespace

Report ReportBuilder::build(RetentionExplainer* explainer) {
    // A look that names no holder (watch's): its verdicts, nothing of what explains them.
    const bool lookOnly = d_inputs.verdicts_only && explainer == nullptr;
    if (d_settled != nullptr) {
        if (!lookKeepsSettledSites(lookOnly)) {
            d_settled->clear();
            d_settled = nullptr;
        } else if (std::string context = settledContext();
                   context != d_settled->context || d_n == 0 ||
                   d_boundaries.back().iteration < d_settled->through) {
            d_settled->clear();
            d_settled->context = std::move(context);
        }
    }
    startReport();
    readLiveBlocks();
    replayBoundaries();
    reconcileWithAllocator();
    setAsideFreedAfterStop();
    attributeExternalStacks();
    makeFindings(lookOnly);
    if (lookOnly) {
        for (FindingDraft& draft : d_drafts) {
            settleVerdict(draft);
        }
        sortFindings();
        publishFindings();
        return std::move(d_report);
    }
    gatherLiveBlocks();
    describeExamples();
    if (explainer != nullptr && !d_drafts.empty()) {
        explainFindings(*explainer);
    }
    finalizeFindings();
    if (explainer != nullptr && !d_inputs.explain_grown_only && !d_inputs.live_findings) {
        proveFixes(*explainer);
    }
    sortFindings();
    if (!d_inputs.explain_grown_only && !d_inputs.live_findings) {
        listLiveBlocks();
    }
    publishFindings();
    d_report.devices =
        buildDeviceTimelines(d_boundaries, d_inputs.devices, d_report.findings, d_inputs.warmup,
                             d_inputs.config, d_inputs.privateuse1_backend);
    findPeakSpikes();
    d_report.causes = groupCauses(d_report, d_inputs.config);
    warnAboutShadowedIterations();
    warnAboutRejectedTotals();
    warnAboutDroppedEvents();
    warnAboutUntrackedGrowth();
    d_report.summary = summarize(d_report);
    if (d_inputs.out_of_memory) {
        addOutOfMemoryForensics();
    }
    return std::move(d_report);
}

// The run's identity: versions, boundary kind, the caller's warnings.
void ReportBuilder::startReport() {
    d_report.torch_version = d_inputs.torch_version;
    d_report.python_version = d_inputs.python_version;
    d_report.warmup = d_inputs.warmup;
    d_report.boundary = d_inputs.boundary;
    d_report.warnings = d_inputs.warnings;
    d_report.events_recorded = d_recorder.eventCount();
    d_report.sample_bytes = d_recorder.sampler().threshold();
    d_report.iterations = d_n > 0 ? static_cast<int>(d_boundaries.back().iteration) + 1 : 0;
    for (const BoundarySnapshot& snap : d_boundaries) {
        d_at.push_back(snap.iteration);
    }
    if (static_cast<size_t>(d_report.iterations) != d_n) {
        d_report.series_iterations.assign(d_at.begin(), d_at.end());
    }
}

// Every live block, read once: for external stacks, examples and retaining paths. A copy,
// because the report itself allocates while the hook is on.
void ReportBuilder::readLiveBlocks() {
    d_liveNow.reserve(d_recorder.liveBlockCount());
    d_recorder.forEachLiveBlock([&](uintptr_t ptr, const BlockRecord& rec) {
        d_liveNow.push_back(LiveBlock{ptr, rec});
    });
}

// The kept boundaries in order, each holding the groups it changed: every site's series is
// its running sum, so the replay costs what the boundaries hold, not sites x boundaries x
// groups.
void ReportBuilder::replayBoundaries() {
    if (d_settled != nullptr) {
        markChangedSettledSites();
    }
    std::vector<SiteAccumulator*> touched;
    for (size_t b = 0; b < d_n; ++b) {
        const BoundarySnapshot& snap = d_boundaries[b];
        d_shadowedIterations += snap.shadowedIterations;
        touched.clear();
        for (const GroupSample& g : snap.groups) {
            if (d_settled != nullptr && settledUnchanged(g.key)) {
                continue; // its finding is the last look's: not named, replayed or judged
            }
            GroupReplay& r = replayOf(g.key);
            SiteAccumulator& acc = *r.site;
            if (acc.touchedAt != b) {
                acc.touchedAt = b;
                fillTo(acc, b);
                touched.push_back(&acc);
            }
            acc.current += static_cast<int64_t>(g.bytes) - static_cast<int64_t>(r.bytes);
            r.bytes = g.bytes;
            r.count = g.count;
            r.oldest = g.oldestIteration;
            acc.series.born[b] += static_cast<int64_t>(g.bornThisIteration);
            // Ties go to the lower stack token, so the shown stack does not depend on the
            // order groups were recorded in.
            if (g.bytes > acc.stackBytes || (g.bytes == acc.stackBytes &&
                                             (acc.stack.empty() || g.key.stack < acc.stackToken))) {
                acc.stackBytes = g.bytes;
                acc.stack = framesOf(g.key.stack);
                acc.stackToken = g.key.stack;
            }
        }
        for (SiteAccumulator* acc : touched) {
            uint32_t oldest = std::numeric_limits<uint32_t>::max();
            for (const GroupKey& k : acc->groups) {
                const GroupReplay& r = d_replay[k];
                if (r.bytes > 0) {
                    oldest = std::min(oldest, r.oldest);
                }
            }
            acc->currentOldest = oldest;
            acc->series.bytes[b] = acc->current;
            acc->series.oldest[b] = oldest;
            acc->filled = b + 1;
        }
    }
    for (auto& [key, acc] : d_sites) {
        fillTo(acc, d_n);
    }
    for (const auto& [key, r] : d_replay) {
        r.site->lastCount += r.count;
    }
}

void ReportBuilder::startSeries(SiteAccumulator& acc) const {
    if (acc.series.bytes.size() != d_n) {
        acc.series.bytes.assign(d_n, 0);
        acc.series.born.assign(d_n, 0);
        acc.series.oldest.assign(d_n, std::numeric_limits<uint32_t>::max());
    }
}

// Series points of boundaries that did not touch the site repeat its running state.
void ReportBuilder::fillTo(SiteAccumulator& acc, size_t b) const {
    startSeries(acc);
    for (; acc.filled < b; ++acc.filled) {
        acc.series.bytes[acc.filled] = acc.current;
        acc.series.oldest[acc.filled] = acc.currentOldest;
    }
}

GroupReplay& ReportBuilder::replayOf(const GroupKey& key) {
    GroupReplay& r = d_replay[key];
    if (r.site == nullptr) {
        const std::vector<Frame>& frames = framesOf(key.stack);
        std::string node = key.node ? d_recorder.nodeName(key.node) : std::string();
        Frame site = siteOfGroup(frames, node);
        SiteAccumulator& acc =
            siteFor(site, deviceName(key.device, d_inputs.privateuse1_backend), node);
        if (site.cell && acc.site.cell && *site.cell > *acc.site.cell) {
            acc.site = site; // the newest run of a re-run cell names the site
        }
        acc.groups.push_back(key);
        r.site = &acc;
    }
    return r;
}

// Blocks the allocator no longer holds though the hook never saw their free leave what is
// alive now, and their group's series from the boundary ending their birth iteration on:
// when they were freed is unknown, and a block counted at every later boundary would be a
// false leak. The report says how many.
void ReportBuilder::reconcileWithAllocator() {
    const auto& covered = d_inputs.allocator_view_devices;
    if (covered.empty()) {
        return;
    }
    std::map<std::string, std::pair<uint64_t, uint64_t>> unseen; // device -> blocks, bytes
    size_t kept = 0;
    for (const LiveBlock& block : d_liveNow) {
        const BlockRecord& rec = block.rec;
        if (std::find(covered.begin(), covered.end(), rec.device.type) == covered.end() ||
            d_inputs.allocator_live_blocks.count(block.ptr) != 0) {
            d_liveNow[kept++] = block;
            continue;
        }
        auto& [blocks, bytes] = unseen[deviceName(rec.device, d_inputs.privateuse1_backend)];
        blocks += 1;
        bytes += rec.weight;
        auto group = d_replay.find(GroupKey{rec.stack, rec.node, rec.device});
        if (group == d_replay.end() || d_n == 0) {
            continue; // born after the last boundary: in no series yet
        }
        SiteAccumulator& acc = *group->second.site;
        acc.lastCount -= std::min<uint64_t>(acc.lastCount, 1);
        const auto size = static_cast<int64_t>(rec.weight);
        size_t first = static_cast<size_t>(
            std::lower_bound(d_at.begin(), d_at.end(), rec.iteration) - d_at.begin());
        for (size_t b = first; b < d_n; ++b) {
            acc.series.bytes[b] = std::max<int64_t>(acc.series.bytes[b] - size, 0);
        }
        if (first < d_n && d_at[first] == rec.iteration) {
            acc.series.born[first] = std::max<int64_t>(acc.series.born[first] - size, 0);
        }
    }
    d_liveNow.resize(kept);
    for (const auto& [device, count] : unseen) {
        d_report.warnings.push_back(
            device + ": " + std::to_string(count.first) + " block(s) (" +
            formatBytes(static_cast<double>(count.second)) +
            ") were freed on a thread torchleak's hook does not reach (a user thread, "
            "NCCL's, an async checkpoint writer); the allocator's own state says they are "
            "gone, so they count from their birth as freed");
    }
}

// Blocks freed after tracking stopped leave the blocks alive now (no path, no example),
// and stay in what each iteration left behind: the verdict is about the run.
void ReportBuilder::setAsideFreedAfterStop() {
    const auto& freed = d_inputs.freed_after_stop;
    if (!freed.empty()) {
        // Compacted in place (no second copy of 10^6 live blocks), in order.
        size_t kept = 0;
        for (const LiveBlock& block : d_liveNow) {
            if (freed.count(block.ptr) == 0) {
                d_liveNow[kept++] = block;
            } else {
                d_freedAfterStop.push_back(block);
            }
        }
        d_liveNow.resize(kept);
    }
    if (!d_freedAfterStop.empty()) {
        uint64_t bytes = 0;
        for (const LiveBlock& block : d_freedAfterStop) {
            bytes += block.rec.weight;
        }
        d_report.warnings.push_back(
            std::to_string(d_freedAfterStop.size()) + " block(s) (" +
            formatBytes(static_cast<double>(bytes)) +
            ") alive when tracking stopped were freed before this report was built: the "
            "verdicts are the run's, but what held them let go, so their findings have no "
            "retaining path (build the report before releasing them to see it)");
    }
    if (d_inputs.freed_after_stop_incomplete) {
        d_report.warnings.push_back(kFreedAfterStopIncomplete);
    }
}

// Surviving blocks with an external stack (CUDA) become their own sites: a block alive
// now was alive at every boundary since the one ending its birth iteration. What they
// account for is taken out of the stackless group's site they were recorded in.
void ReportBuilder::attributeExternalStacks() {
    if (d_n == 0 || d_inputs.external_stacks.empty()) {
        return;
    }
    for (const auto& [ptr, rec] : d_liveNow) {
        auto external = d_inputs.external_stacks.find(ptr);
        if (rec.stack != 0 || external == d_inputs.external_stacks.end() ||
            external->second.empty() || rec.iteration > d_at.back()) {
            continue;
        }
        const std::vector<Frame>& frames = external->second;
        std::string node = rec.node ? d_recorder.nodeName(rec.node) : std::string();
        const Frame* user = innermostUserFrame(frames);
        Frame site = user != nullptr ? *user : frames.front();
        if (!node.empty() && site.user) {
            site.function = node;
        }
        SiteAccumulator& acc =
            siteFor(site, deviceName(rec.device, d_inputs.privateuse1_backend), node);
        fillTo(acc, d_n);
        if (acc.stack.empty()) {
            acc.stack = frames;
        }
        SiteAccumulator* stackless = nullptr;
        if (auto it = d_replay.find(GroupKey{0, rec.node, rec.device}); it != d_replay.end()) {
            stackless = it->second.site;
            stackless->lastCount -= std::min<uint64_t>(stackless->lastCount, 1);
        }
        const auto size = static_cast<int64_t>(rec.weight);
        size_t first = static_cast<size_t>(
            std::lower_bound(d_at.begin(), d_at.end(), rec.iteration) - d_at.begin());
        for (size_t b = first; b < d_n; ++b) {
            acc.series.bytes[b] += size;
            acc.series.oldest[b] = std::min(acc.series.oldest[b], rec.iteration);
            if (stackless != nullptr) {
                stackless->series.bytes[b] =
                    std::max<int64_t>(stackless->series.bytes[b] - size, 0);
            }
        }
        if (first < d_n && d_at[first] == rec.iteration) {
            acc.series.born[first] += size;
            if (stackless != nullptr) {
                stackless->series.born[first] =
                    std::max<int64_t>(stackless->series.born[first] - size, 0);
            }
        }
        acc.lastCount += 1;
        acc.externalBlocks.push_back(ptr);
    }
}

// One finding per site that ever held min_bytes: its series, trend, verdict, and the dtype
// and shape of its biggest live block.
void ReportBuilder::makeFindings(bool lookOnly) {
    const uint64_t sampleBytes = d_recorder.sampler().threshold();
    const uint64_t minBytes = d_inputs.config.min_bytes;
    fillSurvivors();
    d_drafts.reserve(d_sites.size());
    std::vector<SettledNow> settledNow;
    for (auto& [key, acc] : d_sites) {
        int64_t maxBytes = *std::max_element(acc.series.bytes.begin(), acc.series.bytes.end());
        if (maxBytes <= 0 || static_cast<uint64_t>(maxBytes) < minBytes) {
            // Thinning only drops points: a site under min_bytes stays under while unchanged.
            if (d_settled != nullptr) {
                settledNow.push_back({&acc, std::nullopt});
            }
            continue;
        }
        for (auto& o : acc.series.oldest) {
            if (o == std::numeric_limits<uint32_t>::max()) {
                o = 0;
            }
        }
        acc.series.at = d_at;
        acc.series.noise_variance_per_byte = acc.sampled.variancePerByte(sampleBytes);
        acc.series.surviving.resize(d_n, 0); // a site none of whose blocks is alive
        acc.series.surviving_since.resize(d_n, 0);
        Finding f;
        f.site = acc.site;
        Classification c = classifyPerRun(acc.series, acc.stack, f.site);
        f.verdict = c.verdict;
        f.device = acc.device;
        if (!acc.node.empty()) {
            f.autograd_node = acc.node;
        }
        f.allocated_inside = packageFrameBelowSite(acc.stack);
        f.count = acc.lastCount;
        f.total_bytes = static_cast<uint64_t>(std::max<int64_t>(acc.series.bytes.back(), 0));
        f.bytes_per_iteration = c.bytes_per_iteration;
        if (!lookOnly) { // a look reads neither: copies of every site's stack and series
            f.stack = acc.stack;
            f.series = acc.series.bytes;
        }
        f.trend = {c.fit.slope, c.fit.r2, c.fit.p_value};
        f.confidence = c.confidence;
        f.released_periodically = c.released_periodically;
        f.growth_since = c.growth_since;
        // Kept only while its last point alone holds min_bytes: the point that made the site a
        // finding may be thinned away later, the newest never is.
        const int64_t last = acc.series.bytes.back();
        if (d_settled != nullptr && c.settled && last > 0 &&
            static_cast<uint64_t>(last) >= minBytes) {
            settledNow.push_back({&acc, f.verdict});
        }
        d_drafts.push_back({std::move(f), &acc, {}});
    }
    if (d_settled != nullptr) {
        keepSettledSites(std::move(settledNow));
    }
}

// Each finding's live blocks, from one pass over the live table.
void ReportBuilder::gatherLiveBlocks() {
    std::unordered_map<GroupKey, size_t, GroupKeyHash> findingOf;
    std::unordered_map<uintptr_t, size_t> externalOf;
    for (size_t i = 0; i < d_drafts.size(); ++i) {
        // The ledger looks at what grew in the last iteration only: the blocks of a site
        // that did not grow are neither walked nor listed, so they are not gathered.
        if (d_inputs.explain_grown_only && !grewLastIteration(d_drafts[i].finding)) {
            continue;
        }
        for (const GroupKey& k : d_drafts[i].site->groups) {
            findingOf.emplace(k, i);
        }
        for (uintptr_t ptr : d_drafts[i].site->externalBlocks) {
            externalOf.emplace(ptr, i);
        }
    }
    if (findingOf.empty() && externalOf.empty()) {
        return;
    }
    const uint32_t lastEnded = d_n > 0 ? d_at.back() : 0;
    for (const auto& [ptr, rec] : d_liveNow) {
        std::optional<size_t> index;
        if (auto ext = externalOf.find(ptr); ext != externalOf.end()) {
            index = ext->second; // attributed to its own site by an external stack
        } else if (auto grp = findingOf.find(GroupKey{rec.stack, rec.node, rec.device});
                   grp != findingOf.end()) {
            index = grp->second;
        }
        if (index) {
            d_drafts[*index].blocks.push_back(
                FindingBlock{rec.iteration, rec.size, rec.sequence, ptr, rec.weight,
                             roleOfBlock(rec.heldAs, rec.phase, rec.iteration >= lastEnded)});
        }
    }
}

// Each finding's dtype and shape, from its biggest block alive at the last boundary: one
// question to the describer for all findings.
void ReportBuilder::describeExamples() {
    const uint32_t last = d_n > 0 ? d_at.back() : 0;
    std::vector<uintptr_t> examples;
    std::vector<size_t> findingOf;
    for (size_t i = 0; i < d_drafts.size(); ++i) {
        const FindingBlock* best = nullptr;
        for (const FindingBlock& b : d_drafts[i].blocks) {
            if (b.birth <= last && (best == nullptr || b.size > best->size)) {
                best = &b;
            }
        }
        if (best != nullptr) {
            examples.push_back(best->block);
            findingOf.push_back(i);
        }
    }
    if (examples.empty()) {
        return;
    }
    auto descriptions = d_describer.describe(examples);
    for (size_t k = 0; k < examples.size() && k < descriptions.size(); ++k) {
        if (descriptions[k]) {
            d_drafts[findingOf[k]].finding.dtype = descriptions[k]->dtype;
            d_drafts[findingOf[k]].finding.shape = descriptions[k]->shape;
        }
    }
}

// Each finding's verdict is final only now that its path is known: the machinery rule,
// then the allow-list; then the fix, in words and, with the site's line, as code. (A leak's
// severity is its cause's, set by groupCauses; every other finding is Info.)
void ReportBuilder::finalizeFindings() {
    const auto sourceOf = [this](const Frame& frame) -> const std::vector<std::string>& {
        auto [it, fresh] = d_sourceFiles.try_emplace(frame.file);
        if (fresh) {
            it->second = d_symbolizer.sourceLines(frame);
        }
        return it->second;
    };
    LineMentions mentions; // of d_sourceFiles' lines, which outlive it
    for (FindingDraft& draft : d_drafts) {
        settleVerdict(draft);
        Finding& f = draft.finding;
        if (f.verdict == Verdict::Leak && f.holder && keepsGraphs(f)) {
            f.appended = appendedValueAnywhere(f, sourceOf); // the fix quotes what is kept
        }
        const FixAdvice advice = adviseFix(f);
        f.suggestion = advice.text;
        f.fix_rule = advice.rule;
        if (f.verdict == Verdict::Leak && f.released_periodically) {
            f.suggestion += " (it is released only at a coarser boundary, such as an epoch "
                            "end, and grows within each)";
        }
        if (!f.site.source) {
            f.site.source = d_symbolizer.sourceLine(f.site);
        }
        f.compiled_op = compiledOpOf(f.stack, d_symbolizer);
        // The fix as a line of Python, where the rule is certain of it (it reads the site's
        // line: `losses.append(loss)` becomes `losses.append(loss.item())`).
        static const std::vector<std::string> kNoLines;
        f.fix_code =
            suggestFixCode(f, f.verdict == Verdict::Leak && f.holder ? sourceOf(f.site) : kNoLines);
        if (f.verdict == Verdict::Leak && f.holder && advice.clears_holder) {
            // An entry under a key the loop ends elsewhere is popped there (a serving loop's
            // per-request store): .clear() would drop the requests still running. Else,
            // clearing a holder the loop reads is no fix: it crashes the next iteration.
            if (auto ended = endedKeyAnywhere(f, sourceOf, mentions)) {
                f.suggestion = endedKeyFixText(f, *ended);
                f.fix_code = ended->name + ".pop(" + ended->key + ", None)";
                f.fix_rule = "pop-what-ended";
                f.holder_read = std::move(ended->ended);
            } else if (auto read = loopReadAnywhere(f, sourceOf, mentions)) {
                f.suggestion = loopReadFixText(f, *read);
                f.fix_rule = "bound-what-the-loop-reads";
                f.fix_code.clear();
                f.holder_read = std::move(read);
            }
        }
    }
}

// The machinery rule, then a holder that bounds what it keeps and is still filling (too soon to
// call), then a record of the run's own, then the allow-list.
void ReportBuilder::settleVerdict(FindingDraft& draft) const {
    Finding& f = draft.finding;
    if (f.verdict != Verdict::Leak && f.total_bytes > 0 && heldByMachinery(f)) {
        f.verdict = Verdict::Leak;
        f.confidence = 0.9;
    }
    if (f.verdict == Verdict::Leak && f.holder) {
        if (auto bound = fillingBoundedHolder(f)) {
            f.verdict = Verdict::Undecided;
            f.confidence = 0.5;
            GrowthSince& g = f.growth_since ? *f.growth_since : f.growth_since.emplace();
            g.bounded = bound;
            // Full after its free entries at the rate it fills, and flat as long again: a watch
            // looks at it again then, when a filled cache reads as one.
            const double perIteration =
                std::max({f.holder->entries_per_iteration, f.holder->growth_per_iteration, 1e-3});
            const double free = static_cast<double>(bound->capacity - bound->entries);
            g.settles_at = static_cast<int64_t>(d_report.iterations) +
                           static_cast<int64_t>(std::ceil(2.0 * free / perIteration));
        }
    }
    if (!draft.site->groups.empty() &&
        ownRecord(f, deviceCapacity(draft.site->groups.front().device, d_inputs.devices))) {
        f.verdict = Verdict::Growth;
    }
    if (allowListed(f, d_inputs.config.allow)) {
        f.verdict = Verdict::Allowed;
    }
}

// Leaks first, then by live bytes. Each finding's live blocks move with it.
// Ties (fifty stores each given the same tensor by one line) go by holder, then site: the
// order the split by holder produced them in changed from one live update to the next, and the
// row a user had opened moved down the list under the pointer.
void ReportBuilder::sortFindings() {
    // Each tie's key written once, and each draft moved once: a look at 10^4 sites of one size
    // broke every comparison on the tie, and formatted two site texts and moved two findings
    // per comparison.
    std::vector<std::pair<std::string, std::string>> tie;
    tie.reserve(d_drafts.size());
    for (const FindingDraft& draft : d_drafts) {
        const Finding& f = draft.finding;
        tie.emplace_back(f.holder ? f.holder->path_text : std::string(), siteText(f.site));
    }
    std::vector<size_t> order(d_drafts.size());
    std::iota(order.begin(), order.end(), size_t{0});
    std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) {
        const Finding &a = d_drafts[x].finding, &b = d_drafts[y].finding;
        return listedBefore(a, b) != listedBefore(b, a) ? listedBefore(a, b) : tie[x] < tie[y];
    });
    std::vector<FindingDraft> sorted;
    sorted.reserve(d_drafts.size());
    for (size_t i : order) {
        sorted.push_back(std::move(d_drafts[i]));
    }
    d_drafts = std::move(sorted);
}

void ReportBuilder::warnAboutDroppedEvents() {
    if (const uint64_t dropped = d_recorder.droppedEvents()) {
        d_report.warnings.push_back(
            std::to_string(dropped) +
            " allocation(s) could not be recorded (more devices than torchleak tracks, or "
            "memory exhausted while its tables grew): their blocks are missing from this "
            "report");
    }
}

// A device whose allocator sent totals that cannot be right is shown with tracked bytes.
void ReportBuilder::warnAboutRejectedTotals() {
    if (d_boundaries.empty()) {
        return;
    }
    for (const DeviceSample& d : d_boundaries.back().devices) {
        if (d.rejectedTotals > 0) {
            d_report.warnings.push_back(
                deviceName(d.device, d_inputs.privateuse1_backend) +
                ": its allocator "
                "reported totals that cannot be right (" +
                std::to_string(d.rejectedTotals) +
                " event(s): allocated below the block just allocated, reserved below "
                "allocated, or negative); its timeline shows the bytes torchleak tracked "
                "instead");
        }
    }
}

void ReportBuilder::warnAboutShadowedIterations() {
    if (d_shadowedIterations == 0) {
        return;
    }
    std::ostringstream w;
    w << "another profiler (torch.profiler) was on top of torchleak's hook during "
      << d_shadowedIterations
      << " iteration(s); allocations and frees on this thread were not seen meanwhile, so "
         "findings in those iterations may be incomplete";
    d_report.warnings.push_back(w.str());
}

const std::vector<Frame>& ReportBuilder::framesOf(StackToken token) {
    auto it = d_decoded.find(token);
    if (it == d_decoded.end()) {
        auto raw = d_recorder.stackFrames(token);
        it = d_decoded.emplace(token, token ? d_symbolizer.symbolize(raw) : std::vector<Frame>{})
                 .first;
    }
    return it->second;
}

// The accumulator of a site, created with empty series of n boundaries on first use.
// Its series are started when a boundary first touches it (fillTo).
SiteAccumulator&
ReportBuilder::siteFor(const Frame& site, const std::string& device, const std::string& node) {
    auto [it, fresh] = d_sites.try_emplace(siteKey(site, device, node));
    SiteAccumulator& acc = it->second;
    if (fresh) {
        acc.key = &it->first;
        acc.site = site;
        acc.device = device;
        acc.node = node;
    }
    return acc;
}

} // namespace assembly

Report buildReport(const AllocationRecorder& recorder,
                   const ReportInputs& inputs,
                   StackSymbolizer& symbolizer,
                   BlockDescriber& describer,
                   RetentionExplainer* explainer,
                   SettledSites* settled) {
    Report report =
        assembly::ReportBuilder(recorder, inputs, symbolizer, describer, settled).build(explainer);
    if (inputs.live_findings && report.findings.size() > *inputs.live_findings) {
        std::vector<int> first(*inputs.live_findings);
        std::iota(first.begin(), first.end(), 0);
        const std::string warning = liveViewText(first.size(), report.findings.size());
        report = keepFindings(std::move(report), first, warning);
    }
    if (inputs.live_findings) {
        shareStacksBySite(report);
    }
    return report;
}

} // namespace torchleak
