#include "torchleak/live_block_table.h"

#include <catch2/catch.hpp>
#include <random>
#include <unordered_map>

using namespace torchleak;

TEST_CASE("LiveBlockTable inserts, finds and erases") {
    LiveBlockTable table(4);
    BlockRecord rec;
    rec.size = 64;
    REQUIRE(table.insert(0x1000, rec));
    REQUIRE(table.size() == 1);
    REQUIRE(table.find(0x1000)->size == 64);
    REQUIRE(table.find(0x2000) == nullptr);
    rec.size = 128;
    REQUIRE_FALSE(table.insert(0x1000, rec)); // reused address replaces the record
    REQUIRE(table.size() == 1);
    REQUIRE(table.find(0x1000)->size == 128);
    auto removed = table.erase(0x1000);
    REQUIRE(removed);
    REQUIRE(removed->size == 128);
    REQUIRE_FALSE(table.erase(0x1000)); // a free we never saw allocated
    REQUIRE(table.size() == 0);
}

TEST_CASE("LiveBlockTable: a free of null (an empty tensor's) changes nothing") {
    // 0 marks a free slot; erasing it once took a stale record out of that slot and counted
    // the table one smaller, down to size_t's maximum.
    LiveBlockTable table(4);
    BlockRecord rec;
    rec.size = 64;
    REQUIRE(table.insert(0x1000, rec));
    REQUIRE(table.erase(0x1000));
    REQUIRE_FALSE(table.erase(0));
    REQUIRE(table.find(0) == nullptr);
    REQUIRE(table.size() == 0);
    REQUIRE(table.insert(0x2000, rec));
    REQUIRE_FALSE(table.erase(0));
    REQUIRE(table.size() == 1);
}

TEST_CASE("LiveBlockTable agrees with a reference map over a million random operations") {
    LiveBlockTable table;
    std::unordered_map<uintptr_t, uint64_t> reference;
    std::mt19937_64 rng(42);
    std::vector<uintptr_t> live;
    for (int i = 0; i < 1'000'000; ++i) {
        bool alloc = live.empty() || (rng() % 100) < 55;
        if (alloc) {
            // Aligned, clustered addresses like a real allocator's.
            uintptr_t ptr = 0x7f0000000000ull + (rng() % (1u << 22)) * 64;
            BlockRecord rec;
            rec.size = rng() % 4096 + 1;
            // Half the births through emplace (the recorder's one-probe path), half through
            // insert: the same answers either way.
            bool fresh = false;
            if (rng() % 2 == 0) {
                fresh = table.insert(ptr, rec);
            } else {
                auto [slot, isNew] = table.emplace(ptr);
                REQUIRE((isNew || slot->size == reference.at(ptr)));
                REQUIRE((!isNew || slot->size == 0));
                *slot = rec;
                fresh = isNew;
            }
            REQUIRE(fresh == (reference.count(ptr) == 0));
            if (fresh) {
                live.push_back(ptr);
            }
            reference[ptr] = rec.size;
        } else {
            size_t k = rng() % live.size();
            uintptr_t ptr = live[k];
            live[k] = live.back();
            live.pop_back();
            auto removed = table.erase(ptr);
            REQUIRE(removed);
            REQUIRE(removed->size == reference[ptr]);
            reference.erase(ptr);
        }
    }
    REQUIRE(table.size() == reference.size());
    size_t visited = 0;
    table.forEach([&](uintptr_t ptr, const BlockRecord& rec) {
        ++visited;
        REQUIRE(reference.at(ptr) == rec.size);
    });
    REQUIRE(visited == reference.size());
    for (uintptr_t ptr : live) {
        REQUIRE(table.erase(ptr));
    }
    REQUIRE(table.size() == 0);
}

TEST_CASE("PointerSet: the same table as a set, at a higher load, over clustered pointers") {
    PointerSet set(16, 3);
    std::unordered_map<uintptr_t, bool> reference;
    std::mt19937_64 rng(7);
    for (int i = 0; i < 200'000; ++i) {
        uintptr_t p = (0x7f0000000000ull + (rng() % (1u << 18)) * 16) | (rng() % 3);
        bool fresh = set.insert(p);
        REQUIRE(fresh == reference.emplace(p, true).second);
    }
    REQUIRE(set.size() == reference.size());
    REQUIRE(set.capacity() * 3 >= set.size() * 4); // load never above 3/4
    for (const auto& [p, _] : reference) {
        REQUIRE(set.contains(p));
    }
    REQUIRE_FALSE(set.contains(0x1234));
    static_assert(sizeof(PointerSet) > 0);
}
