#pragma once
// The Catch2 tests' stand-in for Python's symbolizer where a stack crosses a library: a raw
// frame whose code is 0x1000 or more is torch's (linear.py, forward), any other is the user's
// train.py in step(), at the line its offset names.

#include "torchleak/report_builder.h"

#include <span>
#include <vector>

namespace torchleak::testing {

class LibraryFrameSymbolizer final : public StackSymbolizer {
  public:
    std::vector<Frame> symbolize(std::span<const RawFrame> frames) override {
        std::vector<Frame> out;
        for (const RawFrame& r : frames) {
            Frame f;
            const bool library = r.code >= 0x1000;
            f.file = library ? "/site-packages/torch/nn/modules/linear.py" : "train.py";
            f.line = r.offset;
            f.function = library ? "forward" : "step";
            f.user = !library;
            out.push_back(f);
        }
        return out;
    }
};

} // namespace torchleak::testing
