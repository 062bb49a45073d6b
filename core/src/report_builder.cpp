#include "torchleak/report_builder.h"

#include "torchleak/causes.h"
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
    uintptr_t example = 0;
    uint64_t exampleSize = 0;
    GroupKey exampleKey;
    std::vector<GroupKey> groups;
    std::vector<uintptr_t> externalBlocks; // blocks attributed by an external stack
};

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
    unknown.file = "<unknown>";
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
        attributeExternalStacks();
        accumulateBoundarySamples();
        makeFindings();
        if (explainer != nullptr && !d_report.findings.empty()) {
            explainFindings(*explainer);
        }
        finalizeFindings();
        sortFindings();
        d_report.devices = buildDeviceTimelines(d_boundaries, d_inputs.devices, d_report.findings,
                                                d_inputs.warmup, d_inputs.config);
        d_report.causes = groupCauses(d_report, d_inputs.config);
        warnAboutShadowedIterations();
        d_report.summary = summarize(d_report);
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
        d_report.iterations = static_cast<int>(d_n);
    }

    // Every live block, read once: for external stacks, example descriptions (only if the
    // address still holds the block a group recorded: it may have been freed and reused since
    // the last boundary) and retaining paths.
    void readLiveBlocks() {
        d_recorder.forEachLiveBlock(
            [&](uintptr_t ptr, const BlockRecord& rec) { d_liveNow.emplace(ptr, rec); });
    }

    // Surviving blocks with an external stack (CUDA) become their own sites: a block alive
    // now was alive at every boundary since the one ending its birth iteration. What they
    // account for is taken out of the stackless group they were recorded in.
    void attributeExternalStacks() {
        for (const auto& [ptr, rec] : d_liveNow) {
            auto external = d_inputs.external_stacks.find(ptr);
            if (d_n == 0 || rec.stack != 0 || external == d_inputs.external_stacks.end() ||
                external->second.empty()) {
                continue;
            }
            const std::vector<Frame>& frames = external->second;
            GroupKey key{0, rec.node, rec.device};
            auto& taken = d_attributed[key];
            taken.resize(d_n, 0);
            std::string node = rec.node ? d_recorder.nodeName(rec.node) : std::string();
            const Frame* user = innermostUserFrame(frames);
            Frame site = user != nullptr ? *user : frames.front();
            if (!node.empty() && site.user) {
                site.function = node;
            }
            SiteAccumulator& acc = siteFor(site, deviceName(rec.device), node);
            if (acc.stack.empty()) {
                acc.stack = frames;
            }
            for (size_t b = std::min<size_t>(rec.iteration, d_n); b < d_n; ++b) {
                acc.series.bytes[b] += static_cast<int64_t>(rec.size);
                acc.series.oldest[b] = std::min(acc.series.oldest[b], rec.iteration);
                taken[b] += static_cast<int64_t>(rec.size);
            }
            if (rec.iteration < d_n) {
                acc.series.born[rec.iteration] += static_cast<int64_t>(rec.size);
            }
            acc.lastCount += 1;
            acc.externalBlocks.push_back(ptr);
            if (rec.size > acc.exampleSize) {
                acc.exampleSize = rec.size;
                acc.example = ptr;
                acc.exampleKey = GroupKey{0, rec.node, rec.device};
            }
        }
    }

    // Every group sample of every boundary, added to its site's series.
    void accumulateBoundarySamples() {
        for (size_t b = 0; b < d_n; ++b) {
            const BoundarySnapshot& snap = d_boundaries[b];
            if (snap.shadowed) {
                d_shadowedIterations.push_back(snap.iteration);
            }
            for (const GroupSample& sample : snap.groups) {
                GroupSample g = sample;
                if (auto it = d_attributed.find(g.key); it != d_attributed.end()) {
                    uint64_t take = static_cast<uint64_t>(std::max<int64_t>(it->second[b], 0));
                    g.bytes = g.bytes > take ? g.bytes - take : 0;
                    if (g.bytes == 0) {
                        continue;
                    }
                }
                addSample(b, g);
            }
        }
    }

    void addSample(size_t b, const GroupSample& g) {
        const std::vector<Frame>& frames = framesOf(g.key.stack);
        std::string node = g.key.node ? d_recorder.nodeName(g.key.node) : std::string();
        Frame site = siteOfGroup(frames, node);
        SiteAccumulator& acc = siteFor(site, deviceName(g.key.device), node);
        if (site.cell && acc.site.cell && *site.cell > *acc.site.cell) {
            acc.site = site; // the newest run of a re-run cell names the site
        }
        if (std::find(acc.groups.begin(), acc.groups.end(), g.key) == acc.groups.end()) {
            acc.groups.push_back(g.key);
        }
        acc.series.bytes[b] += static_cast<int64_t>(g.bytes);
        acc.series.born[b] += static_cast<int64_t>(g.bornThisIteration);
        acc.series.oldest[b] = std::min(acc.series.oldest[b], g.oldestIteration);
        // Groups arrive in live-table order, which follows addresses: break ties by stack token
        // so the shown stack does not change from run to run.
        if (g.bytes > acc.stackBytes ||
            (g.bytes == acc.stackBytes && (acc.stack.empty() || g.key.stack < acc.stackToken))) {
            acc.stackBytes = g.bytes;
            acc.stack = frames;
            acc.stackToken = g.key.stack;
        }
        if (b == d_n - 1) {
            acc.lastCount += g.count;
            if (g.largestBlockSize > acc.exampleSize) {
                acc.exampleSize = g.largestBlockSize;
                acc.example = g.largestBlock;
                acc.exampleKey = g.key;
            }
        }
    }

    // One finding per site that ever held min_bytes: its series, trend, verdict, and the dtype
    // and shape of its biggest live block.
    void makeFindings() {
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
            Finding f;
            f.site = acc.site;
            Classification c = classifyPerRun(acc, f.site);
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
            describeExample(acc, f);
            f.released_periodically = c.released_periodically;
            d_report.findings.push_back(std::move(f));
            d_findingSites.push_back(&acc);
        }
    }

    // A site's verdict and rate. In watch mode an iteration is one cell run, whichever cell:
    // a cell re-run between others that adds 1 MiB each time grows 1 MiB per run of that cell,
    // not a fraction per cell executed. So the series is read at the boundaries ending a run of
    // the cell the allocations ran in (the outermost cell on the stack: a function defined in
    // one cell and called from another leaks per run of the caller), and a site in that cell
    // names every run.
    Classification classifyPerRun(const SiteAccumulator& acc, Frame& site) const {
        const std::vector<BoundaryRun>& runs = d_inputs.boundary_runs;
        auto outermostCell = std::find_if(acc.stack.rbegin(), acc.stack.rend(), [](const Frame& f) {
            return f.cell.has_value() && !f.group.empty();
        });
        if (d_inputs.boundary != BoundaryKind::Cell || runs.size() != d_n ||
            outermostCell == acc.stack.rend()) {
            return classify(acc.series, d_inputs.warmup, d_inputs.config);
        }
        std::vector<size_t> at;
        for (size_t b = 0; b < d_n; ++b) {
            if (runs[b].group == outermostCell->group) {
                at.push_back(b);
            }
        }
        if (at.empty()) {
            return classify(acc.series, d_inputs.warmup, d_inputs.config);
        }
        SiteSeries perRun;
        for (size_t b : at) {
            perRun.bytes.push_back(acc.series.bytes[b]);
            perRun.born.push_back(acc.series.born[b]);
            // A birth iteration, renumbered as the run it happened in (or the next run).
            perRun.oldest.push_back(static_cast<uint32_t>(
                std::lower_bound(at.begin(), at.end(), acc.series.oldest[b]) - at.begin()));
        }
        if (site.group == outermostCell->group && at.size() > 1) {
            for (size_t b : at) {
                site.runs.push_back(runs[b].cell);
            }
        }
        return classify(perRun, d_inputs.warmup, d_inputs.config);
    }

    void describeExample(const SiteAccumulator& acc, Finding& f) {
        if (acc.example == 0) {
            return;
        }
        auto it = d_liveNow.find(acc.example);
        if (it != d_liveNow.end() && it->second.stack == acc.exampleKey.stack &&
            it->second.node == acc.exampleKey.node) {
            if (auto d = d_describer.describe(acc.example)) {
                f.dtype = d->dtype;
                f.shape = d->shape;
            }
        }
    }

    // Per finding: (birth iteration, size, sequence, block), so that sorting puts the newest
    // iteration first and, within it, the biggest block (the bytes that matter, not a scalar
    // allocated on the same line).
    using Candidate = std::tuple<uint32_t, uint64_t, uint64_t, uintptr_t>;

    // Retaining paths of every finding's live blocks (one walk for all of them), then each
    // finding's representative path, the sites of the tensors on it, and its holder.
    void explainFindings(RetentionExplainer& explainer) {
        std::vector<std::vector<Candidate>> blocksOf = liveBlocksByFinding();
        std::vector<uintptr_t> allBlocks;
        for (const auto& blocks : blocksOf) {
            for (const auto& candidate : blocks) {
                allBlocks.push_back(std::get<3>(candidate));
            }
        }
        auto paths = explainer.explain(allBlocks);
        std::unordered_set<uintptr_t> normalized;
        for (size_t i = 0; i < d_report.findings.size(); ++i) {
            applyRepresentativePath(d_report.findings[i], blocksOf[i], paths, normalized);
        }
    }

    std::vector<std::vector<Candidate>> liveBlocksByFinding() const {
        std::unordered_map<GroupKey, size_t, GroupKeyHash> findingOf;
        std::unordered_map<uintptr_t, size_t> externalOf;
        for (size_t i = 0; i < d_findingSites.size(); ++i) {
            for (const GroupKey& k : d_findingSites[i]->groups) {
                findingOf.emplace(k, i);
            }
            for (uintptr_t ptr : d_findingSites[i]->externalBlocks) {
                externalOf.emplace(ptr, i);
            }
        }
        std::vector<std::vector<Candidate>> blocksOf(d_report.findings.size());
        for (const auto& [ptr, rec] : d_liveNow) {
            std::optional<size_t> index;
            if (auto ext = externalOf.find(ptr); ext != externalOf.end()) {
                index = ext->second; // attributed to its own site by an external stack
            } else if (auto grp = findingOf.find(GroupKey{rec.stack, rec.node, rec.device});
                       grp != findingOf.end()) {
                index = grp->second;
            }
            if (index) {
                blocksOf[*index].emplace_back(rec.iteration, rec.size, rec.sequence, ptr);
            }
        }
        return blocksOf;
    }

    // The representative is the newest block from before the last iteration: the last
    // iteration's own blocks may just be the current state (model.last_hidden), while older
    // survivors are alive only because of what leaks.
    void applyRepresentativePath(Finding& f,
                                 std::vector<Candidate>& blocks,
                                 std::unordered_map<uintptr_t, BlockPath>& paths,
                                 std::unordered_set<uintptr_t>& normalized) {
        std::sort(blocks.begin(), blocks.end(), std::greater<>());
        std::vector<const std::vector<PathStep>*> all;
        const BlockPath* representative = nullptr;
        const BlockPath* newest = nullptr;
        uint32_t lastIteration = d_n > 0 ? static_cast<uint32_t>(d_n - 1) : 0;
        for (const auto& [birth, size, seq, ptr] : blocks) {
            auto it = paths.find(ptr);
            if (it == paths.end()) {
                continue;
            }
            if (!normalized.count(ptr)) {
                it->second.steps = normalizePath(std::move(it->second.steps));
                normalized.insert(ptr);
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
        double growthIterations =
            static_cast<double>(std::max(1, d_report.iterations - std::max(d_inputs.warmup, 0)));
        if (f.retention == Retention::Reachable) {
            f.holder = chooseHolder(f.path, all, growthIterations);
        }
    }

    // Where a tensor met on a path was allocated, when torchleak saw it.
    std::optional<Frame> siteOfPathTensor(uintptr_t block) {
        auto live = d_liveNow.find(block);
        if (live == d_liveNow.end()) {
            return std::nullopt;
        }
        if (const Frame* user = innermostUserFrame(framesOf(live->second.stack))) {
            return *user;
        }
        if (live->second.node) {
            return backwardFrame(d_recorder.nodeName(live->second.node));
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

    // Leaks first, then by live bytes.
    void sortFindings() {
        std::stable_sort(d_report.findings.begin(), d_report.findings.end(),
                         [](const Finding& a, const Finding& b) {
                             bool la = a.verdict == Verdict::Leak, lb = b.verdict == Verdict::Leak;
                             if (la != lb) {
                                 return la;
                             }
                             return a.total_bytes > b.total_bytes;
                         });
    }

    void warnAboutShadowedIterations() {
        if (d_shadowedIterations.empty()) {
            return;
        }
        std::ostringstream w;
        w << "another profiler (torch.profiler) was on top of torchleak's hook during "
          << d_shadowedIterations.size()
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
    std::unordered_map<uintptr_t, BlockRecord> d_liveNow;
    std::map<std::string, SiteAccumulator> d_sites; // ordered: findings come out in key order
    std::unordered_map<GroupKey, std::vector<int64_t>, GroupKeyHash> d_attributed;
    std::vector<uint32_t> d_shadowedIterations;
    std::vector<const SiteAccumulator*> d_findingSites; // parallel to d_report.findings
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
