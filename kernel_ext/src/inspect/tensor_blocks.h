#pragma once
// The allocation each tensor's memory lies in, read from its storage in C++: what memory by
// role names at every boundary (the optimizers' parameters, gradients and state). Read from
// Python (`tensor.untyped_storage().data_ptr()`), every tensor made a storage object first: a
// boundary of the 120 tensors of a 2-layer encoder with AdamW took about 160 µs of the step's
// 30 ms that way.

#include "torchleak/live_block_table.h"

#include <ATen/core/Tensor.h>
#include <cstdint>
#include <span>
#include <vector>

namespace torchleak::python {

struct TensorBlock {
    uintptr_t block = 0; // the storage's start, as the allocator handed it out
    uint64_t bytes = 0;  // the storage's size: what a block made before tracking counts
    DeviceKey device;
};

// Each tensor's block, each block once, by address. Tensors with no ordinary storage (meta,
// sparse, a wrapper subclass, an undefined tensor) have none. Never throws.
std::vector<TensorBlock> distinctBlocks(std::span<const at::Tensor> tensors) noexcept;

} // namespace torchleak::python
