#include "torchleak/memory_roles.h"

#include "torchleak/recorder.h"

#include <algorithm>

namespace torchleak {

namespace {
int64_t phaseBytes(const std::array<int64_t, kBirthPhases>& bytes, BirthPhase phase) noexcept {
    return bytes[static_cast<size_t>(phase)];
}

// Bytes a registry named, kept by name ([HeldAs - 1]: BlockOrigins::registered, and
// DeviceSample::untrackedHeld for named blocks from before tracking, which are in the
// allocator's total when it reports one and beyond the tracked bytes when it does not), added
// to the role each name is: roleOfBlock's mapping, the one place it is written.
void addNamed(RoleBytes& roles, const std::array<int64_t, kRegisteredRoles>& named) noexcept {
    for (size_t i = 0; i < kRegisteredRoles; ++i) {
        bytesOf(roles, roleOfBlock(kRegisteredHeldAs[i], BirthPhase::Forward, false)) += named[i];
    }
}

int64_t accountedFor(const RoleBytes& roles) noexcept {
    int64_t sum = 0;
    for (size_t r = 0; r < static_cast<size_t>(MemoryRole::Untracked); ++r) {
        sum += roles[r];
    }
    return sum;
}
} // namespace

std::string_view toString(MemoryRole role) noexcept {
    switch (role) {
    case MemoryRole::Parameters:
        return "parameters";
    case MemoryRole::Gradients:
        return "gradients";
    case MemoryRole::OptimizerState:
        return "optimizer_state";
    case MemoryRole::Activations:
        return "activations";
    case MemoryRole::Temporaries:
        return "temporaries";
    case MemoryRole::InputsOutputs:
        return "inputs_outputs";
    case MemoryRole::UserHeld:
        return "user_held";
    case MemoryRole::Untracked:
        return "untracked";
    case MemoryRole::Reserve:
        return "reserve";
    }
    return "untracked";
}

std::optional<MemoryRole> memoryRoleFromString(std::string_view name) noexcept {
    for (size_t r = 0; r < kMemoryRoles; ++r) {
        if (toString(static_cast<MemoryRole>(r)) == name) {
            return static_cast<MemoryRole>(r);
        }
    }
    return std::nullopt;
}

std::string_view roleLabel(MemoryRole role) noexcept {
    switch (role) {
    case MemoryRole::OptimizerState:
        return "optimizer state";
    case MemoryRole::InputsOutputs:
        return "inputs and outputs";
    case MemoryRole::UserHeld:
        return "user-held";
    case MemoryRole::Untracked:
        return "not tracked";
    case MemoryRole::Reserve:
        return "allocator reserve";
    default:
        return toString(role);
    }
}

// At a boundary every unnamed block is either this iteration's (still bound: the batch, the
// loss) or an earlier one's (kept by someone); a backward-born block that outlives backward is
// a gradient (of a tensor no optimizer steps), a step-born one the optimizer's state.
RoleBytes rolesAtBoundary(const DeviceSample& sample) noexcept {
    const BlockOrigins& o = sample.live;
    RoleBytes roles{};
    addNamed(roles, o.registered);
    for (const auto* bucket : {&o.thisIteration, &o.earlier}) {
        bytesOf(roles, MemoryRole::Gradients) += phaseBytes(*bucket, BirthPhase::Backward);
        bytesOf(roles, MemoryRole::OptimizerState) +=
            phaseBytes(*bucket, BirthPhase::OptimizerStep);
    }
    bytesOf(roles, MemoryRole::InputsOutputs) = phaseBytes(o.thisIteration, BirthPhase::Forward);
    bytesOf(roles, MemoryRole::UserHeld) = phaseBytes(o.earlier, BirthPhase::Forward);
    addNamed(roles, sample.untrackedHeld);
    bytesOf(roles, MemoryRole::Untracked) =
        std::max<int64_t>(sample.allocated - accountedFor(roles), 0);
    bytesOf(roles, MemoryRole::Reserve) = std::max<int64_t>(sample.reserved - sample.allocated, 0);
    return roles;
}

// What this iteration made and freed again before its end, alive at the peak, is its working
// set: forward-born, the activations autograd saved (and forward temporaries still alive);
// backward- and step-born, temporaries. What it made and kept is counted by what it became.
RoleBytes rolesAtPeak(const DeviceSample& sample) noexcept {
    const BlockOrigins& at = sample.atPeak;
    const BlockOrigins& freed = sample.freedAfterPeak;
    RoleBytes roles{};
    addNamed(roles, at.registered);
    auto kept = [&](BirthPhase p) {
        return phaseBytes(at.thisIteration, p) - phaseBytes(freed.thisIteration, p);
    };
    bytesOf(roles, MemoryRole::Activations) = phaseBytes(freed.thisIteration, BirthPhase::Forward);
    bytesOf(roles, MemoryRole::Temporaries) =
        phaseBytes(freed.thisIteration, BirthPhase::Backward) +
        phaseBytes(freed.thisIteration, BirthPhase::OptimizerStep);
    bytesOf(roles, MemoryRole::InputsOutputs) = kept(BirthPhase::Forward);
    bytesOf(roles, MemoryRole::Gradients) +=
        kept(BirthPhase::Backward) + phaseBytes(at.earlier, BirthPhase::Backward);
    bytesOf(roles, MemoryRole::OptimizerState) +=
        kept(BirthPhase::OptimizerStep) + phaseBytes(at.earlier, BirthPhase::OptimizerStep);
    bytesOf(roles, MemoryRole::UserHeld) = phaseBytes(at.earlier, BirthPhase::Forward);
    addNamed(roles, sample.untrackedHeld);
    bytesOf(roles, MemoryRole::Untracked) = std::max<int64_t>(sample.peak - accountedFor(roles), 0);
    return roles;
}

RoleBytes rolesInFlight(const BlockOrigins& o, int64_t allocated, int64_t reserved) noexcept {
    RoleBytes roles{};
    addNamed(roles, o.registered);
    bytesOf(roles, MemoryRole::Activations) = phaseBytes(o.thisIteration, BirthPhase::Forward);
    bytesOf(roles, MemoryRole::Temporaries) = phaseBytes(o.thisIteration, BirthPhase::Backward);
    bytesOf(roles, MemoryRole::Gradients) += phaseBytes(o.earlier, BirthPhase::Backward);
    bytesOf(roles, MemoryRole::OptimizerState) +=
        phaseBytes(o.thisIteration, BirthPhase::OptimizerStep) +
        phaseBytes(o.earlier, BirthPhase::OptimizerStep);
    bytesOf(roles, MemoryRole::UserHeld) = phaseBytes(o.earlier, BirthPhase::Forward);
    bytesOf(roles, MemoryRole::Untracked) = std::max<int64_t>(allocated - accountedFor(roles), 0);
    bytesOf(roles, MemoryRole::Reserve) = std::max<int64_t>(reserved - allocated, 0);
    return roles;
}

MemoryRole roleOfBlock(HeldAs held, BirthPhase phase, bool bornInLastIteration) noexcept {
    switch (held) {
    case HeldAs::Parameter:
        return MemoryRole::Parameters;
    case HeldAs::Gradient:
        return MemoryRole::Gradients;
    case HeldAs::OptimizerState:
        return MemoryRole::OptimizerState;
    case HeldAs::Unknown:
        break;
    }
    switch (phase) {
    case BirthPhase::Backward:
        return MemoryRole::Gradients;
    case BirthPhase::OptimizerStep:
        return MemoryRole::OptimizerState;
    case BirthPhase::Forward:
        break;
    }
    return bornInLastIteration ? MemoryRole::InputsOutputs : MemoryRole::UserHeld;
}

} // namespace torchleak
