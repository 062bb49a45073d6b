#pragma once
// Verdicts: is a site's growth a leak, warm-up, a plateau or transient; does a device's
// reserve show fragmentation; and the two rules that overrule the curve once the retaining path
// is known (memory only notebook machinery keeps, and the user's allow-list).

#include "torchleak/config.h"
#include "torchleak/model.h"
#include "torchleak/trend.h"

#include <cstdint>
#include <optional>
#include <vector>

namespace torchleak {

struct SiteSeries {
    std::vector<int64_t> bytes;   // live bytes at each boundary
    std::vector<int64_t> born;    // of those, allocated during the iteration that boundary ends
    std::vector<uint32_t> oldest; // birth iteration of the oldest live block (if bytes > 0)
    // The iteration each point was taken at, increasing; empty when every boundary was kept
    // (point i is iteration i). A long run keeps a thinned grid of boundaries.
    std::vector<uint32_t> at;
    // The variance sampling adds to a point, per byte it reads: a sampled small block of s
    // bytes stands for sample_bytes S, which adds S - s per byte (allocation_sampler.h). 0
    // when the site's blocks were recorded whole.
    double noise_variance_per_byte = 0.0;
    // Of the blocks alive when the report is built, the bytes born in the iterations each point
    // ends: since the point before it, one iteration where every boundary was kept (empty when
    // not known). Blocks kept from every judged iteration are accumulation seen directly, not a
    // trend inferred through noise.
    std::vector<int64_t> surviving = {};
    // Of those, the birth iteration of the oldest (0 where none survive): on a thinned grid,
    // the iteration within a point's span at which what it kept began.
    std::vector<uint32_t> surviving_since = {};
};

// The false-alarm budget of a verdict taken `judged` iterations past the warm-up: the run's
// `rate` spent as rate / (t (t + 1)), whose sum over every t is `rate`. A site that does not
// grow, judged at every iteration of a run however long (run watch checks as it goes), is
// called a leak with probability at most `rate`, whichever iterations were looked at.
double falseAlarmBudget(double rate, double judged);

struct Classification {
    Verdict verdict = Verdict::Transient;
    LineFit fit; // slope: Theil-Sen; r2: least squares; p_value: Mann-Kendall
    double confidence = 0.0;
    int64_t bytes_per_iteration = 0;
    bool released_periodically = false; // a saw-tooth: grows, released at a coarser boundary
    // A leak's onset and its rate from there; growth that stopped (a plateau's).
    std::optional<GrowthSince> growth_since;
    // The name of the verdict rule that decided (verdict.cpp's kVerdictRules, tried in order),
    // or null for an empty series: for tests and for a reader of a surprising verdict.
    const char* rule = nullptr;
    // Decided by a rule that only reads what a site keeps while nothing of it changes (a judged
    // part that never changed, its last value, its oldest block's birth): the same verdict at
    // every later boundary until the site changes, thinned grid or not. Watch's looks keep it
    // (settled_sites.h) rather than judge the site again.
    bool settled = false;
};

// The verdict of one site from its series. The first `warmup` iterations are not judged.
Classification classify(const SiteSeries& s, int warmup, const AnalysisConfig& config = {});

struct DeviceVerdict {
    bool fragmentation = false;
    double ratio = 0.0; // (reserved - allocated) / reserved at the last boundary
};
// Fragmentation or an oversized reserve: reserved grows, or stays far above allocated, while
// allocated is flat.
DeviceVerdict judgeDevice(const std::vector<int64_t>& allocated,
                          const std::vector<int64_t>& reserved,
                          int warmup,
                          const AnalysisConfig& config = {},
                          const std::vector<uint32_t>& at = {});

// Memory that only notebook machinery (Out[n], the last exception) keeps: a leak even without
// growth, because the user can no longer free it by a name of their own. Memory only C++
// keeps is a leak only when it grows: a verdict never calls flat memory a leak for its path.
bool heldByMachinery(const Finding& f);

// Past this many iterations, the time a growth would take to fill its device is no run's
// length: it is negligible (the device's projection says so, and ownRecord relies on it).
inline constexpr int64_t kNegligibleIterations = 100'000'000;

// A leak in proportion: growth the user keeps on purpose, to be reported as `growth` with its
// projection rather than as a leak whose fix (`.clear()`) would delete the user's data. It is
// (1) reachable from a root of the user's own (not notebook machinery, not only C++) through
// plain objects, with no autograd step on the path: a record of values, not of graphs; and
// (2) negligible against the device, `capacity` bytes: at its rate the device would take over
// kNegligibleIterations iterations to fill. Whether the loop reads the record back is beyond
// what torchleak sees; the two conditions are what it can know.
bool ownRecord(const Finding& f, uint64_t capacity);

// An intentional cache the user named: a glob matching the site ("file:line"), its function,
// the path or the holder.
bool allowListed(const Finding& f, const std::vector<std::string>& allow);

} // namespace torchleak
