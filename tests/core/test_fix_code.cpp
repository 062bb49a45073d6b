// The fix as code (suggestFixCode): written only where it is certain, and always a line of
// Python that runs as written; everything else gets no code (a view then copies nothing).
#include "torchleak/loop_reads.h"
#include "torchleak/suggestion.h"

#include "path_steps.h"

#include <catch2/catch.hpp>

using namespace torchleak;
using torchleak::testing::step;

namespace {

// `holder[3]`, a tensor of `shape` that keeps its graph (or not), allocated at `source`.
Finding kept(const std::string& holder,
             const std::string& source,
             std::vector<int64_t> shape,
             bool graph,
             const std::string& holderType = "list") {
    Finding f;
    f.verdict = Verdict::Leak;
    f.retention = Retention::Reachable;
    f.site.source = source;
    f.holder = Holder{holder, holderType, 1.0, std::nullopt};
    PathStep entry = step(StepKind::Index, "[3]", "Tensor", graph ? kKeepsGraphNote : "");
    entry.tensor = TensorInfo{};
    entry.tensor->dtype = "float32";
    entry.tensor->shape = std::move(shape);
    f.path = {step(StepKind::Root, holder, holderType), entry};
    return f;
}

} // namespace

TEST_CASE("A loss appended with its graph: the site's own line keeps .item() or .detach()") {
    REQUIRE(suggestFixCode(kept("losses", "losses.append(loss)", {}, true)) ==
            "losses.append(loss.item())");
    REQUIRE(suggestFixCode(kept("losses", "  losses.append((x @ w).sum())  ", {}, true)) ==
            "losses.append((x @ w).sum().item())");
    REQUIRE(suggestFixCode(kept("acts", "acts.append(torch.tanh(x @ w))", {32, 64}, true)) ==
            "acts.append(torch.tanh(x @ w).detach())");
    // Not one primary expression: parenthesised, so .detach() applies to the whole.
    REQUIRE(suggestFixCode(kept("outs", "outs.append(out * 2)", {32, 64}, true)) ==
            "outs.append((out * 2).detach())");
    REQUIRE(suggestFixCode(kept("self.hist", "self.hist.append(out.mean(0))", {64}, true)) ==
            "self.hist.append(out.mean(0).detach())");
}

TEST_CASE("The append below the site, in its block, of the name the site assigns") {
    // #62 item 7: `loss = ...; loss.backward(); losses.append(loss)` had no code at all.
    const std::vector<std::string> file = {
        "for xb, yb in batches:\n",                    // 1
        "    loss = F.cross_entropy(model(xb), yb)\n", // 2: the site
        "    loss.backward()\n",                       // 3
        "    # keep it for the curve\n",               // 4
        "\n",                                          // 5
        "    losses.append(loss)\n",                   // 6
        "print(len(losses))\n",                        // 7
        "losses.append(loss)\n"};                      // 8: after the block
    Finding below = kept("losses", "loss = F.cross_entropy(model(xb), yb)", {}, true);
    below.site.line = 2;
    REQUIRE(suggestFixCode(below, file) == "losses.append(loss.item())");
    // Another name appended, or the append after the block ended: not the site's tensor.
    std::vector<std::string> other = file;
    other[5] = "    losses.append(val_loss)\n";
    REQUIRE(suggestFixCode(below, other).empty());
    std::vector<std::string> outside = file;
    outside[5] = "    pass\n";
    REQUIRE(suggestFixCode(below, outside).empty());
    // A comparison is no assignment; no file, no code.
    Finding compared = kept("losses", "loss == best", {}, true);
    compared.site.line = 2;
    other = file;
    other[1] = "    loss == best\n";
    REQUIRE(suggestFixCode(compared, other).empty());
    REQUIRE(suggestFixCode(below).empty());
}

TEST_CASE("No code where the rewrite could be wrong") {
    // Another line than the append, a second argument, a comment, a string, another holder.
    REQUIRE(suggestFixCode(kept("losses", "loss = model(x).sum()", {}, true)).empty());
    REQUIRE(suggestFixCode(kept("losses", "losses.append(a, b)", {}, true)).empty());
    REQUIRE(suggestFixCode(kept("losses", "losses.append(loss)  # keep", {}, true)).empty());
    REQUIRE(suggestFixCode(kept("losses", "losses.append(d[\"k\"])", {}, true)).empty());
    REQUIRE(suggestFixCode(kept("losses", "other.append(loss)", {}, true)).empty());
    REQUIRE(suggestFixCode(kept("losses", "losses.append(f(x)) or g()", {}, true)).empty());
    Finding noSource = kept("losses", "", {}, true);
    noSource.site.source.reset();
    REQUIRE(suggestFixCode(noSource).empty());
    // Not a leak, or not reachable from a name: nothing to paste.
    Finding plateau = kept("losses", "losses.append(loss)", {}, true);
    plateau.verdict = Verdict::Plateau;
    REQUIRE(suggestFixCode(plateau).empty());
    Finding cycle = kept("losses", "losses.append(loss)", {}, true);
    cycle.retention = Retention::Cycle;
    REQUIRE(suggestFixCode(cycle).empty());
}

TEST_CASE("A container that grows without graphs is cleared, other holders get no code") {
    REQUIRE(suggestFixCode(kept("cache['a']", "x = f()", {64}, false)) == "cache['a'].clear()");
    REQUIRE(suggestFixCode(kept("seen", "x = f()", {64}, false, "collections.deque")) ==
            "seen.clear()");
    REQUIRE(suggestFixCode(kept("model.buf", "x = f()", {64}, false, "Tensor")).empty());
    REQUIRE(suggestFixCode(kept("obj", "x = f()", {64}, false, "mypkg.Store")).empty());
}

TEST_CASE("The notebook's machinery: the output cache and the last exception get code that frees") {
    Finding out;
    out.verdict = Verdict::Leak;
    out.retention = Retention::Reachable;
    out.path = {step(StepKind::Root, "Out[3]", "Tensor", "IPython output cache")};
    // %reset -f out alone leaves the last three outputs in IPython's hidden namespace.
    const std::string both = "get_ipython().run_line_magic('reset', '-f out'); "
                             "get_ipython().user_ns_hidden.update(_='', __='', ___='')";
    REQUIRE(suggestFixCode(out) == both);
    REQUIRE(suggestFix(out).find(both) != std::string::npos); // the prose says the same code
    out.path[0].label = "get_ipython().user_ns_hidden['__']";
    REQUIRE(suggestFixCode(out) == "get_ipython().user_ns_hidden.update(_='', __='', ___='')");
    REQUIRE(suggestFix(out).find("%reset -f out leaves behind") != std::string::npos);

    Finding failed = out;
    failed.path = {step(StepKind::Root, "<last exception> frame train_step: local 'batch'",
                        "Tensor", "sys.last_traceback and IPython's InteractiveTB")};
    const std::string code = suggestFixCode(failed);
    REQUIRE(code == "import sys, gc; sys.last_value = sys.last_traceback = sys.last_exc = None; "
                    "get_ipython().InteractiveTB.tb = None; gc.collect();");
    REQUIRE(suggestFix(failed).find(code) != std::string::npos);
    failed.path[0].note = "sys.last_traceback";
    REQUIRE(suggestFixCode(failed) ==
            "import sys; sys.last_value = sys.last_traceback = sys.last_exc = None");

    out.verdict = Verdict::Transient; // freed since: nothing to fix
    REQUIRE(suggestFixCode(out).empty());
}

TEST_CASE("A holder path that is no Python expression gets no code") {
    // #47: a hook per call with its handle dropped was given
    // `model[0]._forward_hooks[4].<cell self>.acts.clear()`, which does not compile.
    for (const char* holder :
         {"model[0]._forward_hooks[4].<cell self>.acts", "<module>.x", "a..b", "a[]", "a[x]",
          "a['unclosed]", "a[0", "f().x", "a b", "[0]", ".a", "a.[0]", "a[--1]"}) {
        INFO(holder);
        REQUIRE(suggestFixCode(kept(holder, "x = f()", {64}, false)).empty());
        REQUIRE(
            suggestFixCode(kept(holder, std::string(holder) + ".append(loss)", {}, true)).empty());
    }
    for (const char* holder : {"losses", "self.hist", "cache['a']", "cache[\"a b\"]",
                               "cache['it\\'s']", "d[-1].xs", "_a1._b[0][12]['k']"}) {
        INFO(holder);
        REQUIRE(suggestFixCode(kept(holder, "x = f()", {64}, false)) ==
                std::string(holder) + ".clear()");
    }
}

TEST_CASE("A kept tensor of one dimension is said in elements, not read as a count") {
    // #47: "the 512 tensors in logged['stage']" for tensors of 512 elements each.
    const std::string oneD = suggestFix(kept("logged['stage']", "x = f()", {512}, true));
    REQUIRE(oneD.find("the 512-element tensors in logged['stage']") != std::string::npos);
    const std::string twoD = suggestFix(kept("logits", "x = f()", {64, 10}, true));
    REQUIRE(twoD.find("the 64\u00d710 tensors in logits") != std::string::npos);
}

TEST_CASE("A growing dict is bounded as a dict, a list as a deque") {
    // #47: collections.deque(maxlen=...) was offered for a dict, which has keys a deque has not.
    const std::string dict = suggestFix(kept("cache", "x = f()", {64}, false, "dict"));
    REQUIRE(dict.find("deque") == std::string::npos);
    REQUIRE(dict.find("functools.lru_cache(maxsize=...)") != std::string::npos);
    REQUIRE(dict.find("OrderedDict") != std::string::npos);
    const std::string list = suggestFix(kept("window", "x = f()", {64}, false, "list"));
    REQUIRE(list.find("collections.deque(maxlen=...)") != std::string::npos);
    // The same where the loop reads the dict back: an LRU, never a deque (#63 item 3).
    for (const char* type : {"dict", "OrderedDict", "defaultdict"}) {
        Finding f = kept("embeddings", "x = f()", {64}, false, type);
        const std::string read = loopReadFixText(f, HolderRead{7, "v = embeddings[text]", ""});
        INFO(type);
        REQUIRE(read.find("deque") == std::string::npos);
        REQUIRE(read.find("functools.lru_cache(maxsize=...)") != std::string::npos);
    }
}

TEST_CASE("The advice says when its fix empties the holder, whatever its words") {
    // The loop-read check (loop_reads.h) acts on this flag; it used to search the words.
    const FixAdvice clear = adviseFix(kept("window", "x = f()", {64}, false, "list"));
    REQUIRE(clear.clears_holder);
    REQUIRE(clear.text == suggestFix(kept("window", "x = f()", {64}, false, "list")));
    REQUIRE_FALSE(adviseFix(kept("losses", "losses.append(loss)", {}, true)).clears_holder);
    Finding notLeak = kept("window", "x = f()", {64}, false, "list");
    notLeak.verdict = Verdict::Plateau;
    REQUIRE_FALSE(adviseFix(notLeak).clears_holder);
    REQUIRE(adviseFix(notLeak).text.empty());
}
