#include "torchleak/birth_phase.h"

namespace torchleak {

std::string_view toString(BirthPhase phase) noexcept {
    switch (phase) {
    case BirthPhase::Forward:
        return "forward";
    case BirthPhase::Backward:
        return "backward";
    case BirthPhase::OptimizerStep:
        return "optimizer_step";
    }
    return "forward";
}

std::string_view toString(HeldAs held) noexcept {
    switch (held) {
    case HeldAs::Unknown:
        return "unknown";
    case HeldAs::Parameter:
        return "parameter";
    case HeldAs::Gradient:
        return "gradient";
    case HeldAs::OptimizerState:
        return "optimizer_state";
    }
    return "unknown";
}

int64_t BlockOrigins::total() const noexcept {
    int64_t sum = 0;
    for (size_t p = 0; p < kBirthPhases; ++p) {
        sum += thisIteration[p] + earlier[p];
    }
    for (int64_t bytes : registered) {
        sum += bytes;
    }
    return sum;
}

void BlockOrigins::add(HeldAs held,
                       BirthPhase phase,
                       bool bornThisIteration,
                       int64_t bytes) noexcept {
    if (held != HeldAs::Unknown) {
        registered[static_cast<size_t>(held) - 1] += bytes;
        return;
    }
    auto& bucket = bornThisIteration ? thisIteration : earlier;
    bucket[static_cast<size_t>(phase)] += bytes;
}

int64_t BlockOrigins::registeredAs(HeldAs held) const noexcept {
    return held == HeldAs::Unknown ? 0 : registered[static_cast<size_t>(held) - 1];
}

void BlockOrigins::endIteration() noexcept {
    for (size_t p = 0; p < kBirthPhases; ++p) {
        earlier[p] += thisIteration[p];
        thisIteration[p] = 0;
    }
}

} // namespace torchleak
