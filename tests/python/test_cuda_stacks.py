"""CUDA stacks come from PyTorch's history recording; on a CPU build everything is guarded.
The conversion of a snapshot and the attribution in the core are tested here with a
snapshot in the shape torch.cuda.memory._snapshot() returns."""
import torch

from torchleak import _core, _cuda


def test_cpu_build_never_touches_cuda():
    if torch.cuda.is_available():
        return
    assert _cuda.history_available() is False
    assert _cuda.start_history() is False
    assert _cuda.snapshot_stacks() is None
    _cuda.stop_history(False)


def test_block_stacks_from_a_snapshot():
    snapshot = {"segments": [{
        "address": 0x7f0000000000, "total_size": 6 << 20,
        "blocks": [
            {"size": 2 << 20, "state": "active_allocated", "frames": [
                {"filename": "/venv/torch/nn/functional.py", "line": 2385, "name": "linear"},
                {"filename": "/home/u/train.py", "line": 42, "name": "step"}]},
            {"size": 2 << 20, "state": "inactive", "frames": []},
            {"size": 2 << 20, "state": "active_allocated", "frames": [
                {"filename": "/tmp/ipykernel_1/123.py", "line": 3, "name": "<module>"}]},
        ]}]}
    stacks = _cuda.block_stacks(snapshot)
    assert set(stacks) == {0x7f0000000000, 0x7f0000000000 + (4 << 20)}
    first = stacks[0x7f0000000000]
    assert first[0] == ("/venv/torch/nn/functional.py", 2385, "linear")
    assert first[1] == ("/home/u/train.py", 42, "step")
    # The core classifies these frames with the rule it uses for the hook's own frames.
    frame_filter = _core.FrameFilter(["/venv/torch/"], [], {"/tmp/ipykernel_1/123.py": 7})
    assert frame_filter.classify(first[0][0]) == (False, None)
    assert frame_filter.classify(first[1][0]) == (True, None)
    assert frame_filter.classify(stacks[0x7f0000000000 + (4 << 20)][0][0]) == (True, 7)
