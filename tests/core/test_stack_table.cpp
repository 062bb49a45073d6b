#include "torchleak/stack_table.h"

#include <catch2/catch.hpp>
#include <typeinfo>
#include <vector>

using namespace torchleak;

namespace torchleak::testing_ns {
struct MmBackward0 {
    virtual ~MmBackward0() = default;
};
} // namespace torchleak::testing_ns

TEST_CASE("StackTable interns identical stacks once") {
    StackTable table;
    std::vector<RawFrame> a = {{0x10, 4}, {0x20, 8}};
    std::vector<RawFrame> b = {{0x10, 4}, {0x20, 10}};
    bool inserted = false;
    StackToken ta = table.intern(a, &inserted);
    REQUIRE(inserted);
    REQUIRE(ta != 0);
    REQUIRE(table.intern(a, &inserted) == ta);
    REQUIRE_FALSE(inserted);
    StackToken tb = table.intern(b, &inserted);
    REQUIRE(inserted);
    REQUIRE(tb != ta);
    auto frames = table.frames(tb);
    REQUIRE(frames.size() == 2);
    REQUIRE(frames[1].offset == 10);
    REQUIRE(table.intern({}, &inserted) == 0);
    REQUIRE(table.frames(0).empty());
    REQUIRE(table.frames(999).empty());
    REQUIRE(table.allFrames().size() == 4);
}

TEST_CASE("NodeNameTable demangles autograd node type names") {
    NodeNameTable nodes;
    const char* mangled = typeid(torchleak::testing_ns::MmBackward0).name();
    NodeToken t = nodes.intern(mangled);
    REQUIRE(t == 1);
    REQUIRE(nodes.intern(mangled) == 1);
    REQUIRE(nodes.name(t) == "MmBackward0");
    REQUIRE(nodes.name(0).empty());
}

TEST_CASE("StackTable keeps every token through its index's growth") {
    // Thousands of stacks, many alike but for one frame, deep and shallow: the index doubles
    // many times, and every stack still finds its own token, and only its own.
    StackTable table;
    std::vector<std::vector<RawFrame>> stacks;
    for (uintptr_t s = 0; s < 5000; ++s) {
        std::vector<RawFrame> frames;
        const size_t depth = 1 + s % 48;
        for (size_t d = 0; d < depth; ++d) {
            frames.push_back(RawFrame{0x1000 + d * 16, static_cast<int32_t>(d)});
        }
        frames.back().offset = static_cast<int32_t>(s); // differs from its neighbours here only
        stacks.push_back(frames);
    }
    std::vector<StackToken> tokens;
    bool inserted = false;
    for (const auto& frames : stacks) {
        tokens.push_back(table.intern(frames, &inserted));
        REQUIRE(inserted);
    }
    REQUIRE(table.size() == stacks.size());
    for (size_t s = 0; s < stacks.size(); ++s) {
        REQUIRE(table.intern(stacks[s], &inserted) == tokens[s]);
        REQUIRE_FALSE(inserted);
        auto frames = table.frames(tokens[s]);
        REQUIRE(std::vector<RawFrame>(frames.begin(), frames.end()) == stacks[s]);
    }
    REQUIRE(table.size() == stacks.size());
}
