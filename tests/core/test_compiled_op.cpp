#include "torchleak/compiled_op.h"

#include <catch2/catch.hpp>
#include <map>

using namespace torchleak;

namespace {
// A generated file's lines, as linecache gives them.
class GeneratedFile final : public StackSymbolizer {
  public:
    explicit GeneratedFile(std::map<int, std::string> lines) : d_lines(std::move(lines)) {}
    std::vector<Frame> symbolize(std::span<const RawFrame>) override { return {}; }
    std::optional<std::string> sourceLine(const Frame& frame) override {
        auto it = d_lines.find(frame.line);
        return it != d_lines.end() ? std::optional<std::string>(it->second) : std::nullopt;
    }

  private:
    std::map<int, std::string> d_lines;
};

Frame generated(int line) {
    Frame f;
    f.file = "/tmp/torchinductor_me/ty/cty43trr.py";
    f.line = line;
    f.function = "Runner.call";
    f.user = false;
    return f;
}
} // namespace

TEST_CASE("Inductor's source-node comment names the graph nodes and ATen ops") {
    auto op = parseSourceNodeComment(
        "        # Topologically Sorted Source Nodes: [input_3], Original ATen: [aten.t, "
        "aten.addmm]");
    REQUIRE(op);
    CHECK(op->source_nodes == std::vector<std::string>{"input_3"});
    CHECK(op->aten_ops == std::vector<std::string>{"aten.t", "aten.addmm"});
    CHECK(compiledOpText(*op) ==
          "made in torch.compile's generated code by aten.t and aten.addmm (graph node input_3)");
    // The older spelling, and hostile or broken lines.
    CHECK(parseSourceNodeComment("# Source Nodes: [a, b], Original ATen: [aten.mul]"));
    CHECK_FALSE(parseSourceNodeComment("buf0 = empty_strided_cpu((32, 64), (64, 1))"));
    CHECK_FALSE(parseSourceNodeComment("# Source Nodes: [a], Original ATen: [unclosed"));
    CHECK_FALSE(parseSourceNodeComment("# Source Nodes: [a], Original ATen: []"));
    CHECK_FALSE(parseSourceNodeComment("x = 1  # Source Nodes: [a], Original ATen: [aten.mul]"));
    CHECK_FALSE(parseSourceNodeComment(""));
}

TEST_CASE("The comment after the allocating line is its op; the next buffer's is not") {
    GeneratedFile file({{82, "buf0 = empty_strided_cpu((32, 64), (64, 1), torch.float32)"},
                        {83, "# Topologically Sorted Source Nodes: [input_1], Original ATen: "
                             "[aten.t, aten.addmm]"},
                        {90, "buf2 = empty_strided_cpu((32, 8), (8, 1), torch.float32)"},
                        {91, "buf3 = empty_strided_cpu((32, 8), (8, 1), torch.float32)"},
                        {92, "# Source Nodes: [input_3], Original ATen: [aten.addmm]"}});
    auto op = compiledOpOf({generated(82)}, file);
    REQUIRE(op);
    CHECK(op->source_nodes == std::vector<std::string>{"input_1"});
    CHECK_FALSE(compiledOpOf({generated(90)}, file)); // buf3's comment, not buf2's
    CHECK(compiledOpOf({generated(91)}, file));
    // The user's own line is never read as generated code.
    Frame user = generated(82);
    user.user = true;
    CHECK_FALSE(compiledOpOf({user}, file));
    CHECK_FALSE(compiledOpOf({}, file));
}
