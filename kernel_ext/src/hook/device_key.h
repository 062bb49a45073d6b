#pragma once
// c10's Device as the recorder keys it. One conversion for every path that names a device: the
// hook's events and the registry's blocks made before tracking must land on the same key (a
// CPU device's index is -1), or a device's roles would be split in two.

#include "torchleak/live_block_table.h"

#include <c10/core/Device.h>

namespace torchleak {

inline DeviceKey deviceKeyOf(c10::Device device) noexcept {
    return DeviceKey{static_cast<int8_t>(device.type()), static_cast<int8_t>(device.index())};
}

} // namespace torchleak
