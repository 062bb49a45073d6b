#include "torchleak/devices.h"

#include "torchleak/errors.h"
#include "torchleak/memory_roles.h"
#include "torchleak/verdict.h"

#include <algorithm>
#include <charconv>
#include <fstream>
#include <unistd.h>

namespace torchleak {

namespace {
// c10::DeviceType's names, indexed by its value.
constexpr const char* kDeviceTypeNames[] = {
    "cpu",    "cuda",  "mkldnn", "opengl", "opencl", "ideep", "hip", "fpga", "maia", "xla",
    "vulkan", "metal", "xpu",    "mps",    "meta",   "hpu",   "ve",  "lazy", "ipu",  "mtia"};
} // namespace

std::string deviceName(DeviceKey key, std::string_view privateUse1) {
    std::string base =
        key.type == kPrivateUse1Type ? std::string(privateUse1)
        : (key.type >= 0 && static_cast<size_t>(key.type) < std::size(kDeviceTypeNames))
            ? kDeviceTypeNames[key.type]
            : "device" + std::to_string(key.type);
    if (key.type == 0 || key.index < 0) {
        return base;
    }
    return base + ":" + std::to_string(key.index);
}

std::optional<int> parseDeviceIndex(std::string_view digits) {
    int index = -1;
    auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), index);
    if (ec != std::errc() || end != digits.data() + digits.size() || index < 0 || index > 127) {
        return std::nullopt;
    }
    return index;
}

DeviceKey parseDeviceName(std::string_view name, std::string_view privateUse1) {
    size_t colon = name.find(':');
    std::string_view type = name.substr(0, colon);
    DeviceKey key;
    if (!type.empty() && (type == privateUse1 || type == kPrivateUse1DefaultName)) {
        key.type = kPrivateUse1Type;
    } else {
        auto known = std::find(std::begin(kDeviceTypeNames), std::end(kDeviceTypeNames), type);
        if (known == std::end(kDeviceTypeNames)) {
            throw InvalidArgument("unknown device '" + std::string(name) +
                                  "' (examples: cpu, cuda:0)");
        }
        key.type = static_cast<int8_t>(known - std::begin(kDeviceTypeNames));
    }
    if (colon != std::string_view::npos) {
        auto index = parseDeviceIndex(name.substr(colon + 1));
        if (!index) {
            throw InvalidArgument("bad device index in '" + std::string(name) +
                                  "' (a number from 0 to 127)");
        }
        key.index = static_cast<int8_t>(*index);
    }
    return key;
}

namespace {
uint64_t readHostMemoryCapacity() {
    uint64_t physical = 0;
    long pages = sysconf(_SC_PHYS_PAGES);
    long pageSize = sysconf(_SC_PAGE_SIZE);
    if (pages > 0 && pageSize > 0) {
        physical = static_cast<uint64_t>(pages) * static_cast<uint64_t>(pageSize);
    }
    for (const char* path :
         {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}) {
        std::ifstream in(path);
        std::string text;
        if (in >> text && text != "max") {
            try {
                uint64_t limit = std::stoull(text);
                if (limit > 0 && (physical == 0 || limit < physical)) {
                    return limit;
                }
            } catch (...) {
            }
        }
    }
    return physical;
}
} // namespace

// Read once per process: a report asks for every CPU finding (2,000 sites opened the cgroup
// files 4,000 times), and a container's limit does not change under a running job.
uint64_t hostMemoryCapacity() {
    static const uint64_t capacity = readHostMemoryCapacity();
    return capacity;
}

uint64_t deviceCapacity(DeviceKey key, const std::vector<DeviceInfo>& known) {
    uint64_t capacity = 0;
    for (const auto& info : known) {
        if (info.key == key) {
            capacity = info.capacity_bytes;
        }
    }
    if (capacity == 0 && key.type == 0) {
        capacity = hostMemoryCapacity();
    }
    return capacity;
}

std::vector<DeviceTimeline> buildDeviceTimelines(const std::vector<BoundarySnapshot>& boundaries,
                                                 const std::vector<DeviceInfo>& known,
                                                 const std::vector<Finding>& findings,
                                                 int warmup,
                                                 const AnalysisConfig& config,
                                                 std::string_view privateUse1) {
    // The run's length and each point's iteration: a long run keeps a thinned grid.
    const int64_t iterations =
        boundaries.empty() ? 0 : static_cast<int64_t>(boundaries.back().iteration) + 1;
    std::vector<uint32_t> at;
    for (const auto& snap : boundaries) {
        at.push_back(snap.iteration);
    }
    std::vector<DeviceKey> order;
    for (const auto& snap : boundaries) {
        for (const auto& d : snap.devices) {
            if (std::find(order.begin(), order.end(), d.device) == order.end()) {
                order.push_back(d.device);
            }
        }
    }
    std::vector<DeviceTimeline> timelines;
    for (DeviceKey key : order) {
        DeviceTimeline t;
        t.device = deviceName(key, privateUse1);
        t.capacity_bytes = deviceCapacity(key, known);
        for (const auto& snap : boundaries) {
            auto it = std::find_if(snap.devices.begin(), snap.devices.end(),
                                   [&](const DeviceSample& d) { return d.device == key; });
            t.allocated.push_back(it != snap.devices.end() ? it->allocated : 0);
            t.reserved.push_back(it != snap.devices.end() ? it->reserved : 0);
            t.peak.push_back(it != snap.devices.end() ? it->peak : 0);
            t.roles_at_boundary.push_back(it != snap.devices.end() ? rolesAtBoundary(*it)
                                                                   : RoleBytes{});
            t.roles_at_peak.push_back(it != snap.devices.end() ? rolesAtPeak(*it) : RoleBytes{});
        }
        for (const Finding& f : findings) {
            if (f.verdict == Verdict::Leak && f.device == t.device && f.bytes_per_iteration > 0) {
                t.leak_bytes_per_iteration += f.bytes_per_iteration;
            }
        }
        if (t.leak_bytes_per_iteration > 0 && t.capacity_bytes > 0) {
            int64_t used = t.allocated.empty() ? 0 : t.allocated.back();
            int64_t room = std::max<int64_t>(static_cast<int64_t>(t.capacity_bytes) - used, 0);
            t.projected_oom_iteration =
                iterations + (room + t.leak_bytes_per_iteration - 1) / t.leak_bytes_per_iteration;
        }
        DeviceVerdict dv = judgeDevice(t.allocated, t.reserved, warmup, config, at);
        t.fragmentation_ratio = dv.ratio;
        if (dv.fragmentation) {
            t.verdict = "fragmentation";
        }
        timelines.push_back(std::move(t));
    }
    return timelines;
}

} // namespace torchleak
