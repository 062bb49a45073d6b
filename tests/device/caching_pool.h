#pragma once
// CachingPool: the memory of one fake accelerator device, managed the way PyTorch's CUDA
// caching allocator manages a GPU's. Test-only: the fake accelerator (fake_accelerator.cpp)
// puts a torch backend around it so that torchleak's device paths run on real tensors in CI,
// where no GPU is. No torch in here, so Catch2 tests it alone.
//
// What it imitates, because torchleak's verdicts depend on it:
// - a reserve: memory is taken from the "device" in segments (2 MiB for small requests,
//   rounded up to 2 MiB for large ones) and stays reserved when the blocks cut from it are
//   freed, until releaseCached() (torch.cuda.empty_cache()) or an allocation that would not
//   fit otherwise;
// - block splitting and coalescing inside a segment, best fit among cached blocks, so a run
//   whose request sizes keep growing reserves new segments while its allocated bytes stay
//   flat (fragmentation);
// - a capacity: when neither a cached block nor a new segment fits, cached segments are
//   released and the request retried, then it fails (the caller raises the OOM error);
// - totals: allocated = bytes of live blocks (rounded sizes), reserved = bytes of segments.
//
// Not thread-safe: the fake accelerator holds a mutex per device around every call.

#include <cstddef>
#include <cstdint>
#include <map>
#include <set>
#include <utility>
#include <vector>

namespace torchleak::fakedev {

struct PoolTotals {
    uint64_t allocated = 0;
    uint64_t reserved = 0;
    uint64_t capacity = 0;
};

class CachingPool {
  public:
    static constexpr size_t kAlignment = 512;           // every block size is a multiple
    static constexpr size_t kSmallRequest = 1 << 20;    // requests up to 1 MiB ...
    static constexpr size_t kSmallSegment = 2 << 20;    // ... share 2 MiB segments
    static constexpr size_t kSegmentRounding = 2 << 20; // larger segments: multiples of it

    explicit CachingPool(uint64_t capacity) : d_capacity(capacity) {}
    ~CachingPool();
    CachingPool(const CachingPool&) = delete;
    CachingPool& operator=(const CachingPool&) = delete;

    // A block of at least `bytes` (rounded up to kAlignment; 0 is a caller's error), or
    // nullptr when the device is full even after releasing every cached segment.
    // `*blockSize` receives the rounded size, which is what the totals count.
    void* allocate(size_t bytes, size_t* blockSize);
    // Returns the freed block's size, or 0 for a pointer this pool did not hand out (the
    // block stays in the reserve, as a cached block).
    size_t free(void* ptr);
    // Gives every entirely free segment back to the "device" (empty_cache).
    void releaseCached();
    // A capacity below what is reserved now only limits the next segments.
    void setCapacity(uint64_t capacity) { d_capacity = capacity; }

    PoolTotals totals() const { return {d_allocated, d_reserved, d_capacity}; }
    size_t segmentCount() const { return d_segments.size(); }
    size_t blockCount() const { return d_blocks.size(); }
    // The addresses of the blocks handed out and not freed: the pool's own view, as CUDA's
    // memory snapshot lists its active blocks.
    std::vector<uintptr_t> allocatedBlocks() const;
    static size_t roundSize(size_t bytes);

  private:
    struct Block {
        size_t size = 0;
        char* segment = nullptr; // the segment it was cut from
        bool allocated = false;
    };

    char* takeFreeBlock(size_t size);
    bool reserveSegment(size_t size);
    void insertFree(char* ptr, size_t size);

    uint64_t d_capacity;
    uint64_t d_allocated = 0;
    uint64_t d_reserved = 0;
    std::map<char*, Block> d_blocks;           // every block, free or not, by address
    std::set<std::pair<size_t, char*>> d_free; // free blocks by (size, address): best fit
    std::map<char*, size_t> d_segments;        // segment base -> size
};

} // namespace torchleak::fakedev
