// Device names both ways, and device timelines with their leak rate and OOM projection.
#include "torchleak/devices.h"
#include "torchleak/errors.h"

#include <catch2/catch.hpp>

using namespace torchleak;

TEST_CASE("device names round-trip, bad names are clear errors") {
    REQUIRE(deviceName(parseDeviceName("cpu")) == "cpu");
    REQUIRE(deviceName(parseDeviceName("cuda:0")) == "cuda:0");
    REQUIRE(deviceName(parseDeviceName("cuda:7")) == "cuda:7");
    REQUIRE(parseDeviceName("cuda:1").type == 1);
    REQUIRE(parseDeviceName("cuda:1").index == 1);
    REQUIRE(parseDeviceName("cuda").index == -1);
    REQUIRE(deviceName(parseDeviceName("xpu:2")) == "xpu:2");
    REQUIRE_THROWS_WITH(parseDeviceName("gpu:0"), Catch::Contains("unknown device 'gpu:0'"));
    REQUIRE_THROWS_AS(parseDeviceName("cuda:x"), InvalidArgument);
    REQUIRE_THROWS_AS(parseDeviceName("cuda:"), InvalidArgument);
    REQUIRE_THROWS_AS(parseDeviceName("cuda:-1"), InvalidArgument);
    REQUIRE_THROWS_AS(parseDeviceName("cuda:999999999999"), InvalidArgument);
}

TEST_CASE("a device timeline sums its leaks and projects when it is full") {
    constexpr int64_t MiB = 1 << 20;
    std::vector<BoundarySnapshot> boundaries(4);
    DeviceKey cuda{1, 0};
    for (int b = 0; b < 4; ++b) {
        boundaries[b].iteration = static_cast<uint32_t>(b);
        boundaries[b].devices.push_back({cuda, (b + 1) * MiB, 2 * (b + 1) * MiB, (b + 2) * MiB});
    }
    Finding leak;
    leak.verdict = Verdict::Leak;
    leak.device = "cuda:0";
    leak.bytes_per_iteration = MiB;
    Finding other = leak;
    other.verdict = Verdict::Plateau;
    auto timelines = buildDeviceTimelines(boundaries, {{cuda, "cuda:0", 100 * MiB}}, {leak, other},
                                          0, AnalysisConfig{});
    REQUIRE(timelines.size() == 1);
    const DeviceTimeline& t = timelines[0];
    REQUIRE(t.device == "cuda:0");
    REQUIRE(t.allocated == std::vector<int64_t>{MiB, 2 * MiB, 3 * MiB, 4 * MiB});
    REQUIRE(t.peak.back() == 5 * MiB);
    REQUIRE(t.leak_bytes_per_iteration == MiB); // the plateau does not count
    REQUIRE(t.projected_oom_iteration == 4 + 96);
}
