#include "bindings/conversions.h"

#include "torchleak/devices.h"
#include "torchleak/errors.h"

#include <pybind11/stl.h>

namespace py = pybind11;

namespace torchleak::python {

std::vector<NamedRoot> namedRoots(const py::list& roots) {
    std::vector<NamedRoot> out;
    for (const py::handle& item : roots) {
        if (!py::isinstance<py::tuple>(item) || py::len(item) != 4) {
            throw InvalidArgument("a root is a (label, kind, note, object) tuple");
        }
        auto t = py::reinterpret_borrow<py::tuple>(item);
        std::string kind = t[1].cast<std::string>();
        if (kind != "root" && kind != "frame") {
            throw InvalidArgument("a root's kind is 'root' or 'frame', got '" + kind + "'");
        }
        out.push_back({t[0].cast<std::string>(), stepKindFromString(kind), t[2].cast<std::string>(),
                       t[3].ptr()});
    }
    return out;
}

py::dict walkStatsDict(const WalkStats& s) {
    py::dict d;
    d["python_objects"] = s.pythonObjects;
    d["tensors"] = s.tensors;
    d["autograd_nodes"] = s.autogradNodes;
    d["reached"] = s.reached;
    d["unreached"] = s.unreached;
    d["second_phase"] = s.secondPhase;
    d["seconds"] = s.seconds;
    return d;
}

py::dict retainingPathsDict(const std::unordered_map<uintptr_t, BlockPath>& paths) {
    py::dict out;
    for (const auto& [block, path] : paths) {
        py::list steps;
        for (const PathStep& s : path.steps) {
            steps.append(py::make_tuple(std::string(toString(s.kind)), s.label, s.type, s.note));
        }
        out[py::int_(block)] =
            py::make_tuple(std::string(toString(path.retention)), pathText(path.steps), steps);
    }
    return out;
}

BoundaryKind parseBoundary(const std::string& name) {
    try {
        return boundaryFromString(name);
    } catch (const SchemaError&) {
        throw InvalidArgument(
            "boundary must be one of explicit, optimizer_step, repeat, cell; got '" + name + "'");
    }
}

std::vector<DeviceInfo> deviceCapacities(const std::map<std::string, uint64_t>& capacities) {
    std::vector<DeviceInfo> out;
    for (const auto& [name, capacity] : capacities) {
        out.push_back({parseDeviceName(name), name, capacity});
    }
    return out;
}

std::unordered_map<uintptr_t, std::vector<Frame>> externalStacks(const py::dict& stacks,
                                                                 const FrameFilter& filter) {
    std::unordered_map<uintptr_t, std::vector<Frame>> out;
    for (const auto& [block, frames] : stacks) {
        std::vector<Frame> decoded;
        for (const py::handle& item : py::reinterpret_borrow<py::list>(frames)) {
            auto t = py::reinterpret_borrow<py::tuple>(item);
            Frame f;
            f.file = t[0].cast<std::string>();
            f.line = t[1].cast<int>();
            f.function = t[2].cast<std::string>();
            FileClass where = filter.classify(f.file);
            f.user = where.user;
            f.package = where.package;
            f.cell = where.cell;
            f.group = where.group;
            decoded.push_back(std::move(f));
        }
        out.emplace(block.cast<uintptr_t>(), std::move(decoded));
    }
    return out;
}

} // namespace torchleak::python
