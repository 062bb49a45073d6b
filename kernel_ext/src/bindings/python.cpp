// torchleak._core: the one seam between the C++ core and Python. This file only binds (the
// argument conversions are in conversions.cpp); it is also the only place where C++ exceptions
// become Python exceptions (registerExceptions, tested by tests/python/test_errors.py).

#include "bindings/conversions.h"
#include "hook/allocator_hook.h"
#include "hook/cpu_allocator_tap.h"
#include "inspect/frame_capture.h"
#include "inspect/gc_pause.h"
#include "session/tracking_session.h"
#include "torchleak/config.h"
#include "torchleak/devices.h"
#include "torchleak/display_text.h"
#include "torchleak/errors.h"
#include "torchleak/memory_roles.h"
#include "torchleak/rank_merge.h"
#include "torchleak/redaction_fields.h"
#include "torchleak/report_diff.h"
#include "torchleak/report_json.h"
#include "torchleak/report_subset.h"
#include "torchleak/retention.h"

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/util/ThreadLocalDebugInfo.h>
#include <mutex>
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
        .def_static("keys", &AnalysisConfig::keys)
        .def_static(
            "settings",
            []() {
                py::list out;
                for (const SettingSpec& s : AnalysisConfig::settings()) {
                    out.append(py::make_tuple(std::string(s.name), std::string(toString(s.type)),
                                              std::string(s.description)));
                }
                return out;
            },
            "(name, type, description) of every setting; type is size, count, fraction or "
            "patterns.");
    m.def("parse_size", [](const std::string& text) { return parseSize(text); });
    m.def(
        "format_bytes", [](double bytes) { return formatBytes(bytes); },
        "The core's byte formatter, the one the JSON's display strings use.");

    py::class_<python::FrameFilter>(m, "FrameFilter")
        .def(py::init([](std::vector<std::string> libraryPrefixes,
                         std::vector<std::string> packagePrefixes,
                         const std::map<std::string, int>& cellFiles) {
                 return python::FrameFilter{std::move(libraryPrefixes),
                                            std::move(packagePrefixes),
                                            {cellFiles.begin(), cellFiles.end()}};
             }),
             py::arg("library_prefixes"), py::arg("package_prefixes"),
             py::arg("cell_files") = std::map<std::string, int>{})
        .def(
            "classify",
            [](const python::FrameFilter& self, const std::string& file) {
                python::FileClass c = self.classify(file);
                return py::make_tuple(c.user, c.cell ? py::object(py::int_(*c.cell)) : py::none());
            },
            "(user, cell) of a file: is it user code, and which notebook cell is it");

    // Filled field by field, as AnalysisConfig is; a list field is assigned whole (reading one
    // gives a copy).
    py::class_<python::ReportRequest>(m, "ReportInputs")
        .def(py::init<>())
        .def_readwrite("torch_version", &python::ReportRequest::torch_version)
        .def_readwrite("python_version", &python::ReportRequest::python_version)
        .def_readwrite("warmup", &python::ReportRequest::warmup)
        .def_readwrite("boundary", &python::ReportRequest::boundary)
        .def_readwrite("config", &python::ReportRequest::config)
        .def_readwrite("capacities", &python::ReportRequest::capacities)
        .def_readwrite("warnings", &python::ReportRequest::warnings)
        .def_readwrite("external_stacks", &python::ReportRequest::external_stacks)
        .def_readwrite("boundary_runs", &python::ReportRequest::boundary_runs)
        .def_readwrite("explain_grown_only", &python::ReportRequest::explain_grown_only)
        .def_readwrite("verdicts_only", &python::ReportRequest::verdicts_only)
        .def_readwrite("leave_out_settled", &python::ReportRequest::leave_out_settled)
        .def_readwrite("privateuse1_backend", &python::ReportRequest::privateuse1_backend)
        .def_readwrite("out_of_memory", &python::ReportRequest::out_of_memory)
        .def_readwrite("allocator_view_devices", &python::ReportRequest::allocator_view_devices)
        .def_readwrite("allocator_live_blocks", &python::ReportRequest::allocator_live_blocks)
        .def_readwrite("autocast_devices", &python::ReportRequest::autocast_devices)
        .def_readwrite("dynamo_compiled_frames", &python::ReportRequest::dynamo_compiled_frames)
        .def_readwrite("torchscript_functions", &python::ReportRequest::torchscript_functions)
        .def_readwrite("resident_memory", &python::ReportRequest::resident_memory)
        .def_readwrite("live_findings", &python::ReportRequest::live_findings)
        .def_readwrite("first_hook_id", &python::ReportRequest::first_hook_id);

    py::class_<python::TrackingSession>(m, "Session")
        .def(py::init<bool, uint64_t>(), py::arg("capture_stacks") = true,
             py::arg("sample_bytes") = 0)
        .def("start", &python::TrackingSession::start)
        .def("start_paused", &python::TrackingSession::startPaused)
        .def("step", &python::TrackingSession::step)
        .def("pause", &python::TrackingSession::pause)
        .def("resume", &python::TrackingSession::resume)
        .def_property_readonly("skipped_events", &python::TrackingSession::skippedEvents)
        .def_property_readonly("newly_steady_groups", &python::TrackingSession::newlySteadyGroups)
        .def_property_readonly("stepped_groups", &python::TrackingSession::steppedGroups)
        .def_property_readonly("paused", &python::TrackingSession::paused)
        .def("stop", &python::TrackingSession::stop)
        .def_property_readonly("active", &python::TrackingSession::active)
        .def_property_readonly("hook_on_top", &python::TrackingSession::hookOnTop)
        .def_property_readonly("hook_in_profiler_slot",
                               &python::TrackingSession::hookInProfilerSlot)
        .def_property_readonly("profiler_slot_joined_at",
                               &python::TrackingSession::profilerSlotJoinedAt)
        .def_property_readonly("iterations", &python::TrackingSession::iterations)
        .def_property_readonly("events", &python::TrackingSession::events)
        .def_property_readonly("allocations", &python::TrackingSession::allocations)
        .def_property_readonly("live_blocks", &python::TrackingSession::liveBlocks)
        .def_property_readonly("stacks", &python::TrackingSession::stacks)
        .def("stackless_device_blocks", &python::TrackingSession::stacklessDeviceBlocks)
        .def_property_readonly("last_iteration",
                               [](const python::TrackingSession& self) {
                                   IterationTotals t = self.lastIteration();
                                   py::dict d;
                                   d["live"] = t.live;
                                   d["born"] = t.born;
                                   d["freed"] = t.freed;
                                   return d;
                               })
        .def_property_readonly("birth_phases",
                               [](const python::TrackingSession& self) {
                                   return python::birthPhasesList(self.boundaries());
                               })
        .def("set_capture_stacks", &python::TrackingSession::setCaptureStacks)
        .def("begin_backward", &python::TrackingSession::beginBackward)
        .def("end_backward", &python::TrackingSession::endBackward)
        .def("begin_optimizer_step", &python::TrackingSession::beginOptimizerStep)
        .def("end_optimizer_step", &python::TrackingSession::endOptimizerStep)
        .def("name_optimizer_blocks",
             [](python::TrackingSession& self, const py::list& optimizers) {
                 std::vector<PyObject*> borrowed; // the caller's list keeps them alive
                 for (const py::handle& o : optimizers) {
                     borrowed.push_back(o.ptr());
                 }
                 self.nameOptimizerBlocks(borrowed);
             })
        .def(
            "report_json",
            [](python::TrackingSession& self, const python::ReportRequest& inputs,
               const python::FrameFilter& filter, const py::list& roots, bool explain,
               const py::list& parameterOwners, bool describeTensors, int indent) {
                ReportInputs in = python::reportInputs(inputs, filter);
                // `roots` (the Python list) keeps every root object alive during the walk.
                std::vector<py::object> owned;
                return self.reportJson(in, filter, python::namedRoots(roots, owned), explain,
                                       indent, python::parameterOwners(parameterOwners),
                                       describeTensors);
            },
            py::arg("inputs"), py::arg("frame_filter") = python::FrameFilter{},
            py::arg("roots") = py::list(), py::arg("explain") = true,
            py::arg("parameter_owners") = py::list(), py::arg("describe_tensors") = true,
            py::arg("indent") = -1)
        .def(
            "note_out_of_memory",
            [](python::TrackingSession& self, const std::string& device,
               const std::string& privateUse1Backend, int64_t requested, int64_t allocated,
               int64_t reserved) {
                self.noteOutOfMemory(parseDeviceName(device, privateUse1Backend), requested,
                                     allocated, reserved);
            },
            py::arg("device"), py::arg("privateuse1_backend"), py::arg("requested"),
            py::arg("allocated"), py::arg("reserved"))
        .def(
            "allocation_failed_now",
            [](const python::TrackingSession& self,
               const std::string& privateUse1Backend) -> std::optional<std::string> {
                auto device = self.allocationFailedNow();
                return device ? std::optional<std::string>(deviceName(*device, privateUse1Backend))
                              : std::nullopt;
            },
            py::arg("privateuse1_backend"),
            "The device (\"cpu\", \"cuda:0\") whose allocator refused a request just now, or "
            "None.")
        .def_property_readonly("last_walk", [](const python::TrackingSession& self) {
            return python::walkStatsDict(self.lastWalk());
        });

    m.def(
        "find_paths",
        [](const py::list& roots, const std::vector<uintptr_t>& blocks) {
            python::GcPause noCollector;
            std::vector<py::object> owned;
            python::RetainingPathFinder finder(python::namedRoots(roots, owned));
            auto paths = finder.explain(blocks);
            return py::make_tuple(python::retainingPathsDict(paths),
                                  python::walkStatsDict(finder.stats()));
        },
        py::arg("roots"), py::arg("blocks"),
        "Retaining paths from (label, kind, note, object) roots to the given storage pointers.");

    m.def(
        "normalize_report",
        // A view: the document is read where Python keeps it (bytes or an ASCII str), not
        // copied first; large reports are hundreds of MiB.
        [](std::string_view text, int indent) { return toJson(reportFromJson(text), indent); },
        py::arg("text"), py::arg("indent") = -1,
        "Parse a torchleak.report/1 document with the C++ schema and write it back.");
    m.def(
        "diff_reports",
        [](const std::string& before, const std::string& after, double tolerance) {
            return diffJson(diffReports(reportFromJson(before), reportFromJson(after), tolerance));
        },
        py::arg("before"), py::arg("after"), py::arg("tolerance") = 0.1,
        "Compare two torchleak.report/1 documents: a torchleak.diff/1 document (its `text` is "
        "what the CLI prints).");
    m.def(
        "keep_findings",
        [](std::string_view text, const std::vector<int>& keep, const std::string& warning) {
            return toJson(keepFindings(reportFromJson(text), keep, warning));
        },
        py::arg("text"), py::arg("keep"), py::arg("warning") = "",
        "A torchleak.report/1 document with only the findings at `keep` (in that order), every "
        "section that names findings renumbered, and `warning` added to its warnings.");
    m.def(
        "merge_rank_reports",
        [](const std::vector<std::tuple<int, std::optional<std::string>, std::string, std::string>>&
               ranks,
           int worldSize, const AnalysisConfig& config) {
            std::vector<RankInput> inputs;
            for (const auto& [rank, report, status, note] : ranks) {
                inputs.push_back(RankInput{rank, report, status, note});
            }
            return toJson(mergeRankReports(inputs, worldSize, config));
        },
        py::arg("ranks"), py::arg("world_size"), py::arg("config") = AnalysisConfig{},
        "One torchleak.report/1 document for a torch.distributed job from its ranks' reports: "
        "ranks is a list of (rank, report JSON or None, status, note), status one of ok, "
        "failed, missing.");
    m.def("capture_strategy", &python::captureStrategy);
    m.def(
        "c10_memory_profiling_enabled", []() { return c10::memoryProfilingEnabled(); },
        "What c10's CPU reporter asks this thread before its bookkeeping (diagnostics, tests).");
    m.def("check_frame_capture", &python::checkCapture,
          "None when the hook reads this interpreter's Python stacks right, else what failed.");
    // Here rather than in torchleak._testing: that module links its own copy of frame capture.
    m.def("_disable_frame_capture_for_testing", &python::disableCaptureForTesting,
          py::arg("disabled"), "Tests only: every stack capture comes back empty.");
    m.def(
        "profiler_state_installed",
        []() {
            return c10::ThreadLocalDebugInfo::get(c10::DebugInfoKind::PROFILER_STATE) != nullptr;
        },
        "True when anything (torchleak or torch.profiler) sits in this thread's PROFILER_STATE "
        "slot.");
    m.def("cpu_tap_installed", &cpuTapInstalled,
          "True while torchleak's CPU allocator tap is the process's CPU allocator.");
    m.def(
        "_allocate_holding_tap_lock_for_testing",
        [](size_t nbytes) {
            // What the hook's own work would meet if it allocated through c10: the tap must
            // let it through unrecorded rather than wait for the lock its thread holds.
            std::lock_guard<RecorderLock> held(cpuTapLock());
            c10::DataPtr block = c10::GetCPUAllocator()->allocate(nbytes);
            return block.get() != nullptr;
        },
        py::arg("nbytes"),
        "Tests only: allocate and free a CPU block while holding the tap's lock.");
    m.def("pending_hook_removals", &AllocatorHook::pendingRemovals);
    m.def("retry_deferred_removals", &AllocatorHook::retryDeferredRemovals);
    m.attr("SCHEMA_VERSION") = kReportSchema;
    // The role names of devices[].roles, in stacking order: the views' colours are keyed by them.
    pybind11::tuple roles(kMemoryRoles);
    for (size_t r = 0; r < kMemoryRoles; ++r) {
        roles[r] = std::string(toString(static_cast<MemoryRole>(r)));
    }
    m.attr("MEMORY_ROLES") = roles;
    pybind11::tuple verdicts(verdictNames().size());
    for (size_t v = 0; v < verdictNames().size(); ++v) {
        verdicts[v] = std::string(verdictNames()[v]);
    }
    m.attr("VERDICTS") = verdicts;
    // (place, rule) of every string field: what Report.redacted() does to each.
    pybind11::tuple fields(redactionFields().size());
    for (size_t k = 0; k < redactionFields().size(); ++k) {
        const RedactionField& f = redactionFields()[k];
        fields[k] = pybind11::make_tuple(std::string(f.place), std::string(toString(f.rule)));
    }
    m.attr("REDACTION_FIELDS") = fields;
}
