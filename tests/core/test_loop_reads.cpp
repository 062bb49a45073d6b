#include "torchleak/loop_reads.h"

#include <catch2/catch.hpp>
#include <map>

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

namespace {
PathStep stepOf(StepKind kind, std::string label) {
    PathStep s;
    s.kind = kind;
    s.label = std::move(label);
    return s;
}

// A leak of `holder`, allocated at `site` (called from `stack`), its path root.attr.
Finding
leakIn(const std::string& root, const std::string& attr, Frame site, std::vector<Frame> stack) {
    Finding f;
    f.verdict = Verdict::Leak;
    f.site = site;
    f.stack = std::move(stack);
    f.stack.insert(f.stack.begin(), site);
    f.path = {stepOf(StepKind::Root, root)};
    if (!attr.empty()) {
        f.path.push_back(stepOf(StepKind::Attr, "." + attr));
    }
    f.path.push_back(stepOf(StepKind::Index, "[3]"));
    f.holder = Holder{attr.empty() ? root : root + "." + attr, "list", 1.0, std::nullopt};
    return f;
}

Frame at(const std::string& file, int line) {
    Frame f;
    f.file = file;
    f.line = line;
    f.function = "f";
    return f;
}

SourceOf filesOf(std::map<std::string, std::vector<std::string>> files) {
    return [files = std::move(files)](const Frame& frame) -> const std::vector<std::string>& {
        static const std::vector<std::string> none;
        auto it = files.find(frame.file);
        return it == files.end() ? none : it->second;
    };
}
} // namespace

TEST_CASE("A read is found where the loop reaches the holder, wherever it is written") {
    // The site's own line hands the dict to a helper in another module.
    Finding handed = leakIn("cache", "", at("loop.py", 2), {});
    auto read = loopReadAnywhere(
        handed,
        filesOf({{"loop.py",
                  {"for i in range(1, N):\n", "    cache[i] = helpers.prev_key(cache, i) + 1\n",
                   "    torchleak.step()\n"}}}));
    REQUIRE(read);
    CHECK(read->line == 2);
    CHECK(read->file.empty());
    // `cache[len(cache)] = x` reads only the key it fills.
    CHECK_FALSE(loopReadAnywhere(handed, filesOf({{"loop.py",
                                                   {"for i in range(1, N):\n",
                                                    "    cache[len(cache)] = torch.ones(3)\n"}}})));

    // A list filled through k.add() and read by Keeper.last() in helpers.py.
    Finding kept = leakIn("k", "history", at("loop.py", 2), {});
    kept.path[0].methods = {{"__init__", "helpers.py", 2},
                            {"add", "helpers.py", 3},
                            {"last", "helpers.py", 5},
                            {"summary", "helpers.py", 8}};
    const std::map<std::string, std::vector<std::string>> files = {
        {"loop.py", {"for i in range(N):\n", "    k.add(k.last() * 1.0 + 1)\n"}},
        {"helpers.py",
         {"class Keeper:\n", "    def __init__(self): self.history = []\n",
          "    def add(self, t):\n", "        self.history.append(t)\n", "    @property\n",
          "    def last(me): return me.history[-1]\n", "    def summary(self):\n",
          "        return len(self.history)\n"}}};
    read = loopReadAnywhere(kept, filesOf(files));
    REQUIRE(read);
    CHECK(read->file == "helpers.py");
    CHECK(read->source == "def last(me): return me.history[-1]");
    CHECK(loopReadFixText(kept, *read).find("(helpers.py, line ") != std::string::npos);
    // A method the loop never calls does not count: summary() reads, add() only fills.
    {
        std::map<std::string, std::vector<std::string>> quiet = files;
        quiet["loop.py"] = {"for i in range(N):\n", "    k.add(torch.ones(3))\n"};
        CHECK_FALSE(loopReadAnywhere(kept, filesOf(quiet)));
    }

    // A method that fills the dict and calls another method of its class that reads it.
    Finding model = leakIn("k", "cache", at("model.py", 4), {at("model.py", 10)});
    model.path[0].methods = {{"step", "model.py", 3}, {"prev", "model.py", 6}};
    read = loopReadAnywhere(
        model, filesOf({{"model.py",
                         {"class Model:\n", "    def __init__(self): self.cache = {}\n",
                          "    def step(self, i):\n", "        self.cache[i] = torch.ones(5)\n",
                          "        return self.prev(i)\n", "    def prev(self, i):\n",
                          "        return self.cache[i - 1] if i else None\n", "k = Model()\n",
                          "for i in range(N):\n", "    k.step(i)\n"}}}));
    REQUIRE(read);
    CHECK(read->line == 7);
}

TEST_CASE("A mention inside a string literal is not a read") {
    CHECK_FALSE(readsHolder("assert_form(path=\"store['train'][\")", "store['train']"));
    CHECK_FALSE(readsHolder("print('state.Y[-1] is', 3)", "state.Y"));
    CHECK(readsHolder("x = store['train'][-1]", "store['train']"));
    CHECK(readsHolder("print('a \\' b', state.Y[-1])", "state.Y"));
}

TEST_CASE("An entry under a key the loop ends elsewhere is popped there, not cleared") {
    // A serving loop: prefill fills state.kv_cache[rid] (the site is the cache's allocation in
    // a helper), decode reads it, and the loop ends the request with state.active.pop(rid).
    Frame site = at("model.py", 2);
    site.user = true;
    Frame loop = at("serve.py", 6);
    loop.user = true;
    Finding kv = leakIn("state", "kv_cache", site, {loop});
    kv.holder->type = "dict";
    const std::vector<std::string> serve = {
        "while queue:\n",                                                 // 1
        "    for rid in list(state.active):\n",                           // 2
        "        if rid not in state.kv_cache:\n",                        // 3
        "            state.kv_cache[rid] = prefill(state.active[rid])\n", // 4
        "        tokens = decode(state.kv_cache[rid])\n",                 // 5
        "        step(rid, tokens)\n",                                    // 6: the call to the site
        "        if done(tokens):\n",                                     // 7
        "            state.active.pop(rid)  # finished\n"};               // 8
    const std::vector<std::string> model = {"def prefill(x):\n", "    return torch.zeros(8, 64)\n"};
    auto ended = endedKeyAnywhere(kv, filesOf({{"serve.py", serve}, {"model.py", model}}));
    REQUIRE(ended);
    CHECK(ended->name == "state.kv_cache");
    CHECK(ended->key == "rid");
    CHECK(ended->ended.line == 8);
    CHECK(ended->ended.source == "state.active.pop(rid)  # finished");
    CHECK(ended->ended.file == "serve.py");
    const std::string text = endedKeyFixText(kv, *ended);
    CHECK(text.find("state.kv_cache.pop(rid, None)") != std::string::npos);
    CHECK(text.find("serve.py, line 8 ends it") != std::string::npos);

    // One line changed: whether the loop still ends the key elsewhere.
    const struct {
        size_t line;
        const char* text;
        bool ended;
    } variants[] = {
        {7, "            state.kv_cache.pop(rid)\n", false},   // only the holder itself
        {7, "            state.active.pop(request)\n", false}, // another key
        {7, "            pass\n", false},                      // never
        {7, "            del pending[rid]\n", true},           // `del` ends it too
        {3, "            state.kv_cache[rid + 1] = prefill(state.active[rid])\n",
         false}, // an expression
    };
    for (const auto& v : variants) {
        std::vector<std::string> changed = serve;
        changed[v.line] = v.text;
        INFO(v.text);
        CHECK(endedKeyAnywhere(kv, filesOf({{"serve.py", changed}, {"model.py", model}}))
                  .has_value() == v.ended);
    }
}

TEST_CASE("The one expression the loop appends to the holder is found where the loop writes it") {
    // The site allocates the input (line 2); the loop appends another line's tensor (line 4),
    // through a method that writes the holder as self.history.
    Frame site = at("train.py", 2);
    site.user = true;
    Finding kept = leakIn("trainer", "history", site, {});
    const std::vector<std::string> train = {
        "    def step(self, x):\n",                              // 1
        "        x = torch.randn(64, 64, requires_grad=True)\n", // 2
        "        y = (x * 2).sum()\n",                           // 3
        "        self.history.append(y)  \n",                    // 4
        "    def other(self):\n",                                // 5
        "        self.history.append(z)\n"};                     // 6: another function's
    auto appended = appendedValueAnywhere(kept, filesOf({{"train.py", train}}));
    REQUIRE(appended);
    CHECK(appended->holder == "self.history");
    CHECK(appended->value == "y");
    CHECK(appended->line == 4);

    const struct {
        const char* text;
        const char* value; // "" where no one expression is certain
    } variants[] = {
        {"        self.history.append(F.cross_entropy(model(x), t))\n",
         "F.cross_entropy(model(x), t)"},
        {"        trainer.history.append(y)\n", "y"}, // the path's own spelling
        {"        self.history.append(y)  # with its graph\n", "y"},
        {"        self.history.append(f('#'))\n", ""},
        {"        self.history.append(y, z)\n", ""},      // not one argument
        {"        self.history.append(name='y')\n", ""},  // a string
        {"        self.histories.append(y)\n", ""},       // another holder
        {"        self.history.append(y); n += 1\n", ""}, // not the whole line
    };
    for (const auto& v : variants) {
        std::vector<std::string> changed = train;
        changed[3] = v.text;
        INFO(v.text);
        auto found = appendedValueAnywhere(kept, filesOf({{"train.py", changed}}));
        CHECK((found ? found->value : std::string()) == v.value);
    }
    // Two different appends in the loop: which one the fix rewrites is not certain.
    std::vector<std::string> two = train;
    two.insert(two.begin() + 4, "        self.history.append(x)\n");
    CHECK_FALSE(appendedValueAnywhere(kept, filesOf({{"train.py", two}})));
    // The same append twice (an if and its else) is still one expression.
    std::vector<std::string> same = train;
    same.insert(same.begin() + 4, "        self.history.append(y)\n");
    CHECK(appendedValueAnywhere(kept, filesOf({{"train.py", same}})));
    // No holder, no source.
    CHECK_FALSE(appendedValueAnywhere(kept, filesOf({})));
}

TEST_CASE("Sites of long files share one index of the lines that mention the holder") {
    // Two 1,200-line files at top level (each site reads the 400 lines either side of it), one
    // index for every site of both: each site finds the first read near it in its own file.
    const std::map<std::string, std::vector<size_t>> reads = {{"a.py", {100, 700, 1100}},
                                                              {"b.py", {300, 1150}}};
    std::map<std::string, std::vector<std::string>> files;
    for (const auto& [file, readLines] : reads) {
        std::vector<std::string> lines(1200, "keep.append(torch.ones(1))  # keep[-1] unread\n");
        for (size_t k : readLines) {
            lines[k] = "x = keep[-1]\n";
        }
        files[file] = lines;
    }
    const SourceOf sourceOf = filesOf(files);
    LineMentions mentions;
    for (size_t site = 0; site < 1200; site += 37) {
        for (const auto& [file, readLines] : reads) {
            INFO(file << " line " << site + 1);
            std::optional<size_t> expected;
            for (size_t k : readLines) {
                if (k != site && k + 400 >= site && k <= site + 400) {
                    expected = k;
                    break;
                }
            }
            const Finding f = leakIn("keep", "", at(file, static_cast<int>(site) + 1), {});
            const auto read = loopReadAnywhere(f, sourceOf, mentions);
            REQUIRE(read.has_value() == expected.has_value());
            if (read) {
                CHECK(static_cast<size_t>(read->line) == *expected + 1);
                CHECK(read->source == "x = keep[-1]");
            }
        }
    }
}
