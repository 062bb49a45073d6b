#include "inspect/tensor_blocks.h"

#include "hook/device_key.h"

#include <algorithm>

namespace torchleak::python {

namespace {

bool blockOf(const at::Tensor& t, TensorBlock& out) noexcept {
    try {
        if (!t.defined() || !t.has_storage()) {
            return false;
        }
        const c10::Storage& storage = t.storage();
        out.block = reinterpret_cast<uintptr_t>(storage.data_ptr().get());
        out.bytes = storage.nbytes();
        out.device = deviceKeyOf(storage.device());
        return out.block != 0;
    } catch (...) {
        return false; // a storage c10 will not show (a functional or fake tensor's)
    }
}

} // namespace

std::vector<TensorBlock> distinctBlocks(std::span<const at::Tensor> tensors) noexcept {
    std::vector<TensorBlock> out;
    try {
        out.reserve(tensors.size());
        for (const at::Tensor& t : tensors) {
            if (TensorBlock b; blockOf(t, b)) {
                out.push_back(b);
            }
        }
        // Tensors on one block (a parameter made from another's rows, state entries that view
        // one another) name it once; tensors of one storage agree on its size and device.
        std::sort(out.begin(), out.end(),
                  [](const TensorBlock& a, const TensorBlock& b) { return a.block < b.block; });
        out.erase(std::unique(out.begin(), out.end(),
                              [](const TensorBlock& a, const TensorBlock& b) {
                                  return a.block == b.block;
                              }),
                  out.end());
    } catch (...) {
        out.clear(); // out of memory: every block stays counted by its phase
    }
    return out;
}

} // namespace torchleak::python
