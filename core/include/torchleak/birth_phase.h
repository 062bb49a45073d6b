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

// What a registry told torchleak a block is, at a boundary: the optimizers it saw stepping
// name their parameters, the parameters' gradients and their state. A block keeps the name
// until it is freed (a parameter does not become something else).
enum class HeldAs : uint8_t { Unknown, Parameter, Gradient, OptimizerState };
inline constexpr size_t kRegisteredRoles = 3; // HeldAs values after Unknown
inline constexpr std::array<HeldAs, kRegisteredRoles> kRegisteredHeldAs = {
    HeldAs::Parameter, HeldAs::Gradient, HeldAs::OptimizerState};

// "unknown", "parameter", "gradient", "optimizer_state".
std::string_view toString(HeldAs held) noexcept;

// Where a device's tracked live bytes come from: the blocks a registry named, by what it named
// them, and the others by the phase they were born in, those born in the current iteration
// apart from those born earlier (at an iteration's peak, this iteration's forward bytes are its
// activations; at its end, what survives of them is kept by someone). Adds up to the tracked
// bytes.
struct BlockOrigins {
    std::array<int64_t, kBirthPhases> thisIteration{};
    std::array<int64_t, kBirthPhases> earlier{};
    std::array<int64_t, kRegisteredRoles> registered{}; // [HeldAs - 1]

    int64_t total() const noexcept;
    // A block of `bytes` (negative: it goes) with this origin.
    void add(HeldAs held, BirthPhase phase, bool bornThisIteration, int64_t bytes) noexcept;
    int64_t registeredAs(HeldAs held) const noexcept;
    // The iteration ends: its births become earlier ones.
    void endIteration() noexcept;
    bool operator==(const BlockOrigins&) const = default;
};

} // namespace torchleak
