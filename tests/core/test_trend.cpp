// Trend statistics on exact and synthetic series.
#include "torchleak/trend.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <vector>

using namespace torchleak;

TEST_CASE("fitLine recovers an exact ramp") {
    std::vector<double> y = {1, 3, 5, 7, 9};
    LineFit fit = fitLine(y);
    REQUIRE(fit.slope == Approx(2.0));
    REQUIRE(fit.intercept == Approx(1.0));
    REQUIRE(fit.r2 == Approx(1.0));
    REQUIRE(fit.p_value == 0.0);
}

TEST_CASE("fitLine on a flat series finds no trend") {
    std::vector<double> y = {4, 4, 4, 4};
    LineFit fit = fitLine(y);
    REQUIRE(fit.slope == Approx(0.0));
    REQUIRE(fit.p_value == 1.0);
}

TEST_CASE("Student t p-values match known values") {
    // t = 2.228 at 10 degrees of freedom is the two-sided 5% point.
    REQUIRE(studentTwoSidedP(2.228, 10) == Approx(0.05).margin(1e-3));
    REQUIRE(studentTwoSidedP(0.0, 5) == Approx(1.0));
    REQUIRE(studentTwoSidedP(1e9, 5) < 1e-12);
}

TEST_CASE("Theil-Sen ignores an outlier, Mann-Kendall sees no trend in flat data") {
    std::vector<double> y = {1, 2, 3, 4, 100, 6, 7, 8};
    REQUIRE(theilSenSlope(y) == Approx(1.0));
    std::vector<double> flat(20, 5.0);
    REQUIRE(mannKendallIncreasingP(flat) == 1.0);
    std::vector<double> up = {1, 2, 3, 4, 5};
    REQUIRE(mannKendallIncreasingP(up) < 0.05);
}

namespace {

// Mann-Kendall's p from its definition: the sum over every pair of the later point's sign
// against the earlier, and the variance less what ties take.
double pairwiseMannKendallP(const std::vector<double>& y) {
    const size_t n = y.size();
    double s = 0, ties = 0;
    for (size_t i = 0; i < n; ++i) {
        for (size_t j = i + 1; j < n; ++j) {
            s += (y[j] > y[i]) - (y[j] < y[i]);
        }
    }
    std::vector<double> sorted = y;
    std::sort(sorted.begin(), sorted.end());
    for (size_t i = 0; i < n;) {
        size_t j = i;
        while (j < n && sorted[j] == sorted[i]) {
            ++j;
        }
        double t = static_cast<double>(j - i);
        ties += t * (t - 1) * (2 * t + 5);
        i = j;
    }
    double dn = static_cast<double>(n);
    double var = (dn * (dn - 1) * (2 * dn + 5) - ties) / 18.0;
    if (n < 3 || var <= 0 || s <= 0) {
        return 1.0;
    }
    return 0.5 * std::erfc((s - 1.0) / std::sqrt(var) / std::sqrt(2.0));
}

} // namespace

TEST_CASE("Mann-Kendall counted by ranks is the pairwise sum, ties and all") {
    // Series of every kind a site shows: flat, steps (many ties), noise on a ramp, falling,
    // and a few values repeated at random; lengths across the Fenwick tree's powers of two.
    uint64_t state = 12345;
    auto next = [&]() {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        return state >> 33;
    };
    for (size_t n : {0, 1, 2, 3, 4, 7, 8, 9, 16, 17, 40, 63, 64, 65, 200, 529, 545}) {
        for (int kind = 0; kind < 5; ++kind) {
            std::vector<double> y(n);
            for (size_t i = 0; i < n; ++i) {
                const double r = static_cast<double>(next() % 1000);
                y[i] = kind == 0   ? 4096.0
                       : kind == 1 ? 1048576.0 * static_cast<double>(i / 25)
                       : kind == 2 ? 100.0 * static_cast<double>(i) + r * 30.0
                       : kind == 3 ? -static_cast<double>(i) + r / 100.0
                                   : static_cast<double>(next() % 4);
            }
            INFO("n = " << n << ", kind " << kind);
            REQUIRE(mannKendallIncreasingP(y) == pairwiseMannKendallP(y));
        }
    }
}

TEST_CASE("Theil-Sen of a flat series is 0 at any length, on a grid or not") {
    REQUIRE(theilSenSlope(std::vector<double>(545, 65536.0)) == 0.0);
    std::vector<double> x = {0, 4, 8, 12, 16, 17, 18};
    REQUIRE(theilSenSlope(x, std::vector<double>(7, 3.0)) == 0.0);
    std::vector<double> oneStep = {3, 3, 3, 3, 3, 3, 4};
    REQUIRE(theilSenSlope(x, oneStep) == 0.0); // the median pair is still flat
    std::vector<double> ramp = {0, 4, 8, 12, 16, 17, 18};
    REQUIRE(theilSenSlope(x, ramp) == Approx(1.0));
}

TEST_CASE("isFlat: every value the first's, the empty series included") {
    REQUIRE(isFlat(std::vector<double>{}));
    REQUIRE(isFlat(std::vector<double>{5}));
    REQUIRE(isFlat(std::vector<double>(545, 65536.0)));
    REQUIRE_FALSE(isFlat(std::vector<double>{5, 5, 6}));
    REQUIRE_FALSE(isFlat(std::vector<double>{6, 5, 5}));
    REQUIRE_FALSE(isFlat(std::vector<double>{std::nan(""), std::nan("")})); // NaN equals nothing
}
