#pragma once
// A boundary's sample of the group whose stack is `stack`, or null when the boundary does not
// hold it (the group did not change in that iteration, or never held a filed block).
#include "torchleak/recorder.h"

#include <vector>

namespace torchleak::testing {

inline const GroupSample* groupWithStack(const BoundarySnapshot& b,
                                         const AllocationRecorder& rec,
                                         const std::vector<RawFrame>& stack) {
    for (const GroupSample& g : b.groups) {
        if (rec.stackFrames(g.key.stack) == stack) {
            return &g;
        }
    }
    return nullptr;
}

} // namespace torchleak::testing
