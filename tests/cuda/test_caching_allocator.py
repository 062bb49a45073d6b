"""The CUDA caching allocator as torchleak's hook sees it: its events and totals, the addresses
its own snapshot lists, memory by role from its totals, and the memory viewer's pickle."""

import pickle
import threading

import pytest
import torch

import torchleak
from conftest import MiB, device_of, line_of


def leaky_loop(kept, iterations=8):
    for _ in range(iterations):
        kept.append(torch.empty(4 * MiB, dtype=torch.uint8, device="cuda"))  # LEAK
        scratch = torch.empty(16 * MiB, dtype=torch.uint8, device="cuda")
        del scratch
        torchleak.step()


def test_the_caching_allocator_sends_its_events_and_totals_to_the_hook():
    kept = []
    with torchleak.track() as tracker:
        leaky_loop(kept)
        torch.cuda.synchronize()
        allocated_at_end = torch.cuda.memory_allocated()
        reserved_at_end = torch.cuda.memory_reserved()
    report = tracker.report()
    device = device_of(report)
    # The totals are the allocator's own (they ride on every event), not a sum of blocks.
    assert device["allocated"][-1] == allocated_at_end
    assert device["reserved"][-1] == reserved_at_end
    assert device["capacity_bytes"] == torch.cuda.get_device_properties(0).total_memory
    leak = next(f for f in report.leaks if f.device == "cuda:0")
    assert leak.site["line"] == line_of(leaky_loop, "# LEAK"), leak.site
    assert leak.holder["path_text"] == "kept"
    assert leak.bytes_per_iteration == 4 * MiB
    assert not [w for w in report.warnings if "freed on a thread" in w], report.warnings
    del kept


def test_the_allocator_snapshot_lists_the_blocks_at_the_addresses_the_hook_saw():
    """Reconciliation at stop compares the hook's live blocks with the snapshot's active ones:
    were their addresses not the same, every live CUDA block would read as freed elsewhere."""
    kept = []
    with torchleak.track() as tracker:
        leaky_loop(kept, iterations=4)
        hook_view = tracker.report().to_memory_snapshot()
        allocator = torch.cuda.memory._snapshot()
    names = hook_view["torchleak"]["devices"]
    hook_addresses = {s["address"] for s in hook_view["segments"] if names[str(s["device"])] == "cuda:0"}
    active = {b["address"] for seg in allocator["segments"] for b in seg["blocks"] if b["state"] == "active_allocated"}
    mine = {t.data_ptr() for t in kept}
    assert mine <= hook_addresses & active
    del kept


def test_allocation_traceback_returns_frames_in_the_snapshot_shape():
    lookup = getattr(torch.cuda.memory, "_allocation_traceback", None)
    if lookup is None:
        pytest.skip(f"torch {torch.__version__} has no torch.cuda.memory._allocation_traceback (2.15 on)")
    from torchleak import _cuda

    kept = []
    with torchleak.track():
        leaky_loop(kept, iterations=2)
        frames = _cuda._frames(lookup(kept[0].data_ptr()))
    assert any(line == line_of(leaky_loop, "# LEAK") for _, line, _ in frames), frames
    del kept


def test_roles_untracked_and_reserve_come_from_the_caching_allocators_totals():
    before = torch.empty(32 * MiB, dtype=torch.uint8, device="cuda")  # made before tracking, named by nobody
    model = torch.nn.Linear(1024, 1024, device="cuda")
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    losses = []
    with torchleak.track() as tracker:
        for _ in range(6):
            x = torch.randn(256, 1024, device="cuda")
            loss = model(x).square().mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            losses.append(loss)  # the leak: each loss with its graph
    data = tracker.report().to_dict()
    device = next(d for d in data["devices"] if d["device"] == "cuda:0")
    roles = {r["role"]: r for r in device["roles"]}
    for i, (allocated, reserved) in enumerate(zip(device["allocated"], device["reserved"])):
        assert sum(r["at_boundary"][i] for n, r in roles.items() if n != "reserve") == allocated
        assert roles["reserve"]["at_boundary"][i] == reserved - allocated
    assert roles["untracked"]["at_boundary"][-1] >= 32 * MiB
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    assert roles["parameters"]["at_boundary"][-1] == params
    assert roles["user_held"]["at_boundary"][-1] > 0
    del before, losses


def test_the_memory_viewer_pickle_of_a_cuda_run_reads_back_through_memory_viz(tmp_path):
    from torch.cuda import _memory_viz

    kept = []
    with torchleak.track() as tracker:
        leaky_loop(kept, iterations=4)
    report = tracker.report()
    path = report.save(tmp_path / "cuda.pickle")
    with open(path, "rb") as fh:
        snapshot = pickle.load(fh)
    summary = _memory_viz.segsum(snapshot)
    assert "total_allocated" in summary
    line = line_of(leaky_loop, "# LEAK")

    flame = _memory_viz.memory(snapshot, format_flamegraph=lambda text: text)
    assert flame.count(f"test_caching_allocator.py:{line}:") == len(kept), flame[:2000]
    assert {s["address"] for s in snapshot["segments"]} >= {t.data_ptr() for t in kept}
    del kept


def test_a_cuda_tensor_freed_on_another_thread_is_no_leak_and_one_warning():
    def step():
        box = [torch.empty(4 * MiB, dtype=torch.uint8, device="cuda")]
        worker = threading.Thread(target=box.clear)  # the last reference dies on the worker
        worker.start()
        worker.join()

    report = torchleak.check(step, iterations=6, warmup=1)
    assert not [f for f in report.leaks if f.device == "cuda:0"], str(report)
    freed = [w for w in report.warnings if "freed on a thread" in w]
    assert len(freed) == 1, report.warnings
    assert freed[0].startswith("cuda:0: ")
