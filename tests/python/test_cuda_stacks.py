"""The CUDA path's contracts, on the CPU. CUDA stacks come from PyTorch's history recording and
OOMs from its observer; both are driven here through a stand-in for torch.cuda's functions that
behaves as torch 2.11-2.15's sources show (c10/cuda/CUDACachingAllocator.{h,cpp},
torch/csrc/cuda/Module.cpp, torch/cuda/memory.py; docs/out-of-memory.md says what they show):
one global recording switch, isHistoryEnabled raising under the cudaMallocAsync backend,
snapshots of segments and blocks, 2.15's per-block traceback, and an OOM observer called with
(device, segment size, capacity or cap, free bytes)."""

import pytest
import torch

import torchleak
from torchleak import _core, _cuda, _tracking

MiB = 1 << 20
GiB = 1 << 30
USER_FRAME = {"filename": "/home/u/train.py", "line": 42, "name": "step"}


def test_cpu_build_never_touches_cuda():
    if torch.cuda.is_available():
        pytest.skip("a CUDA machine")
    history = _cuda.CudaHistory()
    history.start()
    assert not history.recording and history.warnings == []
    assert history.snapshot() is None
    assert history.stacks_now([(0x1000, 1)]) == {}
    history.stop()


def test_block_stacks_from_a_snapshot():
    snapshot = {
        "segments": [
            {
                "address": 0x7F0000000000,
                "total_size": 6 << 20,
                "blocks": [
                    {
                        "size": 2 << 20,
                        "state": "active_allocated",
                        "frames": [
                            {"filename": "/venv/torch/nn/functional.py", "line": 2385, "name": "linear"},
                            {"filename": "/home/u/train.py", "line": 42, "name": "step"},
                        ],
                    },
                    {"size": 2 << 20, "state": "inactive", "frames": []},
                    {
                        "size": 2 << 20,
                        "state": "active_allocated",
                        "frames": [{"filename": "/tmp/ipykernel_1/123.py", "line": 3, "name": "<module>"}],
                    },
                ],
            }
        ]
    }
    stacks = _cuda.block_stacks(snapshot)
    assert set(stacks) == {0x7F0000000000, 0x7F0000000000 + (4 << 20)}
    first = stacks[0x7F0000000000]
    assert first[0] == ("/venv/torch/nn/functional.py", 2385, "linear")
    assert first[1] == ("/home/u/train.py", 42, "step")
    # The core classifies these frames with the rule it uses for the hook's own frames.
    frame_filter = _core.FrameFilter(["/venv/torch/"], [], {"/tmp/ipykernel_1/123.py": 7})
    assert frame_filter.classify(first[0][0]) == (False, None)
    assert frame_filter.classify(first[1][0]) == (True, None)
    assert frame_filter.classify(stacks[0x7F0000000000 + (4 << 20)][0][0]) == (True, 7)


def test_native_frames_recorded_by_the_default_history_are_never_sites():
    # _record_memory_history()'s default, stacks="all", puts C++ frames first; the core would
    # count their files (not under torch, the stdlib or site-packages) as user code.
    snapshot = {
        "segments": [
            {
                "address": 0x1000,
                "blocks": [
                    {
                        "size": 512,
                        "state": "active_allocated",
                        "frames": [
                            {
                                "filename": "/pytorch/c10/cuda/CUDACachingAllocator.cpp",
                                "line": 1200,
                                "name": "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc",
                            },
                            {"filename": "??", "line": 0, "name": "PyObject_Call"},
                            {"filename": "/pytorch/aten/src/ATen/native/cuda/Blas.cu", "line": 3, "name": "gemm"},
                            USER_FRAME,
                        ],
                    }
                ],
            }
        ]
    }
    assert _cuda.block_stacks(snapshot) == {0x1000: [("/home/u/train.py", 42, "step")]}


class FakeCudaHistory:
    """torch.cuda's history API as the caching allocator (or cudaMallocAsync) answers it."""

    def __init__(self, backend="native", enabled=False):
        self.backend = backend
        self.enabled = enabled
        self.calls = []
        self.segments = []
        self.snapshots = 0
        self.tracebacks = {}
        self.looked_up = []
        self.initialized = True
        self.queue = []

    def _check(self):
        if self.backend != "native":
            # CUDAAllocator's default: TORCH_CHECK(false, name(), " does not yet support ...")
            raise RuntimeError(
                f"{self.backend} does not yet support recordHistory. If you "
                "need it, please file an issue describing your use case."
            )

    def is_enabled(self):
        # torch 2.11 indexes its per-device table here, which CUDA's initialization makes:
        # before it, a SIGSEGV (the H200's first proof). A fake that fails the test instead.
        assert self.initialized, "isHistoryEnabled() before CUDA was initialized"
        self._check()
        return self.enabled

    def lazy_call(self, callback, **kwargs):
        if self.initialized:
            callback()
        else:
            self.queue.append(callback)

    def initialize(self):
        """What torch.cuda._lazy_init does at the first CUDA tensor: the allocator's state, then
        the queued calls."""
        self.initialized = True
        queue, self.queue = self.queue, []
        for callback in queue:
            callback()

    def record(self, enabled="all", context="all", stacks="all", max_entries=0, device=None):
        self._check()
        self.calls.append(enabled)
        self.enabled = enabled not in (None, False)

    def snapshot(self):
        self.snapshots += 1
        return {"segments": self.segments}

    def allocation_traceback(self, address):
        self.looked_up.append(address)
        return self.tracebacks.get(address)


@pytest.fixture
def fake_cuda(monkeypatch):
    fake = FakeCudaHistory()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch._C, "_cuda_isHistoryEnabled", lambda: fake.is_enabled(), raising=False)
    monkeypatch.setattr(torch._C, "_cuda_getAllocatorBackend", lambda: fake.backend, raising=False)
    monkeypatch.setattr(torch.cuda.memory, "_record_memory_history", fake.record)
    monkeypatch.setattr(torch.cuda.memory, "_snapshot", lambda *a, **k: fake.snapshot())
    monkeypatch.setattr(_cuda, "_observed", True)  # no real observer to attach
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: fake.initialized)
    monkeypatch.setattr(torch.cuda, "_lazy_call", fake.lazy_call)
    return fake


def tracked_run():
    with torchleak.track() as tracker:
        torch.ones(16)
    return tracker


@pytest.mark.parametrize("backend_known", [True, False])
def test_cuda_malloc_async_tracks_without_stacks_and_says_so(fake_cuda, monkeypatch, backend_known):
    fake_cuda.backend = "cudaMallocAsync"
    if not backend_known:  # a torch that does not name its backend: isHistoryEnabled raises
        monkeypatch.delattr(torch._C, "_cuda_getAllocatorBackend")
    tracker = tracked_run()  # no RuntimeError on entry, no hook left (autouse fixture)
    (warning,) = [w for w in tracker.report().warnings if "CUDA allocation sites" in w]
    assert "cudaMallocAsync" in warning
    assert fake_cuda.calls == []


def test_torchleak_turns_off_only_the_history_it_started(fake_cuda):
    tracked_run()
    assert fake_cuda.calls == ["state", None]
    assert fake_cuda.enabled is False


def test_a_history_the_user_had_is_used_and_left_on(fake_cuda):
    fake_cuda.enabled = True
    tracker = tracked_run()
    assert fake_cuda.calls == [] and fake_cuda.enabled
    assert not [w for w in tracker.report().warnings if "history" in w]


def test_a_history_the_user_starts_inside_the_block_is_left_on(fake_cuda):
    with torchleak.track():
        torch.cuda.memory._record_memory_history(max_entries=1000)
    assert fake_cuda.calls == ["state", "all"]
    assert fake_cuda.enabled
    assert torch.cuda.memory._record_memory_history == fake_cuda.record  # unwrapped


def test_the_user_stopping_the_history_inside_the_block_is_a_warning(fake_cuda):
    with torchleak.track() as tracker:
        torch.cuda.memory._record_memory_history(enabled=None)
    assert fake_cuda.calls == ["state", None]  # not stopped twice
    assert any("turned off inside the tracked block" in w for w in tracker.report().warnings)


def test_a_history_without_context_is_a_warning(fake_cuda):
    fake_cuda.enabled = True  # the user's, started with context=None: blocks have no frames
    fake_cuda.segments = [{"address": 0x1000, "blocks": [{"size": 512, "state": "active_allocated", "frames": []}]}]
    tracker = tracked_run()
    assert any("recorded no stacks" in w for w in tracker.report().warnings)


def test_a_run_started_before_cuda_is_initialized_asks_the_allocator_only_after(fake_cuda):
    fake_cuda.initialized = False  # a script that moves its model to the GPU inside track()
    with torchleak.track() as tracker:
        assert fake_cuda.calls == [] and len(fake_cuda.queue) == 1
        fake_cuda.initialize()  # the first CUDA tensor
        assert fake_cuda.calls == ["state"]
    assert fake_cuda.calls == ["state", None]
    assert not [w for w in tracker.report().warnings if "CUDA allocation sites" in w]


def test_a_run_that_ends_before_cuda_is_initialized_starts_nothing_later(fake_cuda):
    fake_cuda.initialized = False
    tracked_run()
    fake_cuda.initialize()  # CUDA first used after the tracked block
    assert fake_cuda.calls == []
    assert torch.cuda.memory._record_memory_history == fake_cuda.record


def test_a_failure_at_cuda_initialization_never_reaches_the_users_cuda_call(fake_cuda, monkeypatch):
    fake_cuda.initialized = False

    def broken(*args, **kwargs):
        raise KeyError("anything torch may raise")

    monkeypatch.setattr(torch.cuda.memory, "_record_memory_history", broken)
    with torchleak.track():
        fake_cuda.initialize()  # would raise DeferredCudaCallError from the user's first CUDA call


def test_the_oom_observer_is_attached_once_cuda_is_initialized(fake_cuda, monkeypatch):
    attached = []
    monkeypatch.setattr(_cuda, "_observed", False)
    monkeypatch.setattr(torch._C, "_cuda_attach_out_of_memory_observer", attached.append, raising=False)
    fake_cuda.initialized = False
    assert _cuda.observe_out_of_memory(print)
    assert attached == [] and not _cuda.observe_out_of_memory(print)  # queued once
    fake_cuda.initialize()
    assert attached == [print]


def test_mid_run_lookups_read_only_new_blocks(fake_cuda, monkeypatch):
    monkeypatch.setattr(torch.cuda.memory, "_allocation_traceback", fake_cuda.allocation_traceback, raising=False)
    fake_cuda.tracebacks = {0xA0: [USER_FRAME], 0xB0: [USER_FRAME], 0xC0: [USER_FRAME]}
    history = _cuda.CudaHistory()
    history.start()
    try:
        assert set(history.stacks_now([(0xA0, 1), (0xB0, 2)])) == {0xA0, 0xB0}
        assert set(history.stacks_now([(0xA0, 1), (0xB0, 2), (0xC0, 3)])) == {0xA0, 0xB0, 0xC0}
        assert sorted(fake_cuda.looked_up) == [0xA0, 0xB0, 0xC0]  # each block once
        fake_cuda.looked_up.clear()
        history.stacks_now([(0xA0, 4)])  # the address reused by a new block: read again
        assert fake_cuda.looked_up == [0xA0]
        assert fake_cuda.snapshots == 0  # never the whole allocator's state
    finally:
        history.stop()


def test_mid_run_without_per_block_lookup_snapshots_only_for_new_blocks(fake_cuda, monkeypatch):
    monkeypatch.delattr(torch.cuda.memory, "_allocation_traceback", raising=False)
    fake_cuda.segments = [
        {"address": 0xA0, "blocks": [{"size": 16, "state": "active_allocated", "frames": [USER_FRAME]}]}
    ]
    history = _cuda.CudaHistory()
    history.start()
    try:
        assert set(history.stacks_now([(0xA0, 1)])) == {0xA0}
        assert set(history.stacks_now([(0xA0, 1)])) == {0xA0}
        assert fake_cuda.snapshots == 1
    finally:
        history.stop()


def test_the_oom_observer_reads_segment_and_capacity_as_what_they_are(fake_cuda, monkeypatch):
    # DeviceCachingAllocator::malloc calls observers with (device, the segment it tried to
    # reserve, the capacity or set_per_process_memory_fraction's cap, the driver's free bytes).
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device=None: 5 * GiB)
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device=None: 6 * GiB)
    with pytest.raises(torch.OutOfMemoryError) as info:
        with torchleak.track():
            _tracking._on_cuda_out_of_memory(0, 20 * MiB, 80 * GiB, MiB)
            raise torch.OutOfMemoryError(
                "CUDA out of memory. Tried to allocate 3.00 MiB. GPU 0 has a total capacity of 80.00 GiB"
            )
    oom = info.value.torchleak_report.oom
    assert oom["device"] == "cuda:0"
    assert "requested_bytes" not in oom or oom["requested_bytes"] is None  # not the segment
    assert oom["allocated_bytes"] == 5 * GiB  # not the capacity
    assert oom["reserved_bytes"] == 6 * GiB
    assert oom["totals_from"] == "allocator"


def test_the_oom_observer_never_raises(fake_cuda, monkeypatch):
    def broken(device=None):
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    monkeypatch.setattr(torch.cuda, "memory_allocated", broken)
    with torchleak.track():
        _tracking._on_cuda_out_of_memory(0, 2 * MiB, 80 * GiB, 0)  # an exception here would
        # replace the user's OutOfMemoryError


@pytest.mark.parametrize(
    "message, device",
    [
        ("CUDA error: out of memory", "cuda:0"),
        ("CUDA out of memory. Tried to allocate 2.00 MiB. GPU 3 has a total capacity of 79 GiB", "cuda:3"),
        ("CUBLAS_STATUS_ALLOC_FAILED when calling cublasCreate(handle): cuBLAS out of memory", "cuda:0"),
        ("DefaultCPUAllocator: not enough memory: you tried to allocate 1099511627776 bytes", "cpu"),
    ],
)
def test_an_oom_no_allocator_reported_is_on_the_device_its_message_names(message, device):
    with pytest.raises(RuntimeError) as info:
        with torchleak.track():
            raise RuntimeError(message)
    assert info.value.torchleak_report.oom["device"] == device


def test_cuda_graph_replays_are_named_as_what_the_hook_cannot_see(fake_cuda):
    # A replay makes its outputs in the graph's pool without an allocation call. No graph can be
    # captured without a GPU: the wrapper counts before torch's replay runs (and fails) on a
    # stand-in receiver (a CUDA build's CUDAGraph cannot even be made without one).
    graph = object()
    with torchleak.track() as tracker:
        for _ in range(3):
            try:
                torch.cuda.CUDAGraph.replay(graph)  # no GPU here: counted, then it fails
            except Exception:  # noqa: BLE001
                pass
    (warning,) = [w for w in tracker.report().warnings if "CUDA graphs" in w]
    assert "replayed 3 time(s)" in warning
    with torchleak.track() as tracker:
        pass
    assert not [w for w in tracker.report().warnings if "CUDA graphs" in w]


def test_a_cuda_devices_capacity_is_what_the_process_may_hold(monkeypatch):
    from torchleak import _devices

    asked = []
    initialized = {"now": False}

    def fraction(index):
        assert initialized["now"], "the getter initializes CUDA: never asked before it is"
        asked.append(index)
        return 0.05

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: type("P", (), {"total_memory": 100 * GiB}))
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: initialized["now"])
    monkeypatch.setattr(torch.cuda, "get_per_process_memory_fraction", fraction)
    assert _devices.capacities()["cuda:0"] == 100 * GiB  # CUDA not up: no fraction can be set
    initialized["now"] = True
    assert _devices.capacities()["cuda:0"] == 5 * GiB  # set_per_process_memory_fraction(0.05)
    assert asked == [0]
