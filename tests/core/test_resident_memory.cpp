#include "torchleak/display_text.h"
#include "torchleak/resident_memory.h"

#include <catch2/catch.hpp>
#include <vector>

using namespace torchleak;

namespace {

constexpr int64_t MiB = int64_t{1} << 20;

std::vector<ResidentSample> resident(std::vector<int64_t> mib) {
    std::vector<ResidentSample> out;
    for (size_t k = 0; k < mib.size(); ++k) {
        out.push_back({static_cast<int64_t>(k), mib[k] * MiB});
    }
    return out;
}

DeviceTimeline cpuTracking(std::vector<int64_t> mib) {
    DeviceTimeline cpu;
    cpu.device = "cpu";
    for (int64_t m : mib) {
        cpu.allocated.push_back(m * MiB);
    }
    return cpu;
}

} // namespace

TEST_CASE("Resident memory that grows while no tracked tensor does is said, with its numbers") {
    const auto samples = resident({500, 540, 580, 620, 660, 700});
    const DeviceTimeline cpu = cpuTracking({10, 10, 10, 10, 10, 10});
    const auto growth = findUntrackedGrowth(samples, &cpu, {}, 0);
    REQUIRE(growth);
    REQUIRE(growth->resident_growth == 200 * MiB);
    REQUIRE(growth->tracked_growth == 0);
    REQUIRE(untrackedGrowthText(*growth, BoundaryKind::Explicit) ==
            "the process's resident memory grew 200.0 MiB from iteration 1 to 6 while the CPU "
            "memory torchleak tracks grew 0 B: 200.0 MiB grew outside tensors (Python objects, a "
            "native library's buffers, an allocator's cache), which no finding covers");
    REQUIRE(untrackedGrowthText(*growth, BoundaryKind::Cell).find("from cell run 1 to 6") !=
            std::string::npos);
}

TEST_CASE("Growth the tracked tensors account for, noise, warm-up and short runs are not said") {
    // A tensor leak: resident grows with the tracked bytes.
    const DeviceTimeline leaking = cpuTracking({10, 50, 90, 130, 170, 210});
    REQUIRE_FALSE(findUntrackedGrowth(resident({500, 540, 580, 620, 660, 700}), &leaking, {}, 0));
    // Up and down around a level.
    const DeviceTimeline flat = cpuTracking({10, 10, 10, 10, 10, 10, 10});
    REQUIRE_FALSE(findUntrackedGrowth(resident({500, 700, 520, 690, 510, 680, 560}), &flat, {}, 0));
    // Growth only in warm-up (the first three iterations), flat after.
    REQUIRE_FALSE(findUntrackedGrowth(resident({100, 400, 700, 700, 700, 701, 701}), &flat, {}, 3));
    // An allocator's warm-up past the warm-up: 80 MiB in the first judged iterations, rising by
    // a page now and then after (#62 item 5, an ordinary training cell).
    const DeviceTimeline idle = cpuTracking({10, 10, 10, 10, 10, 10, 10, 10, 10});
    REQUIRE_FALSE(
        findUntrackedGrowth(resident({500, 540, 580, 580, 581, 581, 582, 582, 583}), &idle, {}, 0));
    // Too few judged points, and too little growth for the process's size.
    REQUIRE_FALSE(findUntrackedGrowth(resident({500, 600, 700}), &flat, {}, 0));
    REQUIRE_FALSE(
        findUntrackedGrowth(resident({4000, 4020, 4040, 4060, 4080, 4100}), &flat, {}, 0));
}

TEST_CASE("On a thinned grid the tracked bytes are read at the point each sample was taken at") {
    // Points kept at iterations 0, 4, 8; samples at 0, 2, 4, 6, 8.
    const DeviceTimeline cpu = cpuTracking({10, 110, 210});
    std::vector<ResidentSample> samples;
    for (int64_t it : {0, 2, 4, 6, 8}) {
        samples.push_back({it, (500 + 50 * it) * MiB});
    }
    const auto growth = findUntrackedGrowth(samples, &cpu, {0, 4, 8}, 0);
    REQUIRE(growth);
    REQUIRE(growth->tracked_growth == 200 * MiB);
    REQUIRE(growth->resident_growth == 400 * MiB);
    REQUIRE_FALSE(findUntrackedGrowth(samples, nullptr, {}, 0) == std::nullopt);
}
