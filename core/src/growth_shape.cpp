#include "torchleak/growth_shape.h"

#include "torchleak/trend.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace torchleak {

namespace {

// The spread of one point's noise, from the steps between neighbours: robust (a leak's steady
// steps, a staircase's rare jumps and a cache's one fill leave it at 0), and a point's noise is
// the step's over sqrt 2.
double stepNoise(std::span<const double> y) {
    if (y.size() < 3) {
        return 0.0;
    }
    std::vector<double> steps(y.size() - 1);
    for (size_t i = 1; i < y.size(); ++i) {
        steps[i - 1] = y[i] - y[i - 1];
    }
    const double centre = upperMedian(steps);
    for (double& s : steps) {
        s = std::fabs(s - centre);
    }
    return 1.4826 * upperMedian(std::move(steps)) / std::sqrt(2.0);
}

} // namespace

size_t riseOnset(std::span<const double> x, std::span<const double> y, bool forced) {
    const size_t n = std::min(x.size(), y.size());
    if (n < 4) {
        return 0;
    }
    // Centred sums in long double: a run's iterations reach 10^6 and its bytes 10^11, and an
    // exact hinge must come out with an error of ~0, not of the sums' rounding.
    long double meanY = 0.0L;
    for (size_t i = 0; i < n; ++i) {
        meanY += static_cast<long double>(y[i]) / static_cast<long double>(n);
    }
    const long double x0 = x[0];
    std::vector<long double> yc(n), xc(n);
    long double syy = 0.0L;
    for (size_t i = 0; i < n; ++i) {
        yc[i] = static_cast<long double>(y[i]) - meanY;
        xc[i] = static_cast<long double>(x[i]) - x0;
        syy += yc[i] * yc[i];
    }
    if (!(syy > 0.0L)) {
        return 0;
    }
    // Suffix sums over the points after the knot: count, x, x^2, x y, y.
    long double c = 0.0L, sx = 0.0L, sxx = 0.0L, sxy = 0.0L, sy = 0.0L;
    std::vector<long double> sse(n, syy);
    for (size_t k = n - 1; k-- > 0;) {
        const size_t i = k + 1;
        c += 1.0L;
        sx += xc[i];
        sxx += xc[i] * xc[i];
        sxy += xc[i] * yc[i];
        sy += yc[i];
        if (k + 3 > n) {
            continue; // at least two points after the knot
        }
        const long double xk = xc[k];
        const long double sz = sx - c * xk;
        const long double szz = sxx - 2.0L * xk * sx + c * xk * xk;
        const long double szy = sxy - xk * sy;
        const long double var = szz - sz * sz / static_cast<long double>(n);
        if (var > 0.0L) {
            sse[k] = std::max(syy - szy * szy / var, 0.0L);
        }
    }
    const long double exact = 1e-12L * syy;
    size_t best = 0;
    for (size_t k = 1; k + 2 < n; ++k) {
        if (sse[k] < sse[best] - exact) {
            best = k;
        }
    }
    if (forced || best == 0 || sse[best] <= exact) {
        return best;
    }
    if (sse[0] <= exact) {
        return 0; // a straight line from the start
    }
    const double ratio = static_cast<double>(sse[0] / sse[best]);
    const double dn = static_cast<double>(n);
    return dn * std::log(ratio) > 3.0 * std::log(dn) ? best : 0;
}

GrowthShape growthShape(std::span<const double> x,
                        std::span<const double> y,
                        double varianceFloor,
                        double minRate) {
    GrowthShape shape;
    const size_t n = std::min(x.size(), y.size());
    if (n < 3) {
        return shape;
    }
    double mean = 0.0;
    for (size_t i = 0; i < n; ++i) {
        mean += y[i] / static_cast<double>(n);
    }
    const double sampled = std::sqrt(std::max(varianceFloor * mean, 0.0));
    shape.tolerance = 2.0 * std::max(stepNoise(y.first(n)), sampled);
    const double highest = *std::max_element(y.begin(), y.begin() + static_cast<std::ptrdiff_t>(n));
    while (shape.top + 1 < n && y[shape.top] < highest - shape.tolerance) {
        ++shape.top;
    }
    shape.onset = riseOnset(x.first(shape.top + 1), y.first(shape.top + 1));
    shape.grown = y[shape.top] - y[shape.onset];
    const size_t flatPoints = n - 1 - shape.top;
    if (shape.top <= shape.onset || !(shape.grown > shape.tolerance) || shape.grown <= 0.0 ||
        flatPoints < kMinFlatPoints) {
        return shape;
    }
    // The longest pause between new highs while it grew.
    double longestPause = 0.0, lastHigh = x[shape.onset], level = y[shape.onset];
    for (size_t i = shape.onset + 1; i <= shape.top; ++i) {
        if (y[i] > level) {
            longestPause = std::max(longestPause, x[i] - lastHigh);
            lastHigh = x[i];
            level = y[i];
        }
    }
    const double flatIterations = x[n - 1] - x[shape.top];
    shape.settles_at = x[shape.top] + std::max(kSettledRatio * (x[shape.top] - x[shape.onset]),
                                               2.0 * longestPause);
    if (flatIterations < 2.0 * longestPause) {
        shape.paused = true;
        return shape;
    }
    const double rate = shape.grown / std::max(x[shape.top] - x[shape.onset], 1.0);
    const double since =
        theilSenSlope(x.subspan(shape.top, n - shape.top), y.subspan(shape.top, n - shape.top));
    shape.stopped = since < std::max(minRate, 0.25 * rate);
    shape.settled = shape.stopped && x[n - 1] >= shape.settles_at;
    return shape;
}

std::optional<Staircase>
staircaseOf(std::span<const double> x, std::span<const double> y, double tolerance) {
    const size_t n = std::min(x.size(), y.size());
    std::vector<size_t> jumps;
    for (size_t i = 1; i < n; ++i) {
        const double d = y[i] - y[i - 1];
        if (d < -tolerance) {
            return std::nullopt; // it gave memory back: not a leak's steps
        }
        if (d > tolerance) {
            jumps.push_back(i);
        }
    }
    if (jumps.size() < 2) {
        return std::nullopt;
    }
    // A jump shows at the first point after its step, which on a thinned grid may have been
    // any iteration since the point before: a gap between two jumps is known only within the
    // widths of their points. The steps are regular when gaps that fit these bounds could be
    // (the longest gap's least at most 1.5 times the shortest's most); on a dense series the
    // bounds are the gaps themselves. At 5,000 steps a step every 25 lands on a grid of 16 at
    // gaps of 16 and 32 alternately, which the gaps alone called irregular.
    std::vector<double> sizes, gaps;
    double risen = 0.0, longestLeast = 0.0, shortestMost = std::numeric_limits<double>::max();
    bool thinned = false;
    for (size_t k = 0; k < jumps.size(); ++k) {
        const size_t i = jumps[k];
        sizes.push_back(y[i] - y[i - 1]);
        risen += sizes.back();
        thinned = thinned || x[i] - x[i - 1] > 1.0;
        if (k > 0) {
            const size_t before = jumps[k - 1];
            gaps.push_back(x[i] - x[before]);
            longestLeast = std::max(longestLeast, x[i - 1] + 1.0 - x[before]);
            shortestMost = std::min(shortestMost, x[i] - x[before - 1] - 1.0);
        }
    }
    const auto [smallest, biggest] = std::minmax_element(sizes.begin(), sizes.end());
    const double narrowest = *std::min_element(gaps.begin(), gaps.end());
    // Flat between its steps: from each jump to the point before the next (or the end) the level
    // drifts by no more than the noise allows (twice the tolerance) or half a step. A steady
    // leak on a grid of stride 4 jumps by four iterations' worth at every kept point and rises
    // by one iteration's, under the tolerance, at each of the newest 16: without this it read
    // as "1.5 MiB every 4 iterations".
    const double step = upperMedian(sizes);
    const double drift = std::max(0.5 * step, 2.0 * tolerance);
    for (size_t k = 0; k < jumps.size(); ++k) {
        const size_t end = k + 1 < jumps.size() ? jumps[k + 1] - 1 : n - 1;
        if (y[end] - y[jumps[k]] > drift) {
            return std::nullopt;
        }
    }
    const double total = y[n - 1] - y[jumps.front() - 1];
    if (narrowest < 2.0 || longestLeast > 1.5 * shortestMost || *biggest > 2.0 * *smallest ||
        !(total > 0.0) || risen < 0.9 * total) {
        return std::nullopt;
    }
    // The period: the median gap where each is exact; on a grid, the jumps' whole span over
    // their count, which the grid's rounding of each gap averages out.
    const double every =
        thinned ? (x[jumps.back()] - x[jumps.front()]) / static_cast<double>(jumps.size() - 1)
                : upperMedian(std::move(gaps));
    return Staircase{jumps.front(), step, every, std::move(jumps)};
}

} // namespace torchleak
