#include "torchleak/stack_table.h"

#include <algorithm>
#include <bit>
#include <cstdlib>
#include <cxxabi.h>
#include <memory>

namespace torchleak {

StackTable::StackTable() : d_index(256) {
    d_offsets.push_back(0);
    d_arena.reserve(4096);
}

namespace {
constexpr uint64_t kOdd = 0x9E3779B97F4A7C15ull;

uint64_t mixFrame(uint64_t h, const RawFrame& f) noexcept {
    h = (h ^ static_cast<uint64_t>(f.code)) * kOdd;
    return (h ^ static_cast<uint64_t>(static_cast<uint32_t>(f.offset))) * kOdd;
}
} // namespace

// Every allocation with a stack hashes it, up to 48 frames deep in a training step. One
// accumulator made each frame wait for the last (a chain of five dependent operations a frame);
// four accumulators, four frames at a time, let the processor hash them side by side.
uint64_t StackTable::hash(std::span<const RawFrame> frames) noexcept {
    uint64_t a = 0xcbf29ce484222325ull ^ frames.size();
    uint64_t b = 0x84222325cbf29ce4ull;
    uint64_t c = 0xff51afd7ed558ccdull;
    uint64_t d = 0xc4ceb9fe1a85ec53ull;
    size_t i = 0;
    for (; i + 4 <= frames.size(); i += 4) {
        a = mixFrame(a, frames[i]);
        b = mixFrame(b, frames[i + 1]);
        c = mixFrame(c, frames[i + 2]);
        d = mixFrame(d, frames[i + 3]);
    }
    for (; i < frames.size(); ++i) {
        a = mixFrame(a, frames[i]);
    }
    uint64_t h = a ^ std::rotl(b, 17) ^ std::rotl(c, 31) ^ std::rotl(d, 47);
    // fmix64 (MurmurHash3): every input bit reaches the low bits the hash table's buckets use.
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ull;
    h ^= h >> 33;
    return h;
}

StackToken StackTable::intern(std::span<const RawFrame> frames, bool* inserted) {
    *inserted = false;
    if (frames.empty()) {
        return 0;
    }
    // Grown first, as PointerTable does, so that the probe that misses ends on the slot the
    // new stack takes.
    if ((size() + 1) * 2 > d_index.size()) {
        growIndex();
    }
    const uint64_t h = hash(frames);
    const size_t mask = d_index.size() - 1;
    size_t i = h & mask;
    for (; d_index[i].token != 0; i = (i + 1) & mask) {
        if (d_index[i].hash == h) {
            auto existing = this->frames(d_index[i].token);
            if (std::equal(existing.begin(), existing.end(), frames.begin(), frames.end())) {
                return d_index[i].token;
            }
        }
    }
    d_arena.insert(d_arena.end(), frames.begin(), frames.end());
    d_offsets.push_back(static_cast<uint32_t>(d_arena.size()));
    auto token = static_cast<StackToken>(d_offsets.size() - 1);
    d_index[i] = IndexSlot{h, token};
    *inserted = true;
    return token;
}

void StackTable::growIndex() {
    std::vector<IndexSlot> grown(d_index.size() * 2);
    const size_t mask = grown.size() - 1;
    for (const IndexSlot& slot : d_index) {
        if (slot.token != 0) {
            size_t i = slot.hash & mask;
            while (grown[i].token != 0) {
                i = (i + 1) & mask;
            }
            grown[i] = slot;
        }
    }
    d_index.swap(grown);
}

NodeToken NodeNameTable::intern(const char* mangledTypeName) noexcept {
    for (size_t i = 0; i < d_names.size(); ++i) {
        if (d_names[i] == mangledTypeName) {
            return static_cast<NodeToken>(i + 1);
        }
    }
    if (d_names.size() >= 0xFFFE) {
        return 0;
    }
    // Called under the recorder's lock; push_back may allocate only while new node types
    // appear, a few dozen per program.
    try {
        d_names.push_back(mangledTypeName);
    } catch (...) {
        return 0;
    }
    return static_cast<NodeToken>(d_names.size());
}

std::string NodeNameTable::name(NodeToken token) const {
    if (token == 0 || token > d_names.size()) {
        return {};
    }
    return shortTypeName(d_names[token - 1]);
}

std::string shortTypeName(const char* mangled) {
    int status = 0;
    std::unique_ptr<char, void (*)(void*)> demangled(
        abi::__cxa_demangle(mangled, nullptr, nullptr, &status), std::free);
    std::string full = (status == 0 && demangled) ? std::string(demangled.get()) : mangled;
    auto template_start = full.find('<');
    auto cut = full.rfind("::", template_start == std::string::npos ? full.size() : template_start);
    return cut == std::string::npos ? full : full.substr(cut + 2);
}

} // namespace torchleak
