#pragma once
// The shape of a growth curve in time: when the growth began (its change point) and whether it
// has stopped. Real leaks rarely last a whole run: they begin at the first evaluation, a new
// data shard, a scheduler milestone. A cache grows until it is full, then stays flat. The
// verdict (verdict.h) decides *whether* the recent regime grows, on tests whose false-alarm
// cost is counted; this file only says *where* the regimes meet, for the rate and the words.

#include <cstddef>
#include <optional>
#include <span>
#include <vector>

namespace torchleak {

// The change point of a series that is flat and then rises: the index k minimising the squared
// error of y = a + b * max(0, x - x[k]) (segmented regression with one free knot, O(n) with
// suffix sums). The knot is kept only when the hinge explains the series better than one
// straight line through all of it by more than a searched knot costs: n ln(SSE_line / SSE_knot)
// > 3 ln n (BIC's penalty for the slope and, for a position searched among n, twice again);
// `forced` keeps the best knot whatever it costs (a recent regime already shown to grow).
// 0 when there is none.
size_t riseOnset(std::span<const double> x, std::span<const double> y, bool forced = false);

struct GrowthShape {
    size_t onset = 0;     // index of the last point before the growth (0: from the start)
    size_t top = 0;       // index of the first point at the series' highest level
    bool stopped = false; // flat since `top` for long enough: bounded growth, not a leak
    // Stopped, and flat for kSettledRatio times as long as it grew: a plateau. Stopped but not
    // settled is too soon to tell a cache that filled from a leak that pauses (one that steps
    // at each epoch's evaluation: grows 20 iterations, pauses 100).
    bool settled = false;
    // Grew, then flat for kMinFlatPoints or more, but for less than twice its longest pause:
    // a staircase between two steps, as undecided as a stop that has not settled.
    bool paused = false;
    // Where a stopped or paused growth is settled if it stays flat: `top`'s iteration plus
    // kSettledRatio times its growth or twice its longest pause between new highs, whichever
    // is longer. 0 when it neither stopped nor paused.
    double settles_at = 0.0;
    double grown = 0.0;     // y[top] - y[onset]
    double tolerance = 0.0; // the noise a level is allowed, in y units
};

// A growth made of regular steps: an evaluation epoch's leak (6 MiB every 5 iterations), said
// as one ("6.0 MiB every 5 iterations since iteration 5") with its onset at its first step, not
// where a line through the steps would cross the floor (mid-step) or the end of warm-up. The
// series rises only in jumps over `tolerance`, two or more, at least two iterations apart and
// regularly (the widest gap at most 1.5 times the narrowest, each gap known within the widths
// of its two points: a thinned grid moves a step to the next kept point), of like size (the
// biggest at most twice the smallest), the jumps making nine tenths of the rise from before the
// first to the end, flat between them (drifting by no more than twice the tolerance or half a
// step), and nothing falls by more than the tolerance. `first` is the index of the point the
// first step shows at; `every` is exact on a dense series and the jumps' mean gap on a grid.
struct Staircase {
    size_t first = 0;
    double step = 0.0;      // the median jump, in y units
    double every = 0.0;     // the median gap between jumps, in x units
    std::vector<size_t> at; // the index of each jump's point, `first` the first
};
std::optional<Staircase>
staircaseOf(std::span<const double> x, std::span<const double> y, double tolerance);

// Where the growth began and whether it stopped. The highest level is reached at `top` (within
// the noise: twice the robust spread of the series' steps, and of the sampled noise known
// from `varianceFloor` per byte). It has stopped when the series has stayed below it for at
// least kMinFlatPoints points, and for at least twice the longest pause between new highs
// while it grew (a staircase that steps every 50 iterations pauses 49: it stops only after
// 100 flat), and the part after `top` does not rise at a quarter of the growth's rate.
inline constexpr size_t kMinFlatPoints = 8;
inline constexpr double kSettledRatio = 8.0;
GrowthShape growthShape(std::span<const double> x,
                        std::span<const double> y,
                        double varianceFloor,
                        double minRate);

} // namespace torchleak
