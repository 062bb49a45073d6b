#include "torchleak/loop_reads.h"

#include <catch2/catch.hpp>

using namespace torchleak;

TEST_CASE("A read of the holder is told from the writes that fill it") {
    for (const char* read :
         {"prev = state.Y[-1]", "for y in state.Y:", "n = len(state.Y)", "torch.cat(state.Y)",
          "x = f(a, state.Y)", "if state.Y:", "state.Y[-1].sum()", "state.Y.pop()",
          // an element's element stored: state.Y[k] is read first
          "state.Y[k][j] = y"}) {
        INFO(read);
        CHECK(readsHolder(read, "state.Y"));
    }
    for (const char* other :
         {"state.Y.append(y)", "state.Y.extend(ys)", "state.Y[i] = y", "state.Y = []",
          "del state.Y[0]", "state.Y.clear()", "mystate.Y[-1]", "state.Yes[0]", "self.state.Y[0]",
          "# prev = state.Y[-1]", "x = 1  # state.Y[-1]", "state.Y == []"}) {
        INFO(other);
        // `state.Y == []` compares: a read, the one listed here on purpose to be caught.
        CHECK(readsHolder(other, "state.Y") == (std::string(other) == "state.Y == []"));
    }
    CHECK_FALSE(readsHolder("anything", ""));
}

TEST_CASE("The function around the site is read, not the rest of the file") {
    const std::vector<std::string> lines = {
        "def other():\n",                  // 1
        "    return state.Y[-1]\n",        // 2: another function's read
        "\n",                              // 3
        "def step(state):\n",              // 4
        "    y = model(x)\n",              // 5
        "    state.Y.append(y)  # site\n", // 6
        "\n",                              // 7
        "    prev = state.Y[-1]\n",        // 8
        "def after():\n",                  // 9
        "    return len(state.Y)\n",       // 10
    };
    Frame site;
    site.line = 6;
    const auto read = loopReadOf(site, "state.Y", lines);
    REQUIRE(read);
    CHECK(read->line == 8);
    CHECK(read->source == "prev = state.Y[-1]");

    std::vector<std::string> writesOnly = lines;
    writesOnly[7] = "    state.Y.append(prev)\n";
    CHECK_FALSE(loopReadOf(site, "state.Y", writesOnly));
    // Top level (a cell, a script's loop): the lines around it.
    const std::vector<std::string> cell = {"for x in data:\n", "    kept.append(f(x))\n",
                                           "    print(kept[-1].sum())\n"};
    site.line = 2;
    REQUIRE(loopReadOf(site, "kept", cell));
    CHECK(loopReadOf(site, "kept", cell)->line == 3);
    // A line out of range, no lines at all.
    site.line = 99;
    CHECK_FALSE(loopReadOf(site, "kept", cell));
    site.line = 2;
    CHECK_FALSE(loopReadOf(site, "kept", {}));
}

TEST_CASE("The holder is matched as the function names it, not only as the walk named it") {
    // #47 follow-up: the walk names `trainer.history` from its root; the method that fills it
    // says `self.history`, and reads it so too.
    const std::vector<std::string> method = {
        "class Trainer:\n",                       // 1
        "    def step(self, x):\n",               // 2
        "        out = self.model(x)  # site\n",  // 3
        "        self.history.append(out)\n",     // 4
        "        return out - self.history[0]\n", // 5
    };
    Frame site;
    site.line = 3;
    const auto read = loopReadOf(site, "trainer.history", method);
    REQUIRE(read);
    CHECK(read->line == 5);
    // Only filled under its other name: nothing read.
    std::vector<std::string> filled = method;
    filled[4] = "        return out\n";
    CHECK_FALSE(loopReadOf(site, "trainer.history", filled));
    // A chain through an index is not spelled (which element is unknown), nor is a holder
    // that ends in an index.
    std::vector<std::string> indexed = method;
    indexed[3] = "        self.runs[0].history.append(out)\n";
    indexed[4] = "        return out - history[0]\n";
    CHECK_FALSE(loopReadOf(site, "trainer.history", indexed));
    CHECK_FALSE(loopReadOf(site, "trainer.logs['a']", filled));
}
