#include "caching_pool.h"

#include <cstdlib>
#include <iterator>

namespace torchleak::fakedev {

CachingPool::~CachingPool() {
    for (auto& [base, size] : d_segments) {
        std::free(base);
    }
}

std::vector<uintptr_t> CachingPool::allocatedBlocks() const {
    std::vector<uintptr_t> out;
    for (const auto& [ptr, block] : d_blocks) {
        if (block.allocated) {
            out.push_back(reinterpret_cast<uintptr_t>(ptr));
        }
    }
    return out;
}

size_t CachingPool::roundSize(size_t bytes) {
    return (bytes + kAlignment - 1) / kAlignment * kAlignment;
}

void CachingPool::insertFree(char* ptr, size_t size) {
    d_free.emplace(size, ptr);
}

char* CachingPool::takeFreeBlock(size_t size) {
    auto fit = d_free.lower_bound({size, nullptr});
    if (fit == d_free.end()) {
        return nullptr;
    }
    char* ptr = fit->second;
    d_free.erase(fit);
    Block& block = d_blocks.at(ptr);
    // Split off the rest, as the CUDA allocator does, so the segment serves later requests.
    if (block.size - size >= kAlignment) {
        char* rest = ptr + size;
        d_blocks[rest] = Block{block.size - size, block.segment, false};
        insertFree(rest, block.size - size);
        block.size = size;
    }
    block.allocated = true;
    return ptr;
}

bool CachingPool::reserveSegment(size_t size) {
    size_t segment = size <= kSmallRequest
                         ? kSmallSegment
                         : (size + kSegmentRounding - 1) / kSegmentRounding * kSegmentRounding;
    if (d_reserved + segment > d_capacity) {
        return false;
    }
    auto* base = static_cast<char*>(std::aligned_alloc(kAlignment, segment));
    if (base == nullptr) {
        return false;
    }
    d_segments[base] = segment;
    d_blocks[base] = Block{segment, base, false};
    insertFree(base, segment);
    d_reserved += segment;
    return true;
}

void* CachingPool::allocate(size_t bytes, size_t* blockSize) {
    size_t size = roundSize(bytes == 0 ? 1 : bytes);
    char* ptr = takeFreeBlock(size);
    if (ptr == nullptr && reserveSegment(size)) {
        ptr = takeFreeBlock(size);
    }
    if (ptr == nullptr) {
        // Full: give the cached segments back and try once more, like the CUDA allocator's
        // release_cached_blocks before it raises.
        releaseCached();
        if (reserveSegment(size)) {
            ptr = takeFreeBlock(size);
        }
    }
    if (ptr == nullptr) {
        return nullptr;
    }
    d_allocated += size;
    *blockSize = size;
    return ptr;
}

size_t CachingPool::free(void* raw) {
    auto it = d_blocks.find(static_cast<char*>(raw));
    if (it == d_blocks.end() || !it->second.allocated) {
        return 0;
    }
    size_t freed = it->second.size;
    d_allocated -= freed;
    it->second.allocated = false;
    // Coalesce with free neighbours of the same segment.
    auto next = std::next(it);
    if (next != d_blocks.end() && !next->second.allocated &&
        next->second.segment == it->second.segment) {
        d_free.erase({next->second.size, next->first});
        it->second.size += next->second.size;
        d_blocks.erase(next);
    }
    if (it != d_blocks.begin()) {
        auto prev = std::prev(it);
        if (!prev->second.allocated && prev->second.segment == it->second.segment) {
            d_free.erase({prev->second.size, prev->first});
            prev->second.size += it->second.size;
            d_blocks.erase(it);
            it = prev;
        }
    }
    insertFree(it->first, it->second.size);
    return freed;
}

void CachingPool::releaseCached() {
    for (auto seg = d_segments.begin(); seg != d_segments.end();) {
        auto block = d_blocks.find(seg->first);
        if (block != d_blocks.end() && !block->second.allocated &&
            block->second.size == seg->second) {
            d_free.erase({block->second.size, block->first});
            d_blocks.erase(block);
            d_reserved -= seg->second;
            std::free(seg->first);
            seg = d_segments.erase(seg);
        } else {
            ++seg;
        }
    }
}

} // namespace torchleak::fakedev
