#pragma once
// A fix must not break the user's loop: clearing a container that the next iteration reads
// (`prev = state.Y[-1]`) crashes it, however much memory it frees. The function around the
// leak's site (the loop's body, or the cell) is read for a use of the holder other than the one
// that fills it; when there is one, the fix says so and offers no `.clear()`.

#include "torchleak/model.h"

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace torchleak {

// Whether `line` reads `holder` (an index, an iteration, an argument, len()): not a write to it
// (append, extend, add, insert, update, setdefault, an item assigned, the name rebound), not
// `del`, not `.clear()`. Comments are ignored; the holder must stand as a whole name chain.
bool readsHolder(std::string_view line, std::string_view holder);

// The first line of the site's function (the `def` block around the site's line; the whole
// cell or file at top level), other than the site's own, that reads the holder: as the walk
// named it, or as the function fills it (`self.history` for `trainer.history`, from a line
// that appends to it). `lines` are the file's, line 1 first, indentation kept.
std::optional<HolderRead>
loopReadOf(const Frame& site, std::string_view holder, const std::vector<std::string>& lines);

// The source of a frame's file (or cell), line 1 first; empty when unknown. A reference the
// caller keeps for the report: 2,000 sites of one file read it once, not 2,000 times.
using SourceOf = std::function<const std::vector<std::string>&(const Frame&)>;

// Which lines of a file mention a text (a holder's spelling, a key): each of 2,000 sites of one
// long file reads the 800 lines around it for its holder, and the lines that mention the holder
// at all are found once per file and spelling instead. Keyed by the lines' address: it must not
// outlive the files it was asked about.
class LineMentions {
  public:
    // The 0-based indices, ascending, of the lines that contain `text` (not empty).
    const std::vector<size_t>& of(const std::vector<std::string>& lines, const std::string& text);

  private:
    std::map<std::pair<const std::vector<std::string>*, std::string>, std::vector<size_t>> d_found;
};

// A read of the finding's holder anywhere the loop can reach it, as far as the source tells:
// the site's function (loopReadOf); the site's own line handing the holder to a call
// (`cache[i] = helpers.prev_key(cache, i)`); the functions on the stack that lead to the site;
// and the methods of the holder's owner (`path[holderEnd - 1].methods`) that these call, and
// that those call in turn (`k.last()` reading `self.history[-1]`, wherever it is written).
std::optional<HolderRead>
loopReadAnywhere(const Finding& f, const SourceOf& sourceOf, LineMentions& mentions);
std::optional<HolderRead> loopReadAnywhere(const Finding& f, const SourceOf& sourceOf);

// An entry the loop is done with: the holder filled under a key (`state.kv_cache[rid] = kv`,
// a plain name) that the same loop takes out of another container (`state.active.pop(rid)`,
// `del pending[rid]`): a per-request store in a serving loop, whose fix is to pop that key
// there too, not to clear what the requests still running need.
struct EndedKey {
    std::string name; // the holder as the filling line writes it ("state.kv_cache", "self.cache")
    std::string key;  // "rid"
    HolderRead ended; // the line that ends the key elsewhere
};
std::optional<EndedKey>
endedKeyAnywhere(const Finding& f, const SourceOf& sourceOf, LineMentions& mentions);
std::optional<EndedKey> endedKeyAnywhere(const Finding& f, const SourceOf& sourceOf);
std::string endedKeyFixText(const Finding& f, const EndedKey& ended);

// The one expression the loop appends to the holder (`holder.append(ARG)`, the whole line), as
// far as the site's function and its callers' loops tell: the line the fix rewrites. Two
// different appends to it are no certainty: nullopt.
std::optional<AppendedValue> appendedValueAnywhere(const Finding& f, const SourceOf& sourceOf);

// The fix for a growing holder that the loop reads: bound it to what the loop needs.
std::string loopReadFixText(const Finding& f, const HolderRead& read);

} // namespace torchleak
