#pragma once
// One finding per holder: the live blocks of one allocation site split by who keeps them, each
// part with a growth curve of its own. In real models nearly every activation is allocated at
// the same few lines (`model(x)`, a shared forward()), so a site is not a cause: the output
// kept in `train_outs` and the one kept in `val_outs` are two leaks with two fixes.

#include "torchleak/config.h"
#include "torchleak/finding_blocks.h"
#include "torchleak/verdict.h"

#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace torchleak {

// Who keeps a block whose retaining path was found: holderName() (retention.h), and whether
// that is a container growing with the iterations.
struct BlockHolder {
    std::string name;
    bool grows = false;
};

struct HolderPart {
    std::string name; // empty: the blocks no path explained, and the bytes freed since
    bool grows = false;
    std::vector<size_t> blocks; // indices into the site's blocks
    SiteSeries series;          // bytes, born and oldest at the site's boundaries
};

// The site's blocks by holder, or nothing when the site has one holder (it stays one finding).
// Paths are found for a sample of the blocks (`holders`, by pointer); a block outside the
// sample goes with the sampled block nearest to it in allocation order. A part's curve is
// what its blocks alive now had alive at each boundary; the rest of the site's curve (blocks
// freed since) goes to its biggest holder that does not grow, the working set it belongs to.
// When that rest itself keeps growing, who held it cannot be told now: nothing is split.
// How often splitByHolder's nearest-neighbour rule names the wrong holder, measured on the
// sampled blocks themselves: each (sequence, holder name) predicted from its nearest other
// sampled block in allocation order; the worst rate of any holder with two sampled blocks or
// more. Holders that take turns (one line appending to fifty lists in turn, or to one list a
// loop variable also names) make the rule a guess, and their unsampled blocks need paths of
// their own. 0 for fewer than two blocks.
double nearestHolderErrorRate(std::vector<std::pair<uint64_t, std::string>> sampled);

// `blocks`: the site's blocks alive when the report is built (a block's bytes are its weight).
std::vector<HolderPart> splitByHolder(const std::vector<FindingBlock>& blocks,
                                      const std::unordered_map<uintptr_t, BlockHolder>& holders,
                                      const SiteSeries& site,
                                      int warmup,
                                      const AnalysisConfig& config);

} // namespace torchleak
