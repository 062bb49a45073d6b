#pragma once
// Devices: their names, their capacity, and each device's timeline in the report (allocated,
// reserved and peak bytes at every boundary, the leak rate, the OOM projection and the
// allocator's verdict).

#include "torchleak/config.h"
#include "torchleak/model.h"
#include "torchleak/recorder.h"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace torchleak {

struct DeviceInfo {
    DeviceKey key;
    std::string name; // "cpu", "cuda:0"
    uint64_t capacity_bytes = 0;
};

// c10's name of the PrivateUse1 device type until a backend renames it
// (torch.utils.rename_privateuse1_backend): the name is the process's, so callers pass it.
inline constexpr std::string_view kPrivateUse1DefaultName = "privateuseone";
inline constexpr int8_t kPrivateUse1Type = 20;

// "cpu", "cuda:0", "fakegpu:1": c10's spelling of a device.
std::string deviceName(DeviceKey key, std::string_view privateUse1 = kPrivateUse1DefaultName);
// A device index as c10 has one (c10::DeviceIndex is an int8_t): ASCII digits from 0 to 127,
// else nullopt. Names read from the user and from a report both check their index with it.
std::optional<int> parseDeviceIndex(std::string_view digits);
// The inverse of deviceName ("cuda:1" -> {CUDA, 1}); throws InvalidArgument for a name c10
// does not have or an index out of range.
DeviceKey parseDeviceName(std::string_view name,
                          std::string_view privateUse1 = kPrivateUse1DefaultName);

// The memory limit of this process: the cgroup limit when there is one, else physical memory.
uint64_t hostMemoryCapacity();

// What `key` can hold: the DeviceInfo that names it, else the host's limit for the CPU, else 0
// (unknown: no projection).
uint64_t deviceCapacity(DeviceKey key, const std::vector<DeviceInfo>& known);

// One timeline per device, in the order the devices first appeared at a boundary. The leak
// rate adds up the findings judged `leak` on that device; the host's capacity is read when no
// DeviceInfo gives one.
std::vector<DeviceTimeline>
buildDeviceTimelines(const std::vector<BoundarySnapshot>& boundaries,
                     const std::vector<DeviceInfo>& known,
                     const std::vector<Finding>& findings,
                     int warmup,
                     const AnalysisConfig& config,
                     std::string_view privateUse1 = kPrivateUse1DefaultName);

} // namespace torchleak
