// The fake accelerator's allocator must behave like PyTorch's CUDA caching allocator where
// torchleak's verdicts depend on it: a reserve that outlives frees, splitting and coalescing,
// a capacity, and totals that agree with what is live.

#include "caching_pool.h"

#include <catch2/catch.hpp>
#include <random>
#include <unordered_map>
#include <vector>

using torchleak::fakedev::CachingPool;

namespace {
constexpr size_t MiB = 1 << 20;
}

TEST_CASE("a freed block stays reserved and is reused") {
    CachingPool pool(64 * MiB);
    size_t size = 0;
    void* a = pool.allocate(1000, &size);
    REQUIRE(a != nullptr);
    CHECK(size == 1024);
    CHECK(pool.totals().allocated == 1024);
    CHECK(pool.totals().reserved == CachingPool::kSmallSegment);
    CHECK(pool.free(a) == 1024);
    CHECK(pool.totals().allocated == 0);
    CHECK(pool.totals().reserved == CachingPool::kSmallSegment);
    void* b = pool.allocate(1000, &size);
    CHECK(b == a);
    CHECK(pool.segmentCount() == 1);
}

TEST_CASE("small requests share a segment and coalesce when freed") {
    CachingPool pool(64 * MiB);
    size_t size = 0;
    std::vector<void*> blocks;
    for (int i = 0; i < 8; ++i) {
        blocks.push_back(pool.allocate(64 * 1024, &size));
    }
    CHECK(pool.segmentCount() == 1);
    for (void* p : blocks) {
        pool.free(p);
    }
    // One free block spanning the whole segment again: a request of the segment's size fits.
    CHECK(pool.blockCount() == 1);
    CHECK(pool.allocate(CachingPool::kSmallSegment, &size) != nullptr);
    CHECK(pool.segmentCount() == 1);
}

TEST_CASE("growing request sizes grow the reserve while allocated stays flat") {
    CachingPool pool(1024 * MiB);
    size_t size = 0;
    uint64_t lastReserved = 0;
    for (size_t k = 1; k <= 6; ++k) {
        void* p = pool.allocate(k * 3 * MiB, &size);
        REQUIRE(p != nullptr);
        pool.free(p);
        CHECK(pool.totals().allocated == 0);
        CHECK(pool.totals().reserved > lastReserved);
        lastReserved = pool.totals().reserved;
    }
    pool.releaseCached();
    CHECK(pool.totals().reserved == 0);
    CHECK(pool.segmentCount() == 0);
}

TEST_CASE("a full device releases its cache before it fails") {
    CachingPool pool(8 * MiB);
    size_t size = 0;
    void* a = pool.allocate(6 * MiB, &size);
    REQUIRE(a != nullptr);
    pool.free(a);
    CHECK(pool.totals().reserved == 6 * MiB);
    // 7 MiB needs an 8 MiB segment, which fits only once the cached 6 MiB segment is gone.
    void* b = pool.allocate(7 * MiB, &size);
    REQUIRE(b != nullptr);
    CHECK(pool.totals().reserved == 8 * MiB);
    CHECK(pool.segmentCount() == 1);
    // The 1 MiB left in that segment serves a small request; a second one finds no room.
    CHECK(pool.allocate(1 * MiB, &size) != nullptr);
    CHECK(pool.allocate(1, &size) == nullptr);
    CHECK(pool.totals().allocated == 8 * MiB);
    CHECK(pool.totals().reserved == 8 * MiB);
}

TEST_CASE("a pointer the pool did not hand out is not freed") {
    CachingPool pool(8 * MiB);
    size_t size = 0;
    void* a = pool.allocate(4096, &size);
    int local = 0;
    CHECK(pool.free(&local) == 0);
    CHECK(pool.free(static_cast<char*>(a) + 512) == 0);
    CHECK(pool.free(a) == 4096);
    CHECK(pool.free(a) == 0); // twice
    CHECK(pool.totals().allocated == 0);
}

TEST_CASE("random traffic keeps the totals equal to what is live") {
    CachingPool pool(256 * MiB);
    std::mt19937 rng(7);
    std::unordered_map<void*, size_t> live;
    uint64_t liveBytes = 0;
    for (int i = 0; i < 20000; ++i) {
        if (live.empty() || rng() % 3 != 0) {
            size_t bytes = 1 + rng() % (rng() % 8 == 0 ? 8 * MiB : 64 * 1024);
            size_t size = 0;
            void* p = pool.allocate(bytes, &size);
            if (p == nullptr) {
                continue;
            }
            REQUIRE(live.count(p) == 0);
            live[p] = size;
            liveBytes += size;
        } else {
            auto it = live.begin();
            std::advance(it, static_cast<long>(rng() % live.size()));
            CHECK(pool.free(it->first) == it->second);
            liveBytes -= it->second;
            live.erase(it);
        }
        REQUIRE(pool.totals().allocated == liveBytes);
        REQUIRE(pool.totals().reserved >= pool.totals().allocated);
        REQUIRE(pool.totals().reserved <= pool.totals().capacity);
    }
}
