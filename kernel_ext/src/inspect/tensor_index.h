#pragma once
// LiveTensorIndex: which tensor lives in which allocator block, from the tensors Python's gc
// can see (and their .grad). Used at report time to give a finding its dtype and shape.
// It stores descriptions only, never a tensor, so building it keeps nothing alive.

#include "torchleak/report_builder.h"

#include <c10/core/ScalarType.h>

#include <unordered_map>
#include <unordered_set>

namespace torchleak::python {

// torch's Python name of a dtype ("float32"); c10::toString gives the C++ one ("Float").
std::string dtypeName(at::ScalarType type);

class LiveTensorIndex final : public BlockDescriber {
  public:
    // Needs the GIL. Walks gc.get_objects() once and keeps the tensors of `wanted` blocks (a
    // report asks for a few among maybe millions of live tensors).
    static LiveTensorIndex scan(const std::vector<uintptr_t>& wanted);
    // Scans on describe(): a report with no finding to describe (a trivial cell, a progress
    // update early in a run) skips the heap scan, most of its cost.
    static LiveTensorIndex onFirstUse();
    std::vector<std::optional<BlockDescription>>
    describe(const std::vector<uintptr_t>& blocks) override;
    size_t size() const noexcept { return d_byBlock.size(); }

    struct Entry {
        BlockDescription description;
        uint64_t bytes = 0; // the view that covers most of the block describes it best
    };

  private:
    std::unordered_map<uintptr_t, Entry> d_byBlock;
    bool d_scanPending = false;
};

} // namespace torchleak::python
