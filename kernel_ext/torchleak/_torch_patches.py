"""What torchleak changes inside torch while a Tracker runs, each an install/remove pair.

Each patch was checked against the torch versions the matrix runs (2.11 to 2.15); a torch that
lacks what one patches leaves that patch out and the report loses only what it adds. The
Tracker installs them in order once its session records and removes them in reverse order
whatever happens (tests/python/hook_checks.py fails a test that leaves any installed).
"""

import functools
import sys
import threading

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

from . import _core

_profiler_module = sys.modules["torch.autograd.profiler"]


class ProfilerStepAside:
    """torch.profiler refuses to start while anything sits in PROFILER_STATE: step aside when it
    starts on the tracking thread and come back when it stops. torch calls
    torch.autograd.profiler's _run_on_profiler_start right before enabling its profiler and
    _run_on_profiler_stop right after disabling it (2.11 to 2.15)."""

    def __init__(self, tracker):
        self._tracker = tracker
        self._originals = None

    def install(self):
        original_start = _profiler_module._run_on_profiler_start
        original_stop = _profiler_module._run_on_profiler_stop
        tracker = self._tracker

        def on_profiler_start():
            session = tracker._session
            if (
                session is not None
                and session.active
                and not session.paused
                and threading.get_ident() == tracker._thread
            ):
                session.pause()
                msg = "torch.profiler ran inside torchleak.track(): allocations made while it was on were not recorded"
                tracker._warn(msg)
            return original_start()

        def on_profiler_stop():
            result = original_stop()
            session = tracker._session
            if (
                session is not None
                and session.active
                and session.paused
                and threading.get_ident() == tracker._thread
                and not _core.profiler_state_installed()
            ):
                session.resume()
            return result

        self._originals = (original_start, original_stop)
        _profiler_module._run_on_profiler_start = on_profiler_start
        _profiler_module._run_on_profiler_stop = on_profiler_stop

    def remove(self):
        if self._originals is not None:
            _profiler_module._run_on_profiler_start, _profiler_module._run_on_profiler_stop = self._originals
            self._originals = None


class BackwardSites:
    """Blocks that autograd's nodes make on a device's own thread (no Python stack there; on
    CUDA no capture at all, the hook runs under the allocator's mutex) are attributed to the
    line that called backward() or autograd.grad(). Both reach the engine through
    torch.autograd._engine_run_backward (2.11 to 2.15, imported into torch.autograd by name); a
    torch without it leaves such blocks named by their node alone."""

    def __init__(self, tracker):
        self._tracker = tracker
        self._original = None

    def install(self):
        original = getattr(torch.autograd, "_engine_run_backward", None)
        if original is None:
            return
        tracker = self._tracker

        @functools.wraps(original)
        def run_backward(*args, **kwargs):
            session = tracker._session
            if session is None or not session.active:
                return original(*args, **kwargs)
            previous = session.begin_backward()
            try:
                return original(*args, **kwargs)
            finally:
                session.end_backward(previous)

        self._original = original
        torch.autograd._engine_run_backward = run_backward

    def remove(self):
        if self._original is not None:
            torch.autograd._engine_run_backward = self._original
            self._original = None


class OptimizerPhases:
    """The blocks an optimizer's step makes (its state, at the first step) are born in that
    phase, and the optimizers seen stepping are remembered for naming their blocks: every
    optimizer's step runs torch.optim's global pre- and post-step hooks (2.11 to 2.15)."""

    def __init__(self, tracker):
        self._tracker = tracker
        self._handles = []

    def install(self):
        tracker = self._tracker

        def begin(optimizer, args, kwargs):
            session = tracker._session
            if session is not None and session.active:
                tracker._registry.add(optimizer)
                session.begin_optimizer_step()

        def end(optimizer, args, kwargs):
            session = tracker._session
            if session is not None and session.active:
                session.end_optimizer_step()

        self._handles = [register_optimizer_step_pre_hook(begin), register_optimizer_step_post_hook(end)]

    def remove(self):
        for handle in self._handles:
            handle.remove()
        self._handles = []


# In the order they go in; they come out in reverse.
PATCHES = (ProfilerStepAside, BackwardSites, OptimizerPhases)
