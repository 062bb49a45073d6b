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
