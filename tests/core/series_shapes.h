#pragma once
// The growth shapes real runs have, generated as the recorder would see one site: live bytes at
// every boundary, what the iteration itself allocated, the oldest live block, and of the blocks
// alive at the end, the bytes born in each iteration. Leaks: a late onset, a staircase, a rising
// floor under a saw-tooth, a slow leak under transients ten times its size, a leak of sampled
// small blocks. Clean: warm-up, a cache that fills for most of the run and stops, evaluation
// spikes, variable batch shapes, an LRU cache that churns. Seeded: nothing here is random from
// run to run, and a generator called with a smaller n gives the first n points of the same run
// (what a verdict taken at that boundary sees, its survivors included).
#include "torchleak/verdict.h"

#include <algorithm>
#include <cstdint>
#include <deque>
#include <random>
#include <string>
#include <vector>

namespace torchleak::shapes {

inline constexpr int64_t kKiB = 1024;
inline constexpr int64_t kMiB = 1024 * kKiB;
inline constexpr int64_t kSampleBytes = 256 * kKiB;

struct Shape {
    std::string name;
    bool leak = false;
    int onset = -1;   // the first iteration that keeps bytes for good (leaks), -1 for clean
    int64_t rate = 0; // bytes per iteration of the leak (its average for a staircase)
    SiteSeries series;
};

// Flat at a working set, then `rate` kept every iteration from `onset` on.
inline Shape lateOnset(int n, int onset, int64_t rate, int64_t workingSet = 4 * kMiB) {
    Shape shape{"late onset", true, onset, rate, {}};
    std::vector<int64_t> surviving(static_cast<size_t>(n), 0);
    int64_t kept = 0;
    for (int i = 0; i < n; ++i) {
        const int64_t born = i >= onset ? rate : 0;
        kept += born;
        surviving[static_cast<size_t>(i)] = born;
        shape.series.bytes.push_back(kept + workingSet);
        shape.series.born.push_back(born + workingSet);
        shape.series.oldest.push_back(kept > 0 ? static_cast<uint32_t>(onset)
                                               : static_cast<uint32_t>(i));
    }
    shape.series.surviving = surviving;
    return shape;
}

// `step` bytes kept every `every` iterations from `onset` on (an evaluation epoch's leak).
inline Shape staircase(int n, int onset, int every, int64_t step) {
    Shape shape{"staircase", true, onset, step / every, {}};
    std::vector<int64_t> surviving(static_cast<size_t>(n), 0);
    int64_t kept = 0;
    for (int i = 0; i < n; ++i) {
        const int64_t born = i >= onset && (i - onset) % every == 0 ? step : 0;
        kept += born;
        surviving[static_cast<size_t>(i)] = born;
        shape.series.bytes.push_back(kept + 2 * kMiB);
        shape.series.born.push_back(born + 2 * kMiB);
        shape.series.oldest.push_back(kept > 0 ? static_cast<uint32_t>(onset)
                                               : static_cast<uint32_t>(i));
    }
    shape.series.surviving = surviving;
    return shape;
}

// A buffer that gains `block` per iteration and is cleared every `period`, leaving one block
// behind each time: a saw-tooth whose floor rises by `block` per period.
inline Shape risingFloor(int n, int period, int64_t block) {
    Shape shape{"rising floor", true, 0, block / period, {}};
    std::vector<int64_t> surviving(static_cast<size_t>(n), 0);
    int64_t floor = 0, buffer = 0;
    for (int i = 0; i < n; ++i) {
        buffer += block;
        int64_t born = block;
        if ((i + 1) % period == 0) {
            floor += block; // one block stays behind
            buffer = 0;
            surviving[static_cast<size_t>(i)] = block;
        }
        shape.series.bytes.push_back(floor + buffer);
        shape.series.born.push_back(born);
        shape.series.oldest.push_back(0);
    }
    // The blocks alive at the end: the floor's, and the current buffer's (born in the last
    // iterations of the unfinished period).
    for (int i = n - 1; i >= 0 && (i + 1) % period != 0; --i) {
        surviving[static_cast<size_t>(i)] = block;
    }
    shape.series.surviving = surviving;
    return shape;
}

// `rate` kept per iteration under a working set that varies by `noise` (uniform in [0,
// noise]), ten times the rate: a slow leak hidden in transients.
inline Shape slowLeakUnderNoise(int n, int64_t rate, int64_t noise, uint64_t seed) {
    Shape shape{"slow leak under noise", true, 0, rate, {}};
    std::mt19937_64 rng(seed);
    std::uniform_int_distribution<int64_t> transient(0, noise);
    std::vector<int64_t> surviving(static_cast<size_t>(n), rate);
    for (int i = 0; i < n; ++i) {
        const int64_t t = transient(rng);
        shape.series.bytes.push_back(rate * (i + 1) + t);
        shape.series.born.push_back(rate + t);
        shape.series.oldest.push_back(0);
        surviving[static_cast<size_t>(i)] = rate + (i + 1 == n ? t : 0);
    }
    shape.series.surviving = surviving;
    return shape;
}

// One small block kept per iteration from `onset` on, under sampling: recorded with
// probability size / sample_bytes, then standing for sample_bytes.
inline Shape sampledLeak(int n, int onset, int64_t size, uint64_t seed) {
    Shape shape{"sampled leak", true, onset, size, {}};
    std::mt19937_64 rng(seed);
    std::uniform_int_distribution<int64_t> draw(0, kSampleBytes - 1);
    std::vector<int64_t> surviving(static_cast<size_t>(n), 0);
    int64_t kept = 0;
    for (int i = 0; i < n; ++i) {
        int64_t born = 0;
        if (i >= onset && draw(rng) < size) {
            born = kSampleBytes;
        }
        kept += born;
        surviving[static_cast<size_t>(i)] = born;
        shape.series.bytes.push_back(kept);
        shape.series.born.push_back(born);
        shape.series.oldest.push_back(kept > 0 ? static_cast<uint32_t>(onset)
                                               : static_cast<uint32_t>(i));
    }
    shape.series.surviving = surviving;
    shape.series.noise_variance_per_byte = static_cast<double>(kSampleBytes - size);
    return shape;
}

// Grows for `grow` iterations (buffers, optimizer state), then stays.
inline Shape warmup(int n, int grow, int64_t each) {
    Shape shape{"warm-up", false, -1, 0, {}};
    std::vector<int64_t> surviving(static_cast<size_t>(n), 0);
    int64_t kept = 0;
    for (int i = 0; i < n; ++i) {
        const int64_t born = i < grow ? each : 0;
        kept += born;
        surviving[static_cast<size_t>(i)] = born;
        shape.series.bytes.push_back(kept);
        shape.series.born.push_back(born);
        shape.series.oldest.push_back(0);
    }
    shape.series.surviving = surviving;
    return shape;
}

// A cache of `capacity` entries of `entry` bytes, one added per iteration, the oldest evicted
// once full: it grows for `capacity` iterations, then is flat.
inline Shape boundedCache(int n, int capacity, int64_t entry) {
    Shape shape{"bounded cache", false, -1, 0, {}};
    std::vector<int64_t> surviving(static_cast<size_t>(n), 0);
    for (int i = 0; i < n; ++i) {
        const int64_t entries = std::min(i + 1, capacity);
        shape.series.bytes.push_back(entries * entry);
        shape.series.born.push_back(entry);
        shape.series.oldest.push_back(static_cast<uint32_t>(std::max(0, i + 1 - capacity)));
    }
    for (int i = std::max(0, n - capacity); i < n; ++i) {
        surviving[static_cast<size_t>(i)] = entry;
    }
    shape.series.surviving = surviving;
    return shape;
}

// A cache that takes one entry of `entry` bytes per iteration until it holds `capacity`, then
// only hits: it keeps every block it took, as a leak that pauses does.
inline Shape filledThenKept(int n, int capacity, int64_t entry) {
    Shape shape{"filled, then kept", false, -1, 0, {}};
    for (int i = 0; i < n; ++i) {
        shape.series.bytes.push_back(std::min(i + 1, capacity) * entry);
        shape.series.born.push_back(i < capacity ? entry : 0);
        shape.series.oldest.push_back(0);
        shape.series.surviving.push_back(i < capacity ? entry : 0);
    }
    return shape;
}

// A working set of `bytesAt(i)` at iteration i, all born in the iteration and replaced in the
// next; only the last is alive at the end.
template <typename BytesAt> Shape workingSet(const char* name, int n, BytesAt bytesAt) {
    Shape shape{name, false, -1, 0, {}};
    for (int i = 0; i < n; ++i) {
        const int64_t bytes = bytesAt(i);
        shape.series.bytes.push_back(bytes);
        shape.series.born.push_back(bytes);
        shape.series.oldest.push_back(static_cast<uint32_t>(i));
    }
    shape.series.surviving.assign(static_cast<size_t>(n), 0);
    if (n > 0) {
        shape.series.surviving.back() = shape.series.bytes.back();
    }
    return shape;
}

// A working set with a spike of `spike` every `every` iterations (an evaluation pass whose
// outputs survive its boundary, then are freed).
inline Shape evaluationSpikes(int n, int every, int64_t spike, uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<double> jitter(0.0, 64.0 * kKiB);
    return workingSet("evaluation spikes", n, [&](int i) {
        return 8 * kMiB + static_cast<int64_t>(jitter(rng)) + ((i + 1) % every == 0 ? spike : 0);
    });
}

// Variable-length batches: the working set follows the data (i.i.d. around a level).
inline Shape variableBatches(int n, uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::uniform_int_distribution<int64_t> tokens(64, 2048);
    return workingSet("variable batch shapes", n, [&](int) { return tokens(rng) * 4 * kKiB; });
}

// An LRU cache of 100 entries of random sizes, full after 100 iterations: one entry in, the
// least recent out, every iteration; what is alive wanders around a level.
inline Shape lruChurn(int n, uint64_t seed) {
    Shape shape{"LRU churn", false, -1, 0, {}};
    std::mt19937_64 rng(seed);
    std::uniform_int_distribution<int64_t> size(16 * kKiB, 1 * kMiB);
    std::deque<std::pair<int, int64_t>> entries;
    int64_t live = 0;
    for (int i = 0; i < n; ++i) {
        const int64_t s = size(rng);
        entries.emplace_back(i, s);
        live += s;
        if (entries.size() > 100) {
            live -= entries.front().second;
            entries.pop_front();
        }
        shape.series.bytes.push_back(live);
        shape.series.born.push_back(s);
        shape.series.oldest.push_back(static_cast<uint32_t>(entries.front().first));
    }
    std::vector<int64_t> surviving(static_cast<size_t>(n), 0);
    for (const auto& [born, s] : entries) {
        surviving[static_cast<size_t>(born)] = s;
    }
    shape.series.surviving = surviving;
    return shape;
}

} // namespace torchleak::shapes
