#pragma once
// Trend statistics of a growth curve: the numbers behind every verdict. A series is the live
// bytes of one site (or one device) at iteration boundaries; x is the iteration each point was
// taken at (the index when not given: every boundary kept).

#include <cstddef>
#include <span>
#include <utility>
#include <vector>

namespace torchleak {

struct LineFit {
    double slope = 0.0;
    double intercept = 0.0;
    double r2 = 0.0;
    double p_value = 1.0; // two-sided test of slope == 0 (Student t, n - 2 degrees of freedom)
};

// The middle value, the upper one of an even count (0 for none): a typical size or step that a
// few outliers do not move. O(n).
double upperMedian(std::vector<double> values);

// Least-squares line through (i, y[i]). Fewer than 3 points give p_value 1 unless the points
// are exactly on a non-flat line.
LineFit fitLine(std::span<const double> y);
LineFit fitLine(std::span<const double> x, std::span<const double> y);

// Two-sided p-value of Student's t with `dof` degrees of freedom.
double studentTwoSidedP(double t, double dof);

// Every value equal to the first (an empty series too): no trend statistic can find growth in
// it, and the callers that meet thousands of such sites skip the statistics for it.
bool isFlat(std::span<const double> y);

// Robust trend statistics for growth curves.
// Theil-Sen: the median of the pairwise slopes (an iteration that frees some or allocates an
// irregular size does not drag it); Mann-Kendall: the one-sided p-value that the series
// increases (rank based, ties corrected).
double theilSenSlope(std::span<const double> y);
double theilSenSlope(std::span<const double> x, std::span<const double> y);
double mannKendallIncreasingP(std::span<const double> y);

// The one-sided p-value that y grows with x, from the least-squares slope: Student's t on the
// residuals, except that the noise of a point is taken to be at least `varianceFloor` (what a
// sampled series is known to carry, however smooth a few points happen to look); then normal.
// Points exactly on a rising line with no floor: 0. Fewer than 3 points and no floor: 1.
double growthPValue(std::span<const double> x, std::span<const double> y, double varianceFloor);

// The same test for a saw-tooth: one slope common to every segment (each with its own level),
// `segments` as [begin, end) ranges of the points.
double commonGrowthPValue(std::span<const double> x,
                          std::span<const double> y,
                          std::span<const std::pair<size_t, size_t>> segments,
                          double varianceFloor);

} // namespace torchleak
