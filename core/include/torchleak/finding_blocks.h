#pragma once
// A finding's live blocks as the report reads them, which of them get a retaining path looked
// for, and which one's path stands for the finding.

#include "torchleak/memory_roles.h"
#include "torchleak/retention.h"

#include <compare>
#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <vector>

namespace torchleak {

// Ordered by birth iteration, then size, then allocation sequence: sorted descending, the
// newest iteration comes first and, within it, the biggest block (the bytes that matter, not a
// scalar allocated on the same line).
struct FindingBlock {
    uint32_t birth = 0; // the iteration it was allocated in
    uint64_t size = 0;
    uint64_t sequence = 0; // allocation order
    uintptr_t block = 0;
    uint64_t weight = 0;                    // the bytes it stands for (size, or more when sampled)
    MemoryRole role = MemoryRole::UserHeld; // memory_roles.h's roleOfBlock

    friend auto operator<=>(const FindingBlock&, const FindingBlock&) = default;
};

// Paths are found for at most this many blocks of one finding (the newest first, then spread
// over the rest): a finding of a million blocks needs its representative path and a fair
// sample of where the others hang, not a million paths.
inline constexpr size_t kPathSamplesPerFinding = 256;
inline constexpr size_t kPathHeadSamples = 32;
// A report of thousands of findings shares one budget of sampled blocks, each finding keeping
// at least kPathSamplesAtLeast: 2,000 sites of 30 blocks each had 60,000 paths built and
// fanned out, 0.35 ms a finding, most of the report. Under 64 findings nothing changes.
inline constexpr size_t kPathSamplesPerReport = 16384;
inline constexpr size_t kPathSamplesAtLeast = 16;

// How many blocks of each of `findings` findings get a path looked for.
size_t pathSamplesPerFinding(size_t findings) noexcept;

// The newest blocks (an eighth of `limit`, kPathHeadSamples at the default: the
// representative is among them), then blocks spread evenly over the rest, `limit` in all.
// `blocks` is sorted newest first.
std::vector<FindingBlock> samplePathBlocks(const std::vector<FindingBlock>& blocks,
                                           size_t limit = kPathSamplesPerFinding);

// The path that stands for a finding, of its blocks sorted newest first: the newest block's
// from before the site's last iteration, since that iteration's own blocks may just be the
// current state (model.last_hidden) while older survivors are alive only because of what
// leaks; the newest block's when every path is from then; nullptr when no path was found.
// `lastBoundaryIteration` is the iteration the run's last boundary ended: in cell watch it may
// end another cell's run, and the site's own newest blocks are then just as much current state.
// `found` receives every path the blocks have, for the holder's fan-out, and `births` (when
// given) the iteration of each one's block.
const BlockPath* representativePath(const std::vector<FindingBlock>& blocks,
                                    const std::unordered_map<uintptr_t, BlockPath>& paths,
                                    uint32_t lastBoundaryIteration,
                                    std::vector<const std::vector<PathStep>*>& found,
                                    std::vector<uint32_t>* births = nullptr);

} // namespace torchleak
