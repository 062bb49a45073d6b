"""torchleak.watch(): a whole training run watched with bounded memory, a verdict as it goes.

The recorder's history is thinned to a fixed grid however long the run (recorder.h), every
block is recorded with its stack as under track() (blocks under ``sample_bytes`` are sampled
when it is given: allocation_sampler.h), and the verdict is taken without retaining paths, on
a time budget: checks may take at most ``budget`` of the run's wall time,
so a long step is checked every step and a 10 ms step every few dozen. Memory itself can call a
check the budget would skip (_CheckCue): the tracked total rising to a new high over several
boundaries, or no new high since a leak was confirmed, so that a leak of 1% of the tracked total per iteration
is confirmed within about 10 boundaries of its onset, wherever the onset falls. A leak, once
confirmed, is reported once: a log line, the report written, ``on_leak`` called; the run goes
on. A confirmed leak whose growth became a plateau (it evicts its oldest blocks, or has been
flat for eight times as long as it grew: verdict.cpp) is withdrawn the same way, with
``on_withdrawn``, looked at the iteration the core says it would settle; one only undecided (a
staircase between its steps) is not.
"""

from __future__ import annotations

import logging
import os
import time
import warnings
from collections import deque
from collections.abc import Callable
from types import TracebackType
from typing import Any, Literal

from ._job import DEFAULT_GATHER_TIMEOUT, rank_path
from ._arguments import check_options
from ._config import brief
from ._report import OUTPUT_EXTENSIONS, Finding, Report, biggest_leaks, save_each, writable_path
from ._tracking import Tracker
from .render.format import format_bytes, site_text

logger = logging.getLogger("torchleak")

# Every block recorded, as track() does: sampling small blocks (size / 256 KiB) hid the leaks of
# small blocks that track() finds (a rising floor, 16 KiB under noise, 4 KiB per step: 0 of 12
# runs announced in bench_shapes), and saved nothing measurable on a training step (make
# bench's (c) workload, 10 interleaved rounds: unsampled against sampled -3.0% median, within
# the noise; the hook's own work 86 ns an event). It pays on loops of millions of tiny ops:
# sample_bytes=262144 there.
DEFAULT_SAMPLE_BYTES = 0
# A trend needs a few points past the warm-up before it can be called a leak.
_MIN_JUDGED_ITERATIONS = 8


class _CheckCue:
    """When memory itself asks for a check the time budget would skip. Four cues, each with its own
    back-off: *rising*, the tracked total at the highest of the last SPAN boundaries, up RISE of
    itself over them, in MIN_RISES steps or more (a leak of 1% per iteration is cued within SPAN,
    sampled or not), less what the leaks already announced add at their rate; *settled*, confirmed
    leaks standing and the total at no new high for SPAN boundaries (growth that may have stopped:
    a cache that filled up is withdrawn soon after). A cued check that changed nothing makes its
    cue wait before the next: MIN_GAP boundaries, then twice as long after each further miss
    (MIN_GAP, 2 MIN_GAP, ... MAX_GAP), so a steady leak already announced, a sampled one that rises
    in jumps, or a run that only wobbles costs a few dozen checks, not one per boundary; a check
    that announced or withdrew resets both. A rise to a quarter above the total at the last look is
    cued whatever the back-off: misses early in a long run (noise that rose and fell) had made the
    cue deaf for up to MAX_GAP boundaries, and a leak in a run's last 5% was never announced.
    *steady*: an allocation group became a steady riser (a new high at 6 of its last 8 boundaries:
    the recorder's word, recorder.h), a leak too small to move the total (4 KiB a step under 1 MiB
    of transients); it asks for STEADY_LOOKS looks on its own back-off (at the crossing, then 4, 8
    and 16 boundaries later), enough for the trailing stretch to confirm it, and no more until
    another group crosses. *stepped*: a group reached a new high in rhythm, the third or later of
    regular steps (recorder.h): one look then, the boundary a staircase's third step shows at,
    where the core confirms it. O(1) per boundary: the total and the groups' words come with the
    boundary (session.step())."""

    SPAN = 8
    RISE = 0.04
    MIN_GAP = 4  # a rise cued at its 4th boundary is confirmed by the look at its 8th
    MIN_RISES = 3  # of the last SPAN steps: one jump is not a trend; a sampled leak rises at some
    MAX_GAP = 1024
    NEW_HIGH = 1.25  # of the total at the last look: a rise the back-off does not hold back
    STEADY_LOOKS = 4

    class _Backoff:
        def __init__(self):
            self.last, self.misses = -_CheckCue.MAX_GAP, 0

        def ready(self, iteration):
            return iteration - self.last >= min(_CheckCue.MIN_GAP << max(self.misses - 1, 0), _CheckCue.MAX_GAP)

        def taken(self, iteration, changed):
            self.last = iteration
            self.misses = 0 if changed else self.misses + 1

    def __init__(self):
        self._totals = deque(maxlen=self.SPAN + 1)  # (iteration, tracked total)
        self._high = 0
        self._high_at = 0
        self._rising = self._Backoff()
        self._settled = self._Backoff()
        self._steady = self._Backoff()
        self._steady_left = 0  # looks the last steady riser still asks for
        self._crossings = 0  # groups that became steady risers since a look announced them
        self._stepped = self._Backoff()
        self._step_now = False
        self._cued = None
        self._looked_at = 0  # the total when the run was last looked at
        self._looked_when = 0  # and the iteration
        self._explained = 0.0  # bytes per iteration the leaks announced then add

    def observe(self, iteration, total, newly_steady=0, stepped=0):
        self._step_now = stepped > 0
        self._totals.append((iteration, total))
        if total > self._high:
            self._high, self._high_at = total, iteration
        if newly_steady:
            self._steady = self._Backoff()
            self._steady_left = self.STEADY_LOOKS
            self._crossings += newly_steady

    def _unexplained(self, iteration, total):
        """The total less what the announced leaks added since the last look at their rate:
        2,000 sites announced at once went on rising the total, and each rise had cued a look
        of all of them that found nothing new (8 looks in 30 steps, each 0.1 s)."""
        return total - self._explained * (iteration - self._looked_when)

    def due(self, iteration, announced):
        self._cued = None
        if len(self._totals) <= self.SPAN:
            return False
        totals = [self._unexplained(i, t) for i, t in self._totals]
        rises = sum(b > a for a, b in zip(totals, totals[1:]))
        grew = totals[-1] - totals[0] >= self.RISE * max(self._totals[-1][1], 1)
        if totals[-1] >= max(totals) and grew and rises >= self.MIN_RISES:
            self._cued = self._rising
            far = totals[-1] >= self.NEW_HIGH * max(self._looked_at, 1)
            if far and iteration - self._rising.last >= self.MIN_GAP:
                return True
        elif announced and iteration - self._high_at >= self.SPAN:
            self._cued = self._settled
        if self._cued is not None and self._cued.ready(iteration):
            return True
        if self._steady_left > 0 and self._steady.ready(iteration):
            self._cued = self._steady
            return True
        if self._step_now and self._stepped.ready(iteration):
            self._cued = self._stepped
            return True
        return False

    def looked(self, total, iteration=0, explained=0.0, announced=0):
        """A look was taken (cued or in the budget) with the tracked total at `total`; the
        leaks standing add `explained` bytes per iteration, and `announced` were new. A look
        that announced as many sites as groups became steady risers has answered their
        crossings: their steady looks would find nothing new (a group is one site's stack,
        so a small leak crossing beside an announced big one still gets its looks)."""
        self._looked_at, self._looked_when, self._explained = total, iteration, max(explained, 0.0)
        self._crossings = max(self._crossings - announced, 0)
        if announced and self._crossings == 0:
            self._steady_left = 0

    def taken(self, iteration, changed):
        if changed:
            self._rising.misses = self._settled.misses = self._stepped.misses = 0
        if self._cued is not None:
            self._cued.taken(iteration, changed)
        if self._cued is self._steady:
            self._steady_left = 0 if changed else self._steady_left - 1
        if self._steady_left == 0:
            self._crossings = 0


class Watch:
    """What :func:`watch` returns: use it as a context manager, or ``start()`` / ``stop()``.

    ``watch.leaks`` holds the line logged for each confirmed leak, ``watch.report()`` the report
    so far (or of the whole run after ``stop()``).
    """

    def __init__(
        self,
        *,
        every: int = 1,
        on_leak: Callable[[Report], object] | None = None,
        on_withdrawn: Callable[[Report], object] | None = None,
        json: str | None = "torchleak-watch.json",
        html: str | None = None,
        sample_bytes: int = DEFAULT_SAMPLE_BYTES,
        warmup: int | None = None,
        min_bytes: int = 0,
        budget: float = 0.005,
        gather_timeout: float | None = DEFAULT_GATHER_TIMEOUT,
        redact: bool = False,
    ) -> None:
        check_options(on_leak=on_leak, on_withdrawn=on_withdrawn, budget=budget)
        for (name, ends), path in zip(OUTPUT_EXTENSIONS.items(), (json, html)):
            if path is not None and (not isinstance(path, str) or not path.lower().endswith(ends)):
                raise ValueError(f"{name} must be a path ending in {' or '.join(ends)}, got {brief(path)}")
            if path is not None:  # now, not at the first leak hours later
                try:
                    writable_path(path.replace("{rank}", "0"), ends)
                except ValueError as exc:
                    raise ValueError(f"{name} {exc}") from None
        self.tracker = Tracker(
            warmup=warmup,
            min_bytes=min_bytes,
            every=every,
            sample_bytes=sample_bytes,
            gather_timeout=gather_timeout,
            on_boundary=self._after_boundary,
        )
        self._every = every
        self._on_leak = on_leak
        self._on_withdrawn = on_withdrawn
        # Absolute now: a run that changes directory still writes where it was asked to.
        self._paths = [os.path.abspath(p) for p in (json, html) if p]
        self._budget = float(budget)
        self._redact = bool(redact)
        self._announced: dict[Any, Any] = {}  # key -> the holder said when it was announced
        self._last_listed: dict[Any, Any] = {}  # announced key -> its finding at the last look listing it
        self._deferred: dict[Any, int] = {}  # key -> the iteration a report said to look at it again
        self._cue = _CheckCue()
        self._explained = 0.0  # bytes per iteration the standing leaks add, at the last look
        self._new_at_last_look = 0
        # The iteration at which an announced leak, undecided now, becomes a plateau if it stays
        # flat (the core's growth_since.settles_at): a look is due then, whatever the budget.
        self._settles_at: int | None = None
        self.leaks: list[str] = []
        self.withdrawn: list[str] = []
        self.checks = 0
        self.cued_checks = 0
        self._spent = 0.0
        self._started: float | None = None
        self._broken = False
        # The CLI writes the end-of-run report itself (after gathering a job's ranks).
        self.save_at_end = True

    # -- start and stop ------------------------------------------------------------------------
    def __enter__(self) -> Watch:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> Literal[False]:
        self.tracker.__exit__(exc_type, exc, tb)
        self._save_final()
        return False

    def start(self) -> Watch:
        """Install the hooks and start watching (what ``with`` does on entry)."""
        self._started = time.perf_counter()
        self.tracker.start()
        return self

    def stop(self) -> None:
        """Stop watching, restore every hook and write the final report. Idempotent."""
        self.tracker.stop()
        self._save_final()

    def report(self, **kwargs: Any) -> Report:
        return self.tracker.report(**kwargs)

    @property
    def overhead(self) -> float:
        """Seconds spent on verdicts so far, as a fraction of the time watched."""
        elapsed = time.perf_counter() - self._started if self._started else 0.0
        return self._spent / elapsed if elapsed > 0 else 0.0

    # -- the verdict as the run goes ----------------------------------------------------------
    def _after_boundary(self, tracker):
        iteration = tracker.iterations
        self._cue.observe(iteration, tracker.live_bytes, tracker.newly_steady_groups, tracker.stepped_groups)
        if self._broken or iteration < tracker.warmup + _MIN_JUDGED_ITERATIONS:
            return
        cued = False
        settling = self._settles_at is not None and iteration >= self._settles_at
        if not settling and self._spent > self._budget * (time.perf_counter() - self._started):
            cued = self._cue.due(iteration, bool(self._announced))
            if not cued:
                return
        begun = time.perf_counter()
        try:
            self.checks += 1
            self.cued_checks += cued
            changed = self._check(tracker)
            self._cue.looked(tracker.live_bytes, iteration, self._explained, self._new_at_last_look)
            if cued:
                self._cue.taken(iteration, changed)
        except Exception as error:  # noqa: BLE001 - the training run must go on
            self._broken = True
            warnings.warn(f"torchleak.watch stopped judging the run: {error}", RuntimeWarning)
        finally:
            self._spent += time.perf_counter() - begun

    def _check(self, tracker):
        """One verdict on the run so far; True when it announced or withdrew a leak."""
        document = tracker._verdicts(leave_out_settled=True)
        by_key = {_key(f): f for f in document["findings"]}
        if document.get("settled_left_out"):
            # A finding left out was settled at an earlier look and has not changed since: what
            # the look that last listed it said still holds (an announced leak whose thinned
            # points came to read flat is one).
            for k in self._announced:
                if k not in by_key and k in self._last_listed:
                    by_key[k] = self._last_listed[k]
        # What the report last called too soon, knowing the holder (a bounded deque still
        # filling), waits for the iteration it said: a look has no holders to tell it again.
        self._deferred = {k: at for k, at in self._deferred.items() if at > tracker.iterations}
        new = {k for k, f in by_key.items() if f["verdict"] == "leak"} - set(self._announced) - set(self._deferred)
        self._last_listed = {k: by_key[k] for k in set(self._announced) | new if k in by_key}
        over = [k for k in self._announced if _stopped(by_key.get(k))]
        self._new_at_last_look = len(new)
        standing = (by_key[k] for k in set(self._announced).union(new) - set(over) if k in by_key)
        self._explained = sum(max(f.get("bytes_per_iteration") or 0, 0) for f in standing)
        settles = [
            (by_key[k].get("growth_since") or {}).get("settles_at")
            for k in self._announced
            if k not in over and k in by_key and by_key[k]["verdict"] == "undecided"
        ]
        settles = [s for s in settles if s is not None]
        # settles_at counts iterations as the report does: a look past it, not at it, and never
        # one at every boundary (a thinned grid may settle a few iterations later).
        self._settles_at = max(min(settles) + 1, tracker.iterations + _CheckCue.MIN_GAP) if settles else None
        if not new and not over:
            return False
        report = self._report_to_announce(tracker, announcing=bool(new), withdrawing=bool(over))
        written = self._write(report)
        if over:
            self._withdraw(report, over, written)
        if new:
            self._announce(report, new, written)
            for f in report.findings:
                if _key(f) in new and _key(f) not in self._announced:
                    settles = (f.get("growth_since") or {}).get("settles_at")
                    self._deferred[_key(f)] = settles or tracker.iterations + _CheckCue.MIN_GAP
        return True

    def _report_to_announce(self, tracker, *, announcing, withdrawing):
        """The whole report when it is written or handed to a callback. A watch that only logs
        reads the holder, site, rate and onset of what its lines say: a look with paths has them,
        the same as the whole report's, without fix proofs, live-block lists, the heap scan for
        dtypes and shapes, or a report's document to write and parse (at 2,000 leaking sites of
        one list, two thirds of the live view's time it built before); watch.report() still
        builds the whole one."""
        wanted = (announcing and self._on_leak is not None) or (withdrawing and self._on_withdrawn is not None)
        if self._paths or wanted:
            return tracker.report()
        return _LookWithHolders(tracker._verdicts(paths=True))

    def _announce(self, report, keys, written):
        """One line per holder: a list filled from 2,000 lines of a loop is one leak to its
        reader, not 2,000 lines of log."""
        unit, per = _unit(report, self._every)
        by_holder: dict[str, list[Any]] = {}
        for f in report.leaks:
            if _key(f) not in keys:
                continue
            holder = (f.get("holder") or {}).get("path_text") or f.get("path_text") or "unknown"
            self._announced[_key(f)] = holder
            by_holder.setdefault(holder, []).append(f)
        for holder, found in by_holder.items():
            first = found[0]
            rate = sum(f.bytes_per_iteration for f in found) / per
            sites = first.site_text
            if len(found) > 1:
                sites += f" and {len(found) - 1:,} other site{'s' if len(found) > 2 else ''}"
            onsets = [f.get("growth_since") for f in found if f.get("growth_since")]
            onset = ""
            # The core's words count iterations, and name one site's rate; a run watched every N
            # steps counts steps, and several sites are said by their earliest onset.
            if len(found) == 1 and onsets and per == 1:
                onset = f"; {onsets[0]['text']}"
            elif onsets:
                onset = f"; since {unit} {min(o['iteration'] for o in onsets) * per + 1:,}"
            _say(
                self.leaks,
                f"torchleak: leak confirmed after {report.iterations} iterations: {sites} held by "
                f"{holder}, +{format_bytes(rate)} per {unit}{onset}",
                written,
            )
        if by_holder:
            self._call("on_leak", self._on_leak, report)

    def _withdraw(self, report, keys, written):
        by_key = {_key(f): f for f in report.findings}
        for key in keys:
            holder = self._announced.pop(key)
            f = by_key.get(key)
            since = (f.get("growth_since") or {}) if f is not None else {}
            if since.get("stopped_at") is not None:
                what = since["text"]
            else:
                what = "its memory was freed"
            _say(
                self.withdrawn,
                f"torchleak: leak withdrawn after {report.iterations} iterations: {key[0]} held by "
                f"{holder}: {what}; not a leak",
                written,
            )
        self._call("on_withdrawn", self._on_withdrawn, report)

    def _call(self, name, callback, report):
        if callback is None:
            return
        try:
            callback(report)
        except Exception as error:  # noqa: BLE001 - a user callback must not stop the run
            warnings.warn(f"torchleak.watch: {name} raised {type(error).__name__}: {error}", RuntimeWarning)

    def _write(self, report):
        if not self._paths:
            return []
        written, failed = save_each(report, [rank_path(p, self.tracker.rank) for p in self._paths], redact=self._redact)
        for path, error in failed:
            warnings.warn(f"torchleak.watch could not write {path}: {error}", RuntimeWarning)
        return written

    def _save_final(self):
        if self.save_at_end and self.tracker._started and self._paths:
            self._write(self.tracker.report())


class _LookWithHolders:
    """A look with paths (torchleak.verdicts/1) read as an announcement reads a report: its
    findings, its leaks biggest first, its iterations and boundary."""

    def __init__(self, document):
        self._data = document
        self.findings = [Finding(f) for f in document.get("findings", [])]

    @property
    def leaks(self):
        return biggest_leaks(self.findings)

    @property
    def iterations(self):
        return self._data.get("iterations", 0)

    def to_dict(self):
        return self._data


def _say(lines, line, written):
    """One line logged (logger "torchleak") and kept, naming the report just written."""
    line += f"; report: {written[0]}" if written else ""
    lines.append(line)
    logger.warning(line)


def _key(finding):
    """A finding's identity across looks: a report's Finding or a look's verdict (a dict)."""
    return (site_text(finding.get("site")), finding.get("device"))


def _stopped(finding):
    """An announced leak is over when its growth became a plateau (it evicts, or has been flat
    for eight times as long as it grew) or what it kept was freed; a finding still called a
    leak, or undecided (a staircase between steps), is not. `finding` is a look's verdict."""
    if finding is None:
        return True
    if finding["verdict"] in ("leak", "undecided"):
        return False
    since = finding.get("growth_since") or {}
    return since.get("stopped_at") is not None or finding["total_bytes"] == 0


def _unit(report, every):
    """Rates said per optimizer step when iterations are groups of `every` of them."""
    if report.to_dict().get("boundary") == "optimizer_step":
        return "step", every
    return "iteration", 1


def watch(
    *,
    every: int = 1,
    on_leak: Callable[[Report], object] | None = None,
    on_withdrawn: Callable[[Report], object] | None = None,
    json: str | None = "torchleak-watch.json",
    html: str | None = None,
    sample_bytes: int = DEFAULT_SAMPLE_BYTES,
    warmup: int | None = None,
    min_bytes: int = 0,
    budget: float = 0.005,
    gather_timeout: float | None = DEFAULT_GATHER_TIMEOUT,
    redact: bool = False,
) -> Watch:
    """Watch a whole training run: an iteration every ``every`` optimizer steps (or at each
    ``torchleak.step()``), every block recorded (``sample_bytes`` > 0: blocks under it sampled), and
    a verdict as the run goes, on at most ``budget`` of its time. When a leak is confirmed:
    one log line (logger "torchleak": site, holder, bytes per step), the report written to
    ``json`` / ``html`` (``{rank}`` is the rank in a torch.distributed job), and
    ``on_leak(report)`` called; the run is not stopped. A memory trend cues a check the budget
    would skip, so a leak of 1% of the tracked total per iteration is confirmed within about 10
    iterations of its onset. A confirmed leak whose growth then stopped for long enough to be a
    plateau (a cache that filled up: it evicts, or has been flat for eight times as long as it
    grew) is withdrawn: one log line, the report written again, ``on_withdrawn(report)`` called;
    a leak that steps is not withdrawn between its steps. The final report is written at the
    end.
    With ``redact`` the files written are ``Report.redacted()`` (shapes, sources, absolute
    paths and string keys withheld); ``on_leak`` and ``report()`` get the whole report.
    """
    return Watch(
        every=every,
        on_leak=on_leak,
        on_withdrawn=on_withdrawn,
        json=json,
        html=html,
        sample_bytes=sample_bytes,
        warmup=warmup,
        min_bytes=min_bytes,
        budget=budget,
        gather_timeout=gather_timeout,
        redact=redact,
    )
