// Watch's looks keep the sites the last look settled (settled_sites.h): each look's verdicts must
// be the ones a look that keeps nothing writes, at every look of a long, thinned run.
#include "library_frame_symbolizer.h"
#include "torchleak/report_builder.h"
#include "torchleak/report_json.h"
#include "torchleak/verdict.h"

#include <catch2/catch.hpp>
#include <map>

using namespace torchleak;

namespace {

constexpr DeviceKey kCpu{0, -1};
constexpr uint64_t KiB = 1024;

using FakeSymbolizer = testing::LibraryFrameSymbolizer;

class NoDescriptions final : public BlockDescriber {
  public:
    std::vector<std::optional<BlockDescription>>
    describe(const std::vector<uintptr_t>& blocks) override {
        return {blocks.size(), std::nullopt};
    }
};

// A run with every kind of site a look keeps or must judge again: 300 sites kept before the
// first step and never changed, one kept since warm-up that starts leaking at 700, one that
// leaks throughout, one freed at 200, a cache that fills from 10 to 60, a line that a second
// stack joins at 900, a working set replaced every iteration, a block replaced once, at 407,
// and one alive at a single boundary of the warm-up.
class MixedRun {
  public:
    void step(uint32_t i) {
        if (i == 0) {
            for (uint32_t s = 0; s < 300; ++s) {
                alloc({{0x1, static_cast<int32_t>(1000 + s)}}, 64 * KiB);
            }
            alloc({{0x1, 10}}, 256 * KiB);
            d_freedLater = alloc({{0x1, 11}}, 512 * KiB);
            d_replacedOnce = alloc({{0x1, 15}}, 96 * KiB);
        }
        if (i == 3) { // alive at boundary 3 alone, which the grid drops at 512
            d_briefly = alloc({{0x1, 16}}, 48 * KiB);
        }
        if (i == 4) {
            d_rec.recordFree(d_briefly, kCpu, 0, 0, false);
        }
        if (i == 407) { // a look here finds it replaced in the last iteration, the next does not
            d_rec.recordFree(d_replacedOnce, kCpu, 0, 0, false);
            d_replacedOnce = alloc({{0x1, 15}}, 96 * KiB);
        }
        if (i >= 700) {
            alloc({{0x1, 10}}, 32 * KiB);
        }
        alloc({{0x1, 12}}, 8 * KiB);
        if (i == 200) {
            d_rec.recordFree(d_freedLater, kCpu, 0, 0, false);
        }
        if (i >= 10 && i < 60) {
            alloc({{0x1, 13}}, 16 * KiB);
        }
        if (i >= 900 && i % 3 == 0) {
            alloc({{0x2000, 5}, {0x1, 1000}}, 16 * KiB); // the same line, through torch
        }
        if (d_working != 0) {
            d_rec.recordFree(d_working, kCpu, 0, 0, false);
        }
        d_working = alloc({{0x1, 14}}, 128 * KiB);
        d_rec.markBoundary();
    }

    const AllocationRecorder& recorder() const { return d_rec; }

  private:
    uintptr_t alloc(std::vector<RawFrame> stack, uint64_t size) {
        const uintptr_t ptr = d_next;
        d_next += 0x100000;
        d_rec.recordAlloc(ptr, size, kCpu, stack, nullptr, 0, 0, false);
        return ptr;
    }

    AllocationRecorder d_rec;
    uintptr_t d_next = 0x10000000;
    uintptr_t d_freedLater = 0;
    uintptr_t d_replacedOnce = 0;
    uintptr_t d_briefly = 0;
    uintptr_t d_working = 0;
};

ReportInputs lookInputs() {
    ReportInputs in;
    in.boundary = BoundaryKind::Explicit;
    in.warmup = 5;
    in.verdicts_only = true;
    return in;
}

Report lookAt(const AllocationRecorder& rec, const ReportInputs& in, SettledSites* settled) {
    FakeSymbolizer sym;
    NoDescriptions none;
    return buildReport(rec, in, sym, none, nullptr, settled);
}

std::string look(const AllocationRecorder& rec, const ReportInputs& in, SettledSites* settled) {
    return verdictsJson(lookAt(rec, in, settled));
}

// One finding as a look writes it.
std::string textOf(const Finding& f, BoundaryKind boundary) {
    Report r;
    r.boundary = boundary;
    r.findings = {f};
    return verdictsJson(r);
}

// A look that keeps settled sites against one that keeps none: the same findings, word for word
// and in the same order, but for those it left out, each the verdict the last look kept for
// its site (none a leak nor undecided). How many it left out.
size_t leftOutOfLook(const AllocationRecorder& rec, const ReportInputs& in, SettledSites& settled) {
    std::map<std::string, Verdict> keptBefore; // by "file:line", from the builder's site key
    for (const auto& [key, site] : settled.sites) {
        if (site.verdict) {
            const size_t file = key.find('\x1f'), line = key.find('\x1f', file + 1);
            keptBefore[key.substr(0, file) + ':' + key.substr(file + 1, line - file - 1)] =
                *site.verdict;
        }
    }
    const Report fresh = lookAt(rec, in, nullptr);
    const Report kept = lookAt(rec, in, &settled);
    size_t k = 0, leftOut = 0;
    for (const Finding& f : fresh.findings) {
        if (k < kept.findings.size() &&
            textOf(kept.findings[k], in.boundary) == textOf(f, in.boundary)) {
            ++k;
            continue;
        }
        CAPTURE(f.site.line);
        CHECK(f.verdict != Verdict::Leak);
        CHECK(f.verdict != Verdict::Undecided);
        auto before = keptBefore.find(f.site.file + ':' + std::to_string(f.site.line));
        REQUIRE(before != keptBefore.end());
        CHECK(before->second == f.verdict);
        ++leftOut;
    }
    REQUIRE(k == kept.findings.size()); // every listed finding is the fresh look's, in order
    REQUIRE(kept.settled_left_out == leftOut);
    return leftOut;
}

} // namespace

TEST_CASE("A look that keeps settled sites lists what a look that keeps none lists, but them") {
    MixedRun run;
    SettledSites settled;
    const ReportInputs in = lookInputs();
    size_t looks = 0, mostLeftOut = 0;
    // 1,300 boundaries: the grid's stride doubles twice, so kept points are rewritten under
    // the sites kept between looks.
    for (uint32_t i = 0; i < 1300; ++i) {
        run.step(i);
        if (i >= 10 && (i % 37 == 0 || (i >= 695 && i <= 705) || i % 256 == 0)) {
            CAPTURE(i);
            mostLeftOut = std::max(mostLeftOut, leftOutOfLook(run.recorder(), in, settled));
            // A second look at the same boundary leaves out every settled site.
            leftOutOfLook(run.recorder(), in, settled);
            ++looks;
        }
    }
    CHECK(looks > 40);
    CHECK(mostLeftOut >= 299); // the sites that never changed are not judged at every look
    const std::string last = look(run.recorder(), in, &settled);
    CHECK(last.find("\"verdict\":\"leak\"") != std::string::npos);
    CHECK(last.find("train.py:1000") != std::string::npos); // joined by a second stack at 900
    CHECK(last.find("train.py:10\"") != std::string::npos); // kept since warm-up, leaking from 700
}

TEST_CASE("Settled sites are kept only under the settings they were judged under") {
    MixedRun run;
    for (uint32_t i = 0; i < 120; ++i) {
        run.step(i);
    }
    SettledSites settled;
    ReportInputs in = lookInputs();
    look(run.recorder(), in, &settled);
    REQUIRE(settled.sites.size() >= 300);
    const std::string context = settled.context;

    SECTION("another warm-up starts afresh") {
        in.warmup = 100;
        CHECK(leftOutOfLook(run.recorder(), in, settled) == 0);
        CHECK(settled.context != context);
    }
    SECTION("another min_bytes starts afresh: 300 sites of 64 KiB are no longer findings") {
        in.config.set("min_bytes", "100KiB");
        CHECK(leftOutOfLook(run.recorder(), in, settled) == 0);
        CHECK(look(run.recorder(), in, &settled).find("train.py:1000") == std::string::npos);
    }
    SECTION("the same settings leave out every settled site at the next look") {
        run.step(120);
        CHECK(leftOutOfLook(run.recorder(), in, settled) >= 300);
    }
    SECTION("a report that is not a look, or a look in cell watch, empties it") {
        ReportInputs report = in;
        report.verdicts_only = false;
        look(run.recorder(), report, &settled);
        CHECK(settled.sites.empty());
        CHECK(settled.byGroup.empty());
        look(run.recorder(), in, &settled);
        REQUIRE_FALSE(settled.sites.empty());
        ReportInputs cells = in;
        cells.boundary = BoundaryKind::Cell;
        look(run.recorder(), cells, &settled);
        CHECK(settled.sites.empty());
    }
}

TEST_CASE("classify: settled only for a flat judged part decided by a rule nothing later moves") {
    auto series = [](std::vector<int64_t> bytes, std::vector<uint32_t> oldest, int64_t bornLast) {
        SiteSeries s;
        s.bytes = std::move(bytes);
        for (size_t i = 0; i < s.bytes.size(); ++i) {
            s.at.push_back(static_cast<uint32_t>(i));
        }
        s.born.assign(s.bytes.size(), 0);
        s.born.back() = bornLast;
        s.oldest = std::move(oldest);
        s.oldest.resize(s.bytes.size(), s.oldest.empty() ? 0 : s.oldest.back());
        return s;
    };
    const std::vector<int64_t> flat(40, 4096);
    std::vector<int64_t> rising(40);
    for (size_t i = 0; i < 40; ++i) {
        rising[i] = static_cast<int64_t>(i + 1) * 4096;
    }
    std::vector<int64_t> stopped(40, 40 * 4096);
    for (size_t i = 0; i < 36; ++i) {
        stopped[i] = static_cast<int64_t>(i + 1) * 4096;
    }

    const Classification warmup = classify(series(flat, {0}, 0), 5);
    CHECK(warmup.verdict == Verdict::Warmup);
    CHECK(warmup.settled);
    // The same bytes throughout, its blocks replaced once after warm-up.
    const Classification plateau = classify(series(flat, {20}, 0), 5);
    CHECK(plateau.verdict == Verdict::Plateau);
    CHECK_FALSE(plateau.growth_since);
    CHECK(plateau.settled);
    // Its births at the last boundary decide it: the next boundary, without them, would not.
    const Classification replaced = classify(series(flat, {39}, 4096), 5);
    CHECK(replaced.verdict == Verdict::Transient);
    CHECK_FALSE(replaced.settled);
    CHECK_FALSE(classify(series(rising, {0}, 4096), 5).settled);
    const Classification justStopped = classify(series(stopped, {0}, 0), 5);
    CHECK(justStopped.verdict != Verdict::Plateau);
    CHECK_FALSE(justStopped.settled);
    CHECK_FALSE(classify(series({4096}, {0}, 0), 0).settled); // one judged point: too few
}
