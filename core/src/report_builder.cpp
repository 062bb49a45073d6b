#include "torchleak/report_builder.h"

#include "torchleak/causes.h"
#include "torchleak/display_text.h"
#include "torchleak/holder_split.h"
#include "torchleak/scoring.h"
#include "torchleak/suggestion.h"
#include "torchleak/verdict.h"

#include <algorithm>
#include <limits>
#include <map>
#include <sstream>
#include <tuple>
#include <unordered_set>

namespace torchleak {

namespace {

// Everything known about one site while the report is assembled.
struct SiteAccumulator {
    Frame site;
    std::string device;
    std::string node;
    SiteSeries series;
    std::vector<Frame> stack;
    uint64_t stackBytes = 0;   // bytes of the group whose stack we show
    StackToken stackToken = 0; // its stack: on a tie the earlier interned stack is shown
    uint64_t lastCount = 0;
    std::vector<GroupKey> groups;
    std::vector<uintptr_t> externalBlocks; // blocks attributed by an external stack
    // While the boundaries are replayed: the site's live bytes and oldest birth after the
    // boundaries replayed so far, and how many series points are written.
    int64_t current = 0;
    uint32_t currentOldest = std::numeric_limits<uint32_t>::max();
    size_t filled = 0;
    size_t touchedAt = std::numeric_limits<size_t>::max();
};

// A group's latest sample while the boundaries are replayed, and its site.
struct GroupReplay {
    SiteAccumulator* site = nullptr;
    uint64_t bytes = 0;
    uint64_t count = 0;
    uint32_t oldest = 0;
};

// What a site's live blocks say about the noise sampling adds to its curve.
struct SampledBytes {
    double weight = 0.0;        // of all its live blocks
    double sampledWeight = 0.0; // of those that stand for sample_bytes
    double sampledSize = 0.0;   // the true bytes of those
    double sampledCount = 0.0;

    SampledBytes& operator+=(const SampledBytes& other) {
        weight += other.weight;
        sampledWeight += other.sampledWeight;
        sampledSize += other.sampledSize;
        sampledCount += other.sampledCount;
        return *this;
    }

    void add(uint64_t size, uint64_t weight_) {
        weight += static_cast<double>(weight_);
        if (weight_ != size) {
            sampledWeight += static_cast<double>(weight_);
            sampledSize += static_cast<double>(size);
            sampledCount += 1.0;
        }
    }

    // A sampled block of s bytes stands for S: per byte it reads, it adds S - s of variance
    // (allocation_sampler.h); blocks recorded whole add none.
    double variancePerByte(uint64_t sampleBytes) const {
        if (weight <= 0.0 || sampledCount <= 0.0) {
            return 0.0;
        }
        double meanSize = sampledSize / sampledCount;
        return sampledWeight / weight * std::max(static_cast<double>(sampleBytes) - meanSize, 0.0);
    }
};

// A live block as the report reads it: one copy of the live table.
struct LiveBlock {
    uintptr_t ptr = 0;
    BlockRecord rec;
};

// Paths are found for at most this many blocks of one finding (the newest first, then spread
// over the rest): a finding of a million blocks needs its representative path and a fair
// sample of where the others hang, not a million paths.
constexpr size_t kPathSamplesPerFinding = 256;
constexpr size_t kPathHeadSamples = 32;
// The second walk's budget for the report (blocksToWalkAgain), and the share of a sample the
// nearest-neighbour rule may get wrong before it is not trusted.
constexpr size_t kSecondWalkBlocks = 65536;
constexpr double kNearestHolderErrorAllowed = 0.1;

std::string siteKey(const Frame& f, const std::string& device, const std::string& node) {
    std::ostringstream out;
    out << (f.group.empty() ? f.file : f.group) << '\x1f' << f.line << '\x1f' << f.function
        << '\x1f' << device << '\x1f' << node;
    return out.str();
}

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

// The innermost frame of an installed package below the site (the innermost user frame):
// where in a third-party library the user's line allocated.
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

// The site of a group of blocks recorded with one stack: the innermost user frame; inside
// backward the node says which gradient formula allocated (custom Functions, PyNode, keep their
// own frame); with no user frame, the innermost installed-package frame (a third-party
// library's line says more than torch's internals), then any library frame, then "<unknown>".
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

// One pass per phase over what the recorder kept. The phases run in the order build() lists
// them; each one's comment says what it adds to the report.
class ReportBuilder {
  public:
    ReportBuilder(const AllocationRecorder& recorder,
                  const ReportInputs& inputs,
                  StackSymbolizer& symbolizer,
                  BlockDescriber& describer)
        : d_recorder(recorder), d_inputs(inputs), d_symbolizer(symbolizer), d_describer(describer),
          d_boundaries(recorder.boundaries()), d_n(d_boundaries.size()) {}

    Report build(RetentionExplainer* explainer) {
        startReport();
        readLiveBlocks();
        replayBoundaries();
        reconcileWithAllocator();
        setAsideFreedAfterStop();
        attributeExternalStacks();
        makeFindings();
        d_blocksOf = liveBlocksByFinding();
        describeExamples();
        if (explainer != nullptr && !d_report.findings.empty()) {
            explainFindings(*explainer);
        }
        finalizeFindings();
        sortFindings();
        if (!d_inputs.explain_grown_only) {
            listLiveBlocks();
        }
        d_report.devices =
            buildDeviceTimelines(d_boundaries, d_inputs.devices, d_report.findings, d_inputs.warmup,
                                 d_inputs.config, d_inputs.privateuse1_backend);
        d_report.causes = groupCauses(d_report, d_inputs.config);
        warnAboutShadowedIterations();
        warnAboutRejectedTotals();
        warnAboutDroppedEvents();
        d_report.summary = summarize(d_report);
        if (d_inputs.out_of_memory) {
            addOutOfMemoryForensics();
        }
        return std::move(d_report);
    }

  private:
    // The run's identity: versions, boundary kind, the caller's warnings.
    void startReport() {
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
    void readLiveBlocks() {
        d_liveNow.reserve(d_recorder.liveBlockCount());
        d_recorder.forEachLiveBlock([&](uintptr_t ptr, const BlockRecord& rec) {
            d_liveNow.push_back(LiveBlock{ptr, rec});
        });
    }

    // The kept boundaries in order, each holding the groups it changed: every site's series is
    // its running sum, so the replay costs what the boundaries hold, not sites x boundaries x
    // groups.
    void replayBoundaries() {
        std::vector<SiteAccumulator*> touched;
        for (size_t b = 0; b < d_n; ++b) {
            const BoundarySnapshot& snap = d_boundaries[b];
            d_shadowedIterations += snap.shadowedIterations;
            touched.clear();
            for (const GroupSample& g : snap.groups) {
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
                if (g.bytes > acc.stackBytes ||
                    (g.bytes == acc.stackBytes &&
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

    // Series points of boundaries that did not touch the site repeat its running state.
    static void fillTo(SiteAccumulator& acc, size_t b) {
        for (; acc.filled < b; ++acc.filled) {
            acc.series.bytes[acc.filled] = acc.current;
            acc.series.oldest[acc.filled] = acc.currentOldest;
        }
    }

    GroupReplay& replayOf(const GroupKey& key) {
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
    void reconcileWithAllocator() {
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
    void setAsideFreedAfterStop() {
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

    static constexpr const char* kFreedAfterStopIncomplete =
        "more blocks were freed after tracking stopped than torchleak could note: a path that "
        "reads \"held only from C++\" may be one of them";

    // Surviving blocks with an external stack (CUDA) become their own sites: a block alive
    // now was alive at every boundary since the one ending its birth iteration. What they
    // account for is taken out of the stackless group's site they were recorded in.
    void attributeExternalStacks() {
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
    void makeFindings() {
        const bool sampling = d_recorder.sampler().threshold() > 0;
        for (const std::vector<LiveBlock>* blocks : {&d_liveNow, &d_freedAfterStop}) {
            for (const LiveBlock& block : *blocks) {
                GroupKey key{block.rec.stack, block.rec.node, block.rec.device};
                d_survivingByBirth[key][block.rec.iteration] +=
                    static_cast<int64_t>(block.rec.weight);
                if (sampling) {
                    d_sampledBytes[key].add(block.rec.size, block.rec.weight);
                }
            }
        }
        for (auto& [key, acc] : d_sites) {
            int64_t maxBytes = *std::max_element(acc.series.bytes.begin(), acc.series.bytes.end());
            if (maxBytes <= 0 || static_cast<uint64_t>(maxBytes) < d_inputs.config.min_bytes) {
                continue;
            }
            for (auto& o : acc.series.oldest) {
                if (o == std::numeric_limits<uint32_t>::max()) {
                    o = 0;
                }
            }
            acc.series.at = d_at;
            acc.series.noise_variance_per_byte = samplingNoiseOf(acc);
            acc.series.surviving = survivingOf(acc);
            Finding f;
            f.site = acc.site;
            Classification c = classifyPerRun(acc.series, acc.stack, f.site);
            f.verdict = c.verdict;
            f.stack = acc.stack;
            f.device = acc.device;
            if (!acc.node.empty()) {
                f.autograd_node = acc.node;
            }
            f.allocated_inside = packageFrameBelowSite(acc.stack);
            f.count = acc.lastCount;
            f.total_bytes = static_cast<uint64_t>(std::max<int64_t>(acc.series.bytes.back(), 0));
            f.bytes_per_iteration = c.bytes_per_iteration;
            f.series = acc.series.bytes;
            f.trend = {c.fit.slope, c.fit.r2, c.fit.p_value};
            f.confidence = c.confidence;
            f.released_periodically = c.released_periodically;
            d_report.findings.push_back(std::move(f));
            d_findingSites.push_back(&acc);
        }
    }

    // Of the site's blocks alive now, the bytes born in the iteration each point ends.
    std::vector<int64_t> survivingOf(const SiteAccumulator& acc) const {
        std::vector<int64_t> surviving(d_n, 0);
        for (const GroupKey& k : acc.groups) {
            auto births = d_survivingByBirth.find(k);
            if (births == d_survivingByBirth.end()) {
                continue;
            }
            for (size_t b = 0; b < d_n; ++b) {
                if (auto it = births->second.find(d_at[b]); it != births->second.end()) {
                    surviving[b] += it->second;
                }
            }
        }
        return surviving;
    }

    double samplingNoiseOf(const SiteAccumulator& acc) const {
        const uint64_t sampleBytes = d_recorder.sampler().threshold();
        if (sampleBytes == 0) {
            return 0.0;
        }
        SampledBytes sampled;
        for (const GroupKey& k : acc.groups) {
            if (auto it = d_sampledBytes.find(k); it != d_sampledBytes.end()) {
                sampled += it->second;
            }
        }
        return sampled.variancePerByte(sampleBytes);
    }

    // A site's verdict and rate. In watch mode an iteration is one cell run, whichever cell:
    // a cell re-run between others that adds 1 MiB each time grows 1 MiB per run of that cell,
    // not a fraction per cell executed. So the series is read at the boundaries ending a run of
    // the cell the allocations ran in (the outermost cell on the stack: a function defined in
    // one cell and called from another leaks per run of the caller), and a site in that cell
    // names every run.
    Classification
    classifyPerRun(const SiteSeries& series, const std::vector<Frame>& stack, Frame& site) const {
        const std::vector<BoundaryRun>& runs = d_inputs.boundary_runs;
        const size_t total = static_cast<size_t>(d_report.iterations);
        auto outermostCell = std::find_if(stack.rbegin(), stack.rend(), [](const Frame& f) {
            return f.cell.has_value() && !f.group.empty();
        });
        if (d_inputs.boundary != BoundaryKind::Cell || runs.size() != total ||
            outermostCell == stack.rend()) {
            return classify(series, d_inputs.warmup, d_inputs.config);
        }
        const std::string& cell = outermostCell->group;
        // runsBefore[i]: the runs of the cell among iterations [0, i), i.e. the run number of
        // an iteration of the cell.
        std::vector<uint32_t> runsBefore(total + 1, 0);
        for (size_t i = 0; i < total; ++i) {
            runsBefore[i + 1] = runsBefore[i] + (runs[i].group == cell ? 1 : 0);
        }
        SiteSeries perRun;
        perRun.noise_variance_per_byte = series.noise_variance_per_byte;
        for (size_t b = 0; b < d_n; ++b) {
            uint32_t iteration = d_at[b];
            if (runs[iteration].group != cell) {
                continue;
            }
            perRun.bytes.push_back(series.bytes[b]);
            perRun.born.push_back(series.born[b]);
            if (series.surviving.size() == d_n) {
                perRun.surviving.push_back(series.surviving[b]);
            }
            perRun.at.push_back(runsBefore[iteration]);
            // A birth iteration, renumbered as the run it happened in (or the next run).
            perRun.oldest.push_back(runsBefore[std::min<size_t>(series.oldest[b], total)]);
        }
        if (perRun.bytes.empty()) {
            return classify(series, d_inputs.warmup, d_inputs.config);
        }
        if (site.group == cell && runsBefore[total] > 1) {
            for (size_t i = 0; i < total; ++i) {
                if (runs[i].group == cell) {
                    site.runs.push_back(runs[i].cell);
                }
            }
        }
        return classify(perRun, d_inputs.warmup, d_inputs.config);
    }

    // Each finding's dtype and shape, from its biggest block alive at the last boundary: one
    // question to the describer for all findings.
    void describeExamples() {
        const uint32_t last = d_n > 0 ? d_at.back() : 0;
        std::vector<uintptr_t> examples;
        std::vector<size_t> findingOf;
        for (size_t i = 0; i < d_blocksOf.size(); ++i) {
            const Candidate* best = nullptr;
            for (const Candidate& c : d_blocksOf[i]) {
                if (std::get<0>(c) <= last &&
                    (best == nullptr || std::get<1>(c) > std::get<1>(*best))) {
                    best = &c;
                }
            }
            if (best != nullptr) {
                examples.push_back(std::get<3>(*best));
                findingOf.push_back(i);
            }
        }
        if (examples.empty()) {
            return;
        }
        auto descriptions = d_describer.describe(examples);
        for (size_t k = 0; k < examples.size() && k < descriptions.size(); ++k) {
            if (descriptions[k]) {
                d_report.findings[findingOf[k]].dtype = descriptions[k]->dtype;
                d_report.findings[findingOf[k]].shape = descriptions[k]->shape;
            }
        }
    }

    // Per finding: (birth iteration, size, sequence, block, the bytes it stands for), so that
    // sorting puts the newest iteration first and, within it, the biggest block (the bytes
    // that matter, not a scalar allocated on the same line).
    using Candidate = std::tuple<uint32_t, uint64_t, uint64_t, uintptr_t, uint64_t>;

    // Retaining paths of a sample of every finding's live blocks (one walk for all of them),
    // then each finding's representative path, the sites of the tensors on it, and its holder.
    void explainFindings(RetentionExplainer& explainer) {
        std::vector<std::vector<Candidate>> sampled(d_blocksOf.size());
        std::vector<double> scale(d_blocksOf.size(), 1.0);
        std::vector<uintptr_t> allBlocks;
        for (size_t i = 0; i < d_blocksOf.size(); ++i) {
            // (The ledger's sites that did not grow have no blocks: liveBlocksByFinding.)
            std::vector<Candidate>& blocks = d_blocksOf[i];
            std::sort(blocks.begin(), blocks.end(), std::greater<>());
            sampled[i] = samplePathBlocks(blocks);
            if (!sampled[i].empty()) {
                scale[i] =
                    static_cast<double>(blocks.size()) / static_cast<double>(sampled[i].size());
            }
            for (const auto& candidate : sampled[i]) {
                allBlocks.push_back(std::get<3>(candidate));
            }
        }
        auto paths = explainer.explain(allBlocks);
        for (auto& [ptr, path] : paths) {
            path.steps = normalizePath(std::move(path.steps));
        }
        if (auto more = blocksToWalkAgain(sampled, scale, paths); !more.empty()) {
            for (auto& [ptr, path] : explainer.explain(more)) {
                path.steps = normalizePath(std::move(path.steps));
                paths.emplace(ptr, std::move(path));
            }
        }
        nameCppOwners(sampled, paths);
        std::vector<Finding> findings;
        std::vector<std::vector<Candidate>> blocksOf;
        std::vector<const SiteAccumulator*> sites;
        for (size_t i = 0; i < d_report.findings.size(); ++i) {
            std::vector<FindingPart> parts =
                splitFinding(d_report.findings[i], d_findingSites[i], d_blocksOf[i], sampled[i],
                             scale[i], paths);
            if (parts.empty()) {
                applyRepresentativePath(d_report.findings[i], sampled[i], scale[i], paths);
                parts.push_back({std::move(d_report.findings[i]), std::move(d_blocksOf[i])});
            }
            for (FindingPart& part : parts) {
                findings.push_back(std::move(part.finding));
                blocksOf.push_back(std::move(part.blocks));
                sites.push_back(d_findingSites[i]);
            }
        }
        d_report.findings = std::move(findings);
        d_blocksOf = std::move(blocksOf);
        d_findingSites = std::move(sites);
    }

    // Memory no Python object reaches starts at the C++ cache the evidence names (an open
    // autocast region, a compilation in this process), not at a bare "held only from C++".
    void nameCppOwners(const std::vector<std::vector<Candidate>>& sampled,
                       std::unordered_map<uintptr_t, BlockPath>& paths) {
        for (size_t i = 0; i < sampled.size(); ++i) {
            std::optional<PathStep> owner;
            bool looked = false;
            for (const auto& candidate : sampled[i]) {
                auto it = paths.find(std::get<3>(candidate));
                if (it == paths.end() || it->second.retention != Retention::CppOnly ||
                    it->second.steps.empty() || !isAnonymousCppRoot(it->second.steps[0].label)) {
                    continue;
                }
                if (!looked) {
                    owner = namedCppOwner(d_report.findings[i], d_inputs.torch_caches);
                    looked = true;
                }
                if (!owner) {
                    break;
                }
                PathStep& root = it->second.steps[0];
                root.label = owner->label;
                root.note = owner->note;
            }
        }
    }

    // A finding and its live blocks.
    struct FindingPart {
        Finding finding;
        std::vector<Candidate> blocks;
    };

    // Who keeps each sampled block whose path was found (none for fewer than two paths).
    std::unordered_map<uintptr_t, BlockHolder>
    blockHolders(const Finding& whole,
                 const std::vector<Candidate>& sample,
                 double sampleScale,
                 const std::unordered_map<uintptr_t, BlockPath>& paths) const {
        std::vector<const std::vector<PathStep>*> all;
        for (const Candidate& c : sample) {
            if (auto it = paths.find(std::get<3>(c)); it != paths.end()) {
                all.push_back(&it->second.steps);
            }
        }
        std::unordered_map<uintptr_t, BlockHolder> holders;
        if (all.size() < 2) {
            return holders;
        }
        const PathFanout fanout(all);
        for (const Candidate& c : sample) {
            auto it = paths.find(std::get<3>(c));
            if (it == paths.end()) {
                continue;
            }
            std::optional<Holder> holder;
            if (it->second.retention == Retention::Reachable) {
                holder = fanout.holderOn(it->second.steps, growthIterations(whole), sampleScale);
            }
            holders[std::get<3>(c)] =
                BlockHolder{holderName(it->second, holder), holder.has_value()};
        }
        return holders;
    }

    // A finding's blocks outside its path sample go with the nearest sampled block in
    // allocation order (splitByHolder). Where that rule is wrong for more than a tenth of the
    // sample itself (holders that take turns: one line appending to fifty lists in turn, each
    // list's curve then a scramble judged a plateau), the rest of its blocks are walked too, up
    // to kSecondWalkBlocks for the report. Returns the blocks to walk; `sampled` and `scale`
    // take them in.
    std::vector<uintptr_t>
    blocksToWalkAgain(std::vector<std::vector<Candidate>>& sampled,
                      std::vector<double>& scale,
                      const std::unordered_map<uintptr_t, BlockPath>& paths) {
        std::vector<uintptr_t> more;
        for (size_t i = 0; i < sampled.size() && more.size() < kSecondWalkBlocks; ++i) {
            const std::vector<Candidate>& blocks = d_blocksOf[i];
            if (sampled[i].size() >= blocks.size()) {
                continue;
            }
            const auto holders = blockHolders(d_report.findings[i], sampled[i], scale[i], paths);
            std::vector<std::pair<uint64_t, std::string>> named;
            for (const Candidate& c : sampled[i]) {
                if (auto it = holders.find(std::get<3>(c)); it != holders.end()) {
                    named.emplace_back(std::get<2>(c), it->second.name);
                }
            }
            if (nearestHolderErrorRate(std::move(named)) <= kNearestHolderErrorAllowed) {
                continue;
            }
            std::unordered_set<uintptr_t> have;
            for (const Candidate& c : sampled[i]) {
                have.insert(std::get<3>(c));
            }
            std::vector<Candidate> rest;
            for (const Candidate& c : blocks) {
                if (!have.count(std::get<3>(c))) {
                    rest.push_back(c);
                }
            }
            // Spread over the rest when the budget cannot take all of it.
            const size_t take = std::min(rest.size(), kSecondWalkBlocks - more.size());
            for (size_t k = 0; k < take; ++k) {
                const Candidate& c = rest[k * rest.size() / take];
                sampled[i].push_back(c);
                more.push_back(std::get<3>(c));
            }
            scale[i] = static_cast<double>(blocks.size()) / static_cast<double>(sampled[i].size());
        }
        return more;
    }

    // One finding per holder (holder_split.h): the site's live blocks split by who keeps
    // them, each part with its own curve, verdict, path and fix. Empty when the site has one
    // holder.
    std::vector<FindingPart> splitFinding(const Finding& whole,
                                          const SiteAccumulator* acc,
                                          const std::vector<Candidate>& blocks,
                                          const std::vector<Candidate>& sample,
                                          double sampleScale,
                                          const std::unordered_map<uintptr_t, BlockPath>& paths) {
        if (acc == nullptr) {
            return {};
        }
        const auto holders = blockHolders(whole, sample, sampleScale, paths);
        if (holders.size() < 2) {
            return {};
        }
        std::vector<HeldBlock> held;
        held.reserve(blocks.size());
        for (const auto& [birth, size, seq, ptr, weight] : blocks) {
            held.push_back(HeldBlock{birth, weight, seq, ptr});
        }
        SiteSeries series = acc->series;
        series.at = d_at;
        std::vector<HolderPart> parts =
            splitByHolder(held, holders, series, d_inputs.warmup, d_inputs.config);
        std::vector<FindingPart> findings;
        for (HolderPart& part : parts) {
            Finding f = whole;
            f.path.clear();
            f.path_text.clear();
            f.holder.reset();
            f.retention = Retention::Unknown;
            SampledBytes sampled;
            for (size_t k : part.blocks) {
                sampled.add(std::get<1>(blocks[k]), std::get<4>(blocks[k]));
            }
            part.series.noise_variance_per_byte =
                sampled.variancePerByte(d_recorder.sampler().threshold());
            Frame scratch = f.site;
            Classification c = classifyPerRun(part.series, acc->stack, scratch);
            f.verdict = c.verdict;
            f.bytes_per_iteration = c.bytes_per_iteration;
            f.trend = {c.fit.slope, c.fit.r2, c.fit.p_value};
            f.confidence = c.confidence;
            f.released_periodically = c.released_periodically;
            f.series = part.series.bytes;
            f.total_bytes = static_cast<uint64_t>(std::max<int64_t>(part.series.bytes.back(), 0));
            std::vector<Candidate> mine;
            std::vector<Candidate> mineSampled;
            for (size_t k : part.blocks) {
                mine.push_back(blocks[k]);
                if (holders.count(std::get<3>(blocks[k])) != 0) {
                    mineSampled.push_back(blocks[k]);
                }
            }
            std::sort(mine.begin(), mine.end(), std::greater<>());
            std::sort(mineSampled.begin(), mineSampled.end(), std::greater<>());
            const uint32_t last = d_at.back();
            f.count = static_cast<uint64_t>(
                std::count_if(mine.begin(), mine.end(),
                              [&](const Candidate& b) { return std::get<0>(b) <= last; }));
            applyRepresentativePath(f, mineSampled, sampleScale, paths);
            if (!f.path.empty() && f.path.back().tensor) {
                f.dtype = f.path.back().tensor->dtype;
                f.shape = f.path.back().tensor->shape;
            }
            findings.push_back({std::move(f), std::move(mine)});
        }
        return findings;
    }

    // The judged iterations a holder's fan-out is measured against: in watch mode those of
    // the finding's cell (a list appended to once per run of one cell among others grows one
    // element per run), else the run's.
    double growthIterations(const Finding& f) const {
        int iterations =
            f.site.runs.empty() ? d_report.iterations : static_cast<int>(f.site.runs.size());
        return static_cast<double>(std::max(1, iterations - std::max(d_inputs.warmup, 0)));
    }

    static bool grewLastIteration(const Finding& f) {
        const std::vector<int64_t>& s = f.series;
        return !s.empty() && s.back() > (s.size() > 1 ? s[s.size() - 2] : 0);
    }

    // The newest kPathHeadSamples blocks (the representative is among them), then blocks spread
    // evenly over the rest. `blocks` is sorted newest first.
    static std::vector<Candidate> samplePathBlocks(const std::vector<Candidate>& blocks) {
        if (blocks.size() <= kPathSamplesPerFinding) {
            return blocks;
        }
        std::vector<Candidate> sample(
            blocks.begin(), blocks.begin() + static_cast<std::ptrdiff_t>(kPathHeadSamples));
        const size_t rest = blocks.size() - kPathHeadSamples;
        const size_t spread = kPathSamplesPerFinding - kPathHeadSamples;
        for (size_t k = 0; k < spread; ++k) {
            sample.push_back(blocks[kPathHeadSamples + k * rest / spread]);
        }
        return sample;
    }

    std::vector<std::vector<Candidate>> liveBlocksByFinding() const {
        std::unordered_map<GroupKey, size_t, GroupKeyHash> findingOf;
        std::unordered_map<uintptr_t, size_t> externalOf;
        for (size_t i = 0; i < d_findingSites.size(); ++i) {
            // The ledger looks at what grew in the last iteration only: the blocks of a site
            // that did not grow are neither walked nor listed, so they are not gathered.
            if (d_inputs.explain_grown_only && !grewLastIteration(d_report.findings[i])) {
                continue;
            }
            for (const GroupKey& k : d_findingSites[i]->groups) {
                findingOf.emplace(k, i);
            }
            for (uintptr_t ptr : d_findingSites[i]->externalBlocks) {
                externalOf.emplace(ptr, i);
            }
        }
        std::vector<std::vector<Candidate>> blocksOf(d_report.findings.size());
        if (findingOf.empty() && externalOf.empty()) {
            return blocksOf;
        }
        for (const auto& [ptr, rec] : d_liveNow) {
            std::optional<size_t> index;
            if (auto ext = externalOf.find(ptr); ext != externalOf.end()) {
                index = ext->second; // attributed to its own site by an external stack
            } else if (auto grp = findingOf.find(GroupKey{rec.stack, rec.node, rec.device});
                       grp != findingOf.end()) {
                index = grp->second;
            }
            if (index) {
                blocksOf[*index].emplace_back(rec.iteration, rec.size, rec.sequence, ptr,
                                              rec.weight);
            }
        }
        return blocksOf;
    }

    // The representative is the newest block from before the last iteration: the last
    // iteration's own blocks may just be the current state (model.last_hidden), while older
    // survivors are alive only because of what leaks.
    void applyRepresentativePath(Finding& f,
                                 const std::vector<Candidate>& blocks,
                                 double sampleScale,
                                 const std::unordered_map<uintptr_t, BlockPath>& paths) {
        std::vector<const std::vector<PathStep>*> all;
        const BlockPath* representative = nullptr;
        const BlockPath* newest = nullptr;
        // The site's own last iteration: in watch mode the last boundary may end another
        // cell's run, and the newest block of this one is then just as much current state.
        uint32_t lastIteration = d_n > 0 ? d_at.back() : 0;
        if (!blocks.empty()) {
            lastIteration = std::min(lastIteration, std::get<0>(blocks.front()));
        }
        for (const auto& [birth, size, seq, ptr, weight] : blocks) {
            auto it = paths.find(ptr);
            if (it == paths.end()) {
                continue;
            }
            all.push_back(&it->second.steps);
            if (newest == nullptr) {
                newest = &it->second;
            }
            if (representative == nullptr && birth < lastIteration) {
                representative = &it->second;
            }
        }
        if (representative == nullptr) {
            representative = newest;
        }
        if (representative == nullptr) {
            return;
        }
        f.retention = representative->retention;
        f.path = representative->steps;
        for (PathStep& step : f.path) {
            if (step.tensor && step.tensor->block != 0) {
                step.tensor->site = siteOfPathTensor(step.tensor->block);
            }
        }
        f.path_text = pathText(f.path);
        // Blocks only autograd holds have no Python tensor for the describer; the path's last
        // tensor is one of them.
        if (!f.dtype && !f.path.empty() && f.path.back().tensor) {
            f.dtype = f.path.back().tensor->dtype;
            f.shape = f.path.back().tensor->shape;
        }
        if (f.retention == Retention::Reachable) {
            f.holder = chooseHolder(f.path, all, growthIterations(f), sampleScale);
        }
    }

    // Where a tensor met on a path was allocated, when torchleak saw it. Asked of the live
    // table itself: the tensor on the path is alive, so its block is still the one recorded.
    std::optional<Frame> siteOfPathTensor(uintptr_t block) {
        std::optional<BlockRecord> live = d_recorder.liveBlock(block);
        if (!live) {
            return std::nullopt;
        }
        if (const Frame* user = innermostUserFrame(framesOf(live->stack))) {
            return *user;
        }
        if (live->node) {
            return backwardFrame(d_recorder.nodeName(live->node));
        }
        return std::nullopt;
    }

    // Each finding's verdict is final only now that its path is known: the machinery rule,
    // then the allow-list; then the fix. (A leak's severity is its cause's, set by
    // groupCauses; every other finding is Info.)
    void finalizeFindings() {
        for (Finding& f : d_report.findings) {
            if (f.verdict != Verdict::Leak && f.total_bytes > 0 && heldByMachinery(f)) {
                f.verdict = Verdict::Leak;
                f.confidence = 0.9;
            }
            if (allowListed(f, d_inputs.config.allow)) {
                f.verdict = Verdict::Allowed;
            }
            f.suggestion = suggestFix(f);
            if (f.verdict == Verdict::Leak && f.released_periodically) {
                f.suggestion += " (it is released only at a coarser boundary, such as an epoch "
                                "end, and grows within each)";
            }
        }
    }

    // What each finding has alive now, the blocks of an iteration no boundary ended included
    // (an out-of-memory error stops the run in the middle of one).
    std::vector<LiveNow> liveNowByFinding() const {
        std::vector<LiveNow> live(d_blocksOf.size());
        for (size_t i = 0; i < d_blocksOf.size(); ++i) {
            for (const auto& [birth, size, seq, ptr, weight] : d_blocksOf[i]) {
                live[i].bytes += size;
                live[i].count += 1;
            }
        }
        return live;
    }

    // Leaks first, then by live bytes. Each finding's live blocks move with it.
    void sortFindings() {
        std::vector<size_t> order(d_report.findings.size());
        for (size_t i = 0; i < order.size(); ++i) {
            order[i] = i;
        }
        const auto& findings = d_report.findings;
        std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) {
            return listedBefore(findings[x], findings[y]);
        });
        std::vector<Finding> sorted;
        std::vector<std::vector<Candidate>> blocks(order.size());
        sorted.reserve(order.size());
        for (size_t i = 0; i < order.size(); ++i) {
            sorted.push_back(std::move(d_report.findings[order[i]]));
            if (order[i] < d_blocksOf.size()) {
                blocks[i] = std::move(d_blocksOf[order[i]]);
            }
        }
        d_report.findings = std::move(sorted);
        d_blocksOf = std::move(blocks);
    }

    // Each finding's live blocks in allocation order, for the memory viewer's export. Past
    // kLiveBlocksListed an even spread is listed (the growth's shape survives) and the rest
    // counted.
    void listLiveBlocks() {
        for (size_t i = 0; i < d_blocksOf.size() && i < d_report.findings.size(); ++i) {
            // Sorted in place: a finding of 10^6 blocks must not cost a second copy of them
            // (the OOM forensics, after this, only sum them).
            std::vector<Candidate>& blocks = d_blocksOf[i];
            std::sort(blocks.begin(), blocks.end(), [](const Candidate& a, const Candidate& b) {
                return std::get<2>(a) < std::get<2>(b);
            });
            Finding& f = d_report.findings[i];
            const size_t n = blocks.size();
            const size_t listed = std::min(n, kLiveBlocksListed);
            f.live_blocks.reserve(listed);
            size_t next = 0; // the next index of `blocks` to list
            for (size_t k = 0; k < n; ++k) {
                const auto& [birth, size, seq, ptr, weight] = blocks[k];
                if (f.live_blocks.size() < listed && k == next) {
                    f.live_blocks.push_back({static_cast<uint64_t>(ptr), size, birth, seq});
                    next = (f.live_blocks.size() * n) / listed;
                } else {
                    f.live_blocks_unlisted += 1;
                    f.live_bytes_unlisted += size;
                }
            }
        }
    }

    // The report stands without its forensics: a failure here becomes a warning.
    void addOutOfMemoryForensics() {
        try {
            OutOfMemoryContext context;
            context.event = d_recorder.currentOutOfMemory();
            context.current_iteration = d_recorder.iteration();
            context.tracked_bytes = d_recorder.trackedBytes(failingDevice(
                context.event, *d_inputs.out_of_memory, d_inputs.privateuse1_backend));
            d_report.oom =
                buildOutOfMemoryReport(d_report, liveNowByFinding(), *d_inputs.out_of_memory,
                                       context, d_inputs.devices, d_inputs.privateuse1_backend);
        } catch (const std::exception& e) {
            d_report.warnings.push_back(std::string("the out-of-memory forensics could not be "
                                                    "built (") +
                                        e.what() + "); the report covers the iterations seen");
        }
    }

    void warnAboutDroppedEvents() {
        if (const uint64_t dropped = d_recorder.droppedEvents()) {
            d_report.warnings.push_back(
                std::to_string(dropped) +
                " allocation(s) could not be recorded (more devices than torchleak tracks, or "
                "memory exhausted while its tables grew): their blocks are missing from this "
                "report");
        }
    }

    // A device whose allocator sent totals that cannot be right is shown with tracked bytes.
    void warnAboutRejectedTotals() {
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

    void warnAboutShadowedIterations() {
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

    const std::vector<Frame>& framesOf(StackToken token) {
        auto it = d_decoded.find(token);
        if (it == d_decoded.end()) {
            auto raw = d_recorder.stackFrames(token);
            it =
                d_decoded.emplace(token, token ? d_symbolizer.symbolize(raw) : std::vector<Frame>{})
                    .first;
        }
        return it->second;
    }

    // The accumulator of a site, created with empty series of n boundaries on first use.
    SiteAccumulator&
    siteFor(const Frame& site, const std::string& device, const std::string& node) {
        SiteAccumulator& acc = d_sites[siteKey(site, device, node)];
        if (acc.series.bytes.empty()) {
            acc.site = site;
            acc.device = device;
            acc.node = node;
            acc.series.bytes.assign(d_n, 0);
            acc.series.born.assign(d_n, 0);
            acc.series.oldest.assign(d_n, std::numeric_limits<uint32_t>::max());
        }
        return acc;
    }

    const AllocationRecorder& d_recorder;
    const ReportInputs& d_inputs;
    StackSymbolizer& d_symbolizer;
    BlockDescriber& d_describer;
    const std::vector<BoundarySnapshot>& d_boundaries;
    const size_t d_n;

    Report d_report;
    std::unordered_map<StackToken, std::vector<Frame>> d_decoded;
    std::vector<uint32_t> d_at; // the iteration of each kept boundary
    std::vector<LiveBlock> d_liveNow;
    std::vector<LiveBlock> d_freedAfterStop;
    std::map<std::string, SiteAccumulator> d_sites; // ordered: findings come out in key order
    std::unordered_map<GroupKey, GroupReplay, GroupKeyHash> d_replay;
    uint32_t d_shadowedIterations = 0;
    std::vector<const SiteAccumulator*> d_findingSites; // parallel to d_report.findings
    std::vector<std::vector<Candidate>> d_blocksOf;     // parallel to d_report.findings
    std::unordered_map<GroupKey, SampledBytes, GroupKeyHash> d_sampledBytes;
    // Live bytes by group and birth iteration.
    std::unordered_map<GroupKey, std::unordered_map<uint32_t, int64_t>, GroupKeyHash>
        d_survivingByBirth;
};

} // namespace

Report buildReport(const AllocationRecorder& recorder,
                   const ReportInputs& inputs,
                   StackSymbolizer& symbolizer,
                   BlockDescriber& describer,
                   RetentionExplainer* explainer) {
    return ReportBuilder(recorder, inputs, symbolizer, describer).build(explainer);
}

} // namespace torchleak
