#pragma once
// Trend statistics of a growth curve: the numbers behind every verdict. A series is the live
// bytes of one site (or one device) at iteration boundaries; x is the iteration each point was
// taken at (the index when not given: every boundary kept).

#include <span>

namespace torchleak {

struct LineFit {
    double slope = 0.0;
    double intercept = 0.0;
    double r2 = 0.0;
    double p_value = 1.0; // two-sided test of slope == 0 (Student t, n - 2 degrees of freedom)
};

// Least-squares line through (i, y[i]). Fewer than 3 points give p_value 1 unless the points
// are exactly on a non-flat line.
LineFit fitLine(std::span<const double> y);
LineFit fitLine(std::span<const double> x, std::span<const double> y);

// Two-sided p-value of Student's t with `dof` degrees of freedom.
double studentTwoSidedP(double t, double dof);

// Robust trend statistics for growth curves.
// Theil-Sen: the median of the pairwise slopes (an iteration that frees some or allocates an
// irregular size does not drag it); Mann-Kendall: the one-sided p-value that the series
// increases (rank based, ties corrected).
double theilSenSlope(std::span<const double> y);
double theilSenSlope(std::span<const double> x, std::span<const double> y);
double mannKendallIncreasingP(std::span<const double> y);

} // namespace torchleak
