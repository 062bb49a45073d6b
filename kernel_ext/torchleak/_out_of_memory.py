"""Which exceptions are out-of-memory errors, and how the forensics reach the user: attached to
the exception as ``torchleak_report`` and, on Python 3.11+, as a note that the traceback prints
(so a script that dies of an OOM says why in its last lines)."""

import re

import torch

_OOM_TYPES = tuple(
    t
    for t in (
        getattr(torch, "OutOfMemoryError", None),
        getattr(getattr(torch, "cuda", None), "OutOfMemoryError", None),
        MemoryError,
    )
    if isinstance(t, type)
)
# CPU allocation failures are a plain RuntimeError (c10::Error: torch has no type for them). The
# CPU tap sees the allocator refuse (is_out_of_memory's `allocation_failed`); these words are
# for a failure it could not see (the tap not attached, another allocator in front).
_OOM_WORDS = ("out of memory", "not enough memory", "can't allocate memory")
# What names a CUDA failure, the caching allocator's ("CUDA out of memory. Tried to allocate
# ... GPU 0 has a total capacity ...") and the ones it never sees: "CUDA error: out of memory"
# from a kernel launch or context creation, cuBLAS/cuDNN workspaces, NCCL buffers.
_CUDA_WORDS = re.compile(r"\bCUDA\b|\bcu(BLAS|DNN|FFT|SPARSE|SOLVER)\b|\bNCCL\b|\bGPU \d+\b", re.IGNORECASE)
_GPU_INDEX = re.compile(r"\bGPU (\d+)\b|\bcuda:(\d+)\b")


def is_out_of_memory(exc, allocation_failed=None):
    """Whether `exc` is an out-of-memory error: by its type, or a RuntimeError raised when an
    allocator had just refused a request (`allocation_failed`: its device, from the tracker),
    or, failing both, by the words of the message."""
    if isinstance(exc, _OOM_TYPES):
        return True
    if isinstance(exc, RuntimeError):
        if allocation_failed:
            return True
        try:
            text = str(exc).lower()
        except Exception:  # noqa: BLE001 - a __str__ that raises
            return False
        return any(word in text for word in _OOM_WORDS)
    return False


def describe(exc):
    """(type name, first line of the message, the device it names or "") for the report's
    `oom` section. The device counts when no allocator reported the failure to the hook."""
    try:
        message = str(exc)
    except Exception:  # noqa: BLE001
        message = f"<{type(exc).__name__} whose message could not be read>"
    return type(exc).__name__, message.strip().split("\n", 1)[0], failing_device(message)


def failing_device(message):
    """ "cuda:N" when the message is a CUDA failure (N from "GPU N" or "cuda:N", else the
    current device), "" otherwise."""
    if not _CUDA_WORDS.search(message):
        return ""
    index = _GPU_INDEX.search(message)
    if index:
        return f"cuda:{index[1] or index[2]}"
    try:
        current = torch.cuda.current_device() if torch.cuda.is_initialized() else 0
    except Exception:  # noqa: BLE001 - a CPU build, or a broken context
        current = 0
    return f"cuda:{int(current)}"


def attach(exc, report):
    """Give the exception its report, and its forensics as a note; never raises."""
    try:
        exc.torchleak_report = report
    except (AttributeError, TypeError):
        pass
    oom = report.oom if report is not None else None
    if oom and hasattr(exc, "add_note"):
        try:
            exc.add_note(f"torchleak: {oom['text']}")
        except Exception:  # noqa: BLE001
            pass


__all__ = ["attach", "describe", "failing_device", "is_out_of_memory"]
