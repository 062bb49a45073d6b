"""The check every in-process tier runs around each test: it starts with no hook installed and
leaves none behind (tests/python, tests/integrations and tests/device use it)."""

import contextlib

import torch

from torchleak import _core, _tracking


def hook_installed():
    """Whether a torchleak hook is in: its reporter in this thread's PROFILER_STATE slot (any
    torch with a device allocator) or its tap in front of the CPU allocator (every build)."""
    return _core.profiler_state_installed() or _core.cpu_tap_installed()


def device_allocator_built():
    """Whether this torch registers a device allocator at import (CUDA, ROCm, MPS, XPU builds,
    GPU or not): there the hook also sits in PROFILER_STATE, where those devices report."""
    return (
        torch.backends.cuda.is_built()
        or torch.version.hip is not None
        or torch.backends.mps.is_built()
        or (hasattr(torch, "xpu") and torch.xpu._is_compiled())
    )


@contextlib.contextmanager
def nothing_left_installed():
    """Every test must leave the thread's PROFILER_STATE slot as it found it, and torch's
    functions that tracking wraps (the autograd engine's entry, CUDA history recording) as
    they were, and the CPU allocator without the tap."""
    assert not hook_installed()
    wrapped = [
        (torch.autograd, "_engine_run_backward"),
        (torch.cuda.memory, "_record_memory_history"),
        (torch.cuda.CUDAGraph, "replay"),
    ]
    before = [getattr(module, name, None) for module, name in wrapped]
    yield
    for (module, name), original in zip(wrapped, before):
        assert getattr(module, name, None) is original, f"{name} was left wrapped"
    assert _tracking._active is None, "a Tracker is still active after the test"
    assert not hook_installed(), "a hook was left installed"
    assert _core.pending_hook_removals() == 0
