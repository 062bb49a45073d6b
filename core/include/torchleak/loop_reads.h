#pragma once
// A fix must not break the user's loop: clearing a container that the next iteration reads
// (`prev = state.Y[-1]`) crashes it, however much memory it frees. The function around the
// leak's site (the loop's body, or the cell) is read for a use of the holder other than the one
// that fills it; when there is one, the fix says so and offers no `.clear()`.

#include "torchleak/model.h"

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

// The fix for a growing holder that the loop reads: bound it to what the loop needs.
std::string loopReadFixText(const Finding& f, const HolderRead& read);

} // namespace torchleak
