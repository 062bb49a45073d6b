#include "bindings/conversions.h"

#include "inspect/frame_capture.h"
#include "torchleak/devices.h"
#include "torchleak/errors.h"

#include <pybind11/stl.h>
#include <torch/csrc/autograd/python_variable.h>

namespace py = pybind11;

namespace torchleak::python {

namespace {

bool dunder(const std::string& name) {
    return name.size() >= 4 && name.compare(0, 2, "__") == 0 &&
           name.compare(name.size() - 2, 2, "__") == 0;
}

void addNamespace(const std::string& prefix,
                  PyObject* dict,
                  std::vector<NamedRoot>& out,
                  std::vector<py::object>& owned) {
    if (!PyDict_Check(dict)) {
        throw InvalidArgument("a namespace root's object is a dict");
    }
    // A snapshot of the items: nothing below runs Python code, but the walk later might
    // (a finalizer) and the dict must not be iterated then.
    py::list items = py::reinterpret_steal<py::list>(PyDict_Items(dict));
    if (!items) {
        throw py::error_already_set();
    }
    for (const py::handle& item : items) {
        PyObject* key = PyTuple_GET_ITEM(item.ptr(), 0);
        PyObject* value = PyTuple_GET_ITEM(item.ptr(), 1);
        if (!PyUnicode_Check(key) || PyModule_CheckExact(value)) {
            continue;
        }
        std::string name = utf8(key);
        if (dunder(name)) {
            continue;
        }
        owned.push_back(py::reinterpret_borrow<py::object>(value));
        out.push_back({prefix + name, StepKind::Root, "", value});
    }
}

} // namespace

std::vector<NamedRoot> namedRoots(const py::list& roots, std::vector<py::object>& owned) {
    std::vector<NamedRoot> out;
    for (const py::handle& item : roots) {
        if (!py::isinstance<py::tuple>(item) || py::len(item) != 4) {
            throw InvalidArgument("a root is a (label, kind, note, object) tuple");
        }
        auto t = py::reinterpret_borrow<py::tuple>(item);
        std::string kind = t[1].cast<std::string>();
        if (kind == "namespace") {
            addNamespace(t[0].cast<std::string>(), t[3].ptr(), out, owned);
            continue;
        }
        if (kind != "root" && kind != "frame") {
            throw InvalidArgument("a root's kind is 'root', 'frame' or 'namespace', got '" + kind +
                                  "'");
        }
        out.push_back({t[0].cast<std::string>(), stepKindFromString(kind), t[2].cast<std::string>(),
                       t[3].ptr()});
    }
    return out;
}

ParameterOwners parameterOwners(const py::list& owners) {
    ParameterOwners out;
    auto* tensorType = reinterpret_cast<PyTypeObject*>(THPVariableClass);
    for (const py::handle& item : owners) {
        if (!py::isinstance<py::tuple>(item) || (py::len(item) != 2 && py::len(item) != 3)) {
            throw InvalidArgument("a parameter owner is a (tensor, module text[, path]) tuple");
        }
        auto t = py::reinterpret_borrow<py::tuple>(item);
        // An exact type test, as everywhere in the walk: no __instancecheck__ runs.
        if (tensorType == nullptr || !PyObject_TypeCheck(t[0].ptr(), tensorType)) {
            continue;
        }
        out.emplace(THPVariable_Unpack(t[0].ptr()).unsafeGetTensorImpl(),
                    ParameterOwner{t[1].cast<std::string>(),
                                   py::len(t) == 3 ? t[2].cast<std::string>() : std::string()});
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

namespace {
pybind11::dict originsDict(const BlockOrigins& bytes) {
    pybind11::dict d;
    for (size_t p = 0; p < kBirthPhases; ++p) {
        const std::string name(toString(static_cast<BirthPhase>(p)));
        d[pybind11::str(name)] = pybind11::make_tuple(bytes.thisIteration[p], bytes.earlier[p]);
    }
    pybind11::dict registered;
    for (HeldAs held : kRegisteredHeldAs) {
        registered[pybind11::str(std::string(toString(held)))] = bytes.registeredAs(held);
    }
    d["registered"] = registered;
    return d;
}
} // namespace

pybind11::list birthPhasesList(const std::vector<BoundarySnapshot>& boundaries) {
    pybind11::list out;
    for (const BoundarySnapshot& b : boundaries) {
        for (const DeviceSample& d : b.devices) {
            pybind11::dict e;
            e["iteration"] = b.iteration;
            e["device"] = deviceName(d.device);
            e["allocated"] = d.allocated;
            e["peak"] = d.peak;
            e["live"] = originsDict(d.live);
            e["at_peak"] = originsDict(d.atPeak);
            out.append(std::move(e));
        }
    }
    return out;
}

namespace {

BoundaryKind parseBoundary(const std::string& name) {
    try {
        return boundaryFromString(name);
    } catch (const SchemaError&) {
        throw InvalidArgument(
            "boundary must be one of explicit, optimizer_step, repeat, cell; got '" + name + "'");
    }
}

std::vector<DeviceInfo> deviceCapacities(const std::map<std::string, uint64_t>& capacities,
                                         std::string_view privateUse1) {
    std::vector<DeviceInfo> out;
    for (const auto& [name, capacity] : capacities) {
        out.push_back({parseDeviceName(name, privateUse1), name, capacity});
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

} // namespace

ReportInputs reportInputs(const ReportRequest& request, const FrameFilter& filter) {
    if (request.warmup < 0) {
        throw InvalidArgument("warmup must be >= 0");
    }
    ReportInputs in;
    in.torch_version = request.torch_version;
    in.python_version = request.python_version;
    in.warmup = request.warmup;
    in.boundary = parseBoundary(request.boundary);
    in.config = request.config;
    in.external_stacks = externalStacks(request.external_stacks, filter);
    in.warnings = request.warnings;
    if (!request.privateuse1_backend.empty()) {
        in.privateuse1_backend = request.privateuse1_backend;
    }
    in.devices = deviceCapacities(request.capacities, in.privateuse1_backend);
    in.explain_grown_only = request.explain_grown_only;
    in.verdicts_only = request.verdicts_only;
    in.leave_out_settled = request.leave_out_settled;
    in.torch_caches = {request.autocast_devices, request.dynamo_compiled_frames,
                       request.torchscript_functions};
    in.live_findings = request.live_findings;
    in.first_hook_id = request.first_hook_id;
    for (const auto& [iteration, bytes] : request.resident_memory) {
        in.resident.push_back({iteration, bytes});
    }
    for (const std::string& type : request.allocator_view_devices) {
        in.allocator_view_devices.push_back(
            parseDeviceName(type + ":0", in.privateuse1_backend).type);
    }
    in.allocator_live_blocks.insert(request.allocator_live_blocks.begin(),
                                    request.allocator_live_blocks.end());
    if (request.out_of_memory) {
        const auto& [error, message, device] = *request.out_of_memory;
        in.out_of_memory = OutOfMemoryInputs{error, message, device};
    }
    // Grouped by the same rule as the frames, so a cell's re-runs are one group.
    for (const auto& [file, cell] : request.boundary_runs) {
        in.boundary_runs.push_back({filter.classify(file).group, cell});
    }
    return in;
}

} // namespace torchleak::python
