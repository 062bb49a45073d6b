"""Signals (Ctrl-C and the kernel's Stop: SIGINT; torchrun's SIGTERM) while torchleak does work
that must not be cut in half.

A SIGINT delivered while the tracker records a boundary or draws %%leakcheck's live view would
raise KeyboardInterrupt out of torchleak's own code: the loop would end without its report and
with the iteration half counted. Held (`HeldInterrupt`), it is taken once that work is done, at
the boundary, where the loop stops the way it stops for an interrupt inside the user's code.
The command line's saves finish first (`SavesFinishFirst`), and a report an earlier Ctrl-C cut
short is saved with Ctrl-C ignored (`interrupts_ignored`); SIGTERM stops a script the way an
exception does, so its report is written (`TerminationSignal`). Python runs signal handlers on the
main thread only: elsewhere each of these leaves the handler alone."""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
import time
from collections.abc import Iterator
from types import TracebackType


class HeldInterrupt:
    """Within the block, SIGINT sets `arrived` instead of raising KeyboardInterrupt; the
    handler in place before is back once the block ends.

    Only Python's own handler is replaced, and only on the main thread (the one thread signal
    handlers run on): a handler the user or a framework installed keeps its meaning, and a
    loop on another thread is never interrupted by SIGINT anyway. IPython kernels run cells
    under Python's handler."""

    def __init__(self) -> None:
        self.arrived = False
        self._replaced = False

    def __enter__(self) -> HeldInterrupt:
        if (
            threading.current_thread() is threading.main_thread()
            and signal.getsignal(signal.SIGINT) is signal.default_int_handler
        ):
            signal.signal(signal.SIGINT, self._hold)
            self._replaced = True
        return self

    def _hold(self, signum: int, frame: object) -> None:
        self.arrived = True

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._replaced:
            signal.signal(signal.SIGINT, signal.default_int_handler)
            self._replaced = False


@contextlib.contextmanager
def interrupts_ignored() -> Iterator[None]:
    """Ctrl-C is ignored while a report that an earlier Ctrl-C cut short is saved (main thread
    only: Python takes signals there); the handler comes back afterwards."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


class SavesFinishFirst:
    """A first Ctrl-C while the report is printed and saved is noted and said, and the saves go
    on; a second one stops them (KeyboardInterrupt), each file left whole or untouched by the
    atomic writes. Main thread only: Python takes signals there."""

    interrupted = False

    def __enter__(self):
        self._previous = None
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._on_interrupt)
        return self

    def _on_interrupt(self, signum, frame):
        if self.interrupted:
            raise KeyboardInterrupt
        self.interrupted = True
        print(
            "torchleak: interrupted (Ctrl-C) while the report is saved: finishing the saves; Ctrl-C again stops them",
            file=sys.stderr,
            flush=True,
        )

    def __exit__(self, *exc):
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)


class TerminationSignal:
    """SIGTERM stops the script like an exception, so the report is still written (torchrun
    sends it to every rank when one fails). Held until the report is written: a SIGTERM after
    the script, or a second one (torchrun may send more), is noted and otherwise ignored, never
    the default action that would kill the process with its report half written. Only where
    nothing else handles SIGTERM, and only in the main thread; the previous handler comes back
    afterwards."""

    def __init__(self):
        self.note, self._previous = None, None
        self.at = None  # time.monotonic() of the first SIGTERM: torchrun's grace counts from it
        self.stops_script = False  # while the script runs, SIGTERM raises SystemExit in it

    def __enter__(self):
        if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
            self._previous = signal.signal(signal.SIGTERM, self._on_signal)
        return self

    def _on_signal(self, signum, frame):
        first = self.note is None
        self.note = "terminated by SIGTERM"
        if first:
            self.at = time.monotonic()
        if first and self.stops_script:
            raise SystemExit(128 + signum)

    def __exit__(self, *exc):
        if self._previous is not None:
            signal.signal(signal.SIGTERM, self._previous)
        return False
