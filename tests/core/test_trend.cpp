// Trend statistics on exact and synthetic series.
#include "torchleak/trend.h"

#include <catch2/catch.hpp>
#include <cmath>
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
