"""Every thread's CPU allocations reach the recorder (issue #15): threads the tracked code
starts, frees on another thread, backward() on a worker, track() on a non-main thread. c10
reports only to the allocating thread's PROFILER_STATE, so these ride the CPU allocator tap."""

import subprocess
import sys
import threading

import torch

import torchleak
from torchleak import _core

KiB = 1 << 10


def in_thread(fn, *args):
    """Run fn on a new thread and wait for it (bounded), re-raising its exception."""
    box = {}

    def body():
        try:
            box["result"] = fn(*args)
        except BaseException as exc:  # noqa: BLE001 - re-raised on the caller's thread
            box["error"] = exc

    t = threading.Thread(target=body, name="worker")
    t.start()
    t.join(timeout=60)
    assert not t.is_alive(), "the thread did not finish"
    if "error" in box:
        raise box["error"]
    return box.get("result")


def test_a_leak_in_a_thread_the_tracked_code_starts_is_found():
    kept = []

    def fill():
        kept.append(torch.ones(64, 1024))  # 256 KiB a run, kept

    report = torchleak.check(lambda: in_thread(fill), iterations=5)
    [leak] = report.leaks
    assert leak.bytes_per_iteration == 256 * KiB
    assert leak.path_text.startswith("kept[")
    # The worker's own stack, though it held no GIL inside torch.ones.
    assert (leak.site["file"], leak.site["line"]) == (__file__, fill.__code__.co_firstlineno + 1)
    assert not _core.cpu_tap_installed()


def test_a_workers_code_freed_before_the_report_is_named_so_not_read():
    kept = []
    source = compile("kept.append(torch.ones(32, 1024))", "<generated>", "eval")

    def run_generated():
        code = source.replace()  # a fresh code object, dropped when this call returns
        eval(code, {"kept": kept, "torch": torch})

    report = torchleak.check(lambda: in_thread(run_generated), iterations=4)
    [leak] = report.leaks
    assert leak.stack[0]["file"] == "<code freed before the report>"
    assert leak.site["line"] == run_generated.__code__.co_firstlineno + 2


def test_a_tensor_freed_on_another_thread_is_not_a_false_leak():
    def step():
        t = torch.ones(64, 1024)
        box = [t]
        del t
        in_thread(box.clear)  # the last reference dies on the worker

    report = torchleak.check(step, iterations=5)
    assert report.leaks == [], str(report)


def test_backward_on_a_worker_thread_is_seen():
    w = torch.randn(256, 256, requires_grad=True)
    x = torch.randn(128, 256)
    losses = []

    def step():
        def forward_backward():
            loss = torch.tanh(x @ w).sum()
            loss.backward()
            losses.append(loss)  # the classic leak, made on the worker

        in_thread(forward_backward)

    report = torchleak.check(step, iterations=5)
    assert report.leaks, str(report)
    assert any(f.path_text.startswith("losses[") for f in report.leaks), str(report)


def test_track_on_a_non_main_thread_records_its_own_and_other_threads_allocations():
    def tracked():
        kept = []
        with torchleak.track(boundary="explicit") as tracker:
            for _ in range(5):
                kept.append(torch.ones(64, 1024))
                in_thread(lambda: kept.append(torch.ones(32, 1024)))
                torchleak.step()
        return tracker.report(), kept

    report, kept = in_thread(tracked)
    assert len(kept) == 10
    assert sum(f.bytes_per_iteration for f in report.leaks) == (64 + 32) * 4 * KiB, str(report)
    first_line = tracked.__code__.co_firstlineno
    assert sorted(f.site["line"] for f in report.leaks) == [first_line + 4, first_line + 5]
    assert not _core.cpu_tap_installed()


def run_child(tmp_path, source, timeout=300):
    """Runs `source` in a child interpreter (bounded) and returns its stdout: for what would hang
    or crash the test process itself."""
    script = tmp_path / "child.py"
    script.write_text(source)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_an_allocation_made_while_the_tap_lock_is_held_is_let_through_unrecorded(tmp_path):
    """The tap holds one lock around each event, the recorder's own: an allocation its holder
    made (the hook's own work, if it ever allocated through c10) must pass unrecorded, not wait
    for itself. In a child with a timeout: the regression is a hang."""
    out = run_child(
        tmp_path,
        "import torch, torchleak\n"
        "from torchleak import _core\n"
        "with torchleak.track() as t:\n"
        "    assert _core.cpu_tap_installed()\n"
        "    before = t.events\n"
        "    assert _core._allocate_holding_tap_lock_for_testing(4096)\n"
        "    between = t.events\n"
        "    x = torch.empty(1024)\n"
        "    after = t.events\n"
        "print(before, between, after)\n",
    )
    before, between, after = map(int, out.split())
    assert between == before  # neither the allocation nor its free was recorded
    assert after > between  # and the tap still records once the lock is given back


def test_sessions_start_and_stop_while_other_threads_allocate(tmp_path):
    """Detaching waits for the event in flight (the tap's lock) and never for more: four
    threads allocate and free all along while the main thread runs 30 short sessions. In a
    child with a timeout: the regression is a crash or a hang."""
    out = run_child(
        tmp_path,
        "import threading, torch, torchleak\n"
        "from torchleak import _core\n"
        "stop = threading.Event()\n"
        "def churn():\n"
        "    while not stop.is_set():\n"
        "        kept = [torch.ones(64) + i for i in range(50)]\n"
        "        del kept\n"
        "threads = [threading.Thread(target=churn) for _ in range(4)]\n"
        "for t in threads: t.start()\n"
        "found = 0\n"
        "for _ in range(30):\n"
        "    hist = []\n"
        "    with torchleak.track() as tr:\n"
        "        for _ in range(6):\n"
        "            hist.append(torch.ones(16384))\n"
        "            torchleak.step()\n"
        "    found += any(f.verdict == 'leak' for f in tr.report().findings)\n"
        "stop.set()\n"
        "for t in threads: t.join(timeout=60)\n"
        "assert not any(t.is_alive() for t in threads)\n"
        "assert not _core.cpu_tap_installed()\n"
        "print(found)\n",
    )
    assert int(out.split()[-1]) == 30  # each session found its own leak
