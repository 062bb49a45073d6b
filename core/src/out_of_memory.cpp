#include "torchleak/out_of_memory.h"

#include "torchleak/display_text.h"

#include <algorithm>
#include <map>

namespace torchleak {

namespace {

constexpr size_t kShownEntries = 10;

// What keeps a finding's blocks, in the words of its path: the holder that grows, else the
// path's root, so that blocks held by one list add up under one name.
std::string keeperOf(const Finding& f) {
    if (f.holder && !f.holder->path_text.empty()) {
        return f.holder->path_text;
    }
    if (!f.path.empty()) {
        return f.path.front().label;
    }
    return "(no retaining path)";
}

} // namespace

DeviceKey failingDevice(const std::optional<OutOfMemoryEvent>& event,
                        const OutOfMemoryInputs& failure,
                        std::string_view privateUse1) {
    if (event) {
        return event->device;
    }
    if (!failure.device.empty()) {
        try {
            return parseDeviceName(failure.device, privateUse1);
        } catch (const std::exception&) {
            // a name c10 does not have: the CPU, as for an error that names none
        }
    }
    return DeviceKey{0, -1};
}

OutOfMemoryReport buildOutOfMemoryReport(const Report& report,
                                         const std::vector<LiveNow>& liveNow,
                                         const OutOfMemoryInputs& failure,
                                         const OutOfMemoryContext& context,
                                         const std::vector<DeviceInfo>& known,
                                         std::string_view privateUse1) {
    OutOfMemoryReport oom;
    const DeviceKey key = failingDevice(context.event, failure, privateUse1);
    oom.device = deviceName(key, privateUse1);
    oom.error = failure.error;
    oom.message = failure.message.substr(0, failure.message.find('\n'));
    oom.iteration = context.event ? context.event->iteration : context.current_iteration;
    if (context.event && context.event->requested >= 0) {
        oom.requested_bytes = context.event->requested;
    }
    // A device allocator's totals at the failure, when they can be right; the CPU reporter's
    // count only what c10 saw while profiling, so the CPU uses tracked bytes.
    const auto& ev = context.event;
    // (A reporter that knows no reserve passes reserved < 0: shown as allocated.)
    if (ev && key.type != 0 && ev->allocated >= 0 &&
        (ev->reserved < 0 || ev->reserved >= ev->allocated)) {
        oom.allocated_bytes = ev->allocated;
        oom.reserved_bytes = ev->reserved < 0 ? ev->allocated : ev->reserved;
        oom.totals_from = "allocator";
    } else {
        oom.allocated_bytes = context.tracked_bytes;
        oom.reserved_bytes = context.tracked_bytes;
        oom.totals_from = "tracked";
    }
    oom.capacity_bytes = deviceCapacity(key, known);
    oom.live_bytes = static_cast<uint64_t>(std::max<int64_t>(context.tracked_bytes, 0));
    oom.roles = rolesInFlight(context.origins, oom.allocated_bytes, oom.reserved_bytes);

    std::vector<int> onDevice;
    for (size_t i = 0; i < report.findings.size(); ++i) {
        if (report.findings[i].device == oom.device) {
            onDevice.push_back(static_cast<int>(i));
        }
    }
    auto liveOf = [&](int i) {
        return static_cast<size_t>(i) < liveNow.size() ? liveNow[static_cast<size_t>(i)]
                                                       : LiveNow{};
    };

    // The likely culprit first: leaks before other growth, then the fastest growth.
    for (int i : onDevice) {
        if (report.findings[static_cast<size_t>(i)].bytes_per_iteration > 0) {
            oom.findings.push_back(i);
        }
    }
    std::stable_sort(oom.findings.begin(), oom.findings.end(), [&](int a, int b) {
        const Finding& fa = report.findings[static_cast<size_t>(a)];
        const Finding& fb = report.findings[static_cast<size_t>(b)];
        bool la = fa.verdict == Verdict::Leak, lb = fb.verdict == Verdict::Leak;
        if (la != lb) {
            return la;
        }
        return fa.bytes_per_iteration > fb.bytes_per_iteration;
    });

    for (int i : onDevice) {
        LiveNow live = liveOf(i);
        if (live.bytes == 0) {
            continue;
        }
        const Finding& f = report.findings[static_cast<size_t>(i)];
        oom.by_site.push_back({i, siteText(f.site), live.bytes, live.count, f.bytes_per_iteration});
    }
    std::stable_sort(oom.by_site.begin(), oom.by_site.end(),
                     [](const OutOfMemorySite& a, const OutOfMemorySite& b) {
                         return a.live_bytes > b.live_bytes;
                     });

    std::map<std::string, OutOfMemoryHolder> holders;
    for (const OutOfMemorySite& s : oom.by_site) {
        std::string keeper = keeperOf(report.findings[static_cast<size_t>(s.finding)]);
        OutOfMemoryHolder& h = holders[keeper];
        h.holder = keeper;
        h.live_bytes += s.live_bytes;
        h.findings.push_back(s.finding);
    }
    for (auto& [name, holder] : holders) {
        oom.by_holder.push_back(std::move(holder));
    }
    std::stable_sort(oom.by_holder.begin(), oom.by_holder.end(),
                     [](const OutOfMemoryHolder& a, const OutOfMemoryHolder& b) {
                         return a.live_bytes > b.live_bytes;
                     });
    if (oom.by_site.size() > kShownEntries) {
        oom.by_site.resize(kShownEntries);
    }
    if (oom.by_holder.size() > kShownEntries) {
        oom.by_holder.resize(kShownEntries);
    }
    return oom;
}

} // namespace torchleak
