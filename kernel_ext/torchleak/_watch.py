"""torchleak.watch(): a whole training run watched with bounded memory, a verdict as it goes.

The recorder's history is thinned to a fixed grid however long the run (recorder.h), blocks
under ``sample_bytes`` are sampled (allocation_sampler.h), and the verdict is taken without
retaining paths, on a time budget: checks may take at most ``budget`` of the run's wall time,
so a long step is checked every step and a 10 ms step every few dozen. A leak, once confirmed,
is reported once: a log line, the report written, the callback called; the run goes on.
"""

import logging
import os
import time
import warnings

from ._job import DEFAULT_GATHER_TIMEOUT, rank_path
from ._arguments import check_options
from ._config import brief
from ._report import OUTPUT_EXTENSIONS, save_each, writable_path
from ._tracking import Tracker
from .render.format import format_bytes

logger = logging.getLogger("torchleak")

DEFAULT_SAMPLE_BYTES = 256 * 1024
# A trend needs a few points past the warm-up before it can be called a leak.
_MIN_JUDGED_ITERATIONS = 8


class Watch:
    """What :func:`watch` returns: use it as a context manager, or ``start()`` / ``stop()``.

    ``watch.leaks`` holds the line logged for each confirmed leak, ``watch.report()`` the report
    so far (or of the whole run after ``stop()``).
    """

    def __init__(
        self,
        *,
        every=1,
        on_leak=None,
        json="torchleak-watch.json",
        html=None,
        sample_bytes=DEFAULT_SAMPLE_BYTES,
        warmup=None,
        min_bytes=0,
        budget=0.005,
        gather_timeout=DEFAULT_GATHER_TIMEOUT,
        redact=False,
    ):
        check_options(on_leak=on_leak, budget=budget)
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
        # Absolute now: a run that changes directory still writes where it was asked to.
        self._paths = [os.path.abspath(p) for p in (json, html) if p]
        self._budget = float(budget)
        self._redact = bool(redact)
        self._announced = set()
        self.leaks = []
        self.checks = 0
        self._spent = 0.0
        self._started = None
        self._broken = False
        # The CLI writes the end-of-run report itself (after gathering a job's ranks).
        self.save_at_end = True

    # -- start and stop ------------------------------------------------------------------------
    def __enter__(self):
        return self.start()

    def __exit__(self, exc_type, exc, tb):
        self.tracker.__exit__(exc_type, exc, tb)
        self._save_final()
        return False

    def start(self):
        self._started = time.perf_counter()
        self.tracker.start()
        return self

    def stop(self):
        """Stop watching, restore every hook and write the final report. Idempotent."""
        self.tracker.stop()
        self._save_final()

    def report(self, **kwargs):
        return self.tracker.report(**kwargs)

    @property
    def overhead(self):
        """Seconds spent on verdicts so far, as a fraction of the time watched."""
        elapsed = time.perf_counter() - self._started if self._started else 0.0
        return self._spent / elapsed if elapsed > 0 else 0.0

    # -- the verdict as the run goes ----------------------------------------------------------
    def _after_boundary(self, tracker):
        if self._broken or tracker.iterations < tracker.warmup + _MIN_JUDGED_ITERATIONS:
            return
        if self._spent > self._budget * (time.perf_counter() - self._started):
            return
        begun = time.perf_counter()
        try:
            self.checks += 1
            quick = tracker._build_report(paths=False, shapes=False)
            new = [f for f in quick.leaks if _key(f) not in self._announced]
            if new:
                self._announce(tracker.report(), {_key(f) for f in new})
        except Exception as error:  # noqa: BLE001 - the training run must go on
            self._broken = True
            warnings.warn(f"torchleak.watch stopped judging the run: {error}", RuntimeWarning)
        finally:
            self._spent += time.perf_counter() - begun

    def _announce(self, report, keys):
        written = self._write(report)
        unit, per = _unit(report, self._every)
        for f in report.leaks:
            if _key(f) not in keys:
                continue
            self._announced.add(_key(f))
            holder = (f.get("holder") or {}).get("path_text") or f.get("path_text") or "unknown"
            rate = f.bytes_per_iteration / per
            line = (
                f"torchleak: leak confirmed after {report.iterations} "
                f"iterations: {f.site_text} held by {holder}, +{format_bytes(rate)} per "
                f"{unit}" + (f"; report: {written[0]}" if written else "")
            )
            self.leaks.append(line)
            logger.warning(line)
        if self._on_leak is not None:
            try:
                self._on_leak(report)
            except Exception as error:  # noqa: BLE001 - a user callback must not stop the run
                warnings.warn(f"torchleak.watch: on_leak raised {type(error).__name__}: {error}", RuntimeWarning)

    def _write(self, report):
        written, failed = save_each(report, [rank_path(p, self.tracker.rank) for p in self._paths], redact=self._redact)
        for path, error in failed:
            warnings.warn(f"torchleak.watch could not write {path}: {error}", RuntimeWarning)
        return written

    def _save_final(self):
        if self.save_at_end and self.tracker._started and self._paths:
            self._write(self.tracker.report())


def _key(finding):
    return (finding.site_text, finding.get("device"))


def _unit(report, every):
    """Rates said per optimizer step when iterations are groups of `every` of them."""
    if report.to_dict().get("boundary") == "optimizer_step":
        return "step", every
    return "iteration", 1


def watch(
    *,
    every=1,
    on_leak=None,
    json="torchleak-watch.json",
    html=None,
    sample_bytes=DEFAULT_SAMPLE_BYTES,
    warmup=None,
    min_bytes=0,
    budget=0.005,
    gather_timeout=DEFAULT_GATHER_TIMEOUT,
    redact=False,
):
    """Watch a whole training run: an iteration every ``every`` optimizer steps (or at each
    ``torchleak.step()``), blocks under ``sample_bytes`` sampled (0 records every block), and
    a verdict as the run goes, on at most ``budget`` of its time. When a leak is confirmed:
    one log line (logger "torchleak": site, holder, bytes per step), the report written to
    ``json`` / ``html`` (``{rank}`` is the rank in a torch.distributed job), and
    ``on_leak(report)`` called; the run is not stopped. The final report is written at the end.
    With ``redact`` the files written are ``Report.redacted()`` (shapes, sources, absolute
    paths and string keys withheld); ``on_leak`` and ``report()`` get the whole report.
    """
    return Watch(
        every=every,
        on_leak=on_leak,
        json=json,
        html=html,
        sample_bytes=sample_bytes,
        warmup=warmup,
        min_bytes=min_bytes,
        budget=budget,
        gather_timeout=gather_timeout,
        redact=redact,
    )
