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

int64_t PhaseBytes::total() const noexcept {
    int64_t sum = 0;
    for (size_t p = 0; p < kBirthPhases; ++p) {
        sum += thisIteration[p] + earlier[p];
    }
    return sum;
}

void PhaseBytes::add(BirthPhase phase, bool bornThisIteration, int64_t bytes) noexcept {
    auto& bucket = bornThisIteration ? thisIteration : earlier;
    bucket[static_cast<size_t>(phase)] += bytes;
}

void PhaseBytes::endIteration() noexcept {
    for (size_t p = 0; p < kBirthPhases; ++p) {
        earlier[p] += thisIteration[p];
        thisIteration[p] = 0;
    }
}

} // namespace torchleak
