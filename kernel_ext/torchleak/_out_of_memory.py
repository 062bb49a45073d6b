"""Which exceptions are out-of-memory errors, and how the forensics reach the user: attached to
the exception as ``torchleak_report`` and, on Python 3.11+, as a note that the traceback prints
(so a script that dies of an OOM says why in its last lines)."""

import torch

_OOM_TYPES = tuple(t for t in (getattr(torch, "OutOfMemoryError", None),
                               getattr(getattr(torch, "cuda", None), "OutOfMemoryError", None),
                               MemoryError) if isinstance(t, type))
# CPU allocation failures that older code paths raise as a plain RuntimeError.
_OOM_WORDS = ("out of memory", "not enough memory")


def is_out_of_memory(exc):
    if isinstance(exc, _OOM_TYPES):
        return True
    if isinstance(exc, RuntimeError):
        try:
            text = str(exc).lower()
        except Exception:  # noqa: BLE001 - a __str__ that raises
            return False
        return any(word in text for word in _OOM_WORDS)
    return False


def describe(exc):
    """(type name, first line of the message) for the report's `oom` section."""
    try:
        message = str(exc)
    except Exception:  # noqa: BLE001
        message = f"<{type(exc).__name__} whose message could not be read>"
    return type(exc).__name__, message.strip().split("\n", 1)[0]


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


__all__ = ["attach", "describe", "is_out_of_memory"]
