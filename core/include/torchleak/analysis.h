#pragma once
// From boundary snapshots to findings: group allocation stacks by site, build each site's
// series of live bytes, fit its trend and give it a verdict. Pure C++ (no torch, no Python):
// the bindings supply what only Python knows through the two interfaces below.

#include "torchleak/config.h"
#include "torchleak/model.h"
#include "torchleak/recorder.h"
#include "torchleak/retention.h"

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

namespace torchleak {

// Turns captured frames into file:line frames, innermost first, with `user` set.
class StackSymbolizer {
  public:
    virtual ~StackSymbolizer() = default;
    virtual std::vector<Frame> symbolize(std::span<const RawFrame> frames) = 0;
};

struct BlockDescription {
    std::string dtype;
    std::vector<int64_t> shape;
};

// Describes the tensor that lives in a block, when one can be found.
class BlockDescriber {
  public:
    virtual ~BlockDescriber() = default;
    virtual std::optional<BlockDescription> describe(uintptr_t block) = 0;
};

struct LineFit {
    double slope = 0.0;
    double intercept = 0.0;
    double r2 = 0.0;
    double p_value = 1.0; // two-sided test of slope == 0 (Student t, n - 2 degrees of freedom)
};

// Least-squares line through (i, y[i]). Fewer than 3 points give p_value 1 unless the points
// are exactly on a non-flat line.
LineFit fitLine(std::span<const double> y);

// Two-sided p-value of Student's t with `dof` degrees of freedom.
double studentTwoSidedP(double t, double dof);

// Robust trend statistics for growth curves.
// Theil-Sen: the median of the pairwise slopes (an iteration that frees some or allocates an
// irregular size does not drag it); Mann-Kendall: the one-sided p-value that the series
// increases (rank based, ties corrected).
double theilSenSlope(std::span<const double> y);
double mannKendallIncreasingP(std::span<const double> y);

struct SiteSeries {
    std::vector<int64_t> bytes;   // live bytes at each boundary
    std::vector<int64_t> born;    // of those, allocated during the iteration that boundary ends
    std::vector<uint32_t> oldest; // birth iteration of the oldest live block (if bytes > 0)
};

struct Classification {
    Verdict verdict = Verdict::Transient;
    LineFit fit; // slope: Theil-Sen; r2: least squares; p_value: Mann-Kendall
    double confidence = 0.0;
    int64_t bytes_per_iteration = 0;
    bool released_periodically = false; // a saw-tooth: grows, released at a coarser boundary
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
                          const AnalysisConfig& config = {});

struct DeviceInfo {
    DeviceKey key;
    std::string name; // "cpu", "cuda:0"
    uint64_t capacity_bytes = 0;
};

struct ReportInputs {
    // Stacks of device blocks that the hook recorded without one (CUDA: the allocator's
    // mutex is held, so PyTorch's own history recording supplies them), innermost first, by
    // block pointer. Surviving blocks are attributed to their sites.
    std::unordered_map<uintptr_t, std::vector<Frame>> external_stacks;
    std::string torch_version;
    std::string python_version;
    int warmup = 0;
    BoundaryKind boundary = BoundaryKind::Explicit;
    AnalysisConfig config;
    std::vector<DeviceInfo> devices;
    std::vector<std::string> warnings;
};

// Builds the report of a recording: one finding per site group, biggest leaks first. With an
// explainer, every finding also gets its retaining path, holder and a specific suggestion.
Report buildReport(const AllocationRecorder& recorder,
                   const ReportInputs& inputs,
                   StackSymbolizer& symbolizer,
                   BlockDescriber& describer,
                   RetentionExplainer* explainer = nullptr);

std::string deviceName(DeviceKey key);
// The memory limit of this process: the cgroup limit when there is one, else physical memory.
uint64_t hostMemoryCapacity();

} // namespace torchleak
