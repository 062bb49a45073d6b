#pragma once
// Conversions between Python arguments and the core's types for the bindings in python.cpp,
// which then only bind. Each throws InvalidArgument (ValueError in Python) for a bad value.

#include "inspect/frame_capture.h"
#include "inspect/heap_walker.h"
#include "torchleak/recorder.h"
#include "torchleak/report_builder.h"

#include <cstdint>
#include <map>
#include <pybind11/pybind11.h>
#include <string>
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

// "parameter", "gradient" or "optimizer_state", with the accepted names in the error.
HeldAs parseHeldAs(const std::string& name);

// A boundary kind by its schema name, with the accepted names in the error.
BoundaryKind parseBoundary(const std::string& name);

// Devices by name ("cuda:0") with their capacity in bytes.
std::vector<DeviceInfo> deviceCapacities(const std::map<std::string, uint64_t>& capacities,
                                         std::string_view privateUse1);

// {block pointer: [(file, line, function), ...]} as PyTorch's history recording gives them,
// innermost first; every frame is classified by the same rule as the frames the hook captured.
std::unordered_map<uintptr_t, std::vector<Frame>> externalStacks(const pybind11::dict& stacks,
                                                                 const FrameFilter& filter);

} // namespace torchleak::python
