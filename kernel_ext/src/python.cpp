// torchleak._core: the one seam between the C++ core and Python. This file only binds; it is
// also the only place where C++ exceptions become Python exceptions (see registerExceptions,
// tested by tests/python/test_errors.py).

#include "frame_capture.h"
#include "torchleak/allocator_hook.h"
#include "torchleak/config.h"
#include "torchleak/errors.h"
#include "torchleak/report_json.h"
#include "torchleak/retention.h"
#include "tracking_session.h"

#include <c10/util/ThreadLocalDebugInfo.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

namespace py = pybind11;
using namespace torchleak;

namespace {

void registerExceptions(py::module_& m) {
    static py::exception<SchemaError> schemaError(m, "ReportSchemaError", PyExc_ValueError);
    py::register_exception_translator([](std::exception_ptr p) {
        try {
            if (p) {
                std::rethrow_exception(p);
            }
        } catch (const SchemaError& e) {
            py::set_error(schemaError, e.what());
        } catch (const StateError& e) {
            py::set_error(PyExc_RuntimeError, e.what());
        } catch (const InvalidArgument& e) {
            py::set_error(PyExc_ValueError, e.what());
        } catch (const IoError& e) {
            py::set_error(PyExc_OSError, e.what());
        } catch (const Error& e) {
            py::set_error(PyExc_RuntimeError, e.what());
        }
    });
}

std::vector<python::NamedRoot> namedRoots(const py::list& roots) {
    std::vector<python::NamedRoot> out;
    for (const py::handle& item : roots) {
        auto t = py::reinterpret_borrow<py::tuple>(item);
        if (t.size() != 4) {
            throw InvalidArgument("a root is a (label, kind, note, object) tuple");
        }
        out.push_back({t[0].cast<std::string>(), t[1].cast<std::string>(), t[2].cast<std::string>(),
                       t[3].ptr()});
    }
    return out;
}

py::dict walkStatsDict(const python::WalkStats& s) {
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

BoundaryKind parseBoundary(const std::string& name) {
    try {
        return boundaryFromString(name);
    } catch (const SchemaError&) {
        throw InvalidArgument(
            "boundary must be one of explicit, optimizer_step, repeat, cell; got '" + name + "'");
    }
}

} // namespace

PYBIND11_MODULE(_core, m) {
    m.doc() = "torchleak's C++ core: allocator hook, recorder, analysis and report.";
    registerExceptions(m);
    python::noteMainThread();

    py::class_<AnalysisConfig>(m, "AnalysisConfig")
        .def(py::init<>())
        .def("set", [](AnalysisConfig& self, const std::string& key,
                       const std::string& value) { self.set(key, value); })
        .def("get",
             [](const AnalysisConfig& self, const std::string& key) { return self.get(key); })
        .def("copy", [](const AnalysisConfig& self) { return AnalysisConfig(self); })
        .def_readonly("allow", &AnalysisConfig::allow)
        .def_static("keys", &AnalysisConfig::keys);
    m.def("parse_size", [](const std::string& text) { return parseSize(text); });

    py::class_<python::FrameFilter>(m, "FrameFilter")
        .def(py::init([](std::vector<std::string> libraryPrefixes,
                         std::vector<std::string> userPrefixes,
                         const std::map<std::string, int>& cellFiles) {
                 return python::FrameFilter{std::move(libraryPrefixes),
                                            std::move(userPrefixes),
                                            {cellFiles.begin(), cellFiles.end()}};
             }),
             py::arg("library_prefixes"), py::arg("user_prefixes"),
             py::arg("cell_files") = std::map<std::string, int>{})
        .def(
            "classify",
            [](const python::FrameFilter& self, const std::string& file) {
                python::FileClass c = self.classify(file);
                return py::make_tuple(c.user, c.cell ? py::object(py::int_(*c.cell)) : py::none());
            },
            "(user, cell) of a file: is it user code, and which notebook cell is it");

    py::class_<python::TrackingSession>(m, "Session")
        .def(py::init<bool>(), py::arg("capture_stacks") = true)
        .def("start", &python::TrackingSession::start)
        .def("start_paused", &python::TrackingSession::startPaused)
        .def("step", &python::TrackingSession::step)
        .def("pause", &python::TrackingSession::pause)
        .def("resume", &python::TrackingSession::resume)
        .def_property_readonly("paused", &python::TrackingSession::paused)
        .def("stop", &python::TrackingSession::stop)
        .def_property_readonly("active", &python::TrackingSession::active)
        .def_property_readonly("hook_on_top", &python::TrackingSession::hookOnTop)
        .def_property_readonly("iterations", &python::TrackingSession::iterations)
        .def_property_readonly("events", &python::TrackingSession::events)
        .def_property_readonly("live_blocks", &python::TrackingSession::liveBlocks)
        .def_property_readonly("stacks", &python::TrackingSession::stacks)
        .def("set_capture_stacks", &python::TrackingSession::setCaptureStacks)
        .def(
            "report_json",
            [](python::TrackingSession& self, const std::string& torchVersion,
               const std::string& pythonVersion, int warmup, const std::string& boundary,
               const AnalysisConfig& config, const std::map<std::string, uint64_t>& capacities,
               const std::vector<std::string>& warnings, const python::FrameFilter& filter,
               const py::list& roots, bool explain, const py::dict& externalStacks, int indent) {
                if (warmup < 0) {
                    throw InvalidArgument("warmup must be >= 0");
                }
                ReportInputs in;
                in.torch_version = torchVersion;
                in.python_version = pythonVersion;
                in.warmup = warmup;
                in.boundary = parseBoundary(boundary);
                in.config = config;
                // (file, line, function) frames recorded by PyTorch, classified by the same
                // rule as the frames the hook captured.
                for (const auto& [block, frames] : externalStacks) {
                    std::vector<Frame> decoded;
                    for (const py::handle& item : py::reinterpret_borrow<py::list>(frames)) {
                        auto t = py::reinterpret_borrow<py::tuple>(item);
                        Frame f;
                        f.file = t[0].cast<std::string>();
                        f.line = t[1].cast<int>();
                        f.function = t[2].cast<std::string>();
                        python::FileClass where = filter.classify(f.file);
                        f.user = where.user;
                        f.cell = where.cell;
                        f.group = where.group;
                        decoded.push_back(std::move(f));
                    }
                    in.external_stacks.emplace(block.cast<uintptr_t>(), std::move(decoded));
                }
                in.warnings = warnings;
                for (const auto& [name, capacity] : capacities) {
                    DeviceInfo d;
                    d.name = name;
                    d.capacity_bytes = capacity;
                    auto colon = name.find(':');
                    std::string type = name.substr(0, colon);
                    d.key.type = type == "cpu" ? 0 : type == "cuda" ? 1 : -1;
                    d.key.index = colon == std::string::npos
                                      ? -1
                                      : static_cast<int8_t>(std::stoi(name.substr(colon + 1)));
                    in.devices.push_back(d);
                }
                // `roots` (the Python list) keeps every root object alive during the walk.
                return self.reportJson(in, filter, namedRoots(roots), explain, indent);
            },
            py::arg("torch_version"), py::arg("python_version"), py::arg("warmup"),
            py::arg("boundary"), py::arg("config") = AnalysisConfig{},
            py::arg("capacities") = std::map<std::string, uint64_t>{},
            py::arg("warnings") = std::vector<std::string>{},
            py::arg("frame_filter") = python::FrameFilter{}, py::arg("roots") = py::list(),
            py::arg("explain") = true, py::arg("external_stacks") = py::dict(),
            py::arg("indent") = -1)
        .def_property_readonly("last_walk", [](const python::TrackingSession& self) {
            return walkStatsDict(self.lastWalk());
        });

    m.def(
        "find_paths",
        [](const py::list& roots, const std::vector<uintptr_t>& blocks) {
            python::RetainingPathFinder finder(namedRoots(roots));
            auto paths = finder.explain(blocks);
            py::dict out;
            for (const auto& [block, path] : paths) {
                py::list steps;
                for (const PathStep& s : path.steps) {
                    steps.append(py::make_tuple(s.kind, s.label, s.type, s.note));
                }
                out[py::int_(block)] = py::make_tuple(std::string(toString(path.retention)),
                                                      pathText(path.steps), steps);
            }
            return py::make_tuple(out, walkStatsDict(finder.stats()));
        },
        py::arg("roots"), py::arg("blocks"),
        "Retaining paths from (label, kind, note, object) roots to the given storage pointers.");

    m.def(
        "normalize_report",
        [](const std::string& text, int indent) { return toJson(reportFromJson(text), indent); },
        py::arg("text"), py::arg("indent") = -1,
        "Parse a torchleak.report/1 document with the C++ schema and write it back.");
    m.def("capture_strategy", &python::captureStrategy);
    m.def(
        "profiler_state_installed",
        []() {
            return c10::ThreadLocalDebugInfo::get(c10::DebugInfoKind::PROFILER_STATE) != nullptr;
        },
        "True when anything (torchleak or torch.profiler) sits in this thread's PROFILER_STATE "
        "slot.");
    m.def("pending_hook_removals", &AllocatorHook::pendingRemovals);
    m.def("retry_deferred_removals", &AllocatorHook::retryDeferredRemovals);
    m.attr("SCHEMA_VERSION") = kReportSchema;
}
