#include "torchleak/trend.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>
#include <xtensor/xmath.hpp>
#include <xtensor/xtensor.hpp>

namespace torchleak {

namespace {

// Continued fraction for the regularized incomplete beta function (Lentz's method).
double betaContinuedFraction(double a, double b, double x) {
    constexpr int kMaxIterations = 300;
    constexpr double kEps = 1e-15;
    constexpr double kTiny = 1e-300;
    double qab = a + b, qap = a + 1.0, qam = a - 1.0;
    double c = 1.0, d = 1.0 - qab * x / qap;
    if (std::fabs(d) < kTiny) {
        d = kTiny;
    }
    d = 1.0 / d;
    double h = d;
    for (int m = 1; m <= kMaxIterations; ++m) {
        int m2 = 2 * m;
        double aa = m * (b - m) * x / ((qam + m2) * (a + m2));
        d = 1.0 + aa * d;
        d = std::fabs(d) < kTiny ? kTiny : d;
        c = 1.0 + aa / c;
        c = std::fabs(c) < kTiny ? kTiny : c;
        d = 1.0 / d;
        h *= d * c;
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2));
        d = 1.0 + aa * d;
        d = std::fabs(d) < kTiny ? kTiny : d;
        c = 1.0 + aa / c;
        c = std::fabs(c) < kTiny ? kTiny : c;
        d = 1.0 / d;
        double del = d * c;
        h *= del;
        if (std::fabs(del - 1.0) < kEps) {
            break;
        }
    }
    return h;
}

double regularizedIncompleteBeta(double a, double b, double x) {
    if (x <= 0.0) {
        return 0.0;
    }
    if (x >= 1.0) {
        return 1.0;
    }
    double lnFront =
        std::lgamma(a + b) - std::lgamma(a) - std::lgamma(b) + a * std::log(x) + b * std::log1p(-x);
    double front = std::exp(lnFront);
    if (x < (a + 1.0) / (a + b + 2.0)) {
        return front * betaContinuedFraction(a, b, x) / a;
    }
    return 1.0 - front * betaContinuedFraction(b, a, 1.0 - x) / b;
}

} // namespace

double upperMedian(std::vector<double> values) {
    if (values.empty()) {
        return 0.0;
    }
    const auto mid = values.begin() + static_cast<std::ptrdiff_t>(values.size() / 2);
    std::nth_element(values.begin(), mid, values.end());
    return *mid;
}

double studentTwoSidedP(double t, double dof) {
    if (!(dof > 0.0) || std::isnan(t)) {
        return 1.0;
    }
    if (std::isinf(t)) {
        return 0.0;
    }
    return regularizedIncompleteBeta(dof / 2.0, 0.5, dof / (dof + t * t));
}

namespace {
std::vector<double> indices(size_t n) {
    std::vector<double> x(n);
    for (size_t i = 0; i < n; ++i) {
        x[i] = static_cast<double>(i);
    }
    return x;
}
} // namespace

LineFit fitLine(std::span<const double> values) {
    return fitLine(indices(values.size()), values);
}

LineFit fitLine(std::span<const double> xs, std::span<const double> values) {
    LineFit fit;
    const size_t n = std::min(xs.size(), values.size());
    if (n == 0) {
        return fit;
    }
    xt::xtensor<double, 1> y = xt::zeros<double>({n});
    std::copy(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(n), y.begin());
    if (n == 1) {
        fit.intercept = y(0);
        return fit;
    }
    xt::xtensor<double, 1> x = xt::zeros<double>({n});
    std::copy(xs.begin(), xs.begin() + static_cast<std::ptrdiff_t>(n), x.begin());
    double mx = xt::mean(x)();
    double my = xt::mean(y)();
    xt::xtensor<double, 1> dx = x - mx;
    xt::xtensor<double, 1> dy = y - my;
    double sxx = xt::sum(dx * dx)();
    double sxy = xt::sum(dx * dy)();
    double syy = xt::sum(dy * dy)();
    if (sxx <= 0.0) {
        fit.intercept = my; // every point at one x: no slope to speak of
        return fit;
    }
    fit.slope = sxy / sxx;
    fit.intercept = my - fit.slope * mx;
    xt::xtensor<double, 1> residual = y - (fit.intercept + fit.slope * x);
    double sse = xt::sum(residual * residual)();
    // Relative to the signal, an SSE this small is rounding noise: the points are on the line.
    bool exact = sse <= 1e-18 * std::max(1.0, syy);
    fit.r2 = syy > 0.0 ? std::clamp(1.0 - sse / syy, 0.0, 1.0) : 1.0;
    if (syy == 0.0) {
        fit.p_value = 1.0; // flat: no evidence of a trend
    } else if (exact) {
        fit.p_value = n >= 3 ? 0.0 : 1.0;
        fit.r2 = 1.0;
    } else if (n >= 3) {
        double se = std::sqrt(sse / static_cast<double>(n - 2) / sxx);
        fit.p_value = studentTwoSidedP(fit.slope / se, static_cast<double>(n - 2));
    }
    return fit;
}

bool isFlat(std::span<const double> y) {
    return std::all_of(y.begin(), y.end(), [&](double v) { return v == y.front(); });
}

double theilSenSlope(std::span<const double> y) {
    return theilSenSlope(indices(y.size()), y);
}

double theilSenSlope(std::span<const double> x, std::span<const double> y) {
    const size_t n = std::min(x.size(), y.size());
    // A flat series' every pair has slope 0: a look meets thousands of sites that did not
    // change, and their n^2 pairs were most of its cost.
    if (n < 2 || isFlat(y.first(n))) {
        return 0.0;
    }
    std::vector<double> slopes;
    auto addPair = [&](size_t i, size_t j) {
        if (x[j] != x[i]) {
            slopes.push_back((y[j] - y[i]) / (x[j] - x[i]));
        }
    };
    if (n <= 400) {
        for (size_t i = 0; i < n; ++i) {
            for (size_t j = i + 1; j < n; ++j) {
                addPair(i, j);
            }
        }
    } else {
        // Long runs: pairs half a run apart keep it O(n) and still robust.
        size_t gap = n / 2;
        for (size_t i = 0; i + gap < n; ++i) {
            addPair(i, i + gap);
        }
    }
    if (slopes.empty()) {
        return 0.0;
    }
    auto mid = slopes.begin() + static_cast<std::ptrdiff_t>(slopes.size() / 2);
    std::nth_element(slopes.begin(), mid, slopes.end());
    double upper = *mid;
    if (slopes.size() % 2 == 1) {
        return upper;
    }
    double lower = *std::max_element(slopes.begin(), mid);
    return (lower + upper) / 2.0;
}

double mannKendallIncreasingP(std::span<const double> y) {
    const size_t n = y.size();
    if (n < 3) {
        return 1.0;
    }
    std::vector<double> sorted(y.begin(), y.end());
    std::sort(sorted.begin(), sorted.end());
    double ties = 0;
    for (size_t i = 0; i < n;) {
        size_t j = i;
        while (j < n && sorted[j] == sorted[i]) {
            ++j;
        }
        double t = static_cast<double>(j - i);
        ties += t * (t - 1) * (2 * t + 5);
        i = j;
    }
    sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
    // S, the later-minus-earlier signs of every pair, counted in O(n log n) with a Fenwick tree
    // over the values' ranks: a watch's look judges every site's stretches, and the pairwise
    // sum was its largest cost (10^4 sites of 40 points, a third of a look).
    std::vector<int64_t> tree(sorted.size() + 1, 0);
    auto countUpTo = [&](size_t rank) { // values seen so far of rank < `rank`
        int64_t c = 0;
        for (; rank > 0; rank &= rank - 1) {
            c += tree[rank];
        }
        return c;
    };
    int64_t s = 0;
    for (size_t j = 0; j < n; ++j) {
        const size_t rank = static_cast<size_t>(
            std::lower_bound(sorted.begin(), sorted.end(), y[j]) - sorted.begin());
        const int64_t below = countUpTo(rank), upToEqual = countUpTo(rank + 1);
        s += below - (static_cast<int64_t>(j) - upToEqual);
        for (size_t r = rank + 1; r < tree.size(); r += r & (~r + 1)) {
            tree[r] += 1;
        }
    }
    double dn = static_cast<double>(n);
    double var = (dn * (dn - 1) * (2 * dn + 5) - ties) / 18.0;
    if (var <= 0 || s <= 0) {
        return 1.0;
    }
    double z = (static_cast<double>(s) - 1.0) / std::sqrt(var); // continuity correction
    return 0.5 * std::erfc(z / std::sqrt(2.0));
}

namespace {

// The one-sided p-value of a slope estimate `slope` with `sxx` (the spread of x about its
// segments' means), residual sum of squares `sse` on `dof` degrees of freedom, and a known
// lower bound on every point's noise variance.
double slopePValue(double slope, double sxx, double sse, double syy, double dof, double floor) {
    if (!(sxx > 0.0) || !(slope > 0.0)) {
        return 1.0;
    }
    bool exact = sse <= 1e-12 * std::max(1.0, syy);
    double empirical = dof > 0.0 && !exact ? sse / dof : 0.0;
    if (dof <= 0.0 && floor <= 0.0) {
        return 1.0; // two points and no known noise: nothing says the rise is not noise
    }
    double variance = std::max(empirical, floor);
    if (variance <= 0.0) {
        return 0.0; // every point on a rising line, and no noise to explain it
    }
    double t = slope / std::sqrt(variance / sxx);
    if (floor >= empirical) {
        return 0.5 * std::erfc(t / std::sqrt(2.0)); // the noise is known: a z-test
    }
    return 0.5 * studentTwoSidedP(t, dof);
}

} // namespace

double growthPValue(std::span<const double> x, std::span<const double> y, double varianceFloor) {
    const size_t n = std::min(x.size(), y.size());
    const std::pair<size_t, size_t> all{0, n};
    return commonGrowthPValue(x.first(n), y.first(n), std::span(&all, 1), varianceFloor);
}

double commonGrowthPValue(std::span<const double> x,
                          std::span<const double> y,
                          std::span<const std::pair<size_t, size_t>> segments,
                          double varianceFloor) {
    // Each usable segment with its own means: one level per segment, one common slope.
    struct Level {
        size_t begin, end;
        double mx, my;
    };
    std::vector<Level> levels;
    double sxx = 0.0, sxy = 0.0, syy = 0.0;
    size_t points = 0;
    for (const auto& [begin, end] : segments) {
        if (end <= begin || end > x.size() || end > y.size()) {
            continue;
        }
        double mx = 0.0, my = 0.0;
        for (size_t i = begin; i < end; ++i) {
            mx += x[i];
            my += y[i];
        }
        mx /= static_cast<double>(end - begin);
        my /= static_cast<double>(end - begin);
        levels.push_back({begin, end, mx, my});
        for (size_t i = begin; i < end; ++i) {
            sxx += (x[i] - mx) * (x[i] - mx);
            sxy += (x[i] - mx) * (y[i] - my);
            syy += (y[i] - my) * (y[i] - my);
        }
        points += end - begin;
    }
    if (!(sxx > 0.0)) {
        return 1.0;
    }
    double slope = sxy / sxx;
    double sse = std::max(syy - slope * sxy, 0.0);
    double dof = static_cast<double>(points) - static_cast<double>(segments.size()) - 1.0;
    // Neighbouring points share blocks (a cache of the last 16 requests, a sampled block kept
    // a few iterations): their noise is correlated, and a run of them up or down looks like a
    // trend. The variance is inflated as for AR(1) noise, (1 + rho) / (1 - rho), rho being the
    // residuals' lag-1 autocorrelation (0 when negative; at most 0.9: a factor of 19).
    double lagged = 0.0, squares = 0.0;
    for (const auto& [begin, end, mx, my] : levels) {
        double previous = 0.0;
        for (size_t i = begin; i < end; ++i) {
            double r = (y[i] - my) - slope * (x[i] - mx);
            squares += r * r;
            lagged += i > begin ? r * previous : 0.0;
            previous = r;
        }
    }
    double inflation = 1.0;
    if (points >= 8 && squares > 0.0) {
        double rho = std::clamp(lagged / squares, 0.0, 0.9);
        inflation = (1.0 + rho) / (1.0 - rho);
    }
    return slopePValue(slope, sxx, sse * inflation, syy, dof,
                       std::max(varianceFloor, 0.0) * inflation);
}

} // namespace torchleak
