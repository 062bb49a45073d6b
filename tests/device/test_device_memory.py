"""Device memory on real tensors: leaks found with site and path, the caching reserve never
called a leak, warm-up then flat is clean, several devices and the CPU in one report, and the
projection against the device's capacity."""

import json
import os
import pathlib
import subprocess
import sys

import pytest
import torch

import backward_sites
import hook_checks
import torchleak
from torchleak import _core
from conftest import DEVICE, MiB, device_of


def leaf(*shape, device="fakegpu"):
    return torch.randn(*shape).to(device).requires_grad_()


def findings_on(report, device):
    return [f for f in report.findings if f.device == device]


def test_a_loss_kept_with_its_graph_on_the_device_is_a_leak_with_site_and_path():
    w = leaf(256, 256)
    losses = []
    with torchleak.track() as tracker:
        for _ in range(8):
            x = torch.ones(256, 256).to("fakegpu")
            hidden = (x @ w).relu()  # the activation the graph keeps: the site
            losses.append(hidden.sum())
            torchleak.step()
    report = tracker.report()
    leaks = [f for f in report.leaks if f.device == "fakegpu:0"]
    assert leaks, str(report)
    sites = {f.site["line"] for f in leaks}
    hidden_line = test_a_loss_kept_with_its_graph_on_the_device_is_a_leak_with_site_and_path.__code__.co_firstlineno + 6
    assert hidden_line in sites
    assert all(f.site["file"] == __file__ for f in leaks)
    kept = next(f for f in leaks if f.site["line"] == hidden_line)
    assert kept.path_text.startswith("losses[")
    assert ".grad_fn" in kept.path_text
    assert kept.holder["path_text"] == "losses"
    assert kept.bytes_per_iteration == 256 * 256 * 4
    device = device_of(report, "fakegpu:0")
    assert device["capacity_bytes"] == DEVICE.native.capacity(0)
    # The allocator's own totals: allocated follows the leak, reserved covers it.
    assert device["allocated"][-1] >= 8 * 256 * 256 * 4
    assert all(r >= a for a, r in zip(device["allocated"], device["reserved"]))


def test_a_reserve_that_grows_while_allocated_is_flat_is_never_a_leak():
    native = DEVICE.native
    with torchleak.track() as tracker:
        for k in range(1, 9):
            # Each request is bigger than any cached block: the allocator reserves a new
            # segment and keeps the old ones cached.
            t = torch.empty(k * 3 * MiB, dtype=torch.uint8, device="fakegpu")
            del t
            torchleak.step()
    report = tracker.report()
    device = device_of(report, "fakegpu:0")
    assert device["reserved"][-1] > device["reserved"][0]
    assert max(device["allocated"]) == 0
    assert native.memory_reserved(0) == device["reserved"][-1]
    assert not findings_on(report, "fakegpu:0") or all(f.verdict != "leak" for f in findings_on(report, "fakegpu:0"))
    assert device["verdict"] in ("fragmentation", "ok")
    assert device["leak_bytes_per_iteration"] == 0
    assert not [f for f in report.leaks if f.device == "fakegpu:0"]


def test_a_device_that_is_flat_after_warm_up_is_clean():
    model = torch.nn.Linear(64, 64).to("fakegpu")
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)  # state on the first step: warm-up
    x = torch.ones(32, 64).to("fakegpu")
    with torchleak.track(warmup=2) as tracker:
        for _ in range(10):
            opt.zero_grad(set_to_none=True)
            model(x).square().mean().backward()
            opt.step()
    report = tracker.report()
    assert report.iterations == 10
    assert not report.leaks, str(report)
    device = device_of(report, "fakegpu:0")
    assert device["allocated"][-1] == device["allocated"][3]
    assert any(f.verdict == "warmup" and f.device == "fakegpu:0" for f in report.findings)


def test_two_devices_and_the_cpu_in_one_report_each_with_their_own_leak():
    kept_gpu1, kept_cpu = [], []
    scratch = torch.ones(128, 128).to("fakegpu:0")
    with torchleak.track() as tracker:
        for _ in range(6):
            kept_gpu1.append(torch.ones(128, 128).to("fakegpu:1"))
            kept_cpu.append(torch.ones(64, 64))
            tmp = scratch * 2  # fakegpu:0: freed every iteration
            del tmp
            torchleak.step()
    report = tracker.report()
    devices = {d["device"] for d in report.devices}
    assert {"cpu", "fakegpu:0", "fakegpu:1"} <= devices
    by_device = {f.device: f for f in report.leaks}
    assert by_device["fakegpu:1"].holder["path_text"] == "kept_gpu1"
    assert by_device["cpu"].holder["path_text"] == "kept_cpu"
    assert "fakegpu:0" not in by_device
    gpu1 = device_of(report, "fakegpu:1")
    assert gpu1["leak_bytes_per_iteration"] == 128 * 128 * 4
    assert DEVICE.native.memory_allocated(1) >= 6 * 128 * 128 * 4


def test_the_projection_is_against_the_devices_capacity():
    DEVICE.native.set_capacity(0, 64 * MiB)
    kept = []
    with torchleak.track() as tracker:
        for _ in range(10):
            kept.append(torch.empty(MiB, dtype=torch.uint8, device="fakegpu"))
            torchleak.step()
    report = tracker.report()
    device = device_of(report, "fakegpu:0")
    assert device["capacity_bytes"] == 64 * MiB
    assert device["leak_bytes_per_iteration"] == MiB
    used = device["allocated"][-1]
    expected = 10 + (64 * MiB - used + MiB - 1) // MiB
    assert device["projected_oom_iteration"] == expected
    remaining = expected - 10
    assert device["projection_text"] == (f"at 1.0 MiB per iteration, fakegpu:0 is full in ~{remaining} iterations")
    assert device["projection_text"] in str(report)


def test_the_report_round_trips_with_device_names_of_the_renamed_backend(tmp_path):
    kept = []
    with torchleak.track() as tracker:
        for _ in range(4):
            kept.append(torch.ones(32).to("fakegpu:1"))
            torchleak.step()
    report = tracker.report()
    path = report.save(tmp_path / "r.json")
    back = torchleak.Report.load(path)
    assert back.to_dict()["devices"] == json.loads(report.to_json())["devices"]
    assert back.leaks[0].device == "fakegpu:1"


@pytest.mark.parametrize("device", ["fakegpu:0", "fakegpu:1"])
def test_check_tracks_a_leak_on_either_device(device):
    kept = []

    def step():
        kept.append(torch.ones(256).to(device))

    report = torchleak.check(step, iterations=6, warmup=1)
    assert [f.device for f in report.leaks] == [device]


def test_an_out_of_tree_allocator_may_still_ask_whether_memory_is_profiled():
    # A PrivateUse1 backend may gate its reports on memoryProfilingEnabled() (CUDA's does not):
    # with one registered, the answer stays yes while tracking, and its events arrive.
    with torchleak.track() as tracker:
        assert _core.c10_memory_profiling_enabled() is True
        kept = torch.empty(MiB, dtype=torch.uint8, device="fakegpu")
    assert device_of(tracker.report(), "fakegpu:0")["allocated"][-1] >= MiB
    del kept


def test_blocks_made_on_autograd_device_threads_are_sited_at_the_backward_call():
    backward_sites.check_a_gradient_kept_per_step_is_sited_at_backward("fakegpu", size=128, batch=32)


def test_blocks_freed_on_a_thread_without_the_hook_are_reconciled_with_the_allocator(monkeypatch):
    # CUDA sends a free to the hook only from threads that inherited it; a tensor made here and
    # dropped by a worker thread (NCCL's, a checkpoint writer) looked alive forever. At stop the
    # allocator's own view (CUDA: its snapshot's active blocks) says what it still holds; here
    # the fake device's pool gives it through the same seam.
    import threading
    from torchleak import _cuda

    monkeypatch.setattr(_cuda.CudaHistory, "snapshot", lambda self: {})
    monkeypatch.setattr(
        _cuda,
        "allocator_view",
        lambda addresses: (["fakegpu"], DEVICE.native.allocated_blocks(0) + DEVICE.native.allocated_blocks(1)),
    )
    handed_off = []
    kept = []
    with torchleak.track() as tracker:
        for i in range(6):
            kept.append(torch.empty(MiB // 2, dtype=torch.uint8, device="fakegpu:1"))  # a leak
            # A segment of its own each, growing: no freed address is handed out again (a
            # reuse would heal the stale block by itself and prove nothing).
            handed_off.append(torch.empty((i + 1) * 2 * MiB, dtype=torch.uint8, device="fakegpu:0"))
            worker = threading.Thread(target=handed_off.clear)  # the last reference dies there
            worker.start()
            worker.join(timeout=30)
            torchleak.step()
    report = tracker.report()
    assert [(f.device, f.bytes_per_iteration) for f in report.leaks] == [("fakegpu:1", MiB // 2)], str(report)
    assert any(w.startswith("fakegpu:0: 6 block(s) (42.0 MiB) were freed on a thread") for w in report.warnings), (
        report.warnings
    )


def test_a_device_registered_after_the_start_is_recorded_from_the_next_boundary(tmp_path):
    # On a CPU-only torch the hook stays out of PROFILER_STATE (the CPU tap carries the CPU);
    # an out-of-tree backend the tracked script imports later reports only there, so the
    # next boundary puts the hook in and the report says what was missed.
    script = tmp_path / "late.py"
    script.write_text(
        "import json, sys, torch, torchleak\n"
        "kept = []\n"
        "with torchleak.track() as tracker:\n"
        "    slot_before = tracker._session.hook_in_profiler_slot\n"
        "    import fakegpu\n"
        "    fakegpu.install()\n"
        "    for _ in range(8):\n"
        "        kept.append(torch.empty(1 << 20, dtype=torch.uint8, device='fakegpu'))\n"
        "        torchleak.step()\n"
        "    slot_after = tracker._session.hook_in_profiler_slot\n"
        "report = tracker.report()\n"
        "json.dump({'before': slot_before, 'after': slot_after,\n"
        "           'joined': tracker._session.profiler_slot_joined_at,\n"
        "           'leaks': [(f.device, f.bytes_per_iteration) for f in report.leaks],\n"
        "           'warnings': report.warnings}, sys.stdout)\n"
    )
    env = dict(os.environ, PYTHONPATH=str(pathlib.Path(__file__).resolve().parent))
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    device_build = hook_checks.device_allocator_built()
    assert out["before"] is device_build and out["after"] is True
    if device_build:
        assert out["joined"] == 0 and not any("registered after" in w for w in out["warnings"])
    else:
        assert out["joined"] == 1
        assert any("recorded from the end of iteration 1 on" in w for w in out["warnings"]), out
    assert ["fakegpu:0", 1 << 20] in out["leaks"], out
