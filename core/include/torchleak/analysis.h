#pragma once
// From boundary snapshots to findings: group allocation stacks by site, build each site's
// series of live bytes, fit its trend and give it a verdict. Pure C++ (no torch, no Python):
// the bindings supply what only Python knows through the two interfaces below.

#include "torchleak/model.h"
#include "torchleak/recorder.h"
#include "torchleak/retention.h"

#include <cstdint>
#include <optional>
#include <span>
#include <string>
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
    double p_value = 1.0;  // two-sided test of slope == 0 (Student t, n - 2 degrees of freedom)
};

// Least-squares line through (i, y[i]). Fewer than 3 points give p_value 1 unless the points
// are exactly on a non-flat line.
LineFit fitLine(std::span<const double> y);

// Two-sided p-value of Student's t with `dof` degrees of freedom.
double studentTwoSidedP(double t, double dof);

struct Thresholds {
    uint64_t min_bytes = 0;  // sites whose live bytes never reach this are left out
    uint64_t critical_bytes = 1ull << 30;    // projected over the run
    uint64_t warning_bytes = 100ull * 1000 * 1000;
};

struct SiteSeries {
    std::vector<int64_t> bytes;  // live bytes at each boundary
    std::vector<int64_t> born;   // of those, allocated during the iteration that boundary ends
    std::vector<uint32_t> oldest;  // birth iteration of the oldest live block (if bytes > 0)
};

struct Classification {
    Verdict verdict = Verdict::Transient;
    LineFit fit;
    double confidence = 0.0;
    int64_t bytes_per_iteration = 0;
};

// The verdict of one site from its series. `warmup` boundaries at the start are not judged.
Classification classify(const SiteSeries& s, int warmup);

struct DeviceInfo {
    DeviceKey key;
    std::string name;  // "cpu", "cuda:0"
    uint64_t capacity_bytes = 0;
};

struct ReportInputs {
    std::string torch_version;
    std::string python_version;
    int warmup = 0;
    BoundaryKind boundary = BoundaryKind::Explicit;
    Thresholds thresholds;
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

}  // namespace torchleak
