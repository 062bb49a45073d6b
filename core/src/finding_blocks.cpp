#include "torchleak/finding_blocks.h"

#include <algorithm>

namespace torchleak {

size_t pathSamplesPerFinding(size_t findings) noexcept {
    if (findings == 0) {
        return kPathSamplesPerFinding;
    }
    return std::clamp(kPathSamplesPerReport / findings, kPathSamplesAtLeast,
                      kPathSamplesPerFinding);
}

std::vector<FindingBlock> samplePathBlocks(const std::vector<FindingBlock>& blocks, size_t limit) {
    if (blocks.size() <= limit) {
        return blocks;
    }
    const size_t head = limit * kPathHeadSamples / kPathSamplesPerFinding;
    std::vector<FindingBlock> sample(blocks.begin(),
                                     blocks.begin() + static_cast<std::ptrdiff_t>(head));
    const size_t rest = blocks.size() - head;
    const size_t spread = limit - head;
    for (size_t k = 0; k < spread; ++k) {
        sample.push_back(blocks[head + k * rest / spread]);
    }
    return sample;
}

const BlockPath* representativePath(const std::vector<FindingBlock>& blocks,
                                    const std::unordered_map<uintptr_t, BlockPath>& paths,
                                    uint32_t lastBoundaryIteration,
                                    std::vector<const std::vector<PathStep>*>& found,
                                    std::vector<uint32_t>* births) {
    const BlockPath* representative = nullptr;
    const BlockPath* newest = nullptr;
    uint32_t lastIteration = lastBoundaryIteration;
    if (!blocks.empty()) {
        lastIteration = std::min(lastIteration, blocks.front().birth);
    }
    for (const FindingBlock& b : blocks) {
        auto it = paths.find(b.block);
        if (it == paths.end()) {
            continue;
        }
        found.push_back(&it->second.steps);
        if (births != nullptr) {
            births->push_back(b.birth);
        }
        if (newest == nullptr) {
            newest = &it->second;
        }
        if (representative == nullptr && b.birth < lastIteration) {
            representative = &it->second;
        }
    }
    return representative != nullptr ? representative : newest;
}

} // namespace torchleak
