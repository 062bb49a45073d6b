#pragma once
// What a device's memory is made of, by role, at a boundary and at the moment of an
// iteration's peak: the answer to "of 61 GiB at the peak, how much is optimizer state and how
// much activations". Derived from the origins the recorder keeps (birth_phase.h) and the
// allocator's totals, with no pass over the blocks: a role is what a registry named a block,
// else what the phase it was born in and whether it outlived its iteration say it is.

#include "torchleak/birth_phase.h"

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace torchleak {

struct DeviceSample; // recorder.h

// The JSON's names (toString) are a contract; the order is the stacking order of a chart,
// bottom up: what a model needs first, what a run leaves behind last.
enum class MemoryRole : uint8_t {
    Parameters,     // named by an optimizer seen stepping
    Gradients,      // named so, or born in backward and alive at the iteration's end
    OptimizerState, // named so, or born in the optimizer's step
    Activations,    // at a peak: born in this iteration's forward, freed before its end
    Temporaries,    // at a peak: born in backward or the step, freed before the end
    InputsOutputs,  // born in this iteration outside backward and the step, alive at its
                    // end: the batch, the outputs, the loss still bound to names
    UserHeld,       // born in an earlier iteration outside backward and the step and still
                    // alive: caches, lists, buffers; where leaks live
    Untracked,      // the allocator's total less the tracked bytes: blocks from before tracking
    Reserve,        // reserved by the allocator but not allocated (at boundaries only)
};
inline constexpr size_t kMemoryRoles = 9;

using RoleBytes = std::array<int64_t, kMemoryRoles>;

inline int64_t& bytesOf(RoleBytes& roles, MemoryRole role) noexcept {
    return roles[static_cast<size_t>(role)];
}
inline int64_t bytesOf(const RoleBytes& roles, MemoryRole role) noexcept {
    return roles[static_cast<size_t>(role)];
}

// "parameters", "gradients", "optimizer_state", "activations", "temporaries",
// "inputs_outputs", "user_held", "untracked", "reserve".
std::string_view toString(MemoryRole role) noexcept;
// The role a JSON name stands for; none for a name this version does not know.
std::optional<MemoryRole> memoryRoleFromString(std::string_view name) noexcept;
// The words views show: "optimizer state", "inputs and outputs", "user-held", "not tracked",
// "allocator reserve".
std::string_view roleLabel(MemoryRole role) noexcept;

// At a boundary: the tracked bytes by role, the blocks from before tracking a registry named
// (DeviceSample::untrackedHeld) with them, `untracked` (allocated less all those, never below
// 0) and `reserve` (reserved less allocated). Without sampling, every role but the reserve adds
// up to `allocated` where the allocator reports totals, and to `allocated` plus the named
// blocks from before tracking where it does not (the CPU: its `allocated` is tracked bytes).
RoleBytes rolesAtBoundary(const DeviceSample& sample) noexcept;
// At the iteration's peak: what was alive then, by role, each block counted by what it turned
// out to be (named at the boundary, or freed before it); adds up to `peak`. No reserve: the
// allocator's reserve at that moment is not kept.
RoleBytes rolesAtPeak(const DeviceSample& sample) noexcept;

// In the middle of an iteration (an out-of-memory error): this iteration's forward blocks are
// activations in flight, its backward ones temporaries (gradients not yet named among them),
// the rest as at a boundary; `untracked` and `reserve` from the allocator's totals.
RoleBytes rolesInFlight(const BlockOrigins& live, int64_t allocated, int64_t reserved) noexcept;

// The role of one live block when a report is built: `bornInLastIteration` says it was born in
// the iteration the last boundary ended (or the one still running).
MemoryRole roleOfBlock(HeldAs held, BirthPhase phase, bool bornInLastIteration) noexcept;

} // namespace torchleak
