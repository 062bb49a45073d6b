#include "torchleak/loop_reads.h"

#include "torchleak/display_text.h"
#include "torchleak/retention.h"
#include "torchleak/suggestion.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <set>

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

// Whether position `at` of the line is inside a string literal (`path="store['train']"` names
// the holder, it does not read it). Quotes are counted from the line's start: a string that
// spans lines is not seen, and then the mention counts, which keeps a fix back, never offers one.
bool insideString(std::string_view line, size_t at) {
    char open = 0;
    for (size_t k = 0; k < at && k < line.size(); ++k) {
        const char c = line[k];
        if (open != 0 && c == '\\') {
            ++k; // an escaped character, the quote included
        } else if (open == 0 && (c == '\'' || c == '"')) {
            open = c;
        } else if (c == open) {
            open = 0;
        }
    }
    return open != 0;
}

// Whether the holder found at [at, end) of the line stands as a whole name chain outside a
// string literal: not `mystate.Y`, `self.state.Y`, `state.Yes` or `"state.Y"`.
bool wholeMention(std::string_view line, size_t at, size_t end) {
    return (at == 0 || (!isNameChar(line[at - 1]) && line[at - 1] != '.')) &&
           (end == line.size() || !isNameChar(line[end])) && !insideString(line, at);
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

// The holder as the loop's code may write it: as the walk named it, and as its class's methods
// write it (`self.history` for `trainer.history`).
std::vector<std::string> holderSpellings(const std::string& holder) {
    std::vector<std::string> names = {holder};
    if (const std::string_view last = lastAttribute(holder); !last.empty()) {
        names.push_back("self." + std::string(last));
    }
    return names;
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
        if (wholeMention(line, at, end) && isRead(line.substr(0, at), line.substr(end))) {
            return true;
        }
    }
    return false;
}

namespace {

// The lines [first, last) of the function around line `at` (0-based): up to the `def` whose
// block holds it, or the file's (cell's) start; at top level of a long file, the lines near it.
std::pair<size_t, size_t> functionAround(const std::vector<std::string>& lines, size_t at) {
    const size_t siteIndent = indentOf(lines[at]);
    constexpr size_t kMostLines = 400;
    size_t first = 0;
    std::optional<size_t> defIndent;
    for (size_t k = at; k-- > 0 && at - k <= kMostLines;) {
        // The indentation first: at top level no line can be the def, and a long file's
        // 2,000 sites each look 400 lines back.
        if (indentOf(lines[k]) < siteIndent && !blank(lines[k]) && isDefinition(lines[k])) {
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
    return {first, last};
}

HolderRead readAt(const std::vector<std::string>& lines, size_t k) {
    std::string source = lines[k].substr(indentOf(lines[k]));
    while (!source.empty() && (source.back() == '\n' || source.back() == '\r')) {
        source.pop_back();
    }
    return HolderRead{static_cast<int>(k + 1), source, ""};
}

std::string_view trimEnd(std::string_view text) {
    while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) {
        text.remove_suffix(1);
    }
    return text;
}

// Whether `line` hands `holder` as a whole argument to a call (`f(cache, i)`): what the callee
// does with it cannot be read here, and most often it reads.
bool passesToCall(std::string_view line, std::string_view holder) {
    line = line.substr(0, line.find('#'));
    for (size_t at = line.find(holder); at != std::string_view::npos;
         at = line.find(holder, at + 1)) {
        const size_t end = at + holder.size();
        if (!wholeMention(line, at, end)) {
            continue;
        }
        const std::string_view before = trimEnd(line.substr(0, at));
        const std::string_view after = skipSpaces(line.substr(end));
        if (before.empty() || (before.back() != '(' && before.back() != ',') || after.empty() ||
            (after.front() != ',' && after.front() != ')')) {
            continue;
        }
        // `len(cache)` sizes the key the line fills; clearing does not break it.
        const std::string_view callee = trimEnd(before.substr(0, before.size() - 1));
        const bool sized = before.back() == '(' && callee.size() >= 3 &&
                           callee.substr(callee.size() - 3) == "len" &&
                           (callee.size() == 3 || !isNameChar(callee[callee.size() - 4]));
        if (!sized) {
            return true;
        }
    }
    return false;
}

// The names called as methods in lines [first, last): `step` of `k.step(i)`, `prev` of
// `self.prev(i)`.
void methodsCalled(const std::vector<std::string>& lines,
                   size_t first,
                   size_t last,
                   std::set<std::string>& out) {
    for (size_t k = first; k < last && k < lines.size(); ++k) {
        std::string_view line = lines[k];
        line = line.substr(0, line.find('#'));
        for (size_t dot = line.find('.'); dot != std::string_view::npos;
             dot = line.find('.', dot + 1)) {
            size_t end = dot + 1;
            while (end < line.size() && isNameChar(line[end])) {
                ++end;
            }
            if (end > dot + 1 && end < line.size() && line[end] == '(') {
                out.emplace(line.substr(dot + 1, end - dot - 1));
            }
        }
    }
}

// The first parameter of a `def` line (`self`), or "".
std::string firstParameter(std::string_view def) {
    const size_t open = def.find('(');
    if (open == std::string_view::npos) {
        return "";
    }
    std::string_view rest = skipSpaces(def.substr(open + 1));
    size_t end = 0;
    while (end < rest.size() && isNameChar(rest[end])) {
        ++end;
    }
    return std::string(rest.substr(0, end));
}

using LineRanges = std::vector<std::pair<size_t, size_t>>; // [first, last), 0-based

// The first line past the indented block that `header` (a `for`, a `def`) opens.
size_t blockEnd(const std::vector<std::string>& lines, size_t header) {
    size_t last = header + 1;
    while (last < lines.size() &&
           (blank(lines[last]) || indentOf(lines[last]) > indentOf(lines[header]))) {
        ++last;
    }
    return last;
}

// The lines [first, last) of the innermost `for` or `while` block around line `at` in its own
// function, the loop line included; nothing (first == last) when the line is in no loop. What
// a caller does after its loop, or around it in a test, is not the next iteration.
std::pair<size_t, size_t> loopAround(const std::vector<std::string>& lines, size_t at) {
    size_t indent = indentOf(lines[at]);
    for (size_t k = at; k-- > 0;) {
        if (blank(lines[k]) || indentOf(lines[k]) >= indent) {
            continue;
        }
        indent = indentOf(lines[k]);
        const std::string_view text = std::string_view(lines[k]).substr(indent);
        if (isDefinition(lines[k]) || startsWith(text, "class ")) {
            break;
        }
        if (startsWith(text, "for ") || startsWith(text, "while ") ||
            startsWith(text, "async for ")) {
            return {k, blockEnd(lines, k)};
        }
    }
    return {at, at};
}

// The lines among `at` (ascending) that lie in [first, last).
std::pair<std::vector<size_t>::const_iterator, std::vector<size_t>::const_iterator>
within(const std::vector<size_t>& at, size_t first, size_t last) {
    return {std::lower_bound(at.begin(), at.end(), first),
            std::lower_bound(at.begin(), at.end(), last)};
}

// The first line of [first, last) that reads the holder, outside `skip`. Only the lines that
// mention a spelling at all can read it.
std::optional<HolderRead> readIn(const std::vector<std::string>& lines,
                                 size_t first,
                                 size_t last,
                                 std::string_view holder,
                                 const LineRanges& skip,
                                 LineMentions& mentions) {
    if (holder.empty()) {
        return std::nullopt;
    }
    // The holder as the function names it: a method fills `self.history` where the walk named
    // the object from its root (`trainer.history`).
    std::vector<std::string> names = {std::string(holder)};
    if (const std::string_view attribute = lastAttribute(holder); !attribute.empty()) {
        const auto [from, to] = within(mentions.of(lines, std::string(attribute)), first, last);
        for (auto k = from; k != to; ++k) {
            writtenChains(lines[*k], attribute, names);
        }
    }
    std::sort(names.begin() + 1, names.end());
    names.erase(std::unique(names.begin() + 1, names.end()), names.end());
    const auto skipped = [&skip](size_t k) {
        return std::any_of(skip.begin(), skip.end(),
                           [k](const auto& range) { return k >= range.first && k < range.second; });
    };
    size_t found = last;
    for (const std::string& name : names) {
        const auto [from, to] = within(mentions.of(lines, name), first, found);
        const auto reads = std::find_if(
            from, to, [&](size_t k) { return !skipped(k) && readsHolder(lines[k], name); });
        found = reads != to ? *reads : found;
    }
    return found < last ? std::optional<HolderRead>(readAt(lines, found)) : std::nullopt;
}

} // namespace

const std::vector<size_t>& LineMentions::of(const std::vector<std::string>& lines,
                                            const std::string& text) {
    auto [it, fresh] = d_found.try_emplace({&lines, text});
    if (fresh) {
        for (size_t k = 0; k < lines.size(); ++k) {
            if (lines[k].find(text) != std::string::npos) {
                it->second.push_back(k);
            }
        }
    }
    return it->second;
}

std::optional<HolderRead>
loopReadOf(const Frame& site, std::string_view holder, const std::vector<std::string>& lines) {
    if (site.line <= 0 || static_cast<size_t>(site.line) > lines.size() || holder.empty()) {
        return std::nullopt;
    }
    const size_t at = static_cast<size_t>(site.line) - 1; // 0-based
    // The site's own line is left out: what it reads of the holder is most often the key it
    // fills (`cache[len(cache)] = x`), which clearing does not break.
    const auto [first, last] = functionAround(lines, at);
    LineMentions mentions;
    return readIn(lines, first, last, holder, {{at, at + 1}}, mentions);
}

namespace {
constexpr size_t kMostFrames = 8;

// The site, then the user functions that called it, innermost first.
std::vector<Frame> loopFrames(const Finding& f) {
    std::vector<Frame> frames = {f.site};
    for (const Frame& frame : f.stack) {
        if (frame.user && !frame.package &&
            !(frame.file == f.site.file && frame.line == f.site.line)) {
            frames.push_back(frame);
        }
    }
    return frames;
}

// The lines of a loop frame: the site's whole function, a caller's loop around its call.
std::pair<size_t, size_t> loopRange(const std::vector<std::string>& lines, size_t i, size_t at) {
    return i == 0 ? functionAround(lines, at) : loopAround(lines, at);
}

// `KEY` of `NAME[KEY] = ...` on the line, a plain name; "" otherwise.
std::string filledKey(std::string_view line, std::string_view name) {
    line = line.substr(0, line.find('#'));
    for (size_t at = line.find(name); at != std::string_view::npos; at = line.find(name, at + 1)) {
        const size_t open = at + name.size();
        if (!wholeMention(line, at, open) || open >= line.size() || line[open] != '[') {
            continue;
        }
        const size_t close = line.find(']', open);
        if (close == std::string_view::npos || !assigns(line.substr(close + 1))) {
            continue;
        }
        const std::string_view key = line.substr(open + 1, close - open - 1);
        if (isPythonName(key)) {
            return std::string(key);
        }
    }
    return "";
}

// Whether the line takes `key` out of a container other than `name`: `X.pop(key...)`,
// `del X[key]`, `X.discard(key)`, `X.remove(key)`.
bool endsKeyElsewhere(std::string_view line, std::string_view name, const std::string& key) {
    line = line.substr(0, line.find('#'));
    for (const std::string& form : {".pop(" + key, ".discard(" + key, ".remove(" + key}) {
        for (size_t at = line.find(form); at != std::string_view::npos;
             at = line.find(form, at + 1)) {
            const size_t end = at + form.size();
            const bool whole = end < line.size() && (line[end] == ')' || line[end] == ',');
            const std::string_view receiver = line.substr(0, at);
            const bool self = receiver.size() >= name.size() &&
                              receiver.substr(receiver.size() - name.size()) == name;
            if (whole && !self && !insideString(line, at)) {
                return true;
            }
        }
    }
    const std::string_view text = skipSpaces(line);
    const std::string deleted = "[" + key + "]";
    return startsWith(text, "del ") && text.find(deleted) != std::string_view::npos &&
           text.find(std::string(name) + deleted) == std::string_view::npos;
}
} // namespace

std::optional<EndedKey> endedKeyAnywhere(const Finding& f, const SourceOf& sourceOf) {
    LineMentions mentions;
    return endedKeyAnywhere(f, sourceOf, mentions);
}

std::optional<EndedKey>
endedKeyAnywhere(const Finding& f, const SourceOf& sourceOf, LineMentions& mentions) {
    if (!f.holder || f.holder->path_text.empty()) {
        return std::nullopt;
    }
    const std::string& holder = f.holder->path_text;
    const std::vector<std::string> names = holderSpellings(holder);
    const std::vector<Frame> frames = loopFrames(f);
    // Where the loop fills the holder under a key, then where it ends that key elsewhere.
    std::optional<std::pair<std::string, std::string>> filled; // (name, key)
    for (size_t i = 0; i < frames.size() && i < kMostFrames && !filled; ++i) {
        const std::vector<std::string>& lines = sourceOf(frames[i]);
        if (frames[i].line <= 0 || static_cast<size_t>(frames[i].line) > lines.size()) {
            continue;
        }
        const auto [first, last] = loopRange(lines, i, static_cast<size_t>(frames[i].line) - 1);
        // The first line that fills a spelling under a key (the earlier spelling on a tie).
        size_t at = last;
        for (const std::string& name : names) {
            const auto [from, to] = within(mentions.of(lines, name), first, at);
            for (auto k = from; k != to; ++k) {
                if (std::string key = filledKey(lines[*k], name); !key.empty()) {
                    filled.emplace(name, std::move(key));
                    at = *k;
                    break;
                }
            }
        }
    }
    if (!filled) {
        return std::nullopt;
    }
    for (size_t i = 0; i < frames.size() && i < kMostFrames; ++i) {
        const std::vector<std::string>& lines = sourceOf(frames[i]);
        if (frames[i].line <= 0 || static_cast<size_t>(frames[i].line) > lines.size()) {
            continue;
        }
        const auto [first, last] = loopRange(lines, i, static_cast<size_t>(frames[i].line) - 1);
        // Every form that ends the key spells it.
        const auto [from, to] = within(mentions.of(lines, filled->second), first, last);
        for (auto it = from; it != to; ++it) {
            const size_t k = *it;
            if (endsKeyElsewhere(lines[k], filled->first, filled->second)) {
                HolderRead ended = readAt(lines, k);
                ended.file = frames[i].file == f.site.file ? "" : frames[i].file;
                return EndedKey{filled->first, filled->second, std::move(ended)};
            }
        }
    }
    return std::nullopt;
}

std::optional<AppendedValue> appendedValueAnywhere(const Finding& f, const SourceOf& sourceOf) {
    if (!f.holder || f.holder->path_text.empty()) {
        return std::nullopt;
    }
    const std::vector<std::string> names = holderSpellings(f.holder->path_text);
    const std::vector<Frame> frames = loopFrames(f);
    for (size_t i = 0; i < frames.size() && i < kMostFrames; ++i) {
        const std::vector<std::string>& lines = sourceOf(frames[i]);
        if (frames[i].line <= 0 || static_cast<size_t>(frames[i].line) > lines.size()) {
            continue;
        }
        const auto [first, last] = loopRange(lines, i, static_cast<size_t>(frames[i].line) - 1);
        std::optional<AppendedValue> found;
        for (size_t k = first; k < last; ++k) {
            std::string_view line = skipSpaces(lines[k]);
            // A comment after the call is cut; a `#` that may be inside a string is not.
            if (const size_t hash = line.find('#');
                hash != std::string_view::npos &&
                line.substr(0, hash).find_first_of("'\"") == std::string_view::npos) {
                line = line.substr(0, hash);
            }
            while (!line.empty() && std::isspace(static_cast<unsigned char>(line.back())) != 0) {
                line.remove_suffix(1);
            }
            for (const std::string& name : names) {
                const auto arg = appendedTo(line, name);
                if (!arg) {
                    continue;
                }
                if (found && (found->holder != name || found->value != *arg)) {
                    return std::nullopt; // two appends: which one the fix rewrites is unsure
                }
                found = AppendedValue{name, std::string(*arg), static_cast<int>(k) + 1};
            }
        }
        if (found) {
            return found;
        }
    }
    return std::nullopt;
}

std::string endedKeyFixText(const Finding& f, const EndedKey& ended) {
    const std::string where =
        ended.ended.file.empty()
            ? "line " + std::to_string(ended.ended.line)
            : ended.ended.file.substr(ended.ended.file.find_last_of("/\\") + 1) + ", line " +
                  std::to_string(ended.ended.line);
    return shortPath(f.holder->path_text) + " keeps an entry under every " + ended.key +
           " after the loop is done with it (" + where + " ends it: " + ended.ended.source +
           "): pop the entry there too (" + ended.name + ".pop(" + ended.key +
           ", None)). Clearing it would also drop the entries still in use";
}

std::optional<HolderRead> loopReadAnywhere(const Finding& f, const SourceOf& sourceOf) {
    LineMentions mentions;
    return loopReadAnywhere(f, sourceOf, mentions);
}

std::optional<HolderRead>
loopReadAnywhere(const Finding& f, const SourceOf& sourceOf, LineMentions& mentions) {
    if (!f.holder || f.holder->path_text.empty()) {
        return std::nullopt;
    }
    const std::string& holder = f.holder->path_text;
    const auto linesOf = [&](const Frame& frame) -> const std::vector<std::string>& {
        return sourceOf(frame);
    };
    const auto elsewhere = [&](HolderRead read, const std::string& file) {
        read.file = file == f.site.file ? "" : file;
        return read;
    };
    const std::vector<Frame> frames = loopFrames(f);
    // Per file, the lines already read: a caller whose loop holds its callee (a nested
    // `def step()`) reads only its own lines.
    std::map<std::string, LineRanges> read;
    for (size_t i = 0; i < frames.size() && i < kMostFrames; ++i) {
        const Frame& frame = frames[i];
        const std::vector<std::string>& lines = linesOf(frame);
        if (frame.line <= 0 || static_cast<size_t>(frame.line) > lines.size()) {
            continue;
        }
        const size_t at = static_cast<size_t>(frame.line) - 1;
        const auto range = loopRange(lines, i, at);
        LineRanges skip = read[frame.file];
        skip.emplace_back(at, at + 1);
        if (auto found = readIn(lines, range.first, range.second, holder, skip, mentions)) {
            return elsewhere(*found, frame.file);
        }
        if (i == 0 && passesToCall(lines[at], holder)) {
            return elsewhere(readAt(lines, at), frame.file);
        }
        read[frame.file].push_back(range);
    }
    // The owner's methods the loop calls, and those they call: `self.<attribute>` read there.
    const auto end = holderEnd(f);
    if (!end || *end == 0 || f.path[*end].kind != StepKind::Attr || f.path[*end].label.size() < 2) {
        return std::nullopt;
    }
    // The methods the loop's lines call, listed only now that the holder is an attribute:
    // listing them for every site cost 2,000 sites of one long file an 800-line scan each.
    std::set<std::string> called;
    for (const auto& [file, ranges] : read) {
        Frame in;
        in.file = file;
        const std::vector<std::string>& lines = linesOf(in);
        for (const auto& [first, last] : ranges) {
            methodsCalled(lines, first, last, called);
        }
    }
    const std::string attribute = f.path[*end].label.substr(1);
    const std::vector<MethodSource>& methods = f.path[*end - 1].methods;
    std::set<std::string> done;
    for (bool more = true; more;) {
        more = false;
        for (const MethodSource& method : methods) {
            if (!called.count(method.name) ||
                !done.insert(method.name + '\x1f' + method.file).second) {
                continue;
            }
            more = true;
            Frame at;
            at.file = method.file;
            at.line = method.line;
            const std::vector<std::string>& lines = linesOf(at);
            // co_firstlineno is a decorator's line when the method has one.
            size_t def = static_cast<size_t>(std::max(method.line, 1)) - 1;
            while (def < lines.size() && def < static_cast<size_t>(method.line) + 8 &&
                   !isDefinition(lines[def])) {
                ++def;
            }
            if (def >= lines.size() || !isDefinition(lines[def])) {
                continue;
            }
            const std::string self = firstParameter(lines[def]);
            const size_t last = blockEnd(lines, def);
            // From the `def` line itself: `def last(self): return self.history[-1]`.
            for (size_t k = def; !self.empty() && k < last; ++k) {
                if (readsHolder(lines[k], self + "." + attribute)) {
                    return elsewhere(readAt(lines, k), method.file);
                }
            }
            methodsCalled(lines, def, last, called);
        }
    }
    return std::nullopt;
}

std::string loopReadFixText(const Finding& f, const HolderRead& read) {
    const std::string holder = shortPath(f.holder->path_text);
    const std::string where = read.file.empty()
                                  ? "line " + std::to_string(read.line)
                                  : read.file.substr(read.file.find_last_of("/\\") + 1) +
                                        ", line " + std::to_string(read.line);
    return holder + " grows every iteration, but the code around it reads it (" + where + ": " +
           read.source +
           "): clearing it would break the next iteration. Keep only what that line needs (" +
           boundedForm(f.holder->type) +
           ", or drop the entries it no longer reads), or store smaller copies (.detach(), "
           ".item()) of what it keeps";
}

} // namespace torchleak
