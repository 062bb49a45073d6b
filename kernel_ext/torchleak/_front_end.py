"""What torchleak's own front ends call on a Tracker beyond its public API.

The front ends are the notebook's magics (`_notebook`: %%leakcheck, cell watch), run watch
(`_watch`), the training-run integrations (`integrations/_training_run`) and the command line
(`__main__`). They drive a Tracker through the members below and through nothing else of its
private state (tests/python/test_front_end.py holds them to it), so the Tracker can change
inside without breaking them, and a new front end knows what it may use. The Tracker's own parts
(`_torch_patches`, `_optimizer_registry`) are not front ends: they are installed by it and reach
its session.

Type checkers hold a Tracker to this protocol (`_tracking.Tracker` is assigned to it in the
test), and the front ends annotate what they are given with it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from ._report import Report


class TrackerFrontEnd(Protocol):
    @property
    def iterations(self) -> int:
        """Boundaries recorded so far."""

    @property
    def _started(self) -> bool:
        """Whether recording ever started: a report can be built (run watch's final save)."""

    @property
    def _last_iteration(self) -> dict[str, int]:
        """The last iteration's `born` and `freed` bytes and all tracked `live` bytes, from the
        recorder's counts alone (cell watch's ledger and `%leakwatch`'s status line): no report
        is built."""

    # Where `_run_iterations`' loop stopped ("in iteration 3 of 8", "after iteration 3 of 8"), or None.
    _stopped_at: str | None
    _stop_warning: str | None

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
        """`report()` with what a front end asks for besides: no paths and no dtype or shape
        (run watch's and the integrations' cheap verdicts mid-run), paths only for what grew in
        the last iteration (cell watch), the out-of-memory error a cell raised, a live view cut
        to `live_findings` findings (%%leakcheck's updates), check()'s arguments as roots."""

    def _verdicts(self, *, paths: bool = False, leave_out_settled: bool = False) -> dict[str, Any]:
        """Run watch's look: each finding's verdict, site, bytes and growth
        (torchleak.verdicts/1), nothing else of a report; with ``paths``, its path and holder;
        with ``leave_out_settled``, none of the findings settled at an earlier such look and
        unchanged since (never a leak nor undecided), counted in ``settled_left_out``."""

    def _run_iterations(
        self,
        body: Callable[[], object],
        iterations: int,
        *,
        after_each: Callable[[int], object] | None = None,
        describe: Callable[[BaseException], str] = str,
    ) -> BaseException | None:
        """%%leakcheck's loop: `body()` `iterations` times with a boundary after each; an
        exception stops it, is noted in the report and is returned, not raised."""

    def _end_cell(self, cell_file: str, execution_count: int) -> None:
        """Cell watch's boundary: the cell compiled as `cell_file` ran as `execution_count`."""

    def _warn(self, message: str) -> None:
        """Add a warning to the report, once (the command line's interrupted walk)."""
