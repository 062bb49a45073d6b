#pragma once
// A retaining path's step, as the Catch2 tests of the remedies and their code build them.
#include "torchleak/model.h"

#include <string>
#include <utility>

namespace torchleak::testing {

inline PathStep
step(StepKind kind, std::string label, std::string type = "", std::string note = "") {
    PathStep s;
    s.kind = kind;
    s.label = std::move(label);
    s.type = std::move(type);
    s.note = std::move(note);
    return s;
}

} // namespace torchleak::testing
