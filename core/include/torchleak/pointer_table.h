#pragma once
// PointerTable: a hash table keyed by a non-null pointer, for the two tables that see every
// pointer of a run: the live blocks (pointer -> BlockRecord, on the allocator's hot path) and
// the retaining-path walk's visited set (a set of tagged pointers).
//
// Open addressing with linear probing: a lookup touches one or two cache lines and nothing is
// allocated unless the table grows. Fibonacci hashing takes the top bits of the product, where
// clustered, aligned allocator addresses are spread best. Erase is backward-shift deletion, so
// millions of insert/erase pairs leave no tombstones behind. Not synchronised: the owner
// serialises access.

#include <bit>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

namespace torchleak {

template <typename Value> class PointerTable {
  public:
    // Grows (doubling) when an insert would take more than maxLoadQuarters/4 of the slots:
    // 2 keeps probe runs short for a table that is also erased from; 3 keeps a large insert-only
    // set small in cache.
    explicit PointerTable(size_t initialCapacity = 1024, unsigned maxLoadQuarters = 2)
        : d_maxLoadQuarters(maxLoadQuarters) {
        size_t cap = std::bit_ceil(initialCapacity < 16 ? size_t{16} : initialCapacity);
        d_bits = static_cast<unsigned>(std::countr_zero(cap));
        d_slots.resize(cap);
    }

    // Returns false when the key is already present (its value is replaced: the allocator
    // reused an address whose free we never saw).
    bool insert(uintptr_t key, const Value& value = Value{}) {
        auto [slot, fresh] = emplace(key);
        *slot = value;
        return fresh;
    }

    // The value of `key`, and whether the key is new: a new key's slot holds Value{} for the
    // caller to fill (one probe where find and insert would take two). May throw while growing,
    // before anything changed. `key` must not be 0.
    std::pair<Value*, bool> emplace(uintptr_t key) {
        if ((d_size + 1) * 4 > d_slots.size() * d_maxLoadQuarters) {
            grow();
        }
        size_t mask = d_slots.size() - 1;
        size_t i = home(key);
        while (d_slots[i].key != 0) {
            if (d_slots[i].key == key) {
                return {&d_slots[i].value, false};
            }
            i = (i + 1) & mask;
        }
        d_slots[i].key = key;
        d_slots[i].value = Value{};
        ++d_size;
        return {&d_slots[i].value, true};
    }

    const Value* find(uintptr_t key) const noexcept {
        if (key == 0) {
            return nullptr;
        }
        size_t mask = d_slots.size() - 1;
        for (size_t i = home(key); d_slots[i].key != 0; i = (i + 1) & mask) {
            if (d_slots[i].key == key) {
                return &d_slots[i].value;
            }
        }
        return nullptr;
    }

    Value* find(uintptr_t key) noexcept {
        return const_cast<Value*>(static_cast<const PointerTable&>(*this).find(key));
    }

    bool contains(uintptr_t key) const noexcept { return find(key) != nullptr; }

    std::optional<Value> erase(uintptr_t key) noexcept {
        if (key == 0) {
            // 0 marks an empty slot: "erasing" it would take a stale value out of a free slot
            // and count the table one smaller (c10 reports frees of null for empty tensors).
            return std::nullopt;
        }
        size_t mask = d_slots.size() - 1;
        size_t i = home(key);
        while (d_slots[i].key != key) {
            if (d_slots[i].key == 0) {
                return std::nullopt; // e.g. a block allocated before tracking started
            }
            i = (i + 1) & mask;
        }
        Value removed = d_slots[i].value;
        // Pull later members of the probe run into the hole, so no tombstones accumulate.
        size_t hole = i;
        for (size_t j = (i + 1) & mask; d_slots[j].key != 0; j = (j + 1) & mask) {
            bool movable = ((j - home(d_slots[j].key)) & mask) >= ((j - hole) & mask);
            if (movable) {
                d_slots[hole] = d_slots[j];
                hole = j;
            }
        }
        d_slots[hole].key = 0;
        --d_size;
        return removed;
    }

    size_t size() const noexcept { return d_size; }
    size_t capacity() const noexcept { return d_slots.size(); }

    void clear() noexcept {
        for (Slot& slot : d_slots) {
            slot.key = 0;
        }
        d_size = 0;
    }

    template <typename Fn> void forEach(Fn&& fn) const {
        for (const Slot& slot : d_slots) {
            if (slot.key != 0) {
                fn(slot.key, slot.value);
            }
        }
    }

  private:
    struct Slot {
        uintptr_t key = 0; // 0 marks an empty slot: no pointer we store is null
        [[no_unique_address]] Value value{};
    };

    size_t home(uintptr_t key) const noexcept {
        return static_cast<size_t>((static_cast<uint64_t>(key) * 0x9E3779B97F4A7C15ull) >>
                                   (64 - d_bits));
    }

    void grow() {
        std::vector<Slot> old;
        old.swap(d_slots);
        ++d_bits;
        d_slots.resize(size_t{1} << d_bits);
        d_size = 0;
        for (const Slot& slot : old) {
            if (slot.key != 0) {
                insert(slot.key, slot.value);
            }
        }
    }

    std::vector<Slot> d_slots;
    unsigned d_bits = 4;
    size_t d_size = 0;
    unsigned d_maxLoadQuarters;
};

// A set of pointers: the table with no value.
struct NoValue {};
using PointerSet = PointerTable<NoValue>;

} // namespace torchleak
