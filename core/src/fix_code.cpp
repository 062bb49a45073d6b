// The fix as one line of Python (suggestion.h: suggestFixCode), apart from the fix in words: it
// must run as written, so each form is written only where the source makes it certain.
#include "torchleak/suggestion.h"

#include "torchleak/display_text.h"
#include "torchleak/retention.h"

#include <algorithm>
#include <cctype>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace torchleak {

// The output cache's fix as one line a cell can run: `%reset -f out` drops Out and the `_n`
// names, and leaves the last three outputs in IPython's hidden namespace, which keep them.
std::string outputCacheFixCode(const std::string& root) {
    const std::string hidden = "get_ipython().user_ns_hidden.update(_='', __='', ___='')";
    return isHiddenOutputCacheRoot(root)
               ? hidden
               : "get_ipython().run_line_magic('reset', '-f out'); " + hidden;
}

// IPython keeps the traceback twice, in sys.last_* and in the shell's traceback printer, and
// its ExecutionResult of the failed cell is a reference cycle with the frames: the fix clears
// both and collects the cycle, or the memory stays.
std::string lastExceptionFixCode(const Finding& f) {
    const bool ipython =
        !f.path.empty() && f.path.front().note.find("InteractiveTB") != std::string::npos;
    std::string code = ipython ? "import sys, gc" : "import sys";
    code += "; sys.last_value = sys.last_traceback = sys.last_exc = None";
    // The trailing ';' keeps IPython from showing (and caching) gc.collect()'s count.
    code += ipython ? "; get_ipython().InteractiveTB.tb = None; gc.collect();" : "";
    return code;
}

bool isPythonName(std::string_view text) {
    return !text.empty() && !std::isdigit(static_cast<unsigned char>(text.front())) &&
           std::all_of(text.begin(), text.end(), [](char c) {
               return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
           });
}

namespace {
std::string_view trimmed(std::string_view text) {
    const auto first = text.find_first_not_of(" \t");
    const auto last = text.find_last_not_of(" \t\r\n");
    return first == std::string_view::npos ? std::string_view()
                                           : text.substr(first, last - first + 1);
}
} // namespace

bool isPythonAccessChain(std::string_view path) {
    auto identifier = [&](size_t& i) {
        if (i >= path.size() ||
            !(std::isalpha(static_cast<unsigned char>(path[i])) || path[i] == '_')) {
            return false;
        }
        while (i < path.size() &&
               (std::isalnum(static_cast<unsigned char>(path[i])) || path[i] == '_')) {
            ++i;
        }
        return true;
    };
    size_t i = 0;
    if (!identifier(i)) {
        return false;
    }
    while (i < path.size()) {
        if (path[i] == '.') {
            ++i;
            if (!identifier(i)) {
                return false;
            }
        } else if (path[i] == '[') {
            ++i;
            if (i < path.size() && (path[i] == '\'' || path[i] == '"')) {
                const char quote = path[i++];
                while (i < path.size() && path[i] != quote) {
                    i += (path[i] == '\\') ? 2 : 1;
                }
                if (i >= path.size()) {
                    return false;
                }
                ++i;
            } else {
                i += (i < path.size() && path[i] == '-') ? 1 : 0;
                const size_t digits = i;
                while (i < path.size() && std::isdigit(static_cast<unsigned char>(path[i]))) {
                    ++i;
                }
                if (i == digits) {
                    return false;
                }
            }
            if (i >= path.size() || path[i] != ']') {
                return false;
            }
            ++i;
        } else {
            return false;
        }
    }
    return true;
}

namespace {

// A primary expression (`loss`, `out.loss`, `torch.tanh(x)`, `(a @ b).sum()`): a method call
// appended to it binds to the whole, so it needs no parentheses.
bool isPrimary(std::string_view expr) {
    if (expr.empty() || !(std::isalpha(static_cast<unsigned char>(expr.front())) ||
                          expr.front() == '_' || expr.front() == '(')) {
        return false;
    }
    int depth = 0;
    for (char c : expr) {
        if (c == '(' || c == '[' || c == '{') {
            ++depth;
        } else if (c == ')' || c == ']' || c == '}') {
            --depth;
        } else if (depth == 0 &&
                   !(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.')) {
            return false; // an operator, a space, a keyword's space: not one primary
        }
    }
    return expr.back() != '.';
}

} // namespace

std::optional<std::string_view> appendedTo(std::string_view line, const std::string& holder) {
    const std::string prefix = holder + ".append(";
    if (line.substr(0, prefix.size()) != prefix || line.back() != ')') {
        return std::nullopt;
    }
    std::string_view arg = trimmed(line.substr(prefix.size(), line.size() - prefix.size() - 1));
    // One argument, its brackets balanced: nothing the rewrite could change the meaning of.
    int depth = 0;
    for (char c : arg) {
        depth += (c == '(' || c == '[' || c == '{')   ? 1
                 : (c == ')' || c == ']' || c == '}') ? -1
                                                      : 0;
        if (depth < 0 || (depth == 0 && c == ',') || c == '#' || c == '"' || c == '\'') {
            return std::nullopt;
        }
    }
    return depth == 0 && !arg.empty() ? std::optional<std::string_view>(arg) : std::nullopt;
}

namespace {

// The line after the site, in the site's block, that appends what the site's line assigns: the
// commonest form of the leak (`loss = criterion(...)`, `loss.backward()`, `losses.append(loss)`)
// has its site two lines above its append.
std::optional<std::string_view> appendedBelowSite(const Finding& f,
                                                  const std::string& holder,
                                                  const std::vector<std::string>& lines) {
    if (f.site.line <= 0 || static_cast<size_t>(f.site.line) > lines.size()) {
        return std::nullopt;
    }
    const size_t at = static_cast<size_t>(f.site.line) - 1;
    const auto indentOf = [](std::string_view line) { return line.find_first_not_of(" \t"); };
    const size_t indent = indentOf(lines[at]);
    const std::string_view site = trimmed(lines[at]);
    constexpr size_t kMostLines = 40;
    for (size_t k = at + 1; k < lines.size() && k - at <= kMostLines; ++k) {
        const std::string_view line = trimmed(lines[k]);
        if (line.empty() || line.front() == '#') {
            continue;
        }
        if (indentOf(lines[k]) < indent) {
            break; // the site's block ended
        }
        const auto arg = appendedTo(line, holder);
        if (!arg) {
            continue;
        }
        // Only the name the site assigns: another expression's tensor is not the site's.
        const bool assigned = isPythonName(*arg) && site.size() > arg->size() &&
                              site.substr(0, arg->size()) == *arg &&
                              trimmed(site.substr(arg->size())).substr(0, 1) == "=" &&
                              trimmed(site.substr(arg->size())).substr(0, 2) != "==";
        return assigned ? arg : std::nullopt;
    }
    return std::nullopt;
}

} // namespace

std::string receiver(std::string_view arg) {
    if (isPrimary(arg)) {
        return std::string(arg);
    }
    std::string out = "("; // piece by piece: GCC 12 warns falsely on "(" + std::string(...)
    out += arg;
    out += ")";
    return out;
}

namespace {

// The site's line storing a view in the holder, storing a copy instead: `holder.append(x)`,
// `holder[key] = x` (one primary-or-parenthesised value, nothing after it); else "".
std::string cloneOnSiteLine(const Finding& f, const std::string& holder) {
    const std::string_view line = f.site.source ? trimmed(*f.site.source) : "";
    if (const auto arg = appendedTo(line, holder)) {
        return holder + ".append(" + receiver(*arg) + ".clone())";
    }
    if (line.substr(0, holder.size() + 1) != holder + "[") {
        return "";
    }
    const size_t eq = line.find(" = ");
    if (eq == std::string_view::npos || line.find('#') != std::string_view::npos) {
        return "";
    }
    const std::string_view value = trimmed(line.substr(eq + 3));
    // The key closes right before " = ": one subscript, no chained assignment or comparison.
    if (line[eq - 1] != ']' || value.empty() || value.find(" = ") != std::string_view::npos ||
        value.find('"') != std::string_view::npos || value.find('\'') != std::string_view::npos) {
        return "";
    }
    return std::string(line.substr(0, eq)) + " = " + receiver(value) + ".clone()";
}
} // namespace

std::string suggestFixCode(const Finding& f, const std::vector<std::string>& siteFile) {
    const std::string root = f.path.empty() ? "" : f.path.front().label;
    if (f.verdict == Verdict::Leak && !f.path.empty() && isOutputCacheRoot(f.path.front())) {
        return outputCacheFixCode(root);
    }
    if (f.verdict == Verdict::Leak && isLastExceptionRoot(root)) {
        return lastExceptionFixCode(f);
    }
    // A dict of hooks is emptied by removing the hooks, which only their handles do safely; a
    // library's private state by the library.
    if (f.verdict != Verdict::Leak || !f.holder || f.holder->hooks || f.holder->library ||
        f.retention != Retention::Reachable) {
        return "";
    }
    const std::string& holder = f.holder->path_text;
    if (!isPythonAccessChain(holder)) {
        return ""; // every line of fix_code must run as written
    }
    if (keepsGraphs(f)) {
        const std::string_view line = f.site.source ? trimmed(*f.site.source) : "";
        std::string written = holder; // the holder as the rewritten line spells it
        auto arg = appendedTo(line, holder);
        if (!arg) {
            arg = appendedBelowSite(f, holder, siteFile);
        }
        if (!arg && f.appended) {
            // The loop's one append to the holder, wherever it is: that line, rewritten.
            written = f.appended->holder;
            arg = f.appended->value;
        }
        const PathStep* entry = entryOf(f);
        if (!arg || entry == nullptr || !entry->tensor) {
            return "";
        }
        int64_t numel = 1;
        for (int64_t d : entry->tensor->shape) {
            numel *= d;
        }
        // Appended piece by piece: GCC 12 warns falsely on "(" + std::string(...) (-Wrestrict).
        std::string code = written + ".append(";
        const bool bare = isPrimary(*arg);
        code += bare ? "" : "(";
        code += *arg;
        code += bare ? "" : ")";
        code += numel == 1 ? ".item())" : ".detach())";
        return code;
    }
    if (f.fix_rule == "kept-at-intervals") {
        return keptAtIntervalsFixCode(f); // the last few kept: what reads the newest still works
    }
    if (pinnedBase(f)) {
        return cloneOnSiteLine(f, holder); // clearing would free it too, but so does a copy
    }
    const PathStep* entry = entryOf(f);
    const auto k = holderEnd(f);
    if (entry != nullptr && k &&
        (f.path[*k].type == "list" || f.path[*k].type == "dict" ||
         f.path[*k].type == "collections.deque" || f.path[*k].type == "set")) {
        return holder + ".clear()";
    }
    return "";
}

} // namespace torchleak
