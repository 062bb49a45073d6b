"""CUDA allocation stacks from PyTorch's own history recording.

The allocator hook runs under the CUDA caching allocator's device mutex, where walking Python
frames is off limits; PyTorch's recorder captures the Python stack outside that lock (about
2 µs per allocation) and keeps it for live blocks only (`enabled="state"`). At stop, one
snapshot gives the stack of every surviving block, which the core attributes to sites.

Recording is one switch in torch that the user may flip too, before or inside the tracked
block: CudaHistory remembers who turned it on, watches the user's own calls meanwhile,
restores exactly what it found and says in the report's warnings what the stacks cannot
cover. Everything here is guarded so that a CPU build never touches CUDA.
"""

import functools

import torch

# Native frames: `_record_memory_history()`'s default (stacks="all") records C++ frames
# beside the Python ones. They are never a site.
_NATIVE_SUFFIXES = (".c", ".cc", ".cpp", ".cxx", ".cu", ".cuh", ".h", ".hh", ".hpp", ".hxx", ".inl", ".so")
_NO_SITES = "CUDA findings are grouped by device and autograd node, without a line"


def history_available():
    return bool(
        torch.cuda.is_available()
        and hasattr(torch.cuda.memory, "_record_memory_history")
        and hasattr(torch.cuda.memory, "_snapshot")
    )


def _initialized():
    is_initialized = getattr(torch.cuda, "is_initialized", None)
    return bool(is_initialized and is_initialized())


def when_initialized(callback):
    """Runs `callback()` now if CUDA is initialized, else when torch initializes it: torch.cuda's
    lazy-init queue runs it before the first CUDA tensor is made. The caching allocator's state
    for each device is made at that initialization; before it, torch 2.11's isHistoryEnabled()
    indexes an empty per-device table (SIGSEGV: every CPU-only process on the H200 that started
    tracking crashed there, see docs/platforms.md), and attaching an OOM observer or starting the
    history loops over no device at all. Initializing CUDA ourselves would take a context and
    hundreds of MiB of device memory from a process that may never use the GPU.

    A queued callback must never raise: torch would raise it from the user's first CUDA call.
    Returns "now", "queued", or None when this torch offers neither."""
    if _initialized():
        callback()
        return "now"
    lazy_call = getattr(torch.cuda, "_lazy_call", None)
    if lazy_call is None:
        return None

    def guarded():
        try:
            callback()
        except Exception:  # noqa: BLE001 - it runs inside the user's first CUDA call
            pass

    lazy_call(guarded)
    return "queued"


def _first_line(error):
    return (str(error).strip().splitlines() or [type(error).__name__])[0]


def _allocator_backend():
    """ "native", "cudaMallocAsync" (PYTORCH_CUDA_ALLOC_CONF=backend:...), or None if torch does
    not say."""
    try:
        return str(torch._C._cuda_getAllocatorBackend())
    except (AttributeError, RuntimeError):
        return None


def _history_enabled():
    """True or False, or the RuntimeError torch raised (an allocator without history)."""
    try:
        return bool(torch._C._cuda_isHistoryEnabled())
    except AttributeError:
        return False
    except RuntimeError as error:
        return error


def _is_python_frame(filename):
    return bool(filename) and filename != "??" and not filename.lower().endswith(_NATIVE_SUFFIXES)


def _frames(raw):
    """[(file, line, function), ...], innermost first, of a block's recorded frames, Python only."""
    frames = []
    for frame in raw or []:
        filename = str(frame.get("filename", ""))
        if _is_python_frame(filename):
            frames.append((filename, int(frame.get("line", 0)), str(frame.get("name", ""))))
    return frames


def block_stacks(snapshot):
    """{block address: [(file, line, function), ...]} for live blocks, innermost first, from a
    `torch.cuda.memory._snapshot()` dictionary. Which frames are user code is decided by the
    core, with the same rule as for the frames the hook captured."""
    return _read_snapshot(snapshot)[0]


def allocator_view(addresses):
    """(device types, addresses): what the allocator holds for the program by its own
    snapshot's active blocks (CudaHistory.read_snapshot), whichever thread allocated or freed,
    for the report's reconciliation."""
    return ["cuda"], sorted(addresses)


def _read_snapshot(snapshot):
    """(block_stacks, number of active blocks, their addresses) of a snapshot."""
    stacks, active, addresses = {}, 0, set()
    for segment in (snapshot or {}).get("segments", []):
        address = segment.get("address", 0)
        for block in segment.get("blocks", []):
            block_address = block.get("address", address)
            address = block_address + block.get("size", 0)
            if block.get("state") != "active_allocated":
                continue
            active += 1
            addresses.add(int(block_address))
            frames = _frames(block.get("frames"))
            if frames:
                stacks[int(block_address)] = frames
    return stacks, active, addresses


class CudaHistory:
    """torch's CUDA memory-history recording during one tracked run."""

    def __init__(self):
        self.warnings = []  # what the report must say; read by the Tracker
        self._on = False  # recording was on while tracking (torchleak's or the user's)
        self._started = False  # torchleak turned it on, so torchleak turns it off
        self._user_calls = []  # the user's own _record_memory_history calls: "on" / "off"
        self._original = None  # torch's _record_memory_history while it is watched
        self._cache = {}  # (address, sequence) -> frames: blocks looked up mid-run
        self._waiting = False  # start() waits for CUDA's initialization (when_initialized)

    def _warn(self, message):
        if message not in self.warnings:
            self.warnings.append(message)

    @property
    def recording(self):
        return self._on

    def start(self):
        """Start recording stacks of live CUDA blocks, or use the user's recording when it is
        on already; where CUDA is not initialized yet, as soon as torch initializes it. Never
        raises: without history, CUDA blocks have no site, and a warning says why."""
        if not history_available():
            return
        self._waiting = True
        if when_initialized(self._start_when_initialized) is None:
            self._waiting = False
            self._warn(f"CUDA allocation sites are unavailable: this torch has no torch.cuda._lazy_call; {_NO_SITES}")

    def _start_when_initialized(self):
        if not self._waiting:
            return  # stopped before CUDA was initialized
        self._waiting = False
        backend = _allocator_backend()
        if backend not in (None, "native"):
            # Measured on an H200 with torch 2.11: under cudaMallocAsync not one CUDA block
            # reached the hook (tests/cuda/test_allocator_settings.py).
            self._warn(
                f"CUDA allocation sites are unavailable: the {backend} allocator "
                f"backend (PYTORCH_CUDA_ALLOC_CONF) records no history; {_NO_SITES}; torch 2.11's "
                f"{backend} reports no allocation to torchleak's hook at all, so CUDA leaks are "
                f"only found with the native backend"
            )
            return
        enabled = _history_enabled()
        if isinstance(enabled, Exception):
            self._warn(f"CUDA allocation sites are unavailable: {_first_line(enabled)}; {_NO_SITES}")
            return
        if not enabled:
            try:
                torch.cuda.memory._record_memory_history(enabled="state", context="state", stacks="python")
            except (RuntimeError, TypeError, ValueError) as error:
                self._warn(
                    f"CUDA allocation sites are unavailable: torch could not record "
                    f"memory history ({_first_line(error)}); {_NO_SITES}"
                )
                return
            self._started = True
        self._on = True
        self._watch_user_calls()

    def _watch_user_calls(self):
        original = torch.cuda.memory._record_memory_history
        history = self

        @functools.wraps(original)
        def record_memory_history(enabled="all", *args, **kwargs):
            history._user_calls.append("off" if enabled in (None, False) else "on")
            return original(enabled, *args, **kwargs)

        self._original = original
        torch.cuda.memory._record_memory_history = record_memory_history

    def _unwatch(self):
        if self._original is not None:
            torch.cuda.memory._record_memory_history = self._original
            self._original = None

    def stop(self):
        """Restore what start() found: recording torchleak started is turned off, unless the
        user started their own inside the block; the user's is left alone. Says when the user
        turned recording off inside the block (later blocks have no stack). Idempotent."""
        self._waiting = False
        self._unwatch()
        if not self._on:
            return
        self._on = False
        still_on = _history_enabled() is True
        if "off" in self._user_calls or not still_on:
            self._warn(
                "CUDA memory-history recording was turned off inside the tracked block "
                "(torch.cuda.memory._record_memory_history(enabled=None)): CUDA blocks "
                "allocated after that have no allocation site"
            )
        users_now = bool(self._user_calls) and self._user_calls[-1] == "on"
        if self._started and still_on and not users_now:
            try:
                torch.cuda.memory._record_memory_history(enabled=None)
            except (RuntimeError, TypeError, ValueError):
                pass

    def snapshot(self):
        """torch.cuda.memory._snapshot(), or None when there is no history to read."""
        if not self._on:
            return None
        try:
            return torch.cuda.memory._snapshot()
        except (RuntimeError, TypeError, ValueError) as error:
            self._warn(f"the CUDA memory snapshot could not be read ({_first_line(error)}): {_NO_SITES}")
            return None

    def read_snapshot(self, snapshot):
        """(block_stacks(snapshot), the addresses of its active blocks), in one pass over the
        snapshot, and a warning when live blocks came without any frame (the user's recording
        started with context=None records no stacks)."""
        stacks, active, addresses = _read_snapshot(snapshot)
        if active and not stacks:
            self._warn(
                f"the CUDA memory history that was on recorded no stacks (started with context=None?): {_NO_SITES}"
            )
        return stacks, addresses

    def stacks_now(self, live_blocks):
        """Mid-run (run watch's checks, a report inside the block): the stacks of the live CUDA
        blocks, given as (address, sequence) pairs. A block's stack does not change while it
        lives, so only blocks not looked up before are read: one at a time through
        torch.cuda.memory._allocation_traceback where torch has it (2.15), else from one
        snapshot (the whole allocator's state: only when some block is new)."""
        if not self._on:
            return {}
        live = set(live_blocks)
        self._cache = {key: frames for key, frames in self._cache.items() if key in live}
        new = [key for key in live if key not in self._cache]
        lookup = getattr(torch.cuda.memory, "_allocation_traceback", None)
        if new and lookup is not None:
            for key in new:
                try:
                    self._cache[key] = _frames(lookup(key[0]))
                except (RuntimeError, TypeError, ValueError):
                    self._cache[key] = []
        elif new:
            stacks, _ = self.read_snapshot(self.snapshot())
            for key in new:
                self._cache[key] = stacks.get(key[0], [])
        return {address: frames for (address, _), frames in self._cache.items() if frames}


class GraphReplays:
    """CUDA-graph replays while tracking. A replay runs the captured kernels into the graph's
    private pool: its outputs are storages built on that memory without an allocation call
    (torch.compile(mode="reduce-overhead")'s cudagraph trees hand them out as tensors), so the
    hook never sees them, and a list that keeps them does not read as a leak. torch.cuda's
    CUDAGraph.replay is Python in torch 2.11 to 2.15, and cudagraph trees call it."""

    def __init__(self):
        self.count = 0
        self._original = None

    def start(self):
        graph = getattr(torch.cuda, "CUDAGraph", None)
        original = getattr(graph, "replay", None)
        if original is None or not torch.cuda.is_available():
            return
        replays = self

        @functools.wraps(original)
        def replay(self, *args, **kwargs):
            replays.count += 1
            return original(self, *args, **kwargs)

        self._original = original
        graph.replay = replay

    def stop(self):
        if self._original is not None:
            torch.cuda.CUDAGraph.replay = self._original
            self._original = None

    def warning(self):
        if not self.count:
            return None
        return (
            f"CUDA graphs were replayed {self.count} time(s) while tracking "
            f'(torch.compile(mode="reduce-overhead") or torch.cuda.graph): a replay\'s '
            f"outputs live in the graph's memory pool and are made without an allocation, "
            f"so torchleak does not see them and keeping them does not show as a leak; the "
            f"pool itself counts in the device's reserved bytes"
        )


_observed = False


def observe_out_of_memory(callback):
    """Route PyTorch's CUDA OOM observer to `callback(device, segment_bytes, limit_bytes,
    device_free)`. Observers cannot be removed, so it is attached once per process; the
    callback decides whether a run is being tracked."""
    global _observed
    if _observed or not torch.cuda.is_available():
        return False
    attach = getattr(torch._C, "_cuda_attach_out_of_memory_observer", None)
    if attach is None:
        return False

    def attach_now():
        global _observed
        try:
            attach(callback)
        except (RuntimeError, TypeError):
            _observed = False  # e.g. the cudaMallocAsync backend: a later run tries again

    _observed = True  # attached now, or queued until CUDA is initialized (when_initialized)
    if when_initialized(attach_now) is None:
        _observed = False
    return _observed


__all__ = [
    "CudaHistory",
    "GraphReplays",
    "allocator_view",
    "block_stacks",
    "history_available",
    "observe_out_of_memory",
    "when_initialized",
]
