"""What torch's own C++ caches hold when a report is built.

Memory that no Python object reaches is named after one of torch's caches only with evidence
that the cache is involved: an autocast region open now with its cast cache on, frames that
torch._dynamo compiled in this process, functions in TorchScript's compilation unit. Nothing
here imports a module the user has not imported, and nothing changes torch's state."""

import sys

import torch

_AUTOCAST_DEVICE_TYPES = ("cpu", "cuda", "xpu", "mps", "hpu", "xla")


def autocast_devices():
    """Device types with an open torch.autocast region on this thread whose casts are cached."""
    try:
        if not torch.is_autocast_cache_enabled():
            return []
    except Exception:  # noqa: BLE001 - an old or stripped torch: no evidence
        return []
    found = []
    for device_type in _AUTOCAST_DEVICE_TYPES:
        try:
            if torch.is_autocast_enabled(device_type):
                found.append(device_type)
        except Exception:  # noqa: BLE001 - a device type this build does not know
            continue
    return found


def dynamo_compiled_frames():
    """Frames torch._dynamo compiled in this process, from its counters (0 when it never loaded)."""
    utils = sys.modules.get("torch._dynamo.utils")
    counters = getattr(utils, "counters", None)
    if not isinstance(counters, dict):
        return 0
    frames = counters.get("frames") or {}
    stats = counters.get("stats") or {}
    try:
        return int(max(frames.get("ok", 0), stats.get("unique_graphs", 0)))
    except (TypeError, ValueError):
        return 0


def torchscript_functions():
    """Functions in TorchScript's global compilation unit (torch.jit.trace and script add them)."""
    state = sys.modules.get("torch.jit._state")
    unit = getattr(state, "_python_cu", None)
    try:
        return len(unit.get_functions()) if unit is not None else 0
    except Exception:  # noqa: BLE001 - a torch without the accessor: no evidence
        return 0


def fill(inputs):
    """Gives the report's inputs (a `_core.ReportInputs`) what torch's caches hold now."""
    inputs.autocast_devices = autocast_devices()
    inputs.dynamo_compiled_frames = dynamo_compiled_frames()
    inputs.torchscript_functions = torchscript_functions()
