// The decision rule on the growth shapes real runs have (series_shapes.h): leaks that begin
// late, come in steps or hide in noise are confirmed, with their onset and their rate from
// there; clean shapes judged at every boundary, as watch judges them, are not; a cache that
// fills for most of the run and then stops is a plateau that says how much it grew and when it
// stopped. Seeded throughout: a failure here is the same failure on every run.
#include "series_shapes.h"
#include "torchleak/growth_shape.h"
#include "torchleak/verdict.h"

#include <catch2/catch.hpp>
#include <functional>

using namespace torchleak;
using namespace torchleak::shapes;

namespace {

constexpr int kWarmup = 2;
// watch judges from the 8th iteration past the warm-up on (_watch.py's _MIN_JUDGED_ITERATIONS).
constexpr int kFirstLook = kWarmup + 8;

// The first boundary (its iteration count) at which a verdict taken at every boundary calls
// the shape a leak, or -1: `make(n)` gives the run's first n points.
int firstLeakAt(const std::function<Shape(int)>& make, int n) {
    for (int p = kFirstLook; p <= n; ++p) {
        if (classify(make(p).series, kWarmup).verdict == Verdict::Leak) {
            return p;
        }
    }
    return -1;
}

} // namespace

TEST_CASE("A leak that begins late is confirmed within 10 boundaries of its onset, its onset "
          "and rate named") {
    const int n = 300;
    const int64_t rate = 1 * kMiB; // a quarter of the 4 MiB working set
    for (int percent = 10; percent <= 90; percent += 10) {
        const int onset = n * percent / 100;
        CAPTURE(onset);
        auto make = [&](int p) { return lateOnset(p, onset, rate); };
        const int at = firstLeakAt(make, n);
        // Point p is the boundary after iteration p - 1: the onset's own boundary is onset + 1.
        REQUIRE(at > onset);
        REQUIRE(at - (onset + 1) <= 10);
        const Classification end = classify(make(n).series, kWarmup);
        REQUIRE(end.verdict == Verdict::Leak);
        REQUIRE(end.growth_since);
        REQUIRE(end.growth_since->iteration == onset);
        REQUIRE_FALSE(end.growth_since->stopped_at);
        REQUIRE(end.bytes_per_iteration == rate);
    }
}

TEST_CASE("Staircases are leaks: a step every N iterations, from the start or late") {
    for (int every : {10, 25}) {
        for (int onset : {0, 160}) {
            CAPTURE(every, onset);
            const Shape s = staircase(400, onset, every, 4 * kMiB);
            const Classification c = classify(s.series, kWarmup);
            REQUIRE(c.verdict == Verdict::Leak);
            REQUIRE(c.growth_since);
            REQUIRE_FALSE(c.growth_since->stopped_at);
            REQUIRE(c.bytes_per_iteration == Approx(4 * kMiB / every).epsilon(0.15));
        }
    }
}

TEST_CASE("A rising floor under a saw-tooth is a leak") {
    // A buffer cleared every 10 iterations that leaves one block behind each time.
    const Shape s = risingFloor(300, 10, 256 * kKiB);
    REQUIRE(classify(s.series, kWarmup).verdict == Verdict::Leak);
}

TEST_CASE("A slow leak under transients ten times its size is a leak") {
    int found = 0;
    const int runs = 50;
    for (int seed = 0; seed < runs; ++seed) {
        const Shape s = slowLeakUnderNoise(300, 64 * kKiB, 640 * kKiB, static_cast<uint64_t>(seed));
        found += classify(s.series, kWarmup).verdict == Verdict::Leak ? 1 : 0;
    }
    REQUIRE(found == runs);
}

TEST_CASE("A late leak of sampled small blocks is a leak, its onset found") {
    int found = 0;
    const int runs = 50;
    for (int seed = 0; seed < runs; ++seed) {
        const Shape s = sampledLeak(300, 150, 64 * kKiB, static_cast<uint64_t>(seed));
        const Classification c = classify(s.series, kWarmup);
        if (c.verdict == Verdict::Leak) {
            ++found;
            REQUIRE(c.growth_since);
            // Only the sampled blocks show it, a quarter of them: the knot lands within 25.
            REQUIRE(c.growth_since->iteration >= 125);
            REQUIRE(c.growth_since->iteration <= 175);
        }
    }
    REQUIRE(found == runs);
}

TEST_CASE("Clean shapes judged at every boundary are never leaks") {
    const int n = 300;
    SECTION("warm-up") {
        REQUIRE(firstLeakAt([](int p) { return warmup(p, 6, 1 * kMiB); }, n) == -1);
    }
    SECTION("evaluation spikes") {
        for (uint64_t seed = 0; seed < 20; ++seed) {
            REQUIRE(firstLeakAt([&](int p) { return evaluationSpikes(p, 50, 64 * kMiB, seed); },
                                n) == -1);
        }
    }
    SECTION("variable batch shapes") {
        for (uint64_t seed = 0; seed < 20; ++seed) {
            REQUIRE(firstLeakAt([&](int p) { return variableBatches(p, seed); }, n) == -1);
        }
    }
    SECTION("LRU churn") {
        for (uint64_t seed = 0; seed < 20; ++seed) {
            // Past its first 100 iterations (while it fills, it does grow).
            auto make = [&](int p) { return lruChurn(p, seed); };
            for (int p = 120; p <= n; ++p) {
                CAPTURE(seed, p);
                REQUIRE(classify(make(p).series, kWarmup).verdict != Verdict::Leak);
            }
        }
    }
}

TEST_CASE("A cache that fills for most of the run and then evicts is a plateau that says so") {
    const int n = 250;
    const int64_t entry = 256 * kKiB;
    for (int capacity : {100, 150, 200, 225}) {
        CAPTURE(capacity);
        const Classification c = classify(boundedCache(n, capacity, entry).series, kWarmup);
        REQUIRE(c.verdict == Verdict::Plateau);
        REQUIRE(c.growth_since);
        REQUIRE(c.growth_since->stopped_at == capacity - 1);
        // From the warm-up's last boundary (iteration 1, 2 entries) to full.
        REQUIRE(c.growth_since->grown_bytes == (capacity - kWarmup) * entry);
        REQUIRE(c.growth_since->bytes_per_iteration == entry);
        REQUIRE_FALSE(c.growth_since->settles_at); // settled: nothing to wait for
        // While it fills it grows, and is called a leak; eight flat boundaries after the last
        // entry, its oldest entries freed as new ones come, it is a cache (watch withdraws it).
        auto make = [&](int p) { return boundedCache(p, capacity, entry); };
        REQUIRE(classify(make(capacity).series, kWarmup).verdict == Verdict::Leak);
        REQUIRE(classify(make(capacity + kMinFlatPoints).series, kWarmup).verdict ==
                Verdict::Plateau);
    }
}

TEST_CASE("Growth that stopped and keeps all it took is undecided until flat for long enough") {
    // As a leak that steps at each evaluation keeps its blocks between steps: too soon to tell
    // from a cache that filled, until flat for eight times as long as it grew.
    const int n = 250;
    const int64_t entry = 256 * kKiB;
    for (int capacity : {100, 150, 200, 225}) {
        CAPTURE(capacity);
        const Classification c = classify(filledThenKept(n, capacity, entry).series, kWarmup);
        REQUIRE(c.verdict == Verdict::Undecided);
        REQUIRE(c.bytes_per_iteration == 0);
        REQUIRE(c.growth_since);
        REQUIRE(c.growth_since->stopped_at == capacity - 1);
        REQUIRE(c.growth_since->flat_iterations == n - capacity);
        REQUIRE(c.growth_since->settles_at == capacity - 1 + 8 * (capacity - kWarmup));
        REQUIRE(classify(filledThenKept(capacity + kMinFlatPoints, capacity, entry).series, kWarmup)
                    .verdict == Verdict::Undecided);
    }
    // Filled in 20 iterations (from the warm-up's last boundary, iteration 1, to 21): a
    // plateau once flat for eight times that.
    const int capacity = 22;
    const int settles = capacity + static_cast<int>(kSettledRatio) * 20;
    REQUIRE(classify(filledThenKept(settles - 1, capacity, entry).series, kWarmup).verdict ==
            Verdict::Undecided);
    REQUIRE(classify(filledThenKept(settles, capacity, entry).series, kWarmup).verdict ==
            Verdict::Plateau);
}

TEST_CASE("A staircase's pause is not a stop, a stop is twice the longest pause") {
    // Steps every 25 iterations, the last at iteration 175, then nothing: flat for 49
    // iterations is still a pause, flat for 50 is a stop.
    auto make = [](int n) {
        Shape s = staircase(n, 0, 25, 4 * kMiB);
        for (int i = 176; i < n; ++i) {
            s.series.bytes[static_cast<size_t>(i)] = s.series.bytes[175];
        }
        return s;
    };
    const Classification paused = classify(make(175 + 50).series, kWarmup);
    // A pause is no stop: undecided (a plateau called it full between two steps), with when
    // it would settle, still flat: twice the pause, or eight times the growth.
    REQUIRE(paused.verdict == Verdict::Undecided);
    REQUIRE(paused.growth_since->flat_iterations == 49);
    REQUIRE(paused.growth_since->settles_at > 175 + 50);
    const Classification stopped = classify(make(175 + 51).series, kWarmup);
    // Stopped, but after 175 iterations of steps, 51 flat is too soon to call it full.
    REQUIRE(stopped.verdict == Verdict::Undecided);
    REQUIRE(stopped.growth_since->stopped_at == 175);
    REQUIRE(stopped.growth_since->grown_bytes == 7 * 4 * kMiB); // the steps after the warm-up
}

TEST_CASE("The change point: the knot of flat-then-rising, kept only when it pays for itself") {
    std::vector<double> x, hockey, line;
    for (int i = 0; i < 100; ++i) {
        x.push_back(i);
        hockey.push_back(i < 60 ? 5.0 : 5.0 + 3.0 * (i - 59));
        line.push_back(2.0 * i + (i % 2 == 0 ? 0.5 : -0.5));
    }
    REQUIRE(riseOnset(x, hockey) == 59);
    REQUIRE(riseOnset(x, line) == 0);
    // A knot in noise alone is not worth its cost unless asked for.
    std::mt19937_64 rng(5);
    std::normal_distribution<double> noise(0.0, 1.0);
    std::vector<double> flat;
    for (int i = 0; i < 100; ++i) {
        flat.push_back(100.0 + noise(rng));
    }
    REQUIRE(riseOnset(x, flat) == 0);
    REQUIRE(riseOnset(std::span<const double>(x).first(3),
                      std::span<const double>(flat).first(3)) == 0);
}

TEST_CASE("10^5 clean series of the battery's shapes, each judged once: false alarms within "
          "the run's budget") {
    std::mt19937_64 rng(43);
    std::uniform_int_distribution<int> length(12, 100);
    AnalysisConfig config;
    int alarms = 0;
    const int runs = 100000;
    for (int r = 0; r < runs; ++r) {
        const int n = length(rng);
        const uint64_t seed = rng();
        Shape s;
        switch (r % 3) {
        case 0:
            s = evaluationSpikes(n, 7 + static_cast<int>(seed % 40), 32 * kMiB, seed);
            break;
        case 1:
            s = variableBatches(n, seed);
            break;
        default:
            // Full from its 100th iteration on, and churning for at least 30 more (while it
            // fills, it grows: watch confirms it, then withdraws it once it stops).
            s = lruChurn(n + 130, seed);
            break;
        }
        alarms += classify(s.series, kWarmup, config).verdict == Verdict::Leak ? 1 : 0;
    }
    REQUIRE(alarms <= static_cast<int>(config.false_alarm_rate * runs));
}
