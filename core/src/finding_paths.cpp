// The phase of buildReport that says why each finding's blocks are alive: a sample of every
// finding's blocks walked in one go (a second walk where the sample misleads), the C++ owner
// named where the evidence allows, the finding split by holder, and each part's representative
// path and holder.

#include "report_assembly.h"
#include "torchleak/display_text.h"
#include "torchleak/holder_split.h"
#include "torchleak/retention.h"
#include "torchleak/site_rule.h"

#include <algorithm>
#include <functional>
#include <unordered_set>

namespace torchleak::assembly {

// Retaining paths of a sample of every finding's live blocks (one walk for all of them),
// then each finding's representative path, the sites of the tensors on it, and its holder.
void ReportBuilder::explainFindings(RetentionExplainer& explainer) {
    std::vector<std::vector<FindingBlock>> sampled(d_drafts.size());
    std::vector<double> scale(d_drafts.size(), 1.0);
    std::vector<uintptr_t> allBlocks;
    const size_t limit = pathSamplesPerFinding(d_drafts.size());
    for (size_t i = 0; i < d_drafts.size(); ++i) {
        // (The ledger's sites that did not grow have no blocks: gatherLiveBlocks.)
        std::vector<FindingBlock>& blocks = d_drafts[i].blocks;
        std::sort(blocks.begin(), blocks.end(), std::greater<>());
        sampled[i] = samplePathBlocks(blocks, limit);
        if (!sampled[i].empty()) {
            scale[i] = static_cast<double>(blocks.size()) / static_cast<double>(sampled[i].size());
        }
        for (const FindingBlock& b : sampled[i]) {
            allBlocks.push_back(b.block);
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
    std::vector<FindingDraft> explained;
    for (size_t i = 0; i < d_drafts.size(); ++i) {
        std::vector<FindingDraft> parts = splitFinding(d_drafts[i], sampled[i], scale[i], paths);
        if (parts.empty()) {
            applyRepresentativePath(d_drafts[i].finding, sampled[i], scale[i], paths);
            parts.push_back(std::move(d_drafts[i]));
        }
        for (FindingDraft& part : parts) {
            explained.push_back(std::move(part));
        }
    }
    d_drafts = std::move(explained);
}

// Memory no Python object reaches starts at the C++ cache the evidence names (an open
// autocast region, a compilation in this process), not at a bare "held only from C++".
void ReportBuilder::nameCppOwners(const std::vector<std::vector<FindingBlock>>& sampled,
                                  std::unordered_map<uintptr_t, BlockPath>& paths) {
    for (size_t i = 0; i < sampled.size(); ++i) {
        std::optional<PathStep> owner;
        bool looked = false;
        for (const FindingBlock& b : sampled[i]) {
            auto it = paths.find(b.block);
            if (it == paths.end() || it->second.retention != Retention::CppOnly ||
                it->second.steps.empty() || !isAnonymousCppRoot(it->second.steps[0].label)) {
                continue;
            }
            if (!looked) {
                owner = namedCppOwner(d_drafts[i].finding, d_inputs.torch_caches);
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

// Who keeps each sampled block whose path was found (none for fewer than two paths).
std::unordered_map<uintptr_t, BlockHolder>
ReportBuilder::blockHolders(const Finding& whole,
                            const std::vector<FindingBlock>& sample,
                            double sampleScale,
                            const std::unordered_map<uintptr_t, BlockPath>& paths) const {
    std::vector<const std::vector<PathStep>*> all;
    std::vector<uint32_t> births;
    for (const FindingBlock& b : sample) {
        if (auto it = paths.find(b.block); it != paths.end()) {
            all.push_back(&it->second.steps);
            births.push_back(b.birth);
        }
    }
    std::unordered_map<uintptr_t, BlockHolder> holders;
    if (all.size() < 2) {
        return holders;
    }
    const PathFanout fanout(all, births);
    for (const FindingBlock& b : sample) {
        auto it = paths.find(b.block);
        if (it == paths.end()) {
            continue;
        }
        std::optional<Holder> holder;
        if (it->second.retention == Retention::Reachable) {
            holder = fanout.holderOn(it->second.steps, growthIterations(whole), sampleScale);
        }
        holders[b.block] = BlockHolder{holderName(it->second, holder), holder.has_value()};
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
ReportBuilder::blocksToWalkAgain(std::vector<std::vector<FindingBlock>>& sampled,
                                 std::vector<double>& scale,
                                 const std::unordered_map<uintptr_t, BlockPath>& paths) {
    std::vector<uintptr_t> more;
    for (size_t i = 0; i < sampled.size() && more.size() < kSecondWalkBlocks; ++i) {
        const std::vector<FindingBlock>& blocks = d_drafts[i].blocks;
        if (sampled[i].size() >= blocks.size()) {
            continue;
        }
        const auto holders = blockHolders(d_drafts[i].finding, sampled[i], scale[i], paths);
        std::vector<std::pair<uint64_t, std::string>> named;
        for (const FindingBlock& b : sampled[i]) {
            if (auto it = holders.find(b.block); it != holders.end()) {
                named.emplace_back(b.sequence, it->second.name);
            }
        }
        if (nearestHolderErrorRate(std::move(named)) <= kNearestHolderErrorAllowed) {
            continue;
        }
        std::unordered_set<uintptr_t> have;
        for (const FindingBlock& b : sampled[i]) {
            have.insert(b.block);
        }
        std::vector<FindingBlock> rest;
        for (const FindingBlock& b : blocks) {
            if (!have.count(b.block)) {
                rest.push_back(b);
            }
        }
        // Spread over the rest when the budget cannot take all of it.
        const size_t take = std::min(rest.size(), kSecondWalkBlocks - more.size());
        for (size_t k = 0; k < take; ++k) {
            const FindingBlock& b = rest[k * rest.size() / take];
            sampled[i].push_back(b);
            more.push_back(b.block);
        }
        scale[i] = static_cast<double>(blocks.size()) / static_cast<double>(sampled[i].size());
    }
    return more;
}

// One finding per holder (holder_split.h): the site's live blocks split by who keeps
// them, each part with its own curve, verdict, path and fix. Empty when the site has one
// holder.
std::vector<FindingDraft>
ReportBuilder::splitFinding(const FindingDraft& whole,
                            const std::vector<FindingBlock>& sample,
                            double sampleScale,
                            const std::unordered_map<uintptr_t, BlockPath>& paths) {
    const SiteAccumulator* acc = whole.site;
    if (acc == nullptr) {
        return {};
    }
    const auto holders = blockHolders(whole.finding, sample, sampleScale, paths);
    if (holders.size() < 2) {
        return {};
    }
    const std::vector<FindingBlock>& blocks = whole.blocks;
    SiteSeries series = acc->series;
    series.at = d_at;
    std::vector<HolderPart> parts =
        splitByHolder(blocks, holders, series, d_inputs.warmup, d_inputs.config);
    std::vector<FindingDraft> drafts;
    for (HolderPart& part : parts) {
        Finding f = whole.finding;
        f.path.clear();
        f.path_text.clear();
        f.holder.reset();
        f.retention = Retention::Unknown;
        SampledBytes sampled;
        for (size_t k : part.blocks) {
            sampled.add(blocks[k].size, blocks[k].weight);
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
        f.growth_since = c.growth_since;
        f.series = part.series.bytes;
        f.total_bytes = static_cast<uint64_t>(std::max<int64_t>(part.series.bytes.back(), 0));
        std::vector<FindingBlock> mine;
        std::vector<FindingBlock> mineSampled;
        for (size_t k : part.blocks) {
            mine.push_back(blocks[k]);
            if (holders.count(blocks[k].block) != 0) {
                mineSampled.push_back(blocks[k]);
            }
        }
        std::sort(mine.begin(), mine.end(), std::greater<>());
        std::sort(mineSampled.begin(), mineSampled.end(), std::greater<>());
        const uint32_t last = d_at.back();
        f.count = static_cast<uint64_t>(std::count_if(
            mine.begin(), mine.end(), [&](const FindingBlock& b) { return b.birth <= last; }));
        applyRepresentativePath(f, mineSampled, sampleScale, paths);
        if (!f.path.empty() && f.path.back().tensor) {
            f.dtype = f.path.back().tensor->dtype;
            f.shape = f.path.back().tensor->shape;
        }
        drafts.push_back({std::move(f), acc, std::move(mine)});
    }
    return drafts;
}

// The judged iterations a holder's fan-out is measured against: in cell watch those of
// the finding's cell (a list appended to once per run of one cell among others grows one
// element per run), else the run's.
double ReportBuilder::growthIterations(const Finding& f) const {
    int iterations =
        f.site.runs.empty() ? d_report.iterations : static_cast<int>(f.site.runs.size());
    return static_cast<double>(std::max(1, iterations - std::max(d_inputs.warmup, 0)));
}

// The finding's path (finding_blocks.h says which block's), the sites of the tensors on it,
// and its holder.
void ReportBuilder::applyRepresentativePath(Finding& f,
                                            const std::vector<FindingBlock>& blocks,
                                            double sampleScale,
                                            const std::unordered_map<uintptr_t, BlockPath>& paths) {
    std::vector<const std::vector<PathStep>*> all;
    std::vector<uint32_t> births;
    const BlockPath* representative =
        representativePath(blocks, paths, d_n > 0 ? d_at.back() : 0, all, &births);
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
        f.holder = chooseHolder(f.path, all, growthIterations(f), sampleScale, births);
        if (f.holder) {
            f.holder->library = libraryOwnerOf(f);
        }
    }
}

// Where a tensor met on a path was allocated, when torchleak saw it. Asked of the live
// table itself: the tensor on the path is alive, so its block is still the one recorded.
std::optional<Frame> ReportBuilder::siteOfPathTensor(uintptr_t block) {
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

} // namespace torchleak::assembly
