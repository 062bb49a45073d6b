#pragma once
// Out-of-memory forensics: when an OOM error ends a tracked run, what the user needs first is
// which device was full and why: its allocated, reserved and capacity bytes at the failure,
// what was live on it by site and by holder, and which sites grew over the iterations before
// (the likely culprit first). Built from a finished report, so it can fail without taking the
// report with it (the builder keeps the report and adds a warning).

#include "torchleak/devices.h"
#include "torchleak/model.h"
#include "torchleak/recorder.h"

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace torchleak {

// What reached torchleak: the exception's type and message.
struct OutOfMemoryInputs {
    std::string error;
    std::string message;
    // The device the error names ("cuda:0"), for failures no allocator reported to the hook
    // (cuBLAS, cuDNN, NCCL or context creation running out of device memory); empty: the CPU.
    std::string device;
};

// What is alive now per finding (same order as Report::findings): the failing iteration's
// blocks, which no boundary has counted yet, included.
struct LiveNow {
    uint64_t bytes = 0;
    uint64_t count = 0;
};

struct OutOfMemoryContext {
    // The allocator's report of this failure; none for a MemoryError, a failure outside the
    // allocators, or when the last report was of an earlier failure the program survived.
    std::optional<OutOfMemoryEvent> event;
    uint32_t current_iteration = 0; // the recorder's iteration when the report is built
    int64_t tracked_bytes = 0;      // tracked bytes on the failing device now
    // Where the failing device's tracked bytes came from at the failure (the event's), else now.
    BlockOrigins origins{};
};

// The device that failed: the allocator's event's, else the one the error names, else the CPU
// (a MemoryError). Used to read the tracked bytes before building.
DeviceKey failingDevice(const std::optional<OutOfMemoryEvent>& event,
                        const OutOfMemoryInputs& failure,
                        std::string_view privateUse1);

OutOfMemoryReport buildOutOfMemoryReport(const Report& report,
                                         const std::vector<LiveNow>& liveNow,
                                         const OutOfMemoryInputs& failure,
                                         const OutOfMemoryContext& context,
                                         const std::vector<DeviceInfo>& known,
                                         std::string_view privateUse1);

} // namespace torchleak
