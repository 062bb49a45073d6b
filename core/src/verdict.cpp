#include "torchleak/verdict.h"

#include "torchleak/growth_shape.h"
#include "torchleak/retention.h"
#include "torchleak/trend.h"

#include <algorithm>
#include <cmath>
#include <span>
#include <string>
#include <vector>

namespace torchleak {

namespace {

// The point that ends the last warm-up iteration (iteration warmup - 1): the baseline of the
// judged part. On a thinned grid, the last point at or before it.
size_t firstJudged(const std::vector<uint32_t>& at, int warmup, size_t n) {
    size_t baseline = static_cast<size_t>(std::max(warmup - 1, 0));
    if (at.empty()) {
        return std::min(baseline, n - 1);
    }
    auto after = std::upper_bound(at.begin(), at.end(), baseline);
    size_t first = after == at.begin() ? 0 : static_cast<size_t>(after - at.begin()) - 1;
    return std::min(first, n - 1);
}

// Splits at releases (a boundary where live bytes fall below half of the previous one).
std::vector<std::pair<size_t, size_t>> segmentsBetweenReleases(const std::vector<double>& y) {
    std::vector<std::pair<size_t, size_t>> segments;
    size_t start = 0;
    for (size_t i = 1; i < y.size(); ++i) {
        if (y[i] < 0.5 * y[i - 1]) {
            segments.emplace_back(start, i);
            start = i;
        }
    }
    segments.emplace_back(start, y.size());
    return segments;
}

double riseFraction(const std::vector<double>& y, size_t from, size_t to) {
    size_t rises = 0;
    for (size_t i = from + 1; i < to; ++i) {
        rises += y[i] > y[i - 1] ? 1 : 0;
    }
    return to - from > 1 ? static_cast<double>(rises) / static_cast<double>(to - from - 1) : 0.0;
}

// The x of points [first, first + n) of a series: their iterations, or their indices when
// `at` is empty.
std::vector<double> iterationsOf(const std::vector<uint32_t>& at, size_t first, size_t n) {
    std::vector<double> x(n);
    for (size_t i = 0; i < n; ++i) {
        x[i] = static_cast<double>(first + i < at.size() ? at[first + i] : first + i);
    }
    return x;
}

// Every judged iteration but the last (whose blocks may be the loop's current state) left
// bytes at the site that are still alive: what grew was kept, seen block by block. Noise, a
// working set or sampled small blocks never leave survivors from every iteration; a bounded
// cache does only until it is full, and then its curve stops (the tail rule).
bool keptFromEveryIteration(const SiteSeries& s, size_t first) {
    const size_t n = s.bytes.size();
    if (s.surviving.size() != n || n < first + 4) {
        return false; // fewer than 3 judged iterations: too few to tell
    }
    for (size_t b = first + 1; b + 1 < n; ++b) {
        if (s.surviving[b] <= 0) {
            return false;
        }
    }
    return true;
}

// The site keeps only a sliding window of its recent blocks: over the last quarter of the
// judged part (at least 8 points) its oldest live block kept getting younger by birth (each
// boundary's oldest was born later and later: old blocks are freed), the window spans several
// iterations (4 or more) and does not widen (the oldest's age at the end is at most a quarter
// more than at the stretch's start).
// A FIFO or LRU cache of a fixed number of entries, whatever its entries' sizes do to its
// total; never a leak, whose first blocks stay (a late leak's oldest block is its onset's).
bool slidingWindow(const SiteSeries& s, size_t first) {
    const size_t n = s.bytes.size();
    if (s.oldest.size() != n || n < first + 8) {
        return false;
    }
    const size_t len = std::max<size_t>(8, (n - first) / 4);
    const size_t from = n - len;
    auto at = [&](size_t b) { return static_cast<double>(b < s.at.size() ? s.at[b] : b); };
    const double span = at(n - 1) - at(from);
    const double advanced =
        static_cast<double>(s.oldest[n - 1]) - static_cast<double>(s.oldest[from]);
    const double ageThen = at(from) - static_cast<double>(s.oldest[from]);
    const double ageNow = at(n - 1) - static_cast<double>(s.oldest[n - 1]);
    // A window of several iterations' blocks: one block re-allocated larger every iteration
    // (torch.cat onto the last result) is as young as the iteration, and a leak.
    return s.bytes[from] > 0 && ageThen >= 4.0 && advanced >= 0.5 * span &&
           ageNow <= 1.25 * ageThen + 1.0;
}

} // namespace

double falseAlarmBudget(double rate, double judged) {
    double t = std::max(judged, 1.0);
    return rate / (t * (t + 1.0));
}

namespace {

// What one stretch of the judged series, [from, end), says on the tests every rule reads.
struct StretchEvidence {
    double slope = 0.0;         // Theil-Sen
    double trendP = 1.0;        // Mann-Kendall, one-sided
    double evidence = 1.0;      // growthPValue: two looks at the stretch, and its recent half
    double rises = 0.0;         // the fraction of its boundaries that rose
    bool tailGrows = false;     // its last quarter (at least 3 points) still rises
    double varianceFloor = 0.0; // the noise sampling adds to a point of its mean size
};

StretchEvidence stretchEvidence(const std::vector<double>& x,
                                const std::vector<double>& y,
                                size_t from,
                                double varianceFloorPerByte,
                                double minRate) {
    StretchEvidence e;
    const std::span<const double> sx = std::span<const double>(x).subspan(from);
    const std::span<const double> sy = std::span<const double>(y).subspan(from);
    const size_t m = sy.size();
    double mean = 0.0;
    for (double v : sy) {
        mean += v / static_cast<double>(m);
    }
    const double floor = varianceFloorPerByte * std::max(mean, 0.0);
    e.varianceFloor = floor;
    // A flat stretch: slope 0, no trend, no evidence, no rise, what every test below computes
    // for it (their slopes are 0, so each p-value is 1), without their sorts and sums.
    if (isFlat(sy)) {
        return e;
    }
    e.slope = theilSenSlope(sx, sy);
    e.trendP = mannKendallIncreasingP(sy);
    // Two looks at the whole stretch, so that its first point alone (the first iteration's odd
    // size: a buffer that starts as the model's output, then is re-allocated one step larger)
    // cannot hide exact growth after it; Bonferroni pays for the second look. And the recent
    // half must grow on its own: a cache that filled up and now only varies is stationary
    // there, whatever its ramp says.
    auto evidenceFrom = [&](size_t k) { return growthPValue(sx.subspan(k), sy.subspan(k), floor); };
    const double whole =
        std::min(1.0, 2.0 * std::min(evidenceFrom(0), m >= 4 ? evidenceFrom(1) : 1.0));
    const size_t recentFrom = m >= 6 ? m - (m + 1) / 2 : 0;
    e.evidence = recentFrom > 0 ? std::max(whole, evidenceFrom(recentFrom)) : whole;
    e.rises = riseFraction(y, from, y.size());
    // Still growing at the end: the last quarter (at least 3 boundaries) rises too, so a cache
    // that filled up and stopped (a plateau) is never called a leak, however long the run.
    const size_t tailLen = std::min(std::max<size_t>(3, (m + 3) / 4), m);
    const auto tailX = sx.subspan(m - tailLen);
    const auto tailY = sy.subspan(m - tailLen);
    const double tailSlope = theilSenSlope(tailX, tailY);
    e.tailGrows = tailSlope >= std::max(minRate, 0.25 * e.slope) && tailY.back() > tailY.front();
    return e;
}

// The two rules a stretch can meet on its own, at a false-alarm level of `budget`: it rises at
// every boundary, or its trend through noise is clear and still rising at the end. The
// confidence of the leak, or 0.
double leakConfidence(const StretchEvidence& e, double budget, const AnalysisConfig& config) {
    const double minRate = static_cast<double>(config.min_leak_bytes_per_iteration);
    if (e.slope < minRate || e.evidence > budget) {
        return 0.0;
    }
    if (e.rises == 1.0) {
        return std::clamp(1.0 - e.evidence, 0.0, 1.0);
    }
    const double confidence = std::clamp((1.0 - e.trendP) * (0.5 + 0.5 * e.rises), 0.0, 1.0);
    return e.trendP < 0.05 && e.tailGrows && confidence >= config.min_confidence ? confidence : 0.0;
}

// The recent stretches a late leak is looked for in: the last 8, 16, 32 ... judged points, as
// long as 4 points stay before the stretch (the whole series is looked at apart). Doubling
// keeps them to log2(points) looks, each paid for from the look's budget (Bonferroni): a
// search over every possible onset would cost as many looks as points.
std::vector<size_t> recentStretches(size_t m) {
    std::vector<size_t> starts;
    for (size_t len = 8; len + 4 <= m; len *= 2) {
        starts.push_back(m - len);
    }
    return starts;
}

// What the verdict rules read: a site's judged part (from the end of warm-up) and its
// statistics, computed once.
struct JudgedSeries {
    JudgedSeries(const SiteSeries& series, int warmupIterations, const AnalysisConfig& cfg)
        : s(series), warmup(warmupIterations), config(cfg),
          first(firstJudged(series.at, warmupIterations, series.bytes.size())),
          post(series.bytes.begin() + static_cast<std::ptrdiff_t>(first), series.bytes.end()),
          m(post.size()), x(iterationsOf(series.at, first, m)),
          minRate(static_cast<double>(cfg.min_leak_bytes_per_iteration)), last(series.bytes.back()),
          whole(stretchEvidence(x, post, 0, series.noise_variance_per_byte, minRate)),
          // Where the growth began and whether it stopped: the words and the rate of a leak or
          // a plateau. A site whose growth stopped long enough ago is no leak, whatever rule
          // its ramp meets; a leak's rate is measured from its onset.
          shape(growthShape(x, post, series.noise_variance_per_byte, minRate)),
          stretches(recentStretches(m)),
          // Growth is a leak only on evidence that noise would give with at most the run's
          // false-alarm budget for this many judged iterations (falseAlarmBudget), the noise a
          // sampled series is known to carry included. The budget of a look is shared: half for
          // the whole judged part, half among the recent stretches a late leak is looked for in.
          budget(m == 0 ? 0.0 : falseAlarmBudget(cfg.false_alarm_rate, x.back() - x.front())),
          wholeBudget(stretches.empty() ? budget : 0.5 * budget),
          // Too short, nothing alive, or a window that slides: no growth rule applies.
          growthJudged(m >= 3 && last > 0 && !slidingWindow(series, first)) {}

    const SiteSeries& s;
    const int warmup;
    const AnalysisConfig& config;
    const size_t first;
    const std::vector<double> post;
    const size_t m;
    const std::vector<double> x;
    const double minRate;
    const int64_t last;
    const StretchEvidence whole;
    const GrowthShape shape;
    const std::vector<size_t> stretches;
    const double budget;
    const double wholeBudget;
    const bool growthJudged;

    // The first iteration that grew after the knot `k`, the last point before the growth; with
    // no warm-up and no knot, the first point is itself judged: the run's first iteration grew
    // when it left bytes at the site (a leak whose first block comes in the second iteration
    // grew from there).
    int64_t firstGrown(size_t k) const {
        const bool firstIterationGrew = k == 0 && warmup <= 0 && post.front() > 0;
        return static_cast<int64_t>(x[k]) + (firstIterationGrew ? 0 : 1);
    }

    // Where and how fast the growth went since `onset` (`flat`, a plateau's or an undecided
    // one's: since its shape's onset, until it stopped).
    GrowthSince growthSince(size_t onset, double wholeSlope, bool flat) const {
        GrowthSince g;
        g.iteration = firstGrown(onset);
        if (flat) {
            const double span = std::max(x[shape.top] - x[shape.onset], 1.0);
            g.stopped_at = static_cast<int64_t>(x[shape.top]);
            g.flat_iterations = static_cast<int64_t>(x.back() - x[shape.top]);
            g.grown_bytes = static_cast<int64_t>(std::llround(shape.grown));
            g.bytes_per_iteration = static_cast<int64_t>(std::llround(shape.grown / span));
        } else if (auto stairs = staircaseOf(x, post, shape.tolerance)) {
            // Its onset is its first step, its rate a step per period.
            g.iteration = keptSince(stairs->first - 1);
            g.step_bytes = static_cast<int64_t>(std::llround(stairs->step));
            g.step_every = static_cast<int64_t>(std::llround(stairs->every));
            g.bytes_per_iteration =
                static_cast<int64_t>(std::llround(stairs->step / stairs->every));
            g.grown_bytes =
                static_cast<int64_t>(std::llround(post.back() - post[stairs->first - 1]));
        } else {
            if (auto resumed = resumedGrowth(onset)) {
                onset = resumed->onset;
                g.earlier = resumed->earlier;
            }
            g.iteration = keptSince(onset);
            const double rate = onset == 0 ? wholeSlope
                                           : theilSenSlope(std::span(x).subspan(onset),
                                                           std::span(post).subspan(onset));
            g.bytes_per_iteration = static_cast<int64_t>(std::llround(rate));
            g.grown_bytes = static_cast<int64_t>(std::llround(post.back() - post[onset]));
        }
        return g;
    }

    // A leak's first iteration, from the knot `k` (the last point before its growth). A loop
    // that keeps its newest tensor by a name (`x = ...; keep.append(x)`) shows its first kept
    // block at the knot's level: held by the name alone there, by the container from the next
    // point on, so the curve rises one iteration late, whether the name is a local or a
    // global. The oldest block alive at the end tells: born at the knot's own iteration, the
    // leak began there.
    // On a long run's thinned grid the first point that grew stands for every iteration since
    // the knot's: when what it kept is what it rose by, its oldest survivor says which of them
    // kept the first block (the grid's stride off otherwise, 16 iterations at 5,000). A point
    // that rose by more than it kept (a saw-tooth whose buffer fills before its floor keeps a
    // block) is dated as a dense series dates it, from the knot.
    int64_t keptSince(size_t k) const {
        const int64_t grown = firstGrown(k);
        if (s.oldest.empty() || s.bytes.back() <= 0) {
            return grown;
        }
        if (post[k] > 0.0) {
            const auto oldest = static_cast<int64_t>(s.oldest.back());
            if (oldest >= static_cast<int64_t>(x[k]) && oldest < grown) {
                return oldest;
            }
        }
        const size_t b = first + k + 1;
        if (k + 1 < m && x[k + 1] - x[k] > 1.0 && grown == static_cast<int64_t>(x[k]) + 1 &&
            s.surviving.size() == s.bytes.size() && s.surviving_since.size() == s.bytes.size() &&
            s.surviving[b] > 0 &&
            2.0 * static_cast<double>(s.surviving[b]) >= post[k + 1] - post[k]) {
            const auto since = static_cast<int64_t>(s.surviving_since[b]);
            return since > grown && since <= static_cast<int64_t>(x[k + 1]) ? since : grown;
        }
        return grown;
    }

    // The growth since `onset` paused and grew again: no new high (over the noise) for
    // kMinFlatPoints points or more, then three new highs or more, after three or more before
    // it. The leak is the stretch growing now, from the pause's end; the earlier one is named
    // apart (both stretches of a run that leaked, stopped and leaked again).
    struct Resumed {
        size_t onset = 0;
        GrowthSince::Earlier earlier;
    };
    std::optional<Resumed> resumedGrowth(size_t onset) const {
        double highest = post[onset];
        size_t lastHigh = onset, pauseFrom = 0, pauseTo = 0, before = 0, after = 0;
        for (size_t i = onset + 1; i < m; ++i) {
            if (!(post[i] > highest + shape.tolerance)) {
                continue;
            }
            if (i - lastHigh >= kMinFlatPoints) {
                pauseFrom = lastHigh;
                pauseTo = i;
                before += after;
                after = 0;
            }
            ++after;
            lastHigh = i;
            highest = post[i];
        }
        if (pauseTo == 0 || after < 3 || before < 3) {
            return std::nullopt;
        }
        const auto at = std::span(x).first(pauseFrom + 1);
        const auto grew = std::span(post).first(pauseFrom + 1);
        const size_t start = riseOnset(at, grew);
        return Resumed{pauseTo - 1,
                       {keptSince(start), static_cast<int64_t>(at[pauseFrom]),
                        static_cast<int64_t>(std::llround(grew[pauseFrom] - grew[start]))}};
    }

    // A leak since `onset` at `confidence` — unless the growth stopped long enough ago.
    bool leak(Classification& c, double confidence, size_t onset) const {
        if (shape.stopped) {
            return false;
        }
        c.verdict = Verdict::Leak;
        c.confidence = confidence;
        c.growth_since = growthSince(onset, c.fit.slope, false);
        c.bytes_per_iteration = c.growth_since->bytes_per_iteration;
        c.fit.slope = static_cast<double>(c.bytes_per_iteration);
        return true;
    }
};

// A verdict rule: true when it decided the site's classification (written into `c`, whose fit
// is the judged part's), false to let the next rule try.
using VerdictRule = bool (*)(const JudgedSeries& j, Classification& c);

// Every judged iteration left bytes that are alive now.
bool keptFromEveryJudgedIteration(const JudgedSeries& j, Classification& c) {
    return j.growthJudged && keptFromEveryIteration(j.s, j.first) && j.whole.slope >= j.minRate &&
           j.whole.tailGrows &&
           j.leak(c, std::clamp(1.0 - j.whole.trendP, 0.5, 1.0), riseOnset(j.x, j.post));
}

// The whole judged part grows beyond its share of the false-alarm budget.
bool growsOverTheJudgedPart(const JudgedSeries& j, Classification& c) {
    if (!j.growthJudged) {
        return false;
    }
    const double confidence = leakConfidence(j.whole, j.wholeBudget, j.config);
    return confidence > 0.0 && j.leak(c, confidence, riseOnset(j.x, j.post));
}

// A leak that began late: a recent stretch grows on its own. Its onset is the knot of the
// flat-then-rising fit, kept whatever the knot costs: the stretch already showed that the
// recent regime grows.
bool beganLate(const JudgedSeries& j, Classification& c) {
    if (!j.growthJudged) {
        return false;
    }
    for (size_t from : j.stretches) {
        const StretchEvidence recent =
            stretchEvidence(j.x, j.post, from, j.s.noise_variance_per_byte, j.minRate);
        const double confidence = leakConfidence(
            recent, 0.5 * j.budget / static_cast<double>(j.stretches.size()), j.config);
        if (confidence > 0.0) {
            return j.leak(c, confidence, riseOnset(j.x, j.post, true));
        }
    }
    return false;
}

// Grows between releases at a coarser boundary (outputs kept for an epoch-end hook): still a
// leak at this granularity. The releases are found in the data, so the segments' growth is no
// evidence on its own: one block whose size follows the batch falls by half often enough that
// the runs between its falls look like growth (0.4% of 200-step runs judged every step; run
// watch's reproducer). What accumulates between releases was kept from earlier iterations; a
// block replaced every iteration was born in the last one.
bool growsBetweenReleases(const JudgedSeries& j, Classification& c) {
    if (!j.growthJudged) {
        return false;
    }
    const auto segments = segmentsBetweenReleases(j.post);
    const bool keptAcrossIterations = j.s.born.empty() || static_cast<double>(j.s.born.back()) <=
                                                              0.5 * static_cast<double>(j.last);
    if (segments.size() < 2 || !keptAcrossIterations) {
        return false;
    }
    std::vector<double> segmentSlopes;
    bool allRise = true;
    for (const auto& [a, b] : segments) {
        if (b - a < 3) {
            continue;
        }
        std::vector<double> seg(j.post.begin() + static_cast<std::ptrdiff_t>(a),
                                j.post.begin() + static_cast<std::ptrdiff_t>(b));
        std::vector<double> segX(j.x.begin() + static_cast<std::ptrdiff_t>(a),
                                 j.x.begin() + static_cast<std::ptrdiff_t>(b));
        segmentSlopes.push_back(theilSenSlope(segX, seg));
        allRise = allRise && riseFraction(j.post, a, b) >= 0.75;
    }
    if (segmentSlopes.size() < 2 || !allRise ||
        commonGrowthPValue(j.x, j.post, segments, j.whole.varianceFloor) > j.wholeBudget) {
        return false;
    }
    const auto middle =
        segmentSlopes.begin() + static_cast<std::ptrdiff_t>(segmentSlopes.size() / 2);
    std::nth_element(segmentSlopes.begin(), middle, segmentSlopes.end());
    if (*middle < j.minRate) {
        return false;
    }
    c.verdict = Verdict::Leak;
    c.released_periodically = true;
    c.fit.slope = *middle;
    c.bytes_per_iteration = static_cast<int64_t>(std::llround(*middle));
    c.confidence = 0.8;
    return true;
}

bool bounded(Classification& c, Verdict verdict, double confidence) {
    c.verdict = verdict;
    c.confidence = confidence;
    c.bytes_per_iteration = 0;
    return true;
}

// Everything the site left alive was freed later.
bool allFreed(const JudgedSeries& j, Classification& c) {
    return j.last == 0 && bounded(c, Verdict::Transient, 1.0);
}

// What is alive now was allocated in the last iteration and will be replaced in the next: a
// per-iteration working set that survives one boundary.
bool replacedEveryIteration(const JudgedSeries& j, Classification& c) {
    const int64_t bornLast = j.s.born.empty() ? 0 : j.s.born.back();
    return bornLast == j.last && j.post.back() - j.post.front() <= 0.0 &&
           bounded(c, Verdict::Transient, 0.9);
}

// Created in the first iterations, then kept and reused.
bool keptSinceWarmup(const JudgedSeries& j, Classification& c) {
    const uint32_t oldest = j.s.oldest.empty() ? 0 : j.s.oldest.back();
    return j.post.back() - j.post.front() <= 0.0 &&
           oldest <= static_cast<uint32_t>(std::max(j.warmup, 0)) &&
           bounded(c, Verdict::Warmup, 0.9);
}

// Since its growth stopped, the site has freed its oldest blocks while keeping its level (the
// oldest live block's birth advanced by half the flat stretch or more): a cache that replaces
// entries, full, not a leak that pauses, which keeps every block it took (a FIFO, an LRU of
// fresh keys, a sliding window).
bool evictsSinceItStopped(const JudgedSeries& j) {
    const size_t n = j.s.bytes.size();
    if (j.s.oldest.size() != n || j.m == 0 || j.shape.top + 1 >= j.m) {
        return false;
    }
    const size_t top = j.first + j.shape.top;
    const double flat = j.x.back() - j.x[j.shape.top];
    const double advanced =
        static_cast<double>(j.s.oldest[n - 1]) - static_cast<double>(j.s.oldest[top]);
    return flat > 0.0 && advanced >= 0.5 * flat;
}

// Steps that keep what they took: three or more regular steps of like size (growth_shape.h's
// staircase), the blocks of each still alive (born at the step's iteration or, held by a name
// at that boundary, the one before). Seen directly, as blocks kept from every iteration are: an
// evaluation epoch's leak is confirmed at its third step, where the trend's statistics waited
// for the fourth or fifth. One that has missed its next step is left to the rules after.
bool keptFromEveryStep(const JudgedSeries& j, Classification& c) {
    if (!j.growthJudged || j.s.surviving.size() != j.s.bytes.size()) {
        return false;
    }
    const auto stairs = staircaseOf(j.x, j.post, j.shape.tolerance);
    // Still stepping: a staircase that missed its next step has paused (undecided, below).
    if (!stairs || stairs->at.size() < 3 ||
        j.x.back() - j.x[stairs->at.back()] > 1.5 * stairs->every) {
        return false;
    }
    for (size_t i : stairs->at) {
        const size_t b = j.first + i;
        const double jump = j.post[i] - j.post[i - 1];
        if (static_cast<double>(j.s.surviving[b] + j.s.surviving[b - 1]) < 0.5 * jump) {
            return false;
        }
    }
    return j.leak(c, std::clamp(1.0 - j.whole.trendP, 0.5, 1.0), stairs->first - 1);
}

// Grew, then stopped: bounded once it has been flat for long enough (growth_shape.h's
// settled), or once it evicts what it took; before that, undecided. The last rule: it always
// decides.
bool grewThenStopped(const JudgedSeries& j, Classification& c) {
    const bool undecided =
        ((j.shape.stopped && !j.shape.settled) || j.shape.paused) && !evictsSinceItStopped(j);
    bounded(c, undecided ? Verdict::Undecided : Verdict::Plateau, undecided ? 0.5 : 0.8);
    if (j.shape.stopped || j.shape.paused) {
        c.growth_since = j.growthSince(j.shape.onset, c.fit.slope, true);
        if (undecided) {
            c.growth_since->settles_at = static_cast<int64_t>(std::ceil(j.shape.settles_at));
        }
    }
    return true;
}

struct NamedVerdictRule {
    const char* name;
    VerdictRule decide;
    // The rule needs the judged part to rise somewhere (a rise at every point, a rising tail, a
    // staircase's jumps, or growth between releases): a judged part that never changed cannot
    // meet it, and is not made to pay for it.
    bool needsARise;
};

// The verdict rules in the order they are tried: the first that decides gives the verdict. The
// leak rules come first (each at its share of the false-alarm budget), then the bounded
// shapes, the last of which always decides. A new rule goes where its evidence ranks.
constexpr NamedVerdictRule kVerdictRules[] = {
    {"kept from every judged iteration", keptFromEveryJudgedIteration, true},
    {"grows over the judged part", growsOverTheJudgedPart, true},
    {"began late", beganLate, true},
    {"kept from every step", keptFromEveryStep, true},
    {"grows between releases", growsBetweenReleases, true},
    {"all freed", allFreed, false},
    {"replaced every iteration", replacedEveryIteration, false},
    {"kept since warm-up", keptSinceWarmup, false},
    {"grew, then stopped", grewThenStopped, false},
};

} // namespace

Classification classify(const SiteSeries& s, int warmup, const AnalysisConfig& config) {
    Classification c;
    if (s.bytes.empty()) {
        return c;
    }
    const JudgedSeries judged(s, warmup, config);
    // The judged part's fit, which the report shows whichever rule decides.
    LineFit ols = fitLine(judged.x, judged.post);
    c.fit.r2 = ols.r2;
    c.fit.intercept = ols.intercept;
    c.fit.slope = judged.whole.slope;
    c.fit.p_value = judged.whole.trendP;
    c.bytes_per_iteration = static_cast<int64_t>(std::llround(c.fit.slope));
    // Most sites of a long run stopped changing long ago (parameters, optimizer state, freed
    // activations): a look at 10^4 of them spent most of its time in the late-leak rule's
    // stretches, which a flat judged part can never meet.
    const bool unchanged = isFlat(judged.post);
    for (const NamedVerdictRule& rule : kVerdictRules) {
        if (unchanged && rule.needsARise) {
            continue;
        }
        if (rule.decide(judged, c)) {
            c.rule = rule.name;
            // What else could decide for it later reads the same: the rise rules are skipped
            // while it stays flat, "replaced every iteration" needs births at the last boundary
            // (an unchanged site has none), and the three below read the last value, the
            // oldest birth and the flat part's shape, none of which moves.
            c.settled = unchanged && judged.m >= 2 && !c.growth_since &&
                        (rule.decide == allFreed || rule.decide == keptSinceWarmup ||
                         rule.decide == grewThenStopped);
            break;
        }
    }
    return c;
}

DeviceVerdict judgeDevice(const std::vector<int64_t>& allocated,
                          const std::vector<int64_t>& reserved,
                          int warmup,
                          const AnalysisConfig& config,
                          const std::vector<uint32_t>& at) {
    DeviceVerdict v;
    if (allocated.empty() || reserved.size() != allocated.size() || reserved.back() <= 0) {
        return v;
    }
    // Fragmentation is a caching allocator's reserve left unused; a device whose reserve is its
    // allocation (the CPU) has none, whatever its curve does.
    if (reserved == allocated) {
        return v;
    }
    v.ratio = static_cast<double>(reserved.back() - allocated.back()) /
              static_cast<double>(reserved.back());
    size_t first = firstJudged(at, warmup, allocated.size());
    std::vector<double> a(allocated.begin() + static_cast<std::ptrdiff_t>(first), allocated.end());
    std::vector<double> r(reserved.begin() + static_cast<std::ptrdiff_t>(first), reserved.end());
    const std::vector<double> x = iterationsOf(at, first, a.size());
    double allocSlope = theilSenSlope(x, a);
    double reservedSlope = theilSenSlope(x, r);
    double scale = std::max(1.0, r.back());
    double span = x.size() > 1 ? x.back() - x.front() + 1.0 : 1.0;
    bool allocatedFlat = std::fabs(allocSlope) * span < 0.05 * scale;
    bool reserveGrows = r.size() >= 3 && reservedSlope > 0 && mannKendallIncreasingP(r) < 0.05;
    v.fragmentation = allocatedFlat && (reserveGrows || v.ratio > config.fragmentation_ratio);
    return v;
}

bool heldByMachinery(const Finding& f) {
    if (f.path.empty()) {
        return false;
    }
    // Memory only C++ reaches is not here: flat, it is as likely the parameters' .grad of a
    // state passed inline as a graph kept alive. Growth is the evidence for it, the path only
    // the explanation.
    return isOutputCacheRoot(f.path.front()) || isLastExceptionRoot(f.path.front().label);
}

bool ownRecord(const Finding& f, uint64_t capacity) {
    if (f.verdict != Verdict::Leak || f.retention != Retention::Reachable || f.path.empty() ||
        heldByMachinery(f) || f.bytes_per_iteration <= 0 || capacity == 0) {
        return false;
    }
    for (const PathStep& step : f.path) {
        if (isAutogradStep(step.kind) || step.note.find(kKeepsGraphNote) != std::string::npos) {
            return false;
        }
    }
    return static_cast<double>(f.bytes_per_iteration) * static_cast<double>(kNegligibleIterations) <
           static_cast<double>(capacity);
}

bool allowListed(const Finding& f, const std::vector<std::string>& allow) {
    if (allow.empty()) {
        return false; // asked of every finding of every look
    }
    std::string site = f.site.file + ":" + std::to_string(f.site.line);
    for (const std::string& pattern : allow) {
        if (globMatch(pattern, site) || globMatch(pattern, f.site.function) ||
            (!f.path_text.empty() && globMatch(pattern, f.path_text)) ||
            (f.holder && globMatch(pattern, f.holder->path_text))) {
            return true;
        }
    }
    return false;
}

} // namespace torchleak
