#pragma once
// The phase of an iteration a block was born in, tagged by the allocator hook: the forward
// pass (and everything else outside the two below: data loading, the user's own code), the
// backward pass (an autograd node was running), or the optimizer's step. It is how PyTorch's
// MemTracker tells activations, backward temporaries and optimizer state apart, and the start
// of a block's role: who holds the block at a boundary refines it.

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace torchleak {

enum class BirthPhase : uint8_t { Forward, Backward, OptimizerStep };
inline constexpr size_t kBirthPhases = 3;

// "forward", "backward", "optimizer_step".
std::string_view toString(BirthPhase phase) noexcept;

// A device's tracked live bytes by the phase they were born in, those born in the current
// iteration apart from those born earlier (at an iteration's peak, this iteration's forward
// bytes are its activations; at its end, what survives of them is kept by someone).
struct PhaseBytes {
    std::array<int64_t, kBirthPhases> thisIteration{};
    std::array<int64_t, kBirthPhases> earlier{};

    int64_t total() const noexcept;
    // Tracked bytes born in `phase` during the current iteration (thisIteration) or before.
    void add(BirthPhase phase, bool bornThisIteration, int64_t bytes) noexcept;
    // The iteration ends: its births become earlier ones.
    void endIteration() noexcept;
    bool operator==(const PhaseBytes&) const = default;
};

} // namespace torchleak
