#pragma once
// The fix for a leak, worded for the pattern its retaining path shows (a loss kept with its
// graph, a ctx attribute, a notebook's output cache, a cycle ...), or a general one.

#include "torchleak/model.h"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace torchleak {

// The fix's words and what they ask of the user's code, for the checks made after it: a fix
// that empties the holder is no fix where the loop reads the holder (loop_reads.h).
struct FixAdvice {
    FixAdvice(std::string words, bool clearsHolder = false)
        : text(std::move(words)), clears_holder(clearsHolder) {}
    FixAdvice(const char* words) : text(words) {}

    std::string text;
    bool clears_holder = false; // the fix is to .clear() (or bound) finding.holder
    std::string rule;           // the remedy rule that gave it (Finding::fix_rule)
};

// The first remedy rule of an ordered table (suggestion.cpp: kRemedyRules) whose premise holds,
// with its name; empty text (and no rule) for a finding that is not a leak.
FixAdvice adviseFix(const Finding& finding);
// The table's rule names, in order (tests and CONTRIBUTING's recipe).
std::vector<std::string> remedyRuleNames();

// adviseFix's words alone.
std::string suggestFix(const Finding& finding);

// How to bound a container of this type (a Holder's `type`): a deque for a sequence; a dict
// (plain, OrderedDict, defaultdict) trimmed oldest first or made a function's lru_cache, since a
// deque has no keys.
std::string boundedForm(const std::string& type);

// The fix for a finding kept by a reference cycle (cycle_fix.cpp).
std::string suggestForCycle(const Finding& finding);

// The fix for a cause whose findings are one line's entries under the same new key in several
// containers (Cause::holders, Cause::new_key): every container, one remedy.
std::string suggestForSharedNewKey(const std::vector<std::string>& holders,
                                   const std::string& newKey);

// The fix as one line of Python, for the forms where it is certain: the site's own line
// `holder.append(x)` rewritten to keep `x.item()` (a one-element tensor) or `x.detach()` when the
// holder keeps autograd graphs (or, given the site's file, the line below the site in its block
// that appends the name the site assigns: `loss = model(x)...` then `losses.append(loss)`);
// `holder.clear()` for a container that grows. Empty otherwise (and for what is not a leak): a
// view's copy button then offers nothing rather than prose.
std::string suggestFixCode(const Finding& finding, const std::vector<std::string>& siteFile = {});

// A holder's entry that is a view pinning a bigger storage (`cache[text] = embeddings[i]`):
// its own bytes and its storage's, when the storage is at least twice the view.
struct PinnedBase {
    uint64_t own_bytes = 0;
    uint64_t storage_bytes = 0;
};
std::optional<PinnedBase> pinnedBase(const Finding& f);

// The argument of `holder.append(ARG)` when the (trimmed) line is that one call, one argument
// with balanced brackets and no string or comment.
std::optional<std::string_view> appendedTo(std::string_view line, const std::string& holder);

// kept_entries_fix.cpp: a holder that keeps each iteration's tensors with their autograd graphs
// (f.holder set; worded for what it keeps), and one that gains an entry every few iterations
// (f.growth_since's step_every) and never drops one: keep the best or the last few, and that
// as a line of code (`del trainer.snapshots[:-3]`).
bool isAppendOnlySequence(const std::string& type);
std::string keptWithGraphFix(const Finding& f);
std::string keptAtIntervalsFix(const Finding& f);
std::string keptAtIntervalsFixCode(const Finding& f);

// `expr` as the receiver of a method call: parenthesised unless it is one primary expression.
std::string receiver(std::string_view expr);

// Whether the finding's holder keeps autograd graphs: through grad_fn steps on its path, or as
// tensors that carry their own (the path's last step noted so).
bool keepsGraphs(const Finding& f);

// A bare Python name (`loss`): no attribute, item or closure cell.
bool isPythonName(std::string_view text);
// The holder's path as Python can read it: a name, then `.attribute`, `[integer]` or
// `['string']` steps. A path that passes through what has no Python spelling (a closure's
// `<cell self>`, a hook dict's bound method) is no expression: its fix gets no code.
bool isPythonAccessChain(std::string_view path);
// The step just below the holder on the finding's path (the entry it keeps), or nullptr.
const PathStep* entryOf(const Finding& f);
// The notebook's output cache emptied, as one line a cell can run (the fix for a result kept
// by Out or `_`); `root` is the path's root, `_` or `Out`.
std::string outputCacheFixCode(const std::string& root);
// The last exception's frames released, as one line (sys.last_*, and IPython's own copy).
std::string lastExceptionFixCode(const Finding& f);

} // namespace torchleak
