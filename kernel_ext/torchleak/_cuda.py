"""CUDA allocation stacks from PyTorch's own history recording.

The allocator hook runs under the CUDA caching allocator's device mutex, where walking Python
frames is off limits; PyTorch's recorder captures the Python stack outside that lock (about
2 µs per allocation) and keeps it for live blocks only (`enabled="state"`). At stop, one
snapshot gives the stack of every surviving block, which the core attributes to sites.
Everything here is guarded so that a CPU build never touches CUDA.
"""

import torch


def history_available():
    return bool(torch.cuda.is_available()
                and hasattr(torch.cuda.memory, "_record_memory_history")
                and hasattr(torch.cuda.memory, "_snapshot"))


def start_history():
    """Start recording stacks of live CUDA blocks; False when unavailable or already on (then
    the user's own recording is left alone, and still used)."""
    if not history_available():
        return False
    try:
        if torch._C._cuda_isHistoryEnabled():
            return False
    except AttributeError:
        pass
    try:
        torch.cuda.memory._record_memory_history(enabled="state", context="state", stacks="python")
        return True
    except (RuntimeError, TypeError, ValueError):
        return False  # e.g. the cudaMallocAsync backend: no history, no CUDA stacks


def stop_history(started):
    if started:
        try:
            torch.cuda.memory._record_memory_history(enabled=None)
        except (RuntimeError, TypeError, ValueError):
            pass


_observed = False


def observe_out_of_memory(callback):
    """Route PyTorch's CUDA OOM observer to `callback(device, requested, allocated, free)`.
    Observers cannot be removed, so it is attached once per process; the callback decides
    whether a run is being tracked."""
    global _observed
    if _observed or not torch.cuda.is_available():
        return False
    attach = getattr(torch._C, "_cuda_attach_out_of_memory_observer", None)
    if attach is None:
        return False
    try:
        attach(callback)
    except (RuntimeError, TypeError):
        return False
    _observed = True
    return True


def snapshot_stacks():
    if not history_available():
        return None
    try:
        return torch.cuda.memory._snapshot()
    except (RuntimeError, TypeError, ValueError):
        return None


def block_stacks(snapshot):
    """{block address: [(file, line, function), ...]} for live blocks, innermost first, from a
    `torch.cuda.memory._snapshot()` dictionary. Which frames are user code is decided by the
    core, with the same rule as for the frames the hook captured."""
    stacks = {}
    for segment in (snapshot or {}).get("segments", []):
        address = segment.get("address", 0)
        for block in segment.get("blocks", []):
            block_address = block.get("address", address)
            address = block_address + block.get("size", 0)
            if block.get("state") != "active_allocated":
                continue
            frames = [(str(frame.get("filename", "")), int(frame.get("line", 0)),
                       str(frame.get("name", ""))) for frame in block.get("frames") or []]
            if frames:
                stacks[int(block_address)] = frames
    return stacks


__all__ = ["block_stacks", "history_available", "observe_out_of_memory", "snapshot_stacks",
           "start_history", "stop_history"]
