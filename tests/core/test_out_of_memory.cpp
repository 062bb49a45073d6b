// Out-of-memory forensics and the device path's bad input: allocators whose totals cannot be
// right, frees never seen, devices beyond the first, a renamed PrivateUse1 backend.
#include "file_line_symbolizer.h"
#include "torchleak/display_text.h"
#include "torchleak/errors.h"
#include "torchleak/report_builder.h"
#include "torchleak/report_json.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

using namespace torchleak;
using torchleak::testing::FileLineSymbolizer;

namespace {

constexpr DeviceKey kCpu{0, -1};
constexpr DeviceKey kFake0{kPrivateUse1Type, 0};
constexpr DeviceKey kFake1{kPrivateUse1Type, 1};
constexpr int64_t MiB = 1 << 20;

using NoDescriber = NoBlockDescriptions;

// A device leak of 1 MiB per iteration at line 10, 2 MiB of other growth at line 20 that is
// freed every other iteration, then a failing iteration that allocated 3 MiB at line 30.
void recordFailingRun(AllocationRecorder& rec, uint32_t iterations) {
    const std::vector<RawFrame> leak = {{0x1, 10}}, churn = {{0x2, 20}}, work = {{0x3, 30}};
    int64_t allocated = 0;
    for (uint32_t i = 0; i < iterations; ++i) {
        allocated += MiB;
        rec.recordAlloc(0x100000 + i * MiB, MiB, kFake0, leak, nullptr, allocated, 64 * MiB, true);
        allocated += 2 * MiB;
        rec.recordAlloc(0x9000000, 2 * MiB, kFake0, churn, nullptr, allocated, 64 * MiB, true);
        allocated -= 2 * MiB;
        rec.recordFree(0x9000000, kFake0, allocated, 64 * MiB, true);
        rec.markBoundary();
    }
    rec.recordAlloc(0xA000000, 3 * MiB, kFake0, work, nullptr, allocated + 3 * MiB, 64 * MiB, true);
    rec.recordOutOfMemory(kFake0, 8 * MiB, allocated + 3 * MiB, 64 * MiB);
}

Report buildWith(const AllocationRecorder& rec, std::optional<OutOfMemoryInputs> oom) {
    FileLineSymbolizer sym;
    NoDescriber desc;
    ReportInputs in;
    in.boundary = BoundaryKind::Explicit;
    in.privateuse1_backend = "fakegpu";
    in.devices = {{kFake0, "fakegpu:0", 64 * MiB}};
    in.out_of_memory = std::move(oom);
    return buildReport(rec, in, sym, desc);
}

} // namespace

TEST_CASE("A renamed PrivateUse1 backend names its devices both ways") {
    REQUIRE(deviceName(kFake1) == "privateuseone:1");
    REQUIRE(deviceName(kFake1, "fakegpu") == "fakegpu:1");
    REQUIRE(parseDeviceName("fakegpu:1", "fakegpu") == kFake1);
    REQUIRE(parseDeviceName("privateuseone:0", "fakegpu") == kFake0);
    REQUIRE_THROWS_AS(parseDeviceName("fakegpu:0"), InvalidArgument); // not renamed here
    REQUIRE(deviceName(parseDeviceName("cuda:0", "fakegpu"), "fakegpu") == "cuda:0");
}

TEST_CASE("Totals that cannot be right are rejected for the rest of the run") {
    AllocationRecorder rec;
    // A sane event, then an allocator reporting 0, 0 with a block live.
    rec.recordAlloc(0x1000, 512, kFake0, {}, nullptr, 512, 2 * MiB, true);
    rec.markBoundary();
    REQUIRE(rec.boundaries()[0].devices[0].allocatorTotals);
    REQUIRE(rec.boundaries()[0].devices[0].reserved == 2 * MiB);
    rec.recordAlloc(0x2000, 1024, kFake0, {}, nullptr, 0, 0, true);
    rec.recordAlloc(0x3000, 1024, kFake0, {}, nullptr, 1 << 30, 2 * MiB,
                    true); // reserved < allocated
    rec.markBoundary();
    const DeviceSample& d = rec.boundaries()[1].devices[0];
    REQUIRE_FALSE(d.allocatorTotals);
    REQUIRE(d.allocated == 512 + 1024 + 1024); // tracked bytes
    REQUIRE(d.reserved == d.allocated);
    REQUIRE(d.rejectedTotals == 2);
    // Negative totals (a size_t that wrapped) on another device are rejected too.
    rec.recordAlloc(0x4000, 64, kFake1, {}, nullptr, -5, 100, true);
    rec.markBoundary();
    REQUIRE(rec.boundaries()[2].devices[1].rejectedTotals == 1);
    REQUIRE(rec.boundaries()[2].devices[1].allocated == 64);

    Report r = buildWith(rec, std::nullopt);
    bool warned = false;
    for (const std::string& w : r.warnings) {
        warned = warned || (w.find("fakegpu:0: its allocator reported totals") == 0);
    }
    REQUIRE(warned);
    REQUIRE(r.devices.size() == 2);
    REQUIRE(r.devices[1].device == "fakegpu:1");
}

TEST_CASE("A free never seen makes up no device, a free on the wrong device moves one count") {
    AllocationRecorder rec;
    rec.recordFree(0xdead000, DeviceKey{1, 7}, 0, 0, true); // cuda:7, never used
    rec.recordAlloc(0x5000, 4096, kFake0, {}, nullptr, 4096, 2 * MiB, true);
    rec.recordFree(0x5000, kFake1, 0, 2 * MiB, true); // reported on the other device
    rec.markBoundary();
    const auto& devices = rec.boundaries()[0].devices;
    REQUIRE(devices.size() == 2); // fakegpu:0, and fakegpu:1 that the free named
    REQUIRE(devices[0].device == kFake0);
    REQUIRE(rec.trackedBytes(kFake0) == 0);
    REQUIRE(rec.trackedBytes(kFake1) == 0);
    REQUIRE(rec.liveBlockCount() == 0);
}

TEST_CASE("Out-of-memory forensics: the failing device, its totals and the culprit first") {
    AllocationRecorder rec;
    recordFailingRun(rec, 6);
    REQUIRE(rec.lastOutOfMemory()->iteration == 6);
    Report r =
        buildWith(rec, OutOfMemoryInputs{"OutOfMemoryError", "fakegpu out of memory.\nmore", ""});
    REQUIRE(r.oom);
    const OutOfMemoryReport& oom = *r.oom;
    REQUIRE(oom.device == "fakegpu:0");
    REQUIRE(oom.error == "OutOfMemoryError");
    REQUIRE(oom.message == "fakegpu out of memory."); // first line only
    REQUIRE(oom.iteration == 6);
    REQUIRE(oom.requested_bytes == 8 * MiB);
    REQUIRE(oom.allocated_bytes == 9 * MiB);
    REQUIRE(oom.reserved_bytes == 64 * MiB);
    REQUIRE(oom.capacity_bytes == 64 * MiB);
    REQUIRE(oom.totals_from == "allocator");
    REQUIRE(oom.live_bytes == 9 * MiB);
    REQUIRE(oom.findings.size() == 1);
    const Finding& culprit = r.findings[static_cast<size_t>(oom.findings[0])];
    REQUIRE(culprit.site.line == 10);
    REQUIRE(culprit.verdict == Verdict::Leak);
    // Live now, by site: the leak's six blocks; the failing iteration's block has no finding.
    REQUIRE(oom.by_site.size() == 1);
    REQUIRE(oom.by_site[0].live_bytes == 6 * MiB);
    REQUIRE(oom.by_site[0].count == 6);
    REQUIRE(oom.by_holder.size() == 1);
    REQUIRE(oom.by_holder[0].holder == "(no retaining path)");
    // What filled the device at the failure, by role: the leak's blocks kept from earlier
    // iterations, the failing iteration's work in flight, the allocator's unused reserve.
    REQUIRE(oom.roles);
    REQUIRE(bytesOf(*oom.roles, MemoryRole::UserHeld) == 6 * MiB);
    REQUIRE(bytesOf(*oom.roles, MemoryRole::Activations) == 3 * MiB);
    REQUIRE(bytesOf(*oom.roles, MemoryRole::Untracked) == 0);
    REQUIRE(bytesOf(*oom.roles, MemoryRole::Reserve) == 55 * MiB);
    REQUIRE(nlohmann::json::parse(toJson(r))["oom"]["roles_text"] ==
            "What filled fakegpu:0 at the failure, 9.0 MiB: user-held 6.0 MiB (67%), activations "
            "3.0 MiB (33%); 55.0 MiB reserved but unused.");
    std::string text = outOfMemoryText(oom, r);
    REQUIRE(text.find("Out of memory on fakegpu:0 in iteration 7 (6 complete before it): asked "
                      "for 8.0 MiB with 9.0 MiB allocated, 64.0 MiB reserved of 64.0 MiB.") == 0);
    REQUIRE(text.find("Likely culprit: train.py:10, +1.0 MiB per iteration (leak).") !=
            std::string::npos);
}

TEST_CASE("Without an allocator's report the failure is the CPU's, with tracked bytes") {
    AllocationRecorder rec;
    for (uint32_t i = 0; i < 3; ++i) {
        rec.recordAlloc(0x100000 + i * 0x1000, 4096, kCpu, std::vector<RawFrame>{{0x1, 5}}, nullptr,
                        0, 0, false);
        rec.markBoundary();
    }
    Report r = buildWith(rec, OutOfMemoryInputs{"MemoryError", "", ""});
    REQUIRE(r.oom);
    REQUIRE(r.oom->device == "cpu");
    REQUIRE(r.oom->totals_from == "tracked");
    REQUIRE(r.oom->allocated_bytes == 3 * 4096);
    REQUIRE_FALSE(r.oom->requested_bytes);
    REQUIRE(r.oom->capacity_bytes > 0); // the host's
    REQUIRE(r.oom->iteration == 3);
}

TEST_CASE("An observer's report without the reserve shows allocated as reserved") {
    AllocationRecorder rec;
    rec.recordOutOfMemory(DeviceKey{1, 0}, 100, 5000, -1);
    Report r = buildWith(rec, OutOfMemoryInputs{"OutOfMemoryError", "CUDA out of memory", ""});
    REQUIRE(r.oom->device == "cuda:0");
    REQUIRE(r.oom->totals_from == "allocator");
    REQUIRE(r.oom->reserved_bytes == 5000);
    REQUIRE(r.oom->findings.empty());
    REQUIRE(outOfMemoryText(*r.oom, r).find("No site grew before it") != std::string::npos);
}

TEST_CASE("No out-of-memory error, no oom section, even after an allocator's OOM report") {
    AllocationRecorder rec;
    recordFailingRun(rec, 3); // the program caught it and went on
    REQUIRE_FALSE(buildWith(rec, std::nullopt).oom);
}

TEST_CASE("The oom section round-trips through JSON and bad indices are rejected") {
    AllocationRecorder rec;
    recordFailingRun(rec, 5);
    Report r =
        buildWith(rec, OutOfMemoryInputs{"OutOfMemoryError", "quotes \" and <b>html</b>", ""});
    std::string json = toJson(r);
    Report back = reportFromJson(json);
    REQUIRE(back.oom);
    REQUIRE(back.oom->device == r.oom->device);
    REQUIRE(back.oom->message == "quotes \" and <b>html</b>");
    REQUIRE(back.oom->requested_bytes == r.oom->requested_bytes);
    REQUIRE(back.oom->findings == r.oom->findings);
    REQUIRE(back.oom->by_site.size() == r.oom->by_site.size());
    REQUIRE(back.oom->by_holder[0].findings == r.oom->by_holder[0].findings);
    REQUIRE(toJson(back) == json);

    std::string bad = json;
    auto at = bad.find("\"by_holder\":[{\"findings\":[");
    REQUIRE(at != std::string::npos);
    bad.insert(at + std::string("\"by_holder\":[{\"findings\":[").size(), "99,");
    REQUIRE_THROWS_WITH(reportFromJson(bad), Catch::Contains("names finding 99"));
}

TEST_CASE("A caught out-of-memory is history: a later failure does not reuse its event") {
    AllocationRecorder rec;
    recordFailingRun(rec, 4); // a batch-size finder caught this one...
    REQUIRE(rec.currentOutOfMemory());
    rec.recordAlloc(0xB000000, MiB, kFake0, {}, nullptr, 2 * MiB, 64 * MiB, true); // ...went on
    REQUIRE_FALSE(rec.currentOutOfMemory());
    REQUIRE(rec.lastOutOfMemory()); // still the last report, no longer the failure
    // A later failure that no allocator reported: not the old event's device, request or totals.
    Report r = buildWith(rec, OutOfMemoryInputs{"MemoryError", "", ""});
    REQUIRE(r.oom);
    REQUIRE(r.oom->device == "cpu");
    REQUIRE_FALSE(r.oom->requested_bytes);
    REQUIRE(r.oom->totals_from == "tracked");
}

TEST_CASE("A CUDA failure no allocator reported is on the device its error names, not the CPU") {
    AllocationRecorder rec;
    const DeviceKey cuda1{1, 1};
    const std::vector<RawFrame> stack = {{0x1, 10}};
    rec.recordAlloc(0x7000, 4 * MiB, cuda1, stack, nullptr, 4 * MiB, 8 * MiB, true);
    rec.markBoundary();
    Report r = buildWith(
        rec, OutOfMemoryInputs{"AcceleratorError", "CUDA error: out of memory", "cuda:1"});
    REQUIRE(r.oom);
    REQUIRE(r.oom->device == "cuda:1");
    REQUIRE(r.oom->live_bytes == 4 * MiB);
    REQUIRE_FALSE(r.oom->requested_bytes);
    // A name c10 does not have is the CPU's, not an error.
    Report odd = buildWith(rec, OutOfMemoryInputs{"RuntimeError", "out of memory", "gpu:x"});
    REQUIRE(odd.oom->device == "cpu");
}
