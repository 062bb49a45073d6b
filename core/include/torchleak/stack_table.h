#pragma once
// Interned allocation stacks.
//
// A stack is a sequence of RawFrames, innermost first. What `code` and `offset` mean is up to
// whoever captured them (the bindings store a PyCodeObject* and a byte offset into its
// bytecode); the core only compares and stores them. Identical stacks share one token, so a
// training loop that allocates from the same few hundred lines costs a hash lookup per event
// and no memory growth. Decoding to file:line is done at report time by a StackSymbolizer.
//
// Not synchronised; AllocationRecorder serialises access.

#include "torchleak/live_block_table.h"

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace torchleak {

// No member initialisers: the hook captures into a buffer of 48 frames on every allocation, and
// initialisers made each one zero 768 bytes first (a `rep stos`, half a percent of a loop of
// small ops). Only the frames a capture reports are read; `RawFrame{}` is still all zeros.
struct RawFrame {
    uintptr_t code;
    int32_t offset;
    bool operator==(const RawFrame&) const = default;
};

class StackTable {
  public:
    StackTable();

    // Returns the token of this stack (never 0 for a non-empty stack) and sets *inserted when
    // the stack was new, so the caller can take ownership of what the frames point to.
    StackToken intern(std::span<const RawFrame> frames, bool* inserted);
    // Inline: intern() compares a candidate's frames through it on every allocation.
    std::span<const RawFrame> frames(StackToken token) const noexcept {
        if (token == 0 || token >= d_offsets.size()) {
            return {};
        }
        return {d_arena.data() + d_offsets[token - 1], d_offsets[token] - d_offsets[token - 1]};
    }
    size_t size() const noexcept { return d_offsets.size() - 1; }

    // Every frame of every stack, once per stack: what the owner must release on teardown.
    const std::vector<RawFrame>& allFrames() const noexcept { return d_arena; }

  private:
    static uint64_t hash(std::span<const RawFrame> frames) noexcept;
    void growIndex();

    // The index from a stack's hash to its token, looked up on every allocation with a stack:
    // open addressing with linear probing over a power-of-two table (token 0: an empty slot),
    // at most half full. A node-based multimap cost a division by its prime bucket count and
    // a pointer chase per event.
    struct IndexSlot {
        uint64_t hash = 0;
        StackToken token = 0;
    };
    std::vector<RawFrame> d_arena;
    std::vector<uint32_t> d_offsets; // stack t spans [d_offsets[t-1], d_offsets[t])
    std::vector<IndexSlot> d_index;
};

// "torch::autograd::generated::MmBackward0" -> "MmBackward0": a C++ type's mangled name,
// demangled, namespaces (outside template arguments) stripped.
std::string shortTypeName(const char* mangledTypeName);

// The names of autograd nodes that allocated inside backward. The recorder sees a node's
// type_info name (a static string, so the pointer identifies it); demangling is deferred.
class NodeNameTable {
  public:
    NodeToken intern(const char* mangledTypeName) noexcept;
    std::string name(NodeToken token) const; // demangled, namespace stripped: "MmBackward0"
    size_t size() const noexcept { return d_names.size(); }

  private:
    std::vector<const char*> d_names; // token t is d_names[t-1]
};

} // namespace torchleak
