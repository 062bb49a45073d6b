#include "torchleak/loop_reads.h"

#include "torchleak/display_text.h"

#include <algorithm>
#include <cctype>

namespace torchleak {

namespace {

bool isNameChar(char c) {
    return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_';
}

size_t indentOf(std::string_view line) {
    size_t n = 0;
    while (n < line.size() && (line[n] == ' ' || line[n] == '\t')) {
        ++n;
    }
    return n;
}

bool blank(std::string_view line) {
    const size_t n = indentOf(line);
    return n == line.size() || line[n] == '#' || line[n] == '\n' || line[n] == '\r';
}

bool startsWith(std::string_view text, std::string_view prefix) {
    return text.substr(0, prefix.size()) == prefix;
}

std::string_view skipSpaces(std::string_view text) {
    while (!text.empty() && text.front() == ' ') {
        text.remove_prefix(1);
    }
    return text;
}

// `=` that assigns (not `==`): the text after the holder stores into it.
bool assigns(std::string_view after) {
    after = skipSpaces(after);
    return !after.empty() && after.front() == '=' && (after.size() == 1 || after[1] != '=');
}

bool isDefinition(std::string_view line) {
    line = line.substr(indentOf(line));
    return startsWith(line, "def ") || startsWith(line, "async def ");
}

// How one use of the holder (the text after it on the line) treats it.
bool isRead(std::string_view before, std::string_view after) {
    for (const char* write : {".append(", ".extend(", ".add(", ".insert(", ".update(",
                              ".setdefault(", ".clear(", ".appendleft(", ".extendleft("}) {
        if (startsWith(after, write)) {
            return false;
        }
    }
    before = before.substr(0, before.find_last_not_of(' ') + 1);
    if (before.size() >= 3 && before.substr(before.size() - 3) == "del" &&
        (before.size() == 3 || !isNameChar(before[before.size() - 4]))) {
        return false;
    }
    if (assigns(after)) {
        return false; // the name rebound: `kept = []`
    }
    if (!after.empty() && after.front() == '[') {
        int depth = 0;
        for (size_t k = 0; k < after.size(); ++k) {
            depth += after[k] == '[' ? 1 : after[k] == ']' ? -1 : 0;
            if (depth == 0) {
                return !assigns(after.substr(k + 1)); // `kept[i] = x` stores
            }
        }
    }
    return true;
}

// The holder's last attribute (`history` of `trainer.history`), or empty when it ends in
// anything else (an index, a call) or is a bare name.
std::string_view lastAttribute(std::string_view holder) {
    const size_t dot = holder.rfind('.');
    if (dot == std::string_view::npos || dot + 1 == holder.size()) {
        return {};
    }
    const std::string_view last = holder.substr(dot + 1);
    return std::all_of(last.begin(), last.end(), isNameChar) ? last : std::string_view();
}

// The chains `line` fills (or empties, or rebinds) that end in the attribute `last`: `self.history`
// in `self.history.append(out)`. A chain interrupted by an index or a call is not spelled.
void writtenChains(std::string_view line, std::string_view last, std::vector<std::string>& out) {
    line = line.substr(0, line.find('#'));
    for (size_t at = line.find(last); at != std::string_view::npos; at = line.find(last, at + 1)) {
        const size_t end = at + last.size();
        if ((at > 0 && isNameChar(line[at - 1])) || (end < line.size() && isNameChar(line[end]))) {
            continue;
        }
        size_t start = at;
        while (start > 0 && (isNameChar(line[start - 1]) || line[start - 1] == '.')) {
            --start;
        }
        if (line[start] == '.' ||
            (start > 0 && (line[start - 1] == ']' || line[start - 1] == ')'))) {
            continue;
        }
        if (!isRead(line.substr(0, start), line.substr(end))) {
            out.emplace_back(line.substr(start, end - start));
        }
    }
}

} // namespace

bool readsHolder(std::string_view line, std::string_view holder) {
    if (holder.empty()) {
        return false;
    }
    line = line.substr(0, line.find('#')); // a comment's mention is no use
    for (size_t at = line.find(holder); at != std::string_view::npos;
         at = line.find(holder, at + 1)) {
        const size_t end = at + holder.size();
        const bool whole = (at == 0 || (!isNameChar(line[at - 1]) && line[at - 1] != '.')) &&
                           (end == line.size() || !isNameChar(line[end]));
        if (whole && isRead(line.substr(0, at), line.substr(end))) {
            return true;
        }
    }
    return false;
}

std::optional<HolderRead>
loopReadOf(const Frame& site, std::string_view holder, const std::vector<std::string>& lines) {
    if (site.line <= 0 || static_cast<size_t>(site.line) > lines.size() || holder.empty()) {
        return std::nullopt;
    }
    const size_t at = static_cast<size_t>(site.line) - 1; // 0-based
    const size_t siteIndent = indentOf(lines[at]);
    // Up to the `def` whose block holds the site, or to the file's (cell's) start.
    constexpr size_t kMostLines = 400;
    size_t first = 0;
    std::optional<size_t> defIndent;
    for (size_t k = at; k-- > 0 && at - k <= kMostLines;) {
        if (!blank(lines[k]) && isDefinition(lines[k]) && indentOf(lines[k]) < siteIndent) {
            first = k + 1;
            defIndent = indentOf(lines[k]);
            break;
        }
    }
    size_t last = lines.size();
    for (size_t k = at + 1; k < lines.size() && k - at <= kMostLines; ++k) {
        if (defIndent && !blank(lines[k]) && indentOf(lines[k]) <= *defIndent) {
            last = k;
            break;
        }
    }
    last = std::min(last, at + kMostLines + 1);
    if (!defIndent && at > kMostLines) {
        first = at - kMostLines; // top level of a long file: the lines near the site
    }
    // The holder as the function names it: a method fills `self.history` where the walk named
    // the object from its root (`trainer.history`).
    std::vector<std::string> names = {std::string(holder)};
    if (const std::string_view attribute = lastAttribute(holder); !attribute.empty()) {
        for (size_t k = first; k < last; ++k) {
            writtenChains(lines[k], attribute, names);
        }
    }
    std::sort(names.begin() + 1, names.end());
    names.erase(std::unique(names.begin() + 1, names.end()), names.end());
    const auto readsAny = [&names](std::string_view line) {
        return std::any_of(names.begin(), names.end(),
                           [line](const std::string& name) { return readsHolder(line, name); });
    };
    // The site's own line is left out: what it reads of the holder is most often the key it
    // fills (`cache[len(cache)] = x`), which clearing does not break.
    for (size_t k = first; k < last; ++k) {
        if (k != at && !blank(lines[k]) && readsAny(lines[k])) {
            std::string source = lines[k].substr(indentOf(lines[k]));
            while (!source.empty() && (source.back() == '\n' || source.back() == '\r')) {
                source.pop_back();
            }
            return HolderRead{static_cast<int>(k + 1), source};
        }
    }
    return std::nullopt;
}

std::string loopReadFixText(const Finding& f, const HolderRead& read) {
    const std::string holder = shortPath(f.holder->path_text);
    return holder + " grows every iteration, but the code around it reads it (line " +
           std::to_string(read.line) + ": " + read.source +
           "): clearing it would break the next iteration. Keep only what that line needs "
           "(collections.deque(maxlen=...), or drop the entries it no longer reads), or store "
           "smaller copies (.detach(), .item()) of what it keeps";
}

} // namespace torchleak
