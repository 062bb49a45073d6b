#pragma once
// The Catch2 tests' stand-in for Python's symbolizer: every frame is train.py in step(), at the
// line its raw frame's offset names.

#include "torchleak/report_builder.h"

#include <span>
#include <vector>

namespace torchleak::testing {

class FileLineSymbolizer final : public StackSymbolizer {
  public:
    std::vector<Frame> symbolize(std::span<const RawFrame> frames) override {
        std::vector<Frame> out;
        for (const RawFrame& r : frames) {
            Frame f;
            f.file = "train.py";
            f.line = static_cast<int>(r.offset);
            f.function = "step";
            out.push_back(f);
        }
        return out;
    }
};

} // namespace torchleak::testing
