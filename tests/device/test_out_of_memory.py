"""Out-of-memory forensics on the fake device: attached to the exception, in the JSON's `oom`
section, the text, the HTML and the notebook outputs; shown by %%leakcheck, %leakwatch and the
CLI; and never at the cost of the report of the iterations seen."""

import gc
import os
import pathlib
import subprocess
import sys
import weakref

import pytest
import torch

import ipython_shell
import torchleak
from conftest import DEVICE, MiB

HERE = pathlib.Path(__file__).resolve().parent


def leaky_loop(kept, iterations=1000):
    for _ in range(iterations):
        kept.append(torch.empty(MiB, dtype=torch.uint8, device="fakegpu"))  # the culprit
        scratch = torch.empty(2 * MiB, dtype=torch.uint8, device="fakegpu")
        del scratch
        torchleak.step()


CULPRIT_LINE = leaky_loop.__code__.co_firstlineno + 2


def test_an_oom_in_a_tracked_loop_carries_its_forensics():
    DEVICE.native.set_capacity(0, 16 * MiB)
    kept = []
    with pytest.raises(torch.OutOfMemoryError) as info:
        with torchleak.track():
            leaky_loop(kept)
    exc = info.value
    report = exc.torchleak_report
    oom = report.oom
    assert oom["device"] == "fakegpu:0"
    assert oom["error"] == "OutOfMemoryError"
    assert oom["message"].startswith("fakegpu out of memory")
    assert oom["totals_from"] == "allocator"
    assert oom["capacity_bytes"] == 16 * MiB
    assert oom["reserved_bytes"] <= 16 * MiB
    assert oom["allocated_bytes"] >= len(kept) * MiB
    assert oom["requested_bytes"] in (MiB, 2 * MiB)
    assert oom["iteration"] == report.iterations
    culprit = report.findings[oom["findings"][0]]
    assert culprit.verdict == "leak"
    assert culprit.site["line"] == CULPRIT_LINE
    assert oom["by_holder"][0]["holder"] == "kept"
    assert oom["by_holder"][0]["live_bytes"] == len(kept) * MiB
    assert oom["by_site"][0]["site"].endswith(f"test_out_of_memory.py:{CULPRIT_LINE}")
    assert oom["text"].startswith(f"Out of memory on fakegpu:0 in iteration {report.iterations + 1}")
    assert "Likely culprit" in oom["text"] and "held by kept" in oom["text"]
    # The traceback's last words say why (Python 3.11+ notes).
    if hasattr(exc, "add_note"):
        assert exc.__notes__ == [f"torchleak: {oom['text']}"]
    # Every view shows it; the JSON round-trips it.
    assert f"OUT OF MEMORY: {oom['text']}" in str(report)
    assert 'data-testid="oom"' in report.to_html()
    back = torchleak.Report.from_json(report.to_json())
    assert back.oom == oom
    del kept


def test_check_attaches_the_forensics_to_the_oom_it_re_raises():
    DEVICE.native.set_capacity(0, 8 * MiB)
    kept = []

    def step():
        kept.append(torch.empty(MiB, dtype=torch.uint8, device="fakegpu"))

    with pytest.raises(torch.OutOfMemoryError) as info:
        torchleak.check(step, iterations=50, warmup=1)
    report = info.value.torchleak_report
    assert report.oom["device"] == "fakegpu:0"
    assert report.findings[report.oom["findings"][0]].holder["path_text"] == "kept"
    assert any("stopped in iteration" in w for w in report.warnings)


def test_an_oom_with_no_growth_before_it_says_the_working_set_did_not_fit():
    DEVICE.native.set_capacity(0, 8 * MiB)
    with pytest.raises(torch.OutOfMemoryError) as info:
        with torchleak.track():
            for _ in range(3):
                torch.empty(MiB, dtype=torch.uint8, device="fakegpu")
                torchleak.step()
            torch.empty(64 * MiB, dtype=torch.uint8, device="fakegpu")
    oom = info.value.torchleak_report.oom
    assert oom["findings"] == []
    assert oom["requested_bytes"] == 64 * MiB
    assert "No site grew before it" in oom["text"]


def test_a_memory_error_is_a_cpu_failure_with_tracked_bytes():
    kept = []
    with pytest.raises(MemoryError) as info:
        with torchleak.track():
            for _ in range(4):
                kept.append(torch.ones(1024))
                torchleak.step()
            raise MemoryError("simulated host allocation failure")
    oom = info.value.torchleak_report.oom
    assert oom["device"] == "cpu"
    assert oom["totals_from"] == "tracked"
    assert oom["requested_bytes"] is None
    assert oom["capacity_bytes"] > 0
    assert oom["by_holder"][0]["holder"] == "kept"


def test_a_cpu_allocation_the_allocator_refuses_is_an_oom_whatever_its_words():
    # #46: torch raises a plain RuntimeError ("DefaultCPUAllocator: can't allocate memory"),
    # which no word list knew. The CPU tap sees the allocator refuse and the request's size.
    kept = []
    with pytest.raises(RuntimeError) as info:
        with torchleak.track():
            for _ in range(4):
                kept.append(torch.ones(1024))
                torchleak.step()
            torch.empty(2**42, dtype=torch.uint8)  # 4 TiB
    oom = info.value.torchleak_report.oom
    assert oom is not None and oom["device"] == "cpu"
    assert oom["requested_bytes"] == 2**42  # only the tap knows it: the message is not read for it
    assert oom["by_holder"][0]["holder"] == "kept"


def test_a_runtime_error_after_the_cpu_allocator_succeeded_again_is_not_an_oom():
    # A failure the program caught and survived: an allocation since then clears it.
    with pytest.raises(RuntimeError) as info:
        with torchleak.track():
            try:
                torch.empty(2**42, dtype=torch.uint8)
            except RuntimeError:
                pass
            torch.ones(16)
            raise RuntimeError("a shape mismatch")
    assert not hasattr(info.value, "torchleak_report")  # not an out-of-memory error


def test_the_words_are_only_the_fallback():
    from torchleak._out_of_memory import is_out_of_memory

    assert is_out_of_memory(RuntimeError("anything at all"), "cpu")
    assert not is_out_of_memory(RuntimeError("anything at all"), None)
    assert not is_out_of_memory(ValueError("out of memory"), "cpu")


def test_the_tracker_does_not_keep_the_oom_or_the_tensors_of_its_frames():
    """The tool never keeps a tensor alive: the tracker remembers the error's words, not the
    exception, whose traceback holds the failing frames and their tensors."""
    seen = []

    def failing_step():
        activation = torch.empty(MiB, dtype=torch.uint8, device="fakegpu")
        seen.append(weakref.ref(activation))
        raise MemoryError("out of host memory")

    tracker = torchleak.track()
    try:  # not pytest.raises: its ExceptionInfo keeps the traceback itself
        with tracker:
            failing_step()
    except MemoryError:
        pass
    gc.collect()
    assert seen[0]() is None
    assert tracker.report().oom["error"] == "MemoryError"


def test_other_exceptions_get_no_oom_section_and_no_report_attached():
    with pytest.raises(ValueError) as info:
        with torchleak.track():
            torch.ones(4).to("fakegpu")
            raise ValueError("not memory")
    assert not hasattr(info.value, "torchleak_report")


def test_a_report_is_kept_when_the_forensics_cannot_be_built(monkeypatch):
    """Nothing is lost: a failure inside the forensics becomes a warning of the report."""
    DEVICE.native.set_capacity(0, 4 * MiB)
    from torchleak import _out_of_memory

    def unreadable(exc):
        raise RuntimeError("cannot read it")

    monkeypatch.setattr(_out_of_memory, "describe", unreadable)
    kept = []
    with pytest.warns(RuntimeWarning, match="could not build the report"):
        with pytest.raises(torch.OutOfMemoryError) as info:
            with torchleak.track():
                leaky_loop(kept)
    assert not hasattr(info.value, "torchleak_report")
    monkeypatch.undo()
    # The run itself was recorded and still reports.
    del kept


def test_leakcheck_shows_the_forensics_and_re_raises(ipython):
    DEVICE.native.set_capacity(0, 6 * MiB)
    ipython.run_line_magic("load_ext", "torchleak")
    ipython.user_ns["torch"] = torch
    ipython_shell.run(ipython, "kept = []")
    result = ipython_shell.run(
        ipython, "%%leakcheck -n 40 -o r\nkept.append(torch.empty(1 << 20, dtype=torch.uint8, device='fakegpu'))\n"
    )
    assert isinstance(result.error_in_exec, torch.OutOfMemoryError)
    report = result.error_in_exec.torchleak_report
    assert report.oom["device"] == "fakegpu:0"
    shown = [out for out in ipython.display_pub.outputs if "application/vnd.torchleak.report+json" in out["data"]]
    assert shown and shown[-1]["data"]["application/vnd.torchleak.report+json"]["oom"]["device"] == "fakegpu:0"
    assert 'data-testid="oom"' in shown[-1]["data"]["text/html"]
    assert "OUT OF MEMORY" in shown[-1]["data"]["text/plain"]


def test_leakwatch_shows_the_forensics_of_a_cell_that_dies_of_an_oom(ipython):
    DEVICE.native.set_capacity(0, 6 * MiB)
    ipython.run_line_magic("load_ext", "torchleak")
    ipython.user_ns["torch"] = torch
    ipython_shell.run(ipython, "%leakwatch on")
    ipython_shell.run(ipython, "kept = []")
    for _ in range(3):
        ipython_shell.run(ipython, "kept.append(torch.empty(1 << 20, dtype=torch.uint8, device='fakegpu'))")
    before = len(ipython.display_pub.outputs)
    result = ipython_shell.run(ipython, "big = torch.empty(16 << 20, dtype=torch.uint8, device='fakegpu')")
    assert isinstance(result.error_in_exec, torch.OutOfMemoryError)
    shown = [
        out for out in ipython.display_pub.outputs[before:] if "application/vnd.torchleak.report+json" in out["data"]
    ]
    assert shown, "cell watch showed no forensics"
    oom = shown[-1]["data"]["application/vnd.torchleak.report+json"]["oom"]
    assert oom["device"] == "fakegpu:0"
    assert oom["requested_bytes"] == 16 * MiB
    assert oom["by_holder"][0]["holder"] == "kept"
    assert result.error_in_exec.torchleak_report.oom == oom
    ipython_shell.run(ipython, "%leakwatch off")


def test_the_cli_prints_the_forensics_when_the_script_dies_of_an_oom(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(
        "import fakegpu, torch\n"
        "fg = fakegpu.install()\n"
        "fg.set_capacity(8 << 20, 0)\n"
        "history = []\n"
        "for step in range(100):\n"
        "    history.append(torch.empty(1 << 20, dtype=torch.uint8, device='fakegpu'))\n"
        "    torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1).step()\n"
    )
    env = dict(os.environ, PYTHONPATH=str(HERE))
    proc = subprocess.run(
        [sys.executable, "-m", "torchleak", "run", "--json", str(tmp_path / "r.json"), str(script)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 3, proc.stderr
    assert "torch.OutOfMemoryError" in proc.stderr
    assert "OUT OF MEMORY: Out of memory on fakegpu:0" in proc.stdout
    assert "held by history" in proc.stdout
    saved = torchleak.Report.load(tmp_path / "r.json")
    assert saved.oom["device"] == "fakegpu:0"
    assert saved.findings[saved.oom["findings"][0]].site["line"] == 6


def test_an_observers_note_after_the_allocators_report_keeps_the_allocators_numbers():
    # PyTorch's CUDA observer runs right after the allocator reported the same failure through
    # the hook, with a segment size and the device's capacity: the allocator's event stays.
    DEVICE.native.set_capacity(0, 16 * MiB)
    kept = []
    with pytest.raises(torch.OutOfMemoryError) as info:
        with torchleak.track() as tracker:
            try:
                leaky_loop(kept)
            except torch.OutOfMemoryError:
                tracker._session.note_out_of_memory("fakegpu:0", "fakegpu", -1, 1, 2)
                raise
    oom = info.value.torchleak_report.oom
    assert oom["requested_bytes"] in (MiB, 2 * MiB)
    assert oom["allocated_bytes"] >= len(kept) * MiB
    assert oom["reserved_bytes"] <= 16 * MiB


def test_an_oom_the_program_survived_is_not_the_failure_that_ends_it():
    DEVICE.native.set_capacity(0, 16 * MiB)
    with pytest.raises(MemoryError) as info:
        with torchleak.track():
            try:  # a batch-size finder: too big, caught, smaller
                torch.empty(64 * MiB, dtype=torch.uint8, device="fakegpu")
            except torch.OutOfMemoryError:
                pass
            smaller = torch.empty(MiB, dtype=torch.uint8, device="fakegpu")
            torchleak.step()
            raise MemoryError("host memory exhausted")
    oom = info.value.torchleak_report.oom
    assert oom["device"] == "cpu"  # not the fake device's old event
    assert oom.get("requested_bytes") is None
    del smaller
