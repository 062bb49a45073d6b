#pragma once
// The state of one report while it is assembled, and the phases that fill it. Internal to
// buildReport (report_builder.h): report_builder.cpp holds the phases over sites and series,
// finding_paths.cpp the phase that explains findings (paths, holders, the split by holder),
// memory_phases.cpp those over memory (roles, spikes, live block lists, OOM forensics).

#include "torchleak/finding_blocks.h"
#include "torchleak/holder_split.h"
#include "torchleak/report_inputs.h"
#include "torchleak/settled_sites.h"
#include "torchleak/verdict.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace torchleak::assembly {

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
    SampledBytes sampled;                  // of its live blocks, under sampling
    // While the boundaries are replayed: the site's live bytes and oldest birth after the
    // boundaries replayed so far, and how many series points are written.
    int64_t current = 0;
    uint32_t currentOldest = std::numeric_limits<uint32_t>::max();
    size_t filled = 0;
    size_t touchedAt = std::numeric_limits<size_t>::max();
    const std::string* key = nullptr; // its key in the builder's sites
};

// A group's latest sample while the boundaries are replayed, and its site.
struct GroupReplay {
    SiteAccumulator* site = nullptr;
    uint64_t bytes = 0;
    uint64_t count = 0;
    uint32_t oldest = 0;
};

// A live block as the report reads it: one copy of the live table.
struct LiveBlock {
    uintptr_t ptr = 0;
    BlockRecord rec;
};

// A finding while the report is assembled: the site it was made from and its live blocks
// travel with it through the split by holder and the sort.
struct FindingDraft {
    Finding finding;
    const SiteAccumulator* site = nullptr;
    std::vector<FindingBlock> blocks;
};

// The second walk's budget for the report (blocksToWalkAgain), and the share of a sample the
// nearest-neighbour rule may get wrong before it is not trusted.
inline constexpr size_t kSecondWalkBlocks = 65536;
inline constexpr double kNearestHolderErrorAllowed = 0.1;

// One pass per phase over what the recorder kept. The phases run in the order build() lists
// them; each one's comment, where it is defined, says what it adds to the report.
class ReportBuilder {
  public:
    ReportBuilder(const AllocationRecorder& recorder,
                  const ReportInputs& inputs,
                  StackSymbolizer& symbolizer,
                  BlockDescriber& describer,
                  SettledSites* settled = nullptr)
        : d_recorder(recorder), d_inputs(inputs), d_symbolizer(symbolizer), d_describer(describer),
          d_boundaries(recorder.boundaries()), d_n(d_boundaries.size()), d_settled(settled) {}

    Report build(RetentionExplainer* explainer);

  private:
    // Sites and their series (report_builder.cpp).
    void startReport();
    void readLiveBlocks();
    void replayBoundaries();
    bool lookKeepsSettledSites(bool lookOnly) const;
    std::string settledContext() const;
    void markChangedSettledSites();
    bool settledUnchanged(const GroupKey& key) const;
    void startSeries(SiteAccumulator& acc) const;
    void fillTo(SiteAccumulator& acc, size_t b) const;
    GroupReplay& replayOf(const GroupKey& key);
    void reconcileWithAllocator();
    void setAsideFreedAfterStop();
    void attributeExternalStacks();
    void makeFindings(bool lookOnly);
    struct SettledNow {
        const SiteAccumulator* site;
        std::optional<Verdict> verdict;
    };
    void keepSettledSites(std::vector<SettledNow> now);
    void fillSurvivors();
    Classification
    classifyPerRun(const SiteSeries& series, const std::vector<Frame>& stack, Frame& site) const;
    void gatherLiveBlocks();
    void describeExamples();
    void finalizeFindings();
    void settleVerdict(FindingDraft& draft) const;
    void sortFindings();
    void warnAboutDroppedEvents();
    void warnAboutRejectedTotals();
    void warnAboutShadowedIterations();
    const std::vector<Frame>& framesOf(StackToken token);
    SiteAccumulator& siteFor(const Frame& site, const std::string& device, const std::string& node);

    // Memory by finding and device (memory_phases.cpp).
    void listLiveBlocks();
    void publishFindings();
    void findPeakSpikes();
    std::vector<LiveNow> liveNowByFinding() const;
    void addOutOfMemoryForensics();
    void warnAboutUntrackedGrowth();

    // Why each finding's blocks are alive (finding_paths.cpp).
    void explainFindings(RetentionExplainer& explainer);
    // fix_proof.cpp
    void proveFixes(RetentionExplainer& explainer);
    void nameCppOwners(const std::vector<std::vector<FindingBlock>>& sampled,
                       std::unordered_map<uintptr_t, BlockPath>& paths);
    std::unordered_map<uintptr_t, BlockHolder>
    blockHolders(const Finding& whole,
                 const std::vector<FindingBlock>& sample,
                 double sampleScale,
                 const std::unordered_map<uintptr_t, BlockPath>& paths) const;
    std::vector<uintptr_t> blocksToWalkAgain(std::vector<std::vector<FindingBlock>>& sampled,
                                             std::vector<double>& scale,
                                             const std::unordered_map<uintptr_t, BlockPath>& paths);
    std::vector<FindingDraft> splitFinding(const FindingDraft& whole,
                                           const std::vector<FindingBlock>& sample,
                                           double sampleScale,
                                           const std::unordered_map<uintptr_t, BlockPath>& paths);
    double growthIterations(const Finding& f) const;
    void applyRepresentativePath(Finding& f,
                                 const std::vector<FindingBlock>& blocks,
                                 double sampleScale,
                                 const std::unordered_map<uintptr_t, BlockPath>& paths);
    std::optional<Frame> siteOfPathTensor(uintptr_t block);

    const AllocationRecorder& d_recorder;
    const ReportInputs& d_inputs;
    StackSymbolizer& d_symbolizer;
    BlockDescriber& d_describer;
    const std::vector<BoundarySnapshot>& d_boundaries;
    const size_t d_n;
    // The last look's settled sites: read and refilled by a look that may keep them, else null.
    SettledSites* d_settled;

    Report d_report;
    // The findings until publishFindings() moves them into d_report; their blocks stay here
    // for the out-of-memory forensics.
    std::vector<FindingDraft> d_drafts;
    // Files read for loop reads, by name: once per report however many sites they hold.
    std::map<std::string, std::vector<std::string>> d_sourceFiles;
    std::unordered_map<StackToken, std::vector<Frame>> d_decoded;
    std::vector<uint32_t> d_at; // the iteration of each kept boundary
    std::vector<LiveBlock> d_liveNow;
    std::vector<LiveBlock> d_freedAfterStop;
    std::map<std::string, SiteAccumulator> d_sites; // ordered: findings come out in key order
    std::unordered_map<GroupKey, GroupReplay, GroupKeyHash> d_replay;
    uint32_t d_shadowedIterations = 0;
};

} // namespace torchleak::assembly
