#include "torchleak/stack_table.h"

#include <algorithm>
#include <cstdlib>
#include <cxxabi.h>
#include <memory>

namespace torchleak {

StackTable::StackTable() {
    d_offsets.push_back(0);
    d_arena.reserve(4096);
}

uint64_t StackTable::hash(std::span<const RawFrame> frames) noexcept {
    uint64_t h = 0xcbf29ce484222325ull ^ frames.size();
    for (const RawFrame& f : frames) {
        h ^= static_cast<uint64_t>(f.code) + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
        h ^= static_cast<uint64_t>(static_cast<uint32_t>(f.offset)) * 0xff51afd7ed558ccdull;
    }
    return h;
}

StackToken StackTable::intern(std::span<const RawFrame> frames, bool* inserted) {
    *inserted = false;
    if (frames.empty()) {
        return 0;
    }
    uint64_t h = hash(frames);
    auto [lo, hi] = d_index.equal_range(h);
    for (auto it = lo; it != hi; ++it) {
        auto existing = this->frames(it->second);
        if (std::equal(existing.begin(), existing.end(), frames.begin(), frames.end())) {
            return it->second;
        }
    }
    d_arena.insert(d_arena.end(), frames.begin(), frames.end());
    d_offsets.push_back(static_cast<uint32_t>(d_arena.size()));
    auto token = static_cast<StackToken>(d_offsets.size() - 1);
    d_index.emplace(h, token);
    *inserted = true;
    return token;
}

std::span<const RawFrame> StackTable::frames(StackToken token) const noexcept {
    if (token == 0 || token >= d_offsets.size()) {
        return {};
    }
    return {d_arena.data() + d_offsets[token - 1], d_offsets[token] - d_offsets[token - 1]};
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
