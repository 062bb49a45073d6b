// Verdicts on synthetic growth curves (issue: leak, warm-up, plateau, transient,
// fragmentation, allowed).
#include "series_shapes.h"
#include "torchleak/config.h"
#include "torchleak/errors.h"
#include "torchleak/verdict.h"

#include <catch2/catch.hpp>
#include <random>
#include <string>

using namespace torchleak;

namespace {
constexpr int64_t MiB = 1 << 20;

// A site whose blocks were all born in iteration 0 unless `bornEach` (one new block per boundary).
SiteSeries series(const std::vector<int64_t>& bytes, bool bornEach = true) {
    SiteSeries s;
    s.bytes = bytes;
    for (size_t i = 0; i < bytes.size(); ++i) {
        int64_t prev = i ? bytes[i - 1] : 0;
        s.born.push_back(bornEach ? std::max<int64_t>(bytes[i] - prev, 0)
                                  : (i == 0 ? bytes[0] : 0));
        s.oldest.push_back(0);
    }
    return s;
}

SiteSeries
series(std::vector<int64_t> bytes, std::vector<int64_t> born, std::vector<uint32_t> oldest) {
    return SiteSeries{std::move(bytes), std::move(born), std::move(oldest), {}};
}
} // namespace

TEST_CASE("classify: a ramp is a leak with its exact slope") {
    auto c = classify(series({MiB, 2 * MiB, 3 * MiB, 4 * MiB, 5 * MiB}, {MiB, MiB, MiB, MiB, MiB},
                             {0, 0, 0, 0, 0}),
                      0);
    REQUIRE(c.verdict == Verdict::Leak);
    REQUIRE(c.bytes_per_iteration == MiB);
    REQUIRE(c.confidence > 0.95); // Mann-Kendall p of 5 rising points
}

TEST_CASE("classify: created in the first iteration, then constant, is warm-up") {
    auto c =
        classify(series({6 * MiB, 6 * MiB, 6 * MiB, 6 * MiB}, {6 * MiB, 0, 0, 0}, {0, 0, 0, 0}), 0);
    REQUIRE(c.verdict == Verdict::Warmup);
    REQUIRE(c.bytes_per_iteration == 0);
}

TEST_CASE("classify: replaced every iteration is transient") {
    auto c = classify(series({MiB, MiB, MiB, MiB}, {MiB, MiB, MiB, MiB}, {0, 1, 2, 3}), 0);
    REQUIRE(c.verdict == Verdict::Transient);
}

TEST_CASE("classify: freed by the end is transient") {
    auto c = classify(series({MiB, 2 * MiB, 0}, {MiB, MiB, 0}, {0, 0, 0}), 0);
    REQUIRE(c.verdict == Verdict::Transient);
}

TEST_CASE("classify: grows then stops is a plateau") {
    auto c = classify(series({MiB, 2 * MiB, 3 * MiB, 3 * MiB, 3 * MiB, 3 * MiB, 3 * MiB},
                             {MiB, MiB, MiB, 0, 0, 0, 0}, {0, 0, 0, 0, 0, 0, 0}),
                      0);
    REQUIRE(c.verdict == Verdict::Plateau);
}

TEST_CASE("classify: warm-up boundaries are not judged") {
    // Iteration 0 creates 8 MiB of state; after that 1 MiB per iteration leaks.
    auto c = classify(
        series({8 * MiB, 9 * MiB, 10 * MiB, 11 * MiB}, {8 * MiB, MiB, MiB, MiB}, {0, 0, 0, 0}), 1);
    REQUIRE(c.verdict == Verdict::Leak);
    REQUIRE(c.bytes_per_iteration == MiB);
}

TEST_CASE("ramp: a leak with its exact slope") {
    std::vector<int64_t> y;
    for (int i = 1; i <= 10; ++i) {
        y.push_back(i * 3 * MiB);
    }
    auto c = classify(series(y), 0);
    REQUIRE(c.verdict == Verdict::Leak);
    REQUIRE(c.bytes_per_iteration == 3 * MiB);
    REQUIRE(c.fit.p_value < 1e-4);
    REQUIRE(c.confidence > 0.99);
}

TEST_CASE("a 1 MiB per iteration leak is found within 5 iterations after warm-up") {
    // 3 warm-up iterations of 8 MiB state, then 1 MiB per iteration for 5 iterations.
    std::vector<int64_t> y = {8 * MiB,  8 * MiB,  8 * MiB,  9 * MiB,
                              10 * MiB, 11 * MiB, 12 * MiB, 13 * MiB};
    auto c = classify(series(y), 3);
    REQUIRE(c.verdict == Verdict::Leak);
    REQUIRE(c.bytes_per_iteration == MiB);
}

TEST_CASE("step then flat: warm-up, however long the run") {
    std::vector<int64_t> y(500, 6 * MiB);
    auto c = classify(series(y, false), 0);
    REQUIRE(c.verdict == Verdict::Warmup);
    REQUIRE(c.bytes_per_iteration == 0);
}

TEST_CASE("ramp that starts after a warm-up") {
    std::vector<int64_t> y = {10 * MiB, 10 * MiB, 12 * MiB, 14 * MiB, 16 * MiB, 18 * MiB};
    auto c = classify(series(y), 2);
    REQUIRE(c.verdict == Verdict::Leak);
    REQUIRE(c.bytes_per_iteration == 2 * MiB);
    // A warm-up one iteration short leaves a kink at the start of the judged part: the exact
    // ramp after it is still the evidence.
    REQUIRE(classify(series(y), 1).verdict == Verdict::Leak);
    // A kink in the middle is noise the line must beat: more iterations, then confirmed.
    std::vector<int64_t> bent = {10 * MiB, 12 * MiB, 12 * MiB, 14 * MiB, 16 * MiB, 18 * MiB};
    REQUIRE(classify(series(bent), 1).verdict != Verdict::Leak);
    for (int64_t v = 20; v <= 36; v += 2) {
        bent.push_back(v * MiB);
    }
    REQUIRE(classify(series(bent), 1).verdict == Verdict::Leak);
}

TEST_CASE("plateau at a cap: never a leak, however long the run") {
    for (int n : {20, 100, 500}) {
        std::vector<int64_t> y;
        for (int i = 1; i <= n; ++i) {
            y.push_back(std::min(i, 8) * MiB); // an lru_cache(maxsize=8) of 1 MiB tensors
        }
        auto c = classify(series(y), 0);
        INFO("n = " << n);
        // Flat for 12 iterations after 7 of growth is too soon to call it full.
        REQUIRE(c.verdict == (n == 20 ? Verdict::Undecided : Verdict::Plateau));
        REQUIRE(c.bytes_per_iteration == 0);
    }
}

TEST_CASE("ramp with noise: irregular sizes and iterations that free some") {
    std::mt19937 rng(7);
    std::uniform_int_distribution<int64_t> jitter(-MiB / 2, MiB / 2);
    std::vector<int64_t> y;
    int64_t live = 0;
    for (int i = 0; i < 30; ++i) {
        live += 2 * MiB + jitter(rng);
        if (i % 7 == 6) {
            live -= 3 * MiB; // an iteration that frees some
        }
        y.push_back(live);
    }
    auto c = classify(series(y), 0);
    REQUIRE(c.verdict == Verdict::Leak);
    REQUIRE(c.bytes_per_iteration > MiB);
    REQUIRE(c.bytes_per_iteration < 2 * MiB);
}

TEST_CASE(
    "saw-tooth: grows within each epoch, released at its end, is a leak at step granularity") {
    std::vector<int64_t> y;
    for (int epoch = 0; epoch < 4; ++epoch) {
        for (int step = 1; step <= 5; ++step) {
            y.push_back(step * MiB);
        }
    }
    auto c = classify(series(y), 0);
    REQUIRE(c.verdict == Verdict::Leak);
    REQUIRE(c.released_periodically);
    REQUIRE(c.bytes_per_iteration == MiB);
}

TEST_CASE("single spike: alive at one boundary, freed later, is transient") {
    std::vector<int64_t> y = {0, 0, 64 * MiB, 0, 0, 0};
    auto c = classify(series(y), 0);
    REQUIRE(c.verdict == Verdict::Transient);
}

TEST_CASE("replaced every iteration is transient, however long the run") {
    SiteSeries s;
    for (uint32_t i = 0; i < 500; ++i) {
        s.bytes.push_back(MiB);
        s.born.push_back(MiB);
        s.oldest.push_back(i);
    }
    REQUIRE(classify(s, 0).verdict == Verdict::Transient);
}

TEST_CASE("growth below min_leak_bytes_per_iteration is not a leak") {
    std::vector<int64_t> y = {100, 200, 300, 400, 500, 600};
    AnalysisConfig cfg;
    cfg.set("min_leak_bytes_per_iteration", "1KiB");
    REQUIRE(classify(series(y), 0, cfg).verdict != Verdict::Leak);
    REQUIRE(classify(series(y), 0).verdict == Verdict::Leak);
}

TEST_CASE("reserved-only growth with flat allocated memory is fragmentation") {
    std::vector<int64_t> allocated(10, 100 * MiB);
    std::vector<int64_t> reserved;
    for (int i = 0; i < 10; ++i) {
        reserved.push_back((120 + 10 * i) * MiB);
    }
    auto v = judgeDevice(allocated, reserved, 0);
    REQUIRE(v.fragmentation);
    REQUIRE(v.ratio == Approx((210.0 - 100.0) / 210.0));
    // Reserve that follows allocation up is not fragmentation.
    std::vector<int64_t> growing;
    for (int i = 0; i < 10; ++i) {
        growing.push_back((100 + 10 * i) * MiB);
    }
    REQUIRE_FALSE(judgeDevice(growing, growing, 0).fragmentation);
    // A reserve that stays far above a flat allocation is flagged too.
    std::vector<int64_t> high(10, 400 * MiB);
    REQUIRE(judgeDevice(allocated, high, 0).fragmentation);
    // A device with no reserve (the CPU: reserved is allocated) is never fragmented, even when
    // a tiny leak grows its curve steadily.
    std::vector<int64_t> creeping;
    for (int i = 0; i < 10; ++i) {
        creeping.push_back(100 * MiB + 4 * i);
    }
    auto cpu = judgeDevice(creeping, creeping, 0);
    REQUIRE_FALSE(cpu.fragmentation);
    REQUIRE(cpu.ratio == 0.0);
}

TEST_CASE("ownRecord: a few bytes per iteration the user keeps by name are growth, not a leak") {
    // An optimisation history: 48 B per trial in the user's own list, values without graphs.
    Finding f;
    f.verdict = Verdict::Leak;
    f.retention = Retention::Reachable;
    f.bytes_per_iteration = 48;
    f.path = {{StepKind::Root, "history", "list", "", std::nullopt, "", std::nullopt},
              {StepKind::Index, "[47]", "Tensor", "", std::nullopt, "", std::nullopt}};
    const uint64_t capacity = 24ULL << 30;
    REQUIRE(ownRecord(f, capacity));
    SECTION("not when it keeps a graph") {
        f.path.push_back(
            {StepKind::GradFn, ".grad_fn", "MulBackward0", "", std::nullopt, "", std::nullopt});
        REQUIRE_FALSE(ownRecord(f, capacity));
    }
    SECTION("not when its tensor carries one") {
        f.path.back().note = kKeepsGraphNote;
        REQUIRE_FALSE(ownRecord(f, capacity));
    }
    SECTION("not when it would fill the device within 10^8 iterations") {
        f.bytes_per_iteration = 260; // 26.0 GB in 10^8 iterations, more than 24 GiB (25.8 GB)
        REQUIRE_FALSE(ownRecord(f, capacity));
        REQUIRE(ownRecord(f, 80ULL << 30)); // an 80 GB device takes longer
    }
    SECTION("not when the device's size is unknown") {
        REQUIRE_FALSE(ownRecord(f, 0));
    }
    SECTION("not when only notebook machinery keeps it") {
        f.path.front().label = "Out[3]";
        REQUIRE_FALSE(ownRecord(f, capacity));
    }
    SECTION("not when nothing names it") {
        f.retention = Retention::CppOnly;
        REQUIRE_FALSE(ownRecord(f, capacity));
    }
    SECTION("only a leak becomes growth") {
        f.verdict = Verdict::Plateau;
        REQUIRE_FALSE(ownRecord(f, capacity));
    }
}

TEST_CASE("A buffer re-allocated one iteration larger is a leak, not a sliding window") {
    // torch.cat onto the last result: one block alive, born in the iteration it ends.
    SiteSeries s;
    for (int i = 0; i < 40; ++i) {
        s.bytes.push_back(static_cast<int64_t>(i + 1) * 1024 * 1024);
        s.born.push_back(static_cast<int64_t>(i + 1) * 1024 * 1024);
        s.oldest.push_back(static_cast<uint32_t>(i));
    }
    s.surviving.assign(40, 0);
    s.surviving.back() = s.bytes.back();
    REQUIRE(classify(s, 2).verdict == Verdict::Leak);
}

TEST_CASE("classify names the verdict rule that decided, tried in order") {
    using namespace torchleak::shapes;
    auto rule = [](const SiteSeries& s, int warmup = 0) {
        const char* name = classify(s, warmup).rule;
        return std::string(name != nullptr ? name : "");
    };
    SiteSeries ramp = series({MiB, 2 * MiB, 3 * MiB, 4 * MiB, 5 * MiB}, {MiB, MiB, MiB, MiB, MiB},
                             {0, 0, 0, 0, 0});
    CHECK(rule(ramp) == "grows over the judged part");
    ramp.surviving = {MiB, MiB, MiB, MiB, MiB}; // and each iteration's blocks are still alive
    CHECK(rule(ramp) == "kept from every judged iteration");
    CHECK(rule(lateOnset(400, 300, 64 * kKiB).series) == "began late");
    CHECK(rule(risingFloor(240, 12, kMiB).series) == "grows between releases");
    CHECK(rule(series({MiB, 2 * MiB, 0}, {MiB, MiB, 0}, {0, 0, 0})) == "all freed");
    CHECK(rule(series({MiB, MiB, MiB, MiB}, {MiB, MiB, MiB, MiB}, {0, 1, 2, 3})) ==
          "replaced every iteration");
    CHECK(rule(series({6 * MiB, 6 * MiB, 6 * MiB, 6 * MiB}, {6 * MiB, 0, 0, 0}, {0, 0, 0, 0})) ==
          "kept since warm-up");
    CHECK(rule(series({MiB, 2 * MiB, 3 * MiB, 3 * MiB, 3 * MiB, 3 * MiB, 3 * MiB},
                      {MiB, MiB, MiB, 0, 0, 0, 0}, {0, 0, 0, 0, 0, 0, 0})) == "grew, then stopped");
    CHECK(rule(SiteSeries{}).empty()); // nothing to judge: no rule ran
}

TEST_CASE("classify: a leak from the start is dated by the first iteration that left bytes") {
    // Without warm-up the first point is judged: the first iteration grew when it left bytes at
    // the site (iteration 0, "since iteration 1"); when its first block came in the second
    // iteration (a loop whose leaking line runs after the first boundary), iteration 1.
    std::vector<int64_t> fromFirst, fromSecond = {0};
    for (int i = 1; i <= 12; ++i) {
        fromFirst.push_back(i * MiB);
        fromSecond.push_back(i * MiB);
    }
    const auto first = classify(series(fromFirst), 0);
    REQUIRE(first.verdict == Verdict::Leak);
    REQUIRE(first.growth_since);
    CHECK(first.growth_since->iteration == 0);
    const auto second = classify(series(fromSecond), 0);
    REQUIRE(second.verdict == Verdict::Leak);
    REQUIRE(second.growth_since);
    CHECK(second.growth_since->iteration == 1);
}

TEST_CASE("classify: a judged part that never changed gets a bounded verdict under any settings") {
    // classify() skips the rules that need a rise when the judged part is flat; these are the
    // settings under which a rise rule is easiest to meet, and none may ever have fired.
    AnalysisConfig loose;
    loose.min_leak_bytes_per_iteration = 0;
    loose.min_confidence = 0.0;
    loose.false_alarm_rate = 0.99;
    for (const AnalysisConfig& config : {AnalysisConfig{}, loose}) {
        for (size_t n : {3, 4, 9, 40, 300, 545}) {
            INFO("points " << n);
            // Kept since the first iteration: warm-up, at any warm-up.
            SiteSeries kept = series(std::vector<int64_t>(n, 3 * MiB), false);
            CHECK(classify(kept, 0, config).verdict == Verdict::Warmup);
            CHECK(classify(kept, 2, config).verdict == Verdict::Warmup);
            // Grew in warm-up, flat since: its judged part is flat, its rule the warm-up's.
            std::vector<int64_t> rampThenFlat(n, 8 * MiB);
            rampThenFlat[0] = MiB;
            SiteSeries warm = series(rampThenFlat, false);
            const Classification w = classify(warm, 2, config);
            CHECK(w.verdict == Verdict::Warmup);
            CHECK(std::string(w.rule) == "kept since warm-up");
            // Everything freed by every boundary after a spike in warm-up: transient.
            std::vector<int64_t> spike(n, 0);
            spike[0] = 5 * MiB;
            const Classification t = classify(series(spike), 2, config);
            CHECK(t.verdict == Verdict::Transient);
            CHECK(std::string(t.rule) == "all freed");
            // The same bytes, born again at every boundary: a working set replaced each time.
            SiteSeries replaced = series(std::vector<int64_t>(n, 2 * MiB), false);
            for (auto& b : replaced.born) {
                b = 2 * MiB;
            }
            CHECK(std::string(classify(replaced, 0, config).rule) == "replaced every iteration");
            // Born after the warm-up and flat ever since (its first point is judged): no rise
            // in the judged part, so the last rule decides, and never a leak.
            SiteSeries late = series(std::vector<int64_t>(n, MiB), false);
            for (auto& o : late.oldest) {
                o = 1;
            }
            const Classification p = classify(late, 0, config);
            CHECK(p.verdict != Verdict::Leak);
            CHECK(std::string(p.rule) == "grew, then stopped");
            CHECK(p.bytes_per_iteration == 0);
        }
    }
}
