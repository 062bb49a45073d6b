#include "torchleak/holder_split.h"

#include "torchleak/trend.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

namespace torchleak {

namespace {

constexpr uint32_t kNoBirth = std::numeric_limits<uint32_t>::max();

// The point index of each iteration of the site's grid: a block born in iteration `birth` is
// counted from the first boundary at or after it.
size_t firstBoundaryOf(const std::vector<uint32_t>& at, size_t n, uint32_t birth) {
    if (at.empty()) {
        return birth;
    }
    return std::min(
        n, static_cast<size_t>(std::lower_bound(at.begin(), at.end(), birth) - at.begin()));
}

uint32_t iterationOf(const std::vector<uint32_t>& at, size_t b) {
    return at.empty() ? static_cast<uint32_t>(b) : at[b];
}

// What the part's blocks alive now had alive at each boundary.
SiteSeries survivorSeries(const std::vector<FindingBlock>& blocks,
                          const std::vector<size_t>& mine,
                          const SiteSeries& site) {
    const size_t n = site.bytes.size();
    SiteSeries s;
    s.at = site.at;
    s.bytes.assign(n, 0);
    s.born.assign(n, 0);
    s.oldest.assign(n, kNoBirth);
    s.surviving_since.assign(n, kNoBirth);
    std::vector<int64_t> added(n + 1, 0);
    for (size_t k : mine) {
        const FindingBlock& block = blocks[k];
        size_t first = firstBoundaryOf(site.at, n, block.birth);
        if (first >= n) {
            continue; // born after the last boundary: in no point yet
        }
        added[first] += static_cast<int64_t>(block.weight);
        s.surviving_since[first] = std::min(s.surviving_since[first], block.birth);
        if (iterationOf(site.at, first) == block.birth) {
            s.born[first] += static_cast<int64_t>(block.weight);
        }
        for (size_t b = first; b < n; ++b) {
            s.oldest[b] = std::min(s.oldest[b], block.birth);
        }
    }
    int64_t running = 0;
    for (size_t b = 0; b < n; ++b) {
        running += added[b];
        s.bytes[b] = running;
    }
    for (auto* births : {&s.oldest, &s.surviving_since}) {
        for (uint32_t& o : *births) {
            o = o == kNoBirth ? 0 : o;
        }
    }
    // Every block counted here is alive now: each point's survivors are what it added.
    s.surviving.assign(added.begin(), added.end() - 1);
    return s;
}

double medianWeight(const std::vector<FindingBlock>& blocks, const std::vector<size_t>& mine) {
    std::vector<double> w;
    for (size_t k : mine) {
        w.push_back(static_cast<double>(blocks[k].weight));
    }
    return upperMedian(std::move(w));
}

// A name that holds only the site's newest blocks (`t = fwd(x); outs.append(t)`) is the
// loop's current value, found first because its path is shorter; the same block is in the
// growing container too, whose curve would otherwise stop one block short. So is a name that
// holds the one before (`prev = hist[-1]; hist.append(prev + 1)` leaves `prev` on the
// second newest): left apart, the container's curve has a flat step, and a short run with one
// flat step is not judged a leak. Such a name's blocks go to the growing part whose blocks are
// most like them in size; the one before only when the sizes agree (within a factor of two),
// since a working set replaced in the last iteration but one (`state = fwd(x)`) is a holder of
// its own. On entry each part's `blocks` are its sampled blocks; `newest` and `before` are the
// births of the two newest iterations that gave the site a block.
void foldNewestIntoGrowing(const std::vector<FindingBlock>& blocks,
                           std::vector<HolderPart>& parts,
                           std::vector<std::pair<uint64_t, size_t>>& sampled,
                           uint32_t newest,
                           uint32_t before) {
    std::vector<size_t> growing;
    for (size_t p = 0; p < parts.size(); ++p) {
        if (parts[p].grows) {
            growing.push_back(p);
        }
    }
    if (growing.empty()) {
        return;
    }
    std::vector<double> medians(parts.size(), 0.0);
    for (size_t p : growing) {
        medians[p] = medianWeight(blocks, parts[p].blocks);
    }
    std::vector<size_t> into(parts.size());
    for (size_t p = 0; p < parts.size(); ++p) {
        into[p] = p;
        const HolderPart& part = parts[p];
        bool newestOnly = std::all_of(part.blocks.begin(), part.blocks.end(),
                                      [&](size_t k) { return blocks[k].birth >= newest; });
        bool recentOnly = std::all_of(part.blocks.begin(), part.blocks.end(),
                                      [&](size_t k) { return blocks[k].birth >= before; });
        if (part.grows || part.name.empty() || !recentOnly) {
            continue;
        }
        const double size = medianWeight(blocks, part.blocks);
        size_t nearest = *std::min_element(growing.begin(), growing.end(), [&](size_t a, size_t b) {
            return std::fabs(medians[a] - size) < std::fabs(medians[b] - size);
        });
        bool alike = size <= 2.0 * medians[nearest] && medians[nearest] <= 2.0 * size;
        if (newestOnly || alike) {
            into[p] = nearest;
        }
    }
    for (auto& [sequence, part] : sampled) {
        part = into[part];
    }
    for (size_t p = 0; p < parts.size(); ++p) {
        if (into[p] != p) {
            auto& target = parts[into[p]].blocks;
            target.insert(target.end(), parts[p].blocks.begin(), parts[p].blocks.end());
            parts[p].blocks.clear();
        }
    }
}

} // namespace

double nearestHolderErrorRate(std::vector<std::pair<uint64_t, std::string>> sampled) {
    if (sampled.size() < 2) {
        return 0.0;
    }
    std::sort(sampled.begin(), sampled.end());
    std::map<std::string, std::pair<size_t, size_t>> byHolder; // (wrong, sampled)
    for (size_t k = 0; k < sampled.size(); ++k) {
        // The nearer neighbour, the earlier one on a tie (as splitByHolder takes it).
        size_t nearest = k == 0 ? 1 : k - 1;
        if (k > 0 && k + 1 < sampled.size() &&
            sampled[k + 1].first - sampled[k].first < sampled[k].first - sampled[k - 1].first) {
            nearest = k + 1;
        }
        auto& [wrong, count] = byHolder[sampled[k].second];
        wrong += sampled[nearest].second != sampled[k].second ? 1 : 0;
        ++count;
    }
    // The worst holder's: a list filled in turn with 49 others is a scramble even when the
    // 49 share one name and the whole sample looks 96% right.
    double worst = 0.0;
    for (const auto& [name, counts] : byHolder) {
        if (counts.second >= 2) {
            worst = std::max(worst, static_cast<double>(counts.first) /
                                        static_cast<double>(counts.second));
        }
    }
    return worst;
}

std::vector<HolderPart> splitByHolder(const std::vector<FindingBlock>& blocks,
                                      const std::unordered_map<uintptr_t, BlockHolder>& holders,
                                      const SiteSeries& site,
                                      int warmup,
                                      const AnalysisConfig& config) {
    const size_t n = site.bytes.size();
    std::vector<HolderPart> parts;
    std::map<std::string, size_t> partOf;
    // (sequence, part) of the sampled blocks, for the nearest-neighbour rule.
    std::vector<std::pair<uint64_t, size_t>> sampled;
    size_t named = 0;
    for (const FindingBlock& block : blocks) {
        auto it = holders.find(block.block);
        if (it == holders.end()) {
            continue;
        }
        auto [entry, fresh] = partOf.emplace(it->second.name, parts.size());
        if (fresh) {
            parts.push_back(HolderPart{it->second.name, false, {}, {}});
            named += it->second.name.empty() ? 0 : 1;
        }
        parts[entry->second].grows = parts[entry->second].grows || it->second.grows;
        parts[entry->second].blocks.push_back(static_cast<size_t>(&block - blocks.data()));
        sampled.emplace_back(block.sequence, entry->second);
    }
    if (named < 2 || n == 0) {
        return {};
    }
    // The site's two newest iterations: in cell watch the last boundary may end another
    // cell's run, so births, not boundaries, say which they are.
    uint32_t newest = 0;
    for (const FindingBlock& block : blocks) {
        newest = std::max(newest, block.birth);
    }
    uint32_t beforeNewest = newest;
    for (const FindingBlock& block : blocks) {
        if (block.birth < newest && (beforeNewest == newest || block.birth > beforeNewest)) {
            beforeNewest = block.birth;
        }
    }
    foldNewestIntoGrowing(blocks, parts, sampled, newest, beforeNewest);
    named = static_cast<size_t>(std::count_if(parts.begin(), parts.end(), [](const HolderPart& p) {
        return !p.name.empty() && !p.blocks.empty();
    }));
    if (named < 2) {
        return {};
    }
    for (HolderPart& part : parts) {
        part.blocks.clear(); // filled again below, with the blocks outside the sample
    }
    std::sort(sampled.begin(), sampled.end());
    for (size_t k = 0; k < blocks.size(); ++k) {
        auto next = std::lower_bound(sampled.begin(), sampled.end(),
                                     std::make_pair(blocks[k].sequence, size_t{0}));
        size_t part = 0;
        if (next == sampled.end()) {
            part = std::prev(next)->second;
        } else if (next == sampled.begin() || next->first == blocks[k].sequence) {
            part = next->second;
        } else {
            auto before = std::prev(next);
            part = blocks[k].sequence - before->first <= next->first - blocks[k].sequence
                       ? before->second
                       : next->second;
        }
        parts[part].blocks.push_back(k);
    }
    SiteSeries rest = site;
    rest.surviving.clear(); // what is left once the parts are taken out was freed since
    rest.surviving_since.clear();
    for (HolderPart& part : parts) {
        part.series = survivorSeries(blocks, part.blocks, site);
        for (size_t b = 0; b < n; ++b) {
            rest.bytes[b] -= part.series.bytes[b];
            rest.born[b] -= part.series.born[b];
        }
    }
    bool restLeft = false;
    for (size_t b = 0; b < n; ++b) {
        rest.bytes[b] = std::max<int64_t>(rest.bytes[b], 0);
        rest.born[b] = std::max<int64_t>(rest.born[b], 0);
        restLeft = restLeft || rest.bytes[b] > 0;
    }
    if (restLeft) {
        if (classify(rest, warmup, config).verdict == Verdict::Leak) {
            return {}; // freed memory that grew: whose it was is gone with it
        }
        // The working set a holder keeps replacing (`out = model(x)`): the outputs freed
        // since were its own.
        HolderPart* steady = nullptr;
        for (HolderPart& part : parts) {
            if (!part.grows && !part.name.empty() && !part.blocks.empty() &&
                (steady == nullptr || part.series.bytes.back() > steady->series.bytes.back())) {
                steady = &part;
            }
        }
        if (steady == nullptr) {
            auto [entry, fresh] = partOf.emplace("", parts.size());
            if (fresh) {
                HolderPart unknown;
                unknown.series.at = site.at;
                unknown.series.bytes.assign(n, 0);
                unknown.series.born.assign(n, 0);
                unknown.series.oldest.assign(n, 0);
                parts.push_back(std::move(unknown));
            }
            steady = &parts[entry->second];
        }
        for (size_t b = 0; b < n; ++b) {
            if (rest.bytes[b] > 0) {
                steady->series.oldest[b] = steady->series.bytes[b] > 0
                                               ? std::min(steady->series.oldest[b], rest.oldest[b])
                                               : rest.oldest[b];
            }
            steady->series.bytes[b] += rest.bytes[b];
            steady->series.born[b] += rest.born[b];
        }
    }
    // A part with nothing at any boundary (all born in an iteration no boundary ended yet)
    // joins the biggest part rather than stand as a finding of no bytes; a part of no live
    // block (only bytes freed since, no holder left to name) is no finding.
    auto biggest = std::max_element(parts.begin(), parts.end(), [](const auto& a, const auto& b) {
        return a.series.bytes.back() < b.series.bytes.back();
    });
    size_t biggestIndex = static_cast<size_t>(biggest - parts.begin());
    std::vector<bool> dropped(parts.size(), false);
    for (size_t p = 0; p < parts.size(); ++p) {
        if (p == biggestIndex) {
            continue;
        }
        bool empty = std::all_of(parts[p].series.bytes.begin(), parts[p].series.bytes.end(),
                                 [](int64_t v) { return v <= 0; });
        dropped[p] = empty || parts[p].blocks.empty();
        if (empty) {
            auto& into = parts[biggestIndex].blocks;
            into.insert(into.end(), parts[p].blocks.begin(), parts[p].blocks.end());
        }
    }
    std::vector<HolderPart> kept;
    for (size_t p = 0; p < parts.size(); ++p) {
        if (!dropped[p]) {
            kept.push_back(std::move(parts[p]));
        }
    }
    size_t stillNamed = static_cast<size_t>(std::count_if(
        kept.begin(), kept.end(), [](const HolderPart& p) { return !p.name.empty(); }));
    if (kept.size() < 2 || stillNamed < 1) {
        return {};
    }
    return kept;
}

} // namespace torchleak
