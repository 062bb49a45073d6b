#pragma once
// Conversions between Python arguments and the core's types for the bindings in python.cpp,
// which then only bind. Each throws InvalidArgument (ValueError in Python) for a bad value.

#include "inspect/frame_capture.h"
#include "inspect/heap_walker.h"
#include "torchleak/config.h"
#include "torchleak/recorder.h"
#include "torchleak/report_builder.h"
#include "torchleak/report_inputs.h"

#include <cstdint>
#include <map>
#include <optional>
#include <pybind11/pybind11.h>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace torchleak::python {

// (label, kind, note, object) tuples; `kind` is "root", "frame" or "namespace". A namespace
// (a module's dict) is one root per global, labelled `label + name`, dunder names and modules
// left out: expanded here, where it costs a tenth of building ~10,000 tuples in Python on every
// report. Tuple objects are borrowed (the caller's list keeps them alive while the walk runs);
// a namespace's values are held in `owned`, since the dict may change under a finalizer.
std::vector<NamedRoot> namedRoots(const pybind11::list& roots,
                                  std::vector<pybind11::object>& owned);

// (parameter, "model[7] (Linear)") pairs; entries that are not tensors are skipped.
ParameterOwners parameterOwners(const pybind11::list& owners);

pybind11::dict walkStatsDict(const WalkStats& stats);

// {block: (retention, path text, [(kind, label, type, note), ...])}
pybind11::dict retainingPathsDict(const std::unordered_map<uintptr_t, BlockPath>& paths);

// Per kept boundary and device: {"iteration", "device", "allocated", "peak", "live", "at_peak"},
// the last two {phase name: (born this iteration, born earlier), "registered": {held as: bytes}}
// (birth_phase.h).
pybind11::list birthPhasesList(const std::vector<BoundarySnapshot>& boundaries);

// What Python supplies for a report (torchleak._core.ReportInputs), in Python's own types: one
// object the Tracker fills field by field, as it fills an AnalysisConfig, turned into the core's
// ReportInputs (report_inputs.h) in one place, reportInputs below. The walk's own arguments (the
// roots, the frame filter, the parameter owners) stay report_json's: they are objects the walk
// reads, not facts about the run.
struct ReportRequest {
    std::string torch_version;
    std::string python_version;
    int warmup = 0;
    std::string boundary = "explicit";
    AnalysisConfig config;
    // Devices by name ("cuda:0") with their capacity in bytes.
    std::map<std::string, uint64_t> capacities;
    std::vector<std::string> warnings;
    // {block pointer: [(file, line, function), ...]} as PyTorch's history recording gives them,
    // innermost first.
    pybind11::dict external_stacks;
    // Cell watch: (cell file, execution count) per boundary.
    std::vector<std::pair<std::string, int>> boundary_runs;
    bool explain_grown_only = false;
    bool verdicts_only = false;
    bool leave_out_settled = false;
    std::string privateuse1_backend = std::string(kPrivateUse1DefaultName);
    // (error type, message, device) of the out-of-memory error that ended the run.
    std::optional<std::tuple<std::string, std::string, std::string>> out_of_memory;
    // Device types ("cuda") whose allocator's own view of its live blocks was read, and those
    // blocks.
    std::vector<std::string> allocator_view_devices;
    std::vector<uintptr_t> allocator_live_blocks;
    std::vector<std::string> autocast_devices;
    uint64_t dynamo_compiled_frames = 0;
    uint64_t torchscript_functions = 0;
    // (iteration, resident bytes) pairs.
    std::vector<std::pair<int64_t, int64_t>> resident_memory;
    std::optional<size_t> live_findings;
    // torch.utils.hooks.RemovableHandle.next_id when tracking started.
    std::optional<uint64_t> first_hook_id;
};

// The core's inputs from a request. Frames (the external stacks) and cells (the boundary runs)
// are classified by the filter the report's own frames are classified by. Throws InvalidArgument
// for a negative warmup, an unknown boundary kind or device name.
ReportInputs reportInputs(const ReportRequest& request, const FrameFilter& filter);

} // namespace torchleak::python
