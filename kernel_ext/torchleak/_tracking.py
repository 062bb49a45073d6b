"""track(), check() and step(): glue between Python and the C++ recorder (torchleak._core)."""

from __future__ import annotations

import sys
import threading
import time
import warnings
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook

from . import (
    _core,
    _cuda,
    _devices,
    _job,
    _optimizer_registry,
    _out_of_memory,
    _resident,
    _roots,
    _torch_caches,
    _torch_patches,
    _user_code,
)
from ._arguments import check_options
from ._config import checked_int, config as _config
from ._signals import HeldInterrupt
from ._report import Report, parse_document

if TYPE_CHECKING:
    from ._front_end import TrackerFrontEnd

# What ends iterations (see Tracker): _arguments.BOUNDARIES, spelled for type checkers.
Boundary = Literal["auto", "explicit", "optimizer_step", "repeat", "cell"]

# The Tracker that torchleak.step() reaches. The one-session-per-process guard itself is the
# C++ session's (a second start() raises there), not this variable's.
_active: Tracker | None = None


def _next_hook_id() -> int | None:
    """The id torch gives the next hook it registers (torch.utils.hooks.RemovableHandle: one
    counter for module, tensor, optimizer and global hooks, which only grows)."""
    handle = getattr(sys.modules.get("torch.utils.hooks"), "RemovableHandle", None)
    next_id = getattr(handle, "next_id", None)
    return next_id if type(next_id) is int and next_id >= 0 else None


def active_tracker():
    """The Tracker that is recording now, or None."""
    return _active


def _on_cuda_out_of_memory(device, segment_bytes, limit_bytes, device_free):
    """PyTorch's CUDA OOM observer. It runs on the failing thread (which may not carry the
    hook), after the allocator released its lock, with what DeviceCachingAllocator::malloc
    passes: the device, the *segment* it tried to reserve (2 MiB, 20 MiB or the request
    rounded up: not the request), the device's capacity or set_per_process_memory_fraction's
    cap (not the allocated bytes), and the bytes the driver calls free. The request is
    unknown here; the totals are the device's statistics, read now. The allocator's own report
    through the hook, when it made one, is kept. Never raises: an exception here would replace
    the user's OutOfMemoryError."""
    try:
        tracker = _active
        session = tracker._session if tracker is not None else None
        if session is None or not session.active:
            return
        index = int(device)
        allocated = int(torch.cuda.memory_allocated(index))
        reserved = int(torch.cuda.memory_reserved(index))
        session.note_out_of_memory(f"cuda:{index}", _devices.privateuse1_name(), -1, allocated, reserved)
    except Exception:  # noqa: BLE001 - see above
        pass


class Tracker:
    """Records tensor allocations between `with torchleak.track()` and the end of the block.

    Iterations end at every ``optimizer.step()`` and at every ``torchleak.step()``. Once
    ``torchleak.step()`` has been called, optimizer steps no longer end iterations, so loops
    with gradient accumulation can mark their own boundaries.
    """

    def __init__(
        self,
        *,
        warmup: int | None = None,
        min_bytes: int = 0,
        capture_stacks: bool = True,
        boundary: Boundary = "auto",
        on_preempt: Callable[[], object] | None = None,
        every: int = 1,
        sample_bytes: int = 0,
        gather_timeout: float | None = None,
        on_boundary: Callable[[Tracker], object] | None = None,
    ) -> None:
        if warmup is None:
            warmup = _config.warmup
        check_options(
            warmup=warmup,
            min_bytes=min_bytes,
            boundary=boundary,
            every=every,
            sample_bytes=sample_bytes,
            gather_timeout=gather_timeout,
        )
        self.warmup = warmup
        self.min_bytes = min_bytes
        # Optimizer steps per iteration (run watch's boundary every N steps).
        self._every = every
        self._steps_seen = 0
        # Seconds spent in boundaries (the registry, the recorder's boundary, on_boundary: a
        # watch's looks too), by this tracker's own clock: `make bench` reports it against the
        # run's time, which rounds on a shared machine cannot resolve to the 1% of a watch.
        self._boundary_seconds = 0.0
        self._registry = _optimizer_registry.OptimizerRegistry()  # the optimizers seen stepping
        self._sample_bytes = sample_bytes
        # In a torch.distributed job: seconds rank 0 waits for the other ranks' reports when
        # the block ends (None: no gathering), the job once seen, and the merged report.
        self._gather_timeout = gather_timeout
        self._job: Any = None
        self._job_report: Report | None = None
        self.exchange: Any = None
        self._on_boundary = on_boundary
        self._capture_stacks = bool(capture_stacks)
        self._boundary = boundary
        self._explicit_seen = False
        self._session: _core.Session | None = None
        self.live_bytes = 0  # tracked bytes alive at the last boundary (sampled at their weight)
        # Allocation groups that became steady risers, and that stepped in rhythm, at the last
        # boundary (recorder.h): watch's cues for a leak too small to move the total, and for
        # a staircase.
        self.newly_steady_groups = 0
        self.stepped_groups = 0
        self._optimizer_hook: Any = None
        self._warnings: list[str] = []
        self._report: Report | None = None
        self._cuda_history = _cuda.CudaHistory()
        self._resident: _resident.ResidentSampler | None = None  # from start()
        self._patches = [patch(self) for patch in _torch_patches.PATCHES]
        self._graph_replays = _cuda.GraphReplays()
        self._cuda_stacks: dict[Any, Any] | None = None  # of the blocks alive at stop
        # What the CUDA allocator held at stop, by its own snapshot: ([device types], addresses)
        self._allocator_view: tuple[list[str], list[int]] = ([], [])
        # (type, message) of the out-of-memory error that ended the run, for the report's
        # `oom` forensics. Never the exception: its traceback's frames hold the user's tensors.
        self._failure: tuple[str, str, str] | None = None
        # torch's next hook handle id when recording started: a hook dict's entries at or above
        # it were registered during the run (hooks that accumulate are named as the cause).
        self._first_hook_id: int | None = None
        # Where _run_iterations' loop stopped ("in iteration 3 of 8", "after iteration 3 of 8").
        self._stopped_at: str | None = None
        self._stop_warning: str | None = None  # the report's warning that says where and why
        # Cell watch's (cell file, execution count) per boundary: rates per run of a cell.
        self._cell_runs: list[tuple[str, int]] = []
        # Cell watch's: called when another Tracker starts, so it steps aside instead of failing.
        self._on_preempt = on_preempt

    # -- start and stop ------------------------------------------------------------------------
    def __enter__(self) -> Tracker:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> Literal[False]:
        self.stop()
        # The forensics ride on the exception; building them must not replace it.
        try:
            if self.note_failure(exc):
                _out_of_memory.attach(exc, self.report())
        except Exception as error:  # noqa: BLE001
            warnings.warn(
                f"torchleak could not build the report of this out-of-memory error: {error}",
                RuntimeWarning,
                stacklevel=2,
            )
        if self._gather_timeout is not None and self._job is not None:
            try:
                self.gather(failure=exc)
            except Exception as error:  # noqa: BLE001 - the job's own error goes first
                warnings.warn(f"torchleak could not gather the ranks' reports: {error}", RuntimeWarning, stacklevel=2)
        return False

    # -- torch.distributed ------------------------------------------------------------------
    def _find_job(self):
        if self._job is None:
            self._job = _job.Job.current()

    @property
    def job(self) -> Any:
        """The torch.distributed job this process is a rank of (seen while tracking), or None."""
        return self._job

    @property
    def rank(self) -> int:
        """This process's rank in that job; 0 outside one."""
        return 0 if self._job is None else self._job.rank

    def gather(
        self,
        *,
        failure: BaseException | str | None = None,
        timeout: float | None = None,
        hurry: Callable[[], bool | float | None] | None = None,
    ) -> Any:
        """In a torch.distributed job, after the block: post this rank's report and, on rank 0,
        merge every rank's (waiting at most ``timeout`` seconds, default the tracker's
        ``gather_timeout``); every rank calls it. Rank 0's ``report()`` is then the merged
        report. ``failure``: the exception that ended this rank's run, or its description.
        ``hurry``: a callable that turns true when the job is being stopped (torchrun's SIGTERM);
        the wait then ends 20 s after the signal when it returns the signal's
        ``time.monotonic()``, else 20 s after the wait sees it. Returns the exchange (``.merged``,
        ``.confirmed``: rank 0 merged this rank's report; ``.complete``: all of it, not a
        summary; ``.note``: why not), or None outside a job."""
        if self._job is None:
            return None
        if self.active:
            raise RuntimeError("gather() after the tracked block, not inside it")
        own = self.report()
        status, note = "ok", ""
        if failure is not None:
            status = "failed"
            note = failure if isinstance(failure, str) else _job.describe_failure(failure)
        if timeout is None:
            timeout = self._gather_timeout
        if timeout is None:
            timeout = _job.DEFAULT_GATHER_TIMEOUT
        self.exchange = _job.exchange(self._job, own, status=status, note=note, timeout=timeout, hurry=hurry)
        self._job_report = self.exchange.merged
        return self.exchange

    def rank_report(self) -> Report:
        """This rank's own report, also on rank 0 after the merge."""
        # The rank's own final report is the one report() cached before the merge replaced it.
        return self._report if self._report is not None else self.report()

    def start(self) -> Tracker:
        """Install the hooks and start recording (what ``with`` does on entry)."""
        global _active
        if _active is not None and _active._on_preempt is not None:
            _active._on_preempt()  # cell watch steps aside for an explicit track()/check()
        if self._session is not None:
            raise RuntimeError("a Tracker can be used once; create a new one with torchleak.track()")
        # Said before the hook goes in: a warnings filter that raises leaves nothing installed.
        problem = _user_code.frame_capture_warning() if self._capture_stacks else None
        if problem is not None:
            self._warn(problem)
            warnings.warn(f"torchleak: {problem}", RuntimeWarning, stacklevel=3)
        _core.retry_deferred_removals()
        session = _core.Session(self._capture_stacks, self._sample_bytes)
        profiler_on = _core.profiler_state_installed()
        if profiler_on:
            # torch.profiler (or another tool) owns the slot; nothing may be pushed on top of
            # it. Record from the moment it stops.
            session.start_paused()
        else:
            session.start()
        self._session = session
        self._first_hook_id = _next_hook_id()
        self._resident = _resident.ResidentSampler()
        self._thread = threading.get_ident()
        _active = self
        # From here on the hook is in: whatever fails takes it out again before raising.
        try:
            if profiler_on:
                msg = "torch.profiler is active on this thread: torchleak records nothing until it stops"
                self._warn(msg)
                warnings.warn(msg, RuntimeWarning, stacklevel=3)
            self._find_job()
            self._cuda_history.start()
            self._graph_replays.start()
            _cuda.observe_out_of_memory(_on_cuda_out_of_memory)
            for patch in self._patches:
                patch.install()
            if self._boundary in ("auto", "optimizer_step"):
                self._optimizer_hook = register_optimizer_step_post_hook(self._on_optimizer_step)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop recording and restore every hook (what ``with`` does on exit). Idempotent."""
        global _active
        for patch in reversed(self._patches):
            patch.remove()
        self._graph_replays.stop()
        if self._resident is not None:
            self._resident.close()  # its samples stay for the report
        if self.active:
            self._find_job()  # a script with no boundary at all is still a rank
        try:
            if self._optimizer_hook is not None:
                self._optimizer_hook.remove()
                self._optimizer_hook = None
        finally:
            session = self._session
            if session is not None and session.active:
                # A run with no boundary at all still reports what it left alive (frees alone,
                # of blocks an earlier session made, are no run).
                if session.iterations == 0 and session.allocations > 0:
                    self._mark_boundary()
                self._read_cuda_state()
                if session.stop() == "deferred":
                    msg = (
                        "another tool pushed a profiler state on top of torchleak's hook and "
                        "is still running: torchleak stopped recording and removes its hook "
                        "once that state is gone"
                    )
                    self._warn(msg)
                    warnings.warn(msg, RuntimeWarning, stacklevel=3)
            if _active is self:
                _active = None

    def _read_cuda_state(self):
        """At stop, before history recording ends: the stacks of surviving CUDA blocks and what
        the allocator itself still holds. Never raises: the hook must come out whatever
        happens here."""
        history = self._cuda_history
        try:
            snapshot = history.snapshot()
            self._cuda_stacks, addresses = history.read_snapshot(snapshot)
            if snapshot is not None:
                self._allocator_view = _cuda.allocator_view(addresses)
        except Exception as error:  # noqa: BLE001
            self._warn(
                f"the CUDA allocator's state could not be read at stop ({error!r}): CUDA "
                f"findings have no allocation site"
            )
        finally:
            history.stop()

    # -- boundaries ---------------------------------------------------------------------------
    def _on_optimizer_step(self, optimizer, args, kwargs):
        if not self._explicit_seen and self._session is not None and self._session.active:
            self._steps_seen += 1
            if self._steps_seen % self._every == 0:
                self._end_iteration()

    def step(self) -> None:
        """End the current iteration. With ``boundary="auto"``, optimizer steps no longer end
        iterations once this was called."""
        if self._session is None or not self._session.active:
            raise RuntimeError("step() outside an active torchleak.track() block")
        self._explicit_seen = True
        self._end_iteration()

    def _end_iteration(self):
        begun = time.perf_counter()
        try:
            self._mark_boundary()
            self._after_boundary()
        finally:
            self._boundary_seconds += time.perf_counter() - begun

    def _mark_boundary(self):
        self._registry.name_held_blocks(self._session, self._warn)
        self.live_bytes = self._session.step()
        joined = self._session.profiler_slot_joined_at
        if joined:
            self._warn(
                f"a device allocator was registered after tracking started; that device's "
                f"memory is recorded from the end of iteration {joined} on, and its blocks "
                f"made before were not seen"
            )
        self.newly_steady_groups = self._session.newly_steady_groups
        self.stepped_groups = self._session.stepped_groups
        if self._resident is not None:
            self._resident.note(self._session.iterations - 1)

    def _after_boundary(self):
        self._find_job()
        if self._on_boundary is not None:
            self._on_boundary(self)

    def _end_cell(self, cell_file: str, execution_count: int) -> None:
        """Cell watch's boundary: the cell compiled as ``cell_file`` ran as ``execution_count``.
        A site's rate is then per run of its cell, and a re-run cell's site names every run."""
        if self._session is None or not self._session.active:
            raise RuntimeError("_end_cell() outside an active tracking session")
        self._mark_boundary()
        self._cell_runs.append((str(cell_file or ""), int(execution_count or 0)))

    @property
    def _last_iteration(self) -> dict[str, int]:
        """Bytes the last iteration left alive (`born`), freed (`freed`) and all tracked live
        bytes (`live`), from the recorder's counts alone: no report is built."""
        if self._session is None:
            return {"live": 0, "born": 0, "freed": 0}
        return self._session.last_iteration

    def note_failure(self, exc: BaseException | None) -> bool:
        """An exception ended the tracked run: when it is an out-of-memory error (the device's
        OutOfMemoryError, a CPU allocation failure, MemoryError), the report gets its ``oom``
        forensics. Returns whether it was one."""
        if exc is None or not _out_of_memory.is_out_of_memory(exc, self._allocation_failed_now()):
            return False
        self._failure = _out_of_memory.describe(exc)
        self._report = None  # a final report built before it lacks the forensics
        return True

    def _allocation_failed_now(self):
        """The device whose allocator refused a request just now ("cpu": the CPU tap saw the
        default allocator throw), or None."""
        try:
            return self._session.allocation_failed_now(_devices.privateuse1_name()) if self._session else None
        except Exception:  # noqa: BLE001 - never in the way of the user's own exception
            return None

    def _warn(self, message: str) -> None:
        """Add a warning to the report (once)."""
        if message not in self._warnings:
            self._warnings.append(message)

    def _collected_roots(self, library, packages):
        """The process's named roots. They are read without calling user code; should an object
        still fail that (a hostile class), the paths start from the roots given alone and the
        report says so, rather than being lost."""
        try:
            return _roots.collect(library, packages)
        except Exception as error:  # noqa: BLE001 - one bad object never costs the report
            self._warn(
                f"the program's global names could not be read ({type(error).__name__}: {error}); "
                "paths start only from the roots given"
            )
            return []

    def _parameter_owners(self, roots):
        try:
            return _roots.parameter_owners(roots)
        except Exception as error:  # noqa: BLE001
            self._warn(f"the models' parameters could not be named ({type(error).__name__}: {error})")
            return []

    def _all_warnings(self):
        """The report's warnings: the tracker's, then what the CUDA side could not see."""
        out = list(self._warnings)
        for w in self._cuda_history.warnings + [self._graph_replays.warning()]:
            if w and w not in out:
                out.append(w)
        return out

    def _run_iterations(
        self,
        body: Callable[[], object],
        iterations: int,
        *,
        after_each: Callable[[int], object] | None = None,
        describe: Callable[[BaseException], str] = str,
    ) -> BaseException | None:
        """Call ``body()`` ``iterations`` times, ending an iteration after each, and
        ``after_each(k)`` after iteration k (1-based). An exception from ``body`` (an OOM, a bug,
        KeyboardInterrupt) stops the loop, is noted in the report's warnings (its message as
        ``describe`` words it) and is returned, not raised, so the caller can report what was
        seen before re-raising it."""
        __tracebackhide__ = True  # IPython leaves this frame out of tracebacks
        for k in range(iterations):
            try:
                body()
            except BaseException as exc:  # noqa: BLE001 - returned to the caller, who re-raises
                try:
                    message = describe(exc)
                except Exception:  # noqa: BLE001 - a user __str__ that raises
                    message = f"<{type(exc).__name__} whose message could not be read>"
                # Counted from 1, as the curve and the progress line count.
                return self._stop_loop(exc, f"in iteration {k + 1} of {iterations}", message)
            # A Stop that lands while the boundary is recorded or the live view drawn is taken
            # after them: the iteration counts whole and the report is kept.
            with HeldInterrupt() as interrupt:
                self.step()
                if after_each is not None:
                    after_each(k + 1)
            if interrupt.arrived and k + 1 < iterations:
                return self._stop_loop(KeyboardInterrupt(), f"after iteration {k + 1} of {iterations}", "")
        return None

    def _stop_loop(self, exc: BaseException, where: str, message: str) -> BaseException:
        """Note in the report's warnings that `exc` stopped the loop `where` ("in iteration 3
        of 8"); a bare KeyboardInterrupt (Stop) has no message to follow a colon."""
        self._stopped_at = where
        self._stop_warning = f"stopped {where} by {type(exc).__name__}" + (f": {message}" if message else "")
        self._warn(self._stop_warning)
        self.note_failure(exc)
        return exc

    @property
    def _kind(self):
        """What ends iterations, as the report names it."""
        if self._boundary != "auto":
            return self._boundary
        return "explicit" if self._explicit_seen else "optimizer_step"

    @property
    def iterations(self) -> int:
        return 0 if self._session is None else self._session.iterations

    @property
    def events(self) -> int:
        """Allocation and free events recorded so far."""
        return 0 if self._session is None else self._session.events

    @property
    def skipped_events(self) -> int:
        """Allocations seen but not recorded: sampling skipped them (``sample_bytes``)."""
        return 0 if self._session is None else self._session.skipped_events

    @property
    def active(self) -> bool:
        return self._session is not None and self._session.active

    @property
    def _started(self) -> bool:
        """Whether recording ever started (a report can be built)."""
        return self._session is not None

    # -- report -------------------------------------------------------------------------------
    def report(
        self, *, warmup: int | None = None, paths: bool = True, roots: Mapping[str, object] | None = None
    ) -> Report:
        """The report of what was recorded so far (or of the whole run after the block).

        With ``paths`` (the default) every finding gets its retaining path from a named root.
        ``roots`` ({name: object}) adds roots of the caller's own, tried before every other:
        objects no global or live frame names (a test's fixtures, a trainer's model).
        When an out-of-memory error ended the run, the report has its ``oom`` forensics.
        """
        return self._build_report(warmup=warmup, paths=paths, roots=roots)

    def _build_report(
        self,
        *,
        warmup: int | None = None,
        paths: bool = True,
        roots: object = None,
        grown_paths_only: bool = False,
        failure: BaseException | None = None,
        shapes: bool = True,
        live_findings: int | None = None,
        argument_roots: list[Any] | None = None,
    ) -> Report:
        """report(), with what torchleak's own front ends ask for besides: paths only for the
        findings that grew in the last iteration (the %leakwatch ledger), no dtype and shape
        (torchleak.watch()'s checks mid-run: finding tensors costs a scan of the heap), the
        out-of-memory error a cell raised (`failure`) for a report built before it is noted, and
        a live view (`live_findings`: %%leakcheck's updates, cut by the core to that many
        findings without their live-block lists), and check()'s arguments as roots named by
        the parameters they are given to (`argument_roots`: after every global and frame, so
        that `trainer.history` is not read `self.history`; before the walk's last resort, the
        closure of check() itself)."""
        if self._session is None:
            raise RuntimeError("nothing was tracked: use the Tracker as `with torchleak.track():`")
        # Checked here: a bad argument reaching the binding would make pybind11 print the
        # repr() of every argument, every root object's user __repr__ included.
        check_options(warmup=warmup)
        if type(paths) is not bool:
            raise ValueError(f"paths must be True or False, got {type(paths).__name__}")
        given = _roots.given(roots)
        # The whole run's final report is kept; one with a partial explanation or roots of the
        # caller's is not.
        final = (
            warmup is None
            and not self.active
            and not grown_paths_only
            and failure is None
            and not given
            and not argument_roots
            and shapes
            and live_findings is None
        )
        described = _out_of_memory.describe(failure) if failure is not None else self._failure
        if self._job_report is not None and final:
            return self._job_report
        if self._report is not None and final:
            return self._report
        text = self._report_text(
            warmup=warmup,
            paths=paths,
            given=given,
            argument_roots=argument_roots,
            grown_paths_only=grown_paths_only,
            described=described,
            shapes=shapes,
            live_findings=live_findings,
        )
        report = Report(text)
        if final:
            self._report = report
        return report

    def _verdicts(self, *, paths: bool = False, leave_out_settled: bool = False) -> dict[str, Any]:
        """watch()'s look: each finding's verdict, site, bytes and growth (torchleak.verdicts/1),
        none of a report's fixes, blocks, causes or text: a look at 10^4 growing sites had built
        and parsed a report of 40 MB. With ``paths``, each finding's path and holder as well
        (the retaining paths walked, no fix proved): what a watch that only logs announces.
        With ``leave_out_settled`` (and no paths), the findings settled at an earlier such look
        and unchanged since are left out, counted in ``settled_left_out``: never a leak nor
        undecided, they are not judged again, and a look costs the sites that changed."""
        if self._session is None:
            raise RuntimeError("nothing was tracked: use the Tracker as `with torchleak.track():`")
        text = self._report_text(
            paths=paths,
            given=[],
            described=self._failure,
            shapes=False,
            verdicts_only=True,
            leave_out_settled=leave_out_settled and not paths,
            live_findings=sys.maxsize if paths else None,  # every finding, none of its blocks listed
        )
        return parse_document(text)

    def _report_text(
        self,
        *,
        paths: bool,
        given: list[Any],
        described: Any,
        shapes: bool,
        warmup: int | None = None,
        grown_paths_only: bool = False,
        live_findings: int | None = None,
        verdicts_only: bool = False,
        leave_out_settled: bool = False,
        argument_roots: list[Any] | None = None,
    ) -> str:
        """The core's document for a report (or a look's verdicts), from this run's inputs."""
        session = self._session
        assert session is not None  # the callers said "nothing was tracked"
        library, packages = _user_code.library_prefixes(), _user_code.package_prefixes()
        roots = given + self._collected_roots(library, packages) + (argument_roots or []) if paths else []
        history = self._cuda_history
        if self.active:
            # Only while history records: listing the live device blocks walks them all, a
            # cost run watch's checks must not pay on a machine without CUDA.
            external_stacks = history.stacks_now(session.stackless_device_blocks()) if history.recording else {}
            view_devices: list[str] = []
            live_blocks: list[int] = []
        else:
            external_stacks = self._cuda_stacks or {}
            view_devices, live_blocks = self._allocator_view
        inputs = _core.ReportInputs()
        inputs.torch_version = torch.__version__
        inputs.python_version = ".".join(map(str, sys.version_info[:3]))
        inputs.warmup = self.warmup if warmup is None else warmup
        inputs.boundary = self._kind
        config = _config.snapshot()
        if self.min_bytes:
            config.set("min_bytes", str(self.min_bytes))
        inputs.config = config
        inputs.capacities = _devices.capacities()
        inputs.warnings = self._all_warnings()
        inputs.external_stacks = external_stacks
        inputs.boundary_runs = self._cell_runs if self._boundary == "cell" else []
        inputs.explain_grown_only = bool(grown_paths_only)
        inputs.privateuse1_backend = _devices.privateuse1_name()
        inputs.out_of_memory = described
        inputs.allocator_view_devices = view_devices
        inputs.allocator_live_blocks = live_blocks
        inputs.resident_memory = self._resident.samples if self._resident is not None else []
        inputs.live_findings = live_findings
        inputs.verdicts_only = verdicts_only
        inputs.leave_out_settled = leave_out_settled
        inputs.first_hook_id = self._first_hook_id
        if paths:
            _torch_caches.fill(inputs)
        text = session.report_json(
            inputs,
            frame_filter=_core.FrameFilter(library, packages, _user_code.cell_files()),
            roots=roots,
            explain=bool(paths),
            parameter_owners=self._parameter_owners(roots) if paths else [],
            describe_tensors=bool(shapes),
        )
        del roots, given
        return text


def track(
    *,
    warmup: int | None = None,
    min_bytes: int = 0,
    capture_stacks: bool = True,
    boundary: Boundary = "auto",
    gather_timeout: float | None = _job.DEFAULT_GATHER_TIMEOUT,
) -> Tracker:
    """Track tensor allocations in a ``with`` block; see :class:`Tracker`.

    In a torch.distributed job (a process group of two or more ranks initialised while
    tracking), the ranks' reports are gathered to rank 0 when the block ends and merged:
    rank 0 waits at most ``gather_timeout`` seconds for the others (None: no gathering), and
    its ``report()`` is then the job's. Every rank must run the block."""
    return Tracker(
        warmup=warmup,
        min_bytes=min_bytes,
        capture_stacks=capture_stacks,
        boundary=boundary,
        gather_timeout=gather_timeout,
    )


def step() -> None:
    """Mark the end of an iteration in the active ``torchleak.track()`` block (or watch, or the
    CLI's run). Outside tracking it does nothing, so that a script instrumented with it runs
    under plain ``python`` as well."""
    if _active is None:
        return
    _active.step()


def check(
    fn: Callable[..., object],
    *args: Any,
    iterations: int = 20,
    warmup: int | None = None,
    min_bytes: int = 0,
    capture_stacks: bool = True,
    roots: Mapping[str, object] | None = None,
    **kwargs: Any,
) -> Report:
    """Run ``fn(*args, **kwargs)`` ``iterations`` times, each run an iteration, and report.

    The first ``warmup`` runs are recorded but not judged. ``roots`` ({name: object}) names
    objects the paths should start from (see :meth:`Tracker.report`); the arguments are roots
    too, named by ``fn``'s parameters (``check(step, make_state())`` reads ``state.cache``).
    If ``fn`` raises (an OOM, a bug, KeyboardInterrupt), the hooks are removed, the report of
    what was seen is attached to the exception as ``torchleak_report`` and the exception
    propagates.
    """
    if not callable(fn):
        raise TypeError(f"check() needs a callable, got {type(fn).__name__}")
    check_options(iterations=iterations)
    if warmup is None:
        warmup = min(_config.warmup, iterations - 1)
    checked_int("warmup", warmup, maximum=iterations - 1)
    tracker = Tracker(warmup=warmup, min_bytes=min_bytes, capture_stacks=capture_stacks, boundary="repeat")
    _roots.given(roots)  # a bad mapping fails before the run, not after it
    with tracker:
        failure = tracker._run_iterations(lambda: fn(*args, **kwargs), iterations)
    report = tracker._build_report(roots=roots, argument_roots=_roots.arguments(fn, args, kwargs))
    if failure is not None:
        _out_of_memory.attach(failure, report)
        raise failure
    return report


if TYPE_CHECKING:

    def _drives_the_front_ends(tracker: Tracker) -> TrackerFrontEnd:
        return tracker  # a type checker holds the Tracker to what the front ends call
