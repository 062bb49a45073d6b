#include "file_line_symbolizer.h"
#include "torchleak/display_text.h"
#include "torchleak/memory_roles.h"
#include "torchleak/peak_spikes.h"
#include "torchleak/recorder.h"
#include "torchleak/report_builder.h"
#include "torchleak/report_json.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <numeric>
#include <vector>

using namespace torchleak;

namespace {
constexpr DeviceKey kCpu{0, -1};
constexpr DeviceKey kCuda0{1, 0};
constexpr uint64_t KiB = 1024, MiB = 1024 * 1024;
const std::vector<RawFrame> kLine = {{0xA0, 2}};

int64_t sumOf(const RoleBytes& roles, bool withReserve) {
    int64_t sum = std::accumulate(roles.begin(), roles.end(), int64_t{0});
    return withReserve ? sum : sum - bytesOf(roles, MemoryRole::Reserve);
}

// One iteration of a training loop as the allocator sees it: zero_grad frees the last
// gradient and the loop rebinds its batch; forward makes three activations and a loss the
// user appends to a list; backward makes the gradient and a temporary, then frees the
// activations; the first step makes the optimizer's state. The registry names parameter,
// gradient and state before the boundary.
void iteration(AllocationRecorder& rec, uint32_t i) {
    auto alloc = [&](uintptr_t p, uint64_t size, const char* node = nullptr) {
        rec.recordAlloc(p, size, kCpu, kLine, node, 0, 0, false);
    };
    auto free = [&](uintptr_t p) { rec.recordFree(p, kCpu, 0, 0, false); };
    const uintptr_t grad = 0x3000 + i, batch = 0x2000 + i, loss = 0x100000 + i;
    if (i == 0) {
        alloc(0x10, MiB); // the parameter, made inside tracking
    } else {
        free(0x3000 + i - 1);
    }
    alloc(batch, 8 * KiB);
    if (i > 0) {
        free(0x2000 + i - 1);
    }
    for (uintptr_t a = 0; a < 3; ++a) {
        alloc(0x100 + a, MiB);
    }
    alloc(loss, 4 * KiB);
    alloc(grad, 64 * KiB, "AccumulateGrad");
    alloc(0x400, 128 * KiB, "AddmmBackward0");
    free(0x400);
    for (uintptr_t a = 0; a < 3; ++a) {
        free(0x100 + a);
    }
    rec.setPhase(BirthPhase::OptimizerStep);
    if (i == 0) {
        alloc(0x500, 128 * KiB);
    }
    rec.setPhase(BirthPhase::Forward);
    const std::vector<uintptr_t> params = {0x10}, grads = {grad}, state = {0x500};
    rec.markHeldAs(params, HeldAs::Parameter);
    rec.markHeldAs(grads, HeldAs::Gradient);
    rec.markHeldAs(state, HeldAs::OptimizerState);
}
} // namespace

TEST_CASE("A training loop's memory by role adds up at every boundary and at every peak") {
    AllocationRecorder rec;
    for (uint32_t i = 0; i < 5; ++i) {
        iteration(rec, i);
        rec.markBoundary();
    }
    const auto& b = rec.boundaries();
    REQUIRE(b.size() == 5);
    for (uint32_t i = 0; i < 5; ++i) {
        INFO("iteration " << i);
        const DeviceSample& d = b[i].devices.at(0);
        const RoleBytes end = rolesAtBoundary(d);
        REQUIRE(sumOf(end, false) == d.allocated);
        REQUIRE(bytesOf(end, MemoryRole::Parameters) == int64_t(MiB));
        REQUIRE(bytesOf(end, MemoryRole::Gradients) == int64_t(64 * KiB));
        REQUIRE(bytesOf(end, MemoryRole::OptimizerState) == int64_t(128 * KiB));
        REQUIRE(bytesOf(end, MemoryRole::InputsOutputs) == int64_t(12 * KiB)); // batch, loss
        REQUIRE(bytesOf(end, MemoryRole::UserHeld) == int64_t(i * 4 * KiB));   // the losses kept
        REQUIRE(bytesOf(end, MemoryRole::Activations) == 0);
        REQUIRE(bytesOf(end, MemoryRole::Temporaries) == 0);
        REQUIRE(bytesOf(end, MemoryRole::Untracked) == 0);
        REQUIRE(bytesOf(end, MemoryRole::Reserve) == 0);

        // The peak is the backward temporary's allocation, the activations still alive; the
        // gradient born before it is counted as the gradient it turned out to be.
        const RoleBytes peak = rolesAtPeak(d);
        REQUIRE(sumOf(peak, true) == d.peak);
        REQUIRE(bytesOf(peak, MemoryRole::Activations) == int64_t(3 * MiB));
        REQUIRE(bytesOf(peak, MemoryRole::Temporaries) == int64_t(128 * KiB));
        REQUIRE(bytesOf(peak, MemoryRole::Parameters) == int64_t(MiB));
        REQUIRE(bytesOf(peak, MemoryRole::Gradients) == int64_t(64 * KiB));
        REQUIRE(bytesOf(peak, MemoryRole::OptimizerState) == (i == 0 ? 0 : int64_t(128 * KiB)));
        REQUIRE(bytesOf(peak, MemoryRole::InputsOutputs) == int64_t(12 * KiB));
        REQUIRE(bytesOf(peak, MemoryRole::UserHeld) == int64_t(i * 4 * KiB));
    }
}

TEST_CASE("Blocks from before tracking are untracked, the allocator's unused bytes its reserve") {
    AllocationRecorder rec;
    // The allocator already holds 10 MiB the hook never saw, and reserves 32 MiB in all.
    rec.recordAlloc(0x10, 2 * MiB, kCuda0, kLine, nullptr, 12 * MiB, 32 * MiB, true);
    rec.recordAlloc(0x20, 4 * MiB, kCuda0, kLine, nullptr, 16 * MiB, 32 * MiB, true);
    rec.recordFree(0x20, kCuda0, 12 * MiB, 32 * MiB, true);
    const DeviceSample& d = rec.markBoundary().devices.at(0);
    const RoleBytes end = rolesAtBoundary(d);
    REQUIRE(bytesOf(end, MemoryRole::InputsOutputs) == int64_t(2 * MiB));
    REQUIRE(bytesOf(end, MemoryRole::Untracked) == int64_t(10 * MiB));
    REQUIRE(bytesOf(end, MemoryRole::Reserve) == int64_t(20 * MiB));
    REQUIRE(sumOf(end, false) == d.allocated);
    REQUIRE(sumOf(end, true) == d.reserved);
    const RoleBytes peak = rolesAtPeak(d);
    REQUIRE(bytesOf(peak, MemoryRole::Activations) == int64_t(4 * MiB));
    REQUIRE(bytesOf(peak, MemoryRole::Untracked) == int64_t(10 * MiB));
    REQUIRE(sumOf(peak, true) == d.peak);
}

TEST_CASE("A thinned history keeps each role's bytes at the highest peak it folded in") {
    AllocationRecorder rec;
    for (uint32_t i = 0; i < 1500; ++i) {
        iteration(rec, i);
        if (i == 901) { // a spike: 40 MiB made and freed in forward
            rec.recordAlloc(0x9000, 40 * MiB, kCpu, kLine, nullptr, 0, 0, false);
            rec.recordFree(0x9000, kCpu, 0, 0, false);
        }
        rec.markBoundary();
    }
    const DeviceSample* highest = nullptr;
    for (const BoundarySnapshot& s : rec.boundaries()) {
        const DeviceSample& d = s.devices.at(0);
        REQUIRE(sumOf(rolesAtBoundary(d), false) == d.allocated);
        REQUIRE(sumOf(rolesAtPeak(d), true) == d.peak);
        if (highest == nullptr || d.peak > highest->peak) {
            highest = &d;
        }
    }
    const RoleBytes peak = rolesAtPeak(*highest);
    REQUIRE(bytesOf(peak, MemoryRole::Activations) == int64_t(40 * MiB));
    REQUIRE(bytesOf(peak, MemoryRole::UserHeld) == int64_t(901 * 4 * KiB));
}

TEST_CASE("Roles are written in stacking order with the core's line and read back unchanged") {
    DeviceTimeline d;
    d.device = "cuda:0";
    d.allocated = {100 * MiB, 120 * MiB};
    d.reserved = {200 * MiB, 200 * MiB};
    d.peak = {300 * MiB, 310 * MiB};
    RoleBytes end{}, peak{};
    bytesOf(end, MemoryRole::Parameters) = 60 * MiB;
    bytesOf(end, MemoryRole::OptimizerState) = 40 * MiB;
    bytesOf(end, MemoryRole::UserHeld) = 20 * MiB;
    bytesOf(end, MemoryRole::Reserve) = 80 * MiB;
    bytesOf(peak, MemoryRole::Parameters) = 60 * MiB;
    bytesOf(peak, MemoryRole::Activations) = 200 * MiB;
    bytesOf(peak, MemoryRole::Gradients) = 50 * MiB;
    d.roles_at_boundary = {RoleBytes{}, end};
    d.roles_at_peak = {RoleBytes{}, peak};
    REQUIRE(rolesText(d, {0, 41}) ==
            "at its highest peak (iteration 42), 310.0 MiB: activations 200.0 MiB (65%), "
            "parameters 60.0 MiB (19%), gradients 50.0 MiB (16%); at the end, 120.0 MiB: "
            "parameters 60.0 MiB (50%), optimizer state 40.0 MiB (33%), user-held 20.0 MiB "
            "(17%); 80.0 MiB reserved but unused");

    Report r;
    r.iterations = 42;
    r.series_iterations = {0, 41};
    r.devices = {d};
    const nlohmann::json j = nlohmann::json::parse(toJson(r));
    const auto& roles = j["devices"][0]["roles"];
    REQUIRE(roles.size() == kMemoryRoles);
    REQUIRE(roles[0]["role"] == "parameters");
    REQUIRE(roles[2]["label"] == "optimizer state");
    REQUIRE(roles[8]["role"] == "reserve");
    REQUIRE_FALSE(roles[8].contains("at_peak"));
    REQUIRE(roles[3]["at_peak"] == nlohmann::json::array({0, 200 * MiB}));
    REQUIRE(j["devices"][0]["roles_text"] == rolesText(d, {0, 41}));
    // In cell watch the chart's axis counts cell runs, and so does its line (#62 item 8).
    REQUIRE(rolesText(d, {0, 41}, BoundaryKind::Cell).rfind("at its highest peak (cell run ", 0) ==
            0);
    const Report back = reportFromJson(toJson(r));
    REQUIRE(back.devices.at(0).roles_at_boundary == d.roles_at_boundary);
    REQUIRE(back.devices.at(0).roles_at_peak == d.roles_at_peak);
}

TEST_CASE("Each role says whether a leak on its device has it, so views outline it as written") {
    DeviceTimeline d;
    d.device = "cuda:0";
    d.allocated = {100 * MiB, 120 * MiB};
    d.reserved = d.allocated;
    d.peak = d.allocated;
    d.roles_at_boundary = {RoleBytes{}, RoleBytes{}};
    d.roles_at_peak = d.roles_at_boundary;
    Report r;
    r.iterations = 2;
    r.devices = {d};
    auto finding = [](Verdict v, const char* device, MemoryRole role) {
        Finding f;
        f.verdict = v;
        f.device = device;
        f.role = role;
        return f;
    };
    r.findings = {finding(Verdict::Leak, "cuda:0", MemoryRole::UserHeld),
                  finding(Verdict::Plateau, "cuda:0", MemoryRole::Gradients),
                  finding(Verdict::Leak, "cuda:1", MemoryRole::Activations)};
    const nlohmann::json j = nlohmann::json::parse(toJson(r));
    std::vector<std::string> leaking;
    for (const auto& entry : j["devices"][0]["roles"]) {
        if (entry.at("leaks").get<bool>()) {
            leaking.push_back(entry["role"]);
        }
    }
    REQUIRE(leaking == std::vector<std::string>{"user_held"});
}

TEST_CASE("Roles that do not fit their device's points are dropped, unknown roles skipped") {
    Report r;
    r.iterations = 2;
    DeviceTimeline d;
    d.device = "cpu";
    d.allocated = {1, 2};
    d.reserved = {1, 2};
    d.peak = {1, 2};
    d.roles_at_boundary = {RoleBytes{}, RoleBytes{}};
    d.roles_at_peak = {RoleBytes{}, RoleBytes{}};
    r.devices = {d};
    nlohmann::json j = nlohmann::json::parse(toJson(r));
    j["devices"][0]["roles"].push_back({{"role", "a <future> role"}, {"at_boundary", {5, 5}}});
    REQUIRE(reportFromJson(j.dump()).devices.at(0).roles_at_boundary.size() == 2);
    j["devices"][0]["roles"][0]["at_boundary"] = {1, 2, 3};
    REQUIRE(reportFromJson(j.dump()).devices.at(0).roles_at_boundary.empty());
    j["devices"][0].erase("roles");
    REQUIRE(reportFromJson(j.dump()).devices.at(0).roles_at_peak.empty());
    REQUIRE(toString(MemoryRole::InputsOutputs) == "inputs_outputs");
    REQUIRE(roleLabel(MemoryRole::Untracked) == "not tracked");
}

TEST_CASE("A peak that jumps and comes back down is a spike, steady growth and the ends are not") {
    const int64_t M = int64_t(MiB);
    std::vector<int64_t> peaks = {30 * M, 10 * M, 10 * M, 60 * M, 11 * M, 10 * M, 10 * M, 90 * M};
    std::vector<RoleBytes> roles(peaks.size(), RoleBytes{});
    for (size_t i = 0; i < peaks.size(); ++i) {
        bytesOf(roles[i], MemoryRole::Parameters) = 4 * M;
        bytesOf(roles[i], MemoryRole::Activations) = peaks[i] - 4 * M;
    }
    const auto spikes = findPeakSpikes(peaks, roles);
    // The first point (30 MiB) and the last (90 MiB, nothing after it) are never spikes.
    REQUIRE(spikes.size() == 1);
    REQUIRE(spikes[0].point == 3);
    // The typical peak is the median, the upper one of an even count: 11 MiB of these eight
    // (and 7 MiB of their activations).
    REQUIRE(spikes[0].typical == 11 * M);
    REQUIRE(spikes[0].role == MemoryRole::Activations);
    REQUIRE(spikes[0].roleRise == 49 * M);
    // A leak's steady rise never comes back down: no spike. Nor a rise under 1 MiB.
    REQUIRE(findPeakSpikes({1 * M, 2 * M, 3 * M, 4 * M, 5 * M, 6 * M}, {}).empty());
    REQUIRE(findPeakSpikes({100, 100, 900'000, 100, 100}, {}).empty());
    REQUIRE(findPeakSpikes({}, {}).empty());
    // A level that lasts (the peak after stays high) is a new level, not a spike.
    REQUIRE(findPeakSpikes({10 * M, 10 * M, 10 * M, 40 * M, 40 * M, 40 * M, 10 * M}, {}).empty());
}

TEST_CASE("A report names a spike's iteration, the role that rose and its biggest block's site") {
    AllocationRecorder rec;
    const std::vector<RawFrame> work = {{0x1, 10}}, big = {{0x2, 77}};
    for (uint32_t i = 0; i < 12; ++i) {
        rec.recordAlloc(0x1000, 2 * MiB, kCpu, work, nullptr, 0, 0, false);
        if (i == 7) { // a one-off 40 MiB buffer, made and freed in forward
            rec.recordAlloc(0x9000, 40 * MiB, kCpu, big, nullptr, 0, 0, false);
            rec.recordAlloc(0x9100, KiB, kCpu, work, nullptr, 0, 0, false); // after it, smaller
            rec.recordFree(0x9100, kCpu, 0, 0, false);
            rec.recordFree(0x9000, kCpu, 0, 0, false);
        }
        rec.recordFree(0x1000, kCpu, 0, 0, false);
        rec.markBoundary();
    }
    testing::FileLineSymbolizer sym;
    NoBlockDescriptions desc;
    ReportInputs in;
    in.boundary = BoundaryKind::Explicit;
    in.devices = {{kCpu, "cpu", 64ull << 30}};
    const Report r = buildReport(rec, in, sym, desc);
    const DeviceTimeline& d = r.devices.at(0);
    REQUIRE(d.spikes.size() == 1);
    const PeakSpike& s = d.spikes[0];
    REQUIRE(s.iteration == 7);
    REQUIRE(s.peak_bytes == int64_t(42 * MiB + KiB));
    REQUIRE(s.typical_peak_bytes == int64_t(2 * MiB));
    REQUIRE(s.role == MemoryRole::Activations);
    REQUIRE(s.role_rise_bytes == int64_t(40 * MiB + KiB));
    REQUIRE(s.block_bytes == 40 * MiB);
    REQUIRE(s.site->line == 77);
    REQUIRE(spikeText(s, r.boundary) ==
            "the peak of iteration 8, 42.0 MiB, against 2.0 MiB typically: activations +40.0 MiB; "
            "its biggest block, 40.0 MiB, allocated at train.py:77");
    const Report back = reportFromJson(toJson(r));
    REQUIRE(back.devices.at(0).spikes.size() == 1);
    REQUIRE(back.devices.at(0).spikes[0].site->line == 77);
    REQUIRE(toJson(back) == toJson(r));
}

TEST_CASE("Named blocks from before tracking count in their roles, on devices with totals or not") {
    AllocationRecorder rec;
    // cuda:0: 10 MiB the hook never saw, 8 of them a model's parameters the registry names.
    rec.recordAlloc(0x10, 2 * MiB, kCuda0, kLine, nullptr, 12 * MiB, 16 * MiB, true);
    // cpu: no allocator totals; a 3 MiB parameter made before tracking.
    rec.recordAlloc(0x20, MiB, kCpu, kLine, nullptr, 0, 0, false);
    const std::vector<uintptr_t> params = {0x10, 0x999};
    std::vector<uint8_t> found(params.size());
    REQUIRE(rec.markHeldAs(params, HeldAs::Parameter, found) == 1);
    REQUIRE(found == std::vector<uint8_t>{1, 0});
    rec.noteUntrackedHeld(kCuda0, HeldAs::Parameter, 8 * MiB);
    rec.noteUntrackedHeld(kCpu, HeldAs::Parameter, 3 * MiB);
    rec.noteUntrackedHeld(kCpu, HeldAs::Unknown, 5 * MiB); // not a name: ignored
    const BoundarySnapshot& first = rec.markBoundary();
    const RoleBytes cuda = rolesAtBoundary(first.devices.at(0));
    REQUIRE(bytesOf(cuda, MemoryRole::Parameters) == int64_t(10 * MiB));
    REQUIRE(bytesOf(cuda, MemoryRole::Untracked) == int64_t(2 * MiB));
    REQUIRE(sumOf(cuda, false) == first.devices.at(0).allocated);
    REQUIRE(bytesOf(rolesAtPeak(first.devices.at(0)), MemoryRole::Parameters) == int64_t(10 * MiB));
    const RoleBytes cpu = rolesAtBoundary(first.devices.at(1));
    REQUIRE(bytesOf(cpu, MemoryRole::Parameters) == int64_t(3 * MiB));
    REQUIRE(bytesOf(cpu, MemoryRole::InputsOutputs) == int64_t(MiB));
    REQUIRE(sumOf(cpu, false) == first.devices.at(1).allocated + int64_t(3 * MiB));
    // Each boundary's registry says it again: a boundary without one names nothing.
    const BoundarySnapshot& second = rec.markBoundary();
    REQUIRE(bytesOf(rolesAtBoundary(second.devices.at(1)), MemoryRole::Parameters) == 0);
}
