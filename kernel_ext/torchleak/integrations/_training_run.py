"""One training run tracked from a framework's callback: an iteration per optimizer step, a
verdict every ``check_every`` steps while the run goes on, the report at its end. The
framework adapters (huggingface.py, lightning.py) only translate their events into these calls.
"""

import os
import warnings

from .._arguments import check_options
from .._job import rank_path
from .._out_of_memory import attach
from .._report import save_each
from .._tracking import Tracker

REPORT_NAME = "torchleak-report"


class TrainingRunTracking:
    """``start()`` at train begin, ``optimizer_step()`` after each optimizer step, ``finish()``
    at train end (or with the exception that ended the run). ``log(level, message)`` is the
    framework's own logger; ``on_leak(report)`` is the user's callback, called once, when a leak
    is first confirmed."""

    def __init__(self, *, warmup, check_every, min_bytes, save, on_leak, log):
        check_options(check_every=check_every, on_leak=on_leak, warmup=warmup, min_bytes=min_bytes)
        self._options = {"warmup": warmup, "min_bytes": min_bytes}
        self._check_every = check_every
        self._save = bool(save)
        self._on_leak = on_leak
        self._log = log
        self.tracker = None
        self.report = None
        self.leak_confirmed_at = None  # the optimizer step at which a leak was first confirmed

    @property
    def active(self):
        return self.tracker is not None and self.tracker.active

    def start(self):
        if self.active:
            # The last run raised where no framework event said so: its tracking ends here.
            self._log("warning", "torchleak: the previous run ended without train end; its tracking stops now")
            self.tracker.stop()
        # A run that raised where no framework event said so (no `with callback:`), or a second
        # callback on the same trainer, must not leave every later tracking in the process
        # failing with "already tracking": when another one starts, this one steps aside.
        self.tracker = Tracker(boundary="explicit", on_preempt=self._step_aside, **self._options)
        self.tracker.start()
        self.report, self.leak_confirmed_at = None, None

    def optimizer_step(self, step, output_dir):
        """An optimizer step ended (``step``: the framework's global step)."""
        if not self.active:
            return
        self.tracker.step()
        every = self._check_every
        if every is None or self.leak_confirmed_at is not None or step % every:
            return
        # A verdict without paths (nor the heap scan for dtype and shape) is the recorder's
        # counts and a fit per site: cheap enough to take every `check_every` steps. The paths
        # are walked only once a leak is confirmed.
        if not self.tracker._build_report(paths=False, shapes=False).leaks:
            return
        self.leak_confirmed_at = step
        report = self.tracker.report()
        self._announce(report, output_dir, f"leak confirmed at step {step}")
        if self._on_leak is not None:
            try:
                self._on_leak(report)
            except Exception as error:  # noqa: BLE001 - a user callback must not stop training
                self._log("warning", f"torchleak: on_leak raised {type(error).__name__}: {error}; the run goes on")

    def _step_aside(self):
        tracker = self.tracker
        if tracker is None or not tracker.active:
            return
        message = (
            "torchleak: a training run's tracking was still on (the run raised without "
            "`with callback:`, or a second torchleak callback started); it stops now so "
            "the new tracking can start"
        )
        self._log("warning", message)
        warnings.warn(message, RuntimeWarning, stacklevel=2)
        tracker.stop()

    def finish(self, output_dir, exc=None):
        """Stop tracking, build the run's report (with out-of-memory forensics when ``exc`` is
        one), log it and save it. Idempotent; returns the report (None if never started)."""
        if self.tracker is None or self.report is not None:
            return self.report
        self.tracker.stop()
        failed = self.tracker.note_failure(exc)
        self.report = self.tracker.report()
        if failed:
            attach(exc, self.report)
        self._announce(
            self.report, output_dir, "train end" if exc is None else f"the run failed with {type(exc).__name__}"
        )
        return self.report

    def _announce(self, report, output_dir, when):
        saved = self._write(report, output_dir)
        lines = [f"torchleak ({when}): {report.summary.get('headline', '')}"]
        if report.oom:
            lines.append(report.oom.get("text", ""))
        for cause in report.causes:
            lines.append(f"  LEAK {cause.get('text', '')}; fix: {cause.get('suggestion', '')}")
        if saved:
            lines.append(f"  report: {', '.join(saved)}")
        self._log("warning" if report.leaks or report.oom else "info", "\n".join(lines))

    def _write(self, report, output_dir):
        if not self._save or not output_dir:
            return []
        # Every rank of a multi-GPU run has the same output directory: each its own file.
        # A report that cannot be written must not end the run: say so and go on.
        try:
            os.makedirs(output_dir, exist_ok=True)
        except OSError as exc:
            self._log("warning", f"torchleak: could not save the report in {output_dir!r}: {exc}")
            return []
        rank = self.tracker.rank
        saved, failed = save_each(
            report, [rank_path(os.path.join(output_dir, f"{REPORT_NAME}.{ext}"), rank) for ext in ("json", "html")]
        )
        for path, exc in failed:
            self._log("warning", f"torchleak: could not save {path}: {exc}")
        return saved


class TrackedRunCallback:
    """What both frameworks' callbacks share: the run's tracking and what it found. Mixed in
    before the framework's own Callback class."""

    def __init__(self, *, warmup, check_every, min_bytes, save, on_leak, log):
        super().__init__()  # the framework's Callback, next in the MRO
        self._run = TrainingRunTracking(
            warmup=warmup, check_every=check_every, min_bytes=min_bytes, save=save, on_leak=on_leak, log=log
        )

    @property
    def report(self):
        """The last run's report (None before its end)."""
        return self._run.report

    @property
    def leak_confirmed_at(self):
        """The optimizer step at which ``check_every`` first confirmed a leak, or None."""
        return self._run.leak_confirmed_at
