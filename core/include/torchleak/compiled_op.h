#pragma once
// What torch.compile's generated code was doing when it allocated: inductor writes, beside
// each buffer it allocates in its generated Python (`buf2 = empty_strided_cpu(...)`), a comment
// naming the graph nodes and ATen ops the buffer is for:
//   # Topologically Sorted Source Nodes: [input_3], Original ATen: [aten.t, aten.addmm]
// (older inductors: `# Source Nodes: [...], Original ATen: [...]`). The site stays the user's
// line that called the compiled model; this says which op of it made the buffer.

#include "torchleak/model.h"
#include "torchleak/report_inputs.h"

#include <optional>
#include <string>
#include <string_view>

namespace torchleak {

// The ops of an inductor source-node comment, or nothing if `line` is not one.
std::optional<CompiledOp> parseSourceNodeComment(std::string_view line);

// The comment that describes the allocation at the innermost frame of `stack` (the comment at
// or just after its line, before the next allocation), when that frame is library code that
// has one. Reads lines through the symbolizer (linecache): generated files are on disk.
std::optional<CompiledOp> compiledOpOf(const std::vector<Frame>& stack,
                                       StackSymbolizer& symbolizer);

// "made in torch.compile's generated code by aten.t and aten.addmm (graph node input_3)".
std::string compiledOpText(const CompiledOp& op);

} // namespace torchleak
