#include "torchleak/compiled_op.h"

#include "torchleak/display_text.h"

namespace torchleak {

namespace {

// The comma-separated names inside the brackets that follow `label` in `line`.
std::optional<std::vector<std::string>> bracketList(std::string_view line, std::string_view label) {
    const size_t at = line.find(label);
    if (at == std::string_view::npos) {
        return std::nullopt;
    }
    const size_t open = line.find('[', at + label.size());
    const size_t close = open == std::string_view::npos ? open : line.find(']', open);
    if (open == std::string_view::npos || close == std::string_view::npos) {
        return std::nullopt;
    }
    std::vector<std::string> names;
    std::string_view inside = line.substr(open + 1, close - open - 1);
    while (!inside.empty()) {
        const size_t comma = inside.find(',');
        std::string_view name = inside.substr(0, comma);
        while (!name.empty() && name.front() == ' ') {
            name.remove_prefix(1);
        }
        while (!name.empty() && name.back() == ' ') {
            name.remove_suffix(1);
        }
        if (!name.empty()) {
            names.emplace_back(name);
        }
        inside = comma == std::string_view::npos ? std::string_view() : inside.substr(comma + 1);
    }
    return names;
}

bool allocatesBuffer(std::string_view line) {
    return line.find("= empty_strided") != std::string_view::npos;
}

} // namespace

std::optional<CompiledOp> parseSourceNodeComment(std::string_view line) {
    while (!line.empty() && (line.front() == ' ' || line.front() == '\t')) {
        line.remove_prefix(1);
    }
    if (line.rfind("#", 0) != 0 || line.find("Source Nodes:") == std::string_view::npos) {
        return std::nullopt;
    }
    const auto nodes = bracketList(line, "Source Nodes:");
    const auto ops = bracketList(line, "Original ATen:");
    if (!nodes || !ops || ops->empty()) {
        return std::nullopt;
    }
    return CompiledOp{*nodes, *ops};
}

std::optional<CompiledOp> compiledOpOf(const std::vector<Frame>& stack,
                                       StackSymbolizer& symbolizer) {
    if (stack.empty() || stack.front().user || stack.front().line <= 0) {
        return std::nullopt;
    }
    // The allocating line, then up to three after it: inductor writes the comment after the
    // buffer's allocation and before the kernel that fills it.
    constexpr int kLinesAfter = 3;
    Frame at = stack.front();
    for (int k = 0; k <= kLinesAfter; ++k, ++at.line) {
        const std::optional<std::string> text = symbolizer.sourceLine(at);
        if (!text) {
            return std::nullopt;
        }
        if (auto op = parseSourceNodeComment(*text)) {
            return op;
        }
        if (k > 0 && allocatesBuffer(*text)) {
            return std::nullopt; // the next buffer's: its comment is not this one's
        }
    }
    return std::nullopt;
}

std::string compiledOpText(const CompiledOp& op) {
    std::string text = "made in torch.compile's generated code by " + listWords(op.aten_ops);
    if (!op.source_nodes.empty()) {
        text += std::string(op.source_nodes.size() == 1 ? " (graph node " : " (graph nodes ") +
                listWords(op.source_nodes) + ")";
    }
    return text;
}

} // namespace torchleak
