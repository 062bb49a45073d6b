import gc
import json
import runpy
import signal
import subprocess
import sys
import weakref

import pytest
import torch

import torchleak
from hook_checks import device_allocator_built, hook_installed
from torchleak import _core

MiB = 1 << 20


def line_of(marker, path=__file__):
    with open(path, encoding="utf-8") as fh:
        for number, line in enumerate(fh, 1):
            if line.rstrip().endswith(marker):
                return number
    raise AssertionError(marker)


def test_list_append_of_1mib_is_one_leak_at_that_line():
    # GIVEN a step that keeps one 1 MiB tensor per call and frees a temporary
    kept = []

    def train_step():
        kept.append(torch.ones(256, 1024))  # LEAK-1MIB
        tmp = torch.randn(512, 512)
        return float(tmp.sum())

    # WHEN it runs 10 times under check()
    report = torchleak.check(train_step, iterations=10)

    # THEN exactly one finding, a leak at that line, 1 MiB per iteration, one block per iteration
    assert len(report.findings) == 1
    (leak,) = report.leaks
    assert leak.site["file"] == __file__
    assert leak.site["line"] == line_of("# LEAK-1MIB")
    assert leak.site["function"] == "test_list_append_of_1mib_is_one_leak_at_that_line.<locals>.train_step"
    assert leak.bytes_per_iteration == MiB
    assert leak.count == 10
    assert leak.total_bytes == 10 * MiB
    assert leak.series == [MiB * (i + 1) for i in range(10)]
    assert leak.dtype == "float32" and leak.shape == [256, 1024]
    assert leak.device == "cpu"
    assert report.devices[0]["leak_bytes_per_iteration"] == MiB
    assert report.devices[0]["projected_oom_iteration"] > 10
    assert report.iterations == 10


def test_allocate_and_free_is_no_leak():
    def step():
        a = torch.randn(512, 512)
        b = a @ a
        return float(b.mean())

    report = torchleak.check(step, iterations=12)
    assert report.leaks == []
    assert report.findings == []
    assert "No tensor allocated during the run survived" in str(report)


def test_module_forward_reports_the_calling_user_line_with_module_frame_in_stack():
    model = torch.nn.Linear(128, 2048)
    outputs = []
    x = torch.randn(128, 128)

    def step():
        with torch.no_grad():
            outputs.append(model(x))  # CALLS-MODEL

    report = torchleak.check(step, iterations=6)
    (leak,) = report.leaks
    assert leak.site["line"] == line_of("# CALLS-MODEL")
    assert leak.bytes_per_iteration == 128 * 2048 * 4
    library = [f for f in leak.stack if not f["user"]]
    assert any(
        f["file"].endswith("torch/nn/modules/linear.py") and f["function"] == "Linear.forward" for f in library
    ), leak.stack
    assert leak.stack[0]["file"].endswith("linear.py")  # innermost first


def test_allocations_in_backward_are_named_by_their_autograd_node():
    w = torch.randn(256, 512, requires_grad=True)
    x = torch.randn(64, 256)
    grads = []

    def step():
        loss = (x @ w).sum()
        loss.backward()  # BACKWARD-CALL
        grads.append(w.grad)  # the gradient buffer was allocated by MmBackward0
        w.grad = None

    report = torchleak.check(step, iterations=6)
    (leak,) = report.leaks
    assert leak.autograd_node == "MmBackward0"
    assert leak.site["function"] == "MmBackward0"
    assert leak.site["line"] == line_of("# BACKWARD-CALL")
    assert leak.bytes_per_iteration == 256 * 512 * 4


def test_warmup_state_is_not_a_leak():
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 256))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x, y = torch.randn(64, 256), torch.randn(64, 256)

    def step():
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()

    report = torchleak.check(step, iterations=8, warmup=1)
    assert report.leaks == []
    verdicts = {f.verdict for f in report.findings}
    assert verdicts <= {"warmup", "transient"}
    assert "warmup" in verdicts  # Adam's exp_avg/exp_avg_sq and the .grad buffers


def test_track_with_optimizer_steps_marks_iterations():
    model = torch.nn.Linear(64, 64)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    with torchleak.track() as tracker:
        for _ in range(5):
            loss = model(torch.randn(32, 64)).pow(2).mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            losses.append(loss)  # keeps each step's graph alive
    report = tracker.report()
    assert report.iterations == 5
    assert report.to_dict()["boundary"] == "optimizer_step"
    assert report.leaks, str(report)


def test_explicit_step_takes_over_from_optimizer_steps():
    with torchleak.track() as tracker:
        for _ in range(3):
            torchleak.step()
    assert tracker.report().iterations == 3
    assert tracker.report().to_dict()["boundary"] == "explicit"


def test_empty_run_reports_nothing():
    with torchleak.track() as tracker:
        pass
    report = tracker.report()
    assert report.iterations == 0
    assert report.findings == []
    assert report.summary["score"] == 100
    json.loads(report.to_json())


def test_tool_keeps_no_tensor_alive():
    kept = []

    def step():
        kept.append(torch.ones(1024, 256))

    report = torchleak.check(step, iterations=4)
    assert report.leaks
    refs = [weakref.ref(t) for t in kept]
    storage_refs = [weakref.ref(t.untyped_storage()) for t in kept]
    kept.clear()
    gc.collect()
    assert all(r() is None for r in refs)
    assert all(r() is None for r in storage_refs)


def test_hooks_are_removed_after_an_exception_inside_track():
    with pytest.raises(ValueError, match="boom"):
        with torchleak.track():
            torch.ones(10)
            raise ValueError("boom")
    assert not hook_installed()


def test_check_reports_what_it_saw_when_interrupted():
    kept = []
    calls = []

    def step():
        calls.append(1)
        kept.append(torch.ones(256, 1024))
        if len(calls) == 4:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt) as info:
        torchleak.check(step, iterations=10)
    report = info.value.torchleak_report
    assert report.iterations == 3
    assert any("KeyboardInterrupt" in w for w in report.warnings)
    assert not hook_installed()


def _interrupt_after(iteration):
    """An `after_each` that sends the process SIGINT (the kernel's Stop) while iteration
    `iteration` ends: inside torchleak's own bookkeeping, not the user's code."""
    return lambda k: signal.raise_signal(signal.SIGINT) if k == iteration else None


def test_a_stop_while_an_iteration_ends_stops_at_the_boundary_with_the_report():
    # Before: the KeyboardInterrupt left torchleak's own code and the loop's report was lost.
    kept = []
    tracker = torchleak.Tracker(boundary="repeat", warmup=0)
    with tracker:
        failure = tracker._run_iterations(lambda: kept.append(torch.ones(1024)), 10, after_each=_interrupt_after(3))
    assert type(failure) is KeyboardInterrupt
    assert len(kept) == 3 and tracker.iterations == 3  # the third iteration counted whole
    report = tracker.report()
    assert "stopped after iteration 3 of 10 by KeyboardInterrupt" in report.warnings, report.warnings
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_stop_while_the_last_iteration_ends_lets_the_run_finish():
    tracker = torchleak.Tracker(boundary="repeat", warmup=0)
    with tracker:
        failure = tracker._run_iterations(lambda: torch.ones(8), 3, after_each=_interrupt_after(3))
    assert failure is None and tracker.iterations == 3
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_sigint_handler_of_the_users_own_is_called_not_held():
    heard = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: heard.append(signum))
    try:
        tracker = torchleak.Tracker(boundary="repeat", warmup=0)
        with tracker:
            failure = tracker._run_iterations(lambda: torch.ones(8), 5, after_each=_interrupt_after(2))
        assert failure is None and tracker.iterations == 5
        assert heard == [signal.SIGINT]
    finally:
        signal.signal(signal.SIGINT, previous)


def test_nested_tracking_is_a_clear_error():
    with torchleak.track():
        with pytest.raises(RuntimeError, match="already tracking"):
            with torchleak.track():
                pass
        with pytest.raises(RuntimeError, match="already tracking"):
            torchleak.check(lambda: None, iterations=2)


def test_step_outside_track_does_nothing_so_instrumented_scripts_run_under_plain_python(tmp_path):
    assert torchleak.step() is None
    script = tmp_path / "train.py"
    script.write_text(
        "import torch, torchleak\nfor _ in range(3):\n    torch.ones(4)\n    torchleak.step()\nprint('done')\n"
    )
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0 and proc.stdout == "done\n", proc.stderr
    with torchleak.track() as tracker:
        torchleak.step()
    with pytest.raises(RuntimeError, match="outside"):
        tracker.step()  # a Tracker's own step() after its block is still a mistake


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(iterations=0), "iterations"),
        (dict(iterations=2.5), "iterations"),
        (dict(iterations=5, warmup=5), "warmup"),
        (dict(iterations=5, warmup=-1), "warmup"),
        (dict(min_bytes=-3), "min_bytes"),
    ],
)
def test_check_validates_its_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        torchleak.check(lambda: None, **kwargs)


def test_check_needs_a_callable():
    with pytest.raises(TypeError):
        torchleak.check(42)


def test_profiler_started_inside_track_works_and_the_gap_is_reported():
    kept = []
    with torchleak.track() as tracker:
        for i in range(4):
            kept.append(torch.ones(256, 1024))  # 1 MiB per iteration
            if i == 1:
                with torch.profiler.profile(
                    activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True
                ) as prof:
                    torch.ones(300, 300).sum()
                assert hook_installed()  # torchleak stepped back in
            torchleak.step()
    # the profiler recorded normally while torchleak stepped aside
    assert any(e.name == "aten::ones" for e in prof.events())
    report = tracker.report()
    assert any("torch.profiler ran inside" in w for w in report.warnings)
    assert report.iterations == 4
    assert torch.autograd.profiler._run_on_profiler_start.__module__ == "torch.autograd.profiler"


def test_track_under_an_active_profiler_warns_and_records_after_it_stops():
    kept = []
    prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
    prof.__enter__()
    with pytest.warns(RuntimeWarning, match="torch.profiler is active"):
        tracker = torchleak.track()
        tracker.__enter__()
    try:
        torch.ones(10).sum()
        torchleak.step()
        prof.__exit__(None, None, None)  # torchleak resumes here
        assert any(e.name == "aten::ones" for e in prof.events())
        for _ in range(4):
            kept.append(torch.ones(256, 1024))
            torchleak.step()
    finally:
        tracker.__exit__(None, None, None)
    report = tracker.report()
    assert report.iterations == 5
    (leak,) = report.leaks
    assert leak.series[-4:] == [MiB, 2 * MiB, 3 * MiB, 4 * MiB]


def test_report_save_and_load(tmp_path):
    kept = []
    report = torchleak.check(lambda: kept.append(torch.ones(64, 1024)), iterations=4)
    json_path = report.save(tmp_path / "r.json")
    html_path = report.save(tmp_path / "r.html")
    loaded = torchleak.Report.load(json_path)
    assert loaded.to_dict() == report.to_dict()
    html = open(html_path, encoding="utf-8").read()
    assert "<script" not in html and "http" not in html
    with pytest.raises(ValueError, match=r"\.json, \.html or \.pickle"):
        report.save(tmp_path / "r.txt")
    with pytest.raises(_core.ReportSchemaError):
        torchleak.Report.from_json('{"schema_version": "something else"}')


def test_file_names_with_quotes_and_html_survive_json_and_are_escaped_in_html(tmp_path):
    weird = tmp_path / "we\"ird <b>&amp; 'name'.py"
    weird.write_text("import torch\nkept = []\ndef step():\n    kept.append(torch.ones(256, 256))\n")
    module = runpy.run_path(str(weird))
    report = torchleak.check(module["step"], iterations=4)
    (leak,) = report.leaks
    assert leak.site["file"] == str(weird)
    assert leak.site["line"] == 4
    parsed = json.loads(report.to_json())
    assert parsed["findings"][0]["site"]["file"] == str(weird)
    assert torchleak.Report.from_json(report.to_json()).leaks[0].site["file"] == str(weird)
    html = report.to_html()
    assert "<b>&amp;" not in html
    assert "&lt;b&gt;&amp;amp;" in html


def test_many_small_allocations():
    kept = []

    def step():
        for _ in range(5000):
            kept.append(torch.empty(4))

    report = torchleak.check(step, iterations=20)
    (leak,) = report.leaks
    assert leak.count == 100_000
    assert leak.bytes_per_iteration == 5000 * leak.total_bytes // 100_000


def test_config_set_is_all_or_nothing_and_attributes_are_validated_at_once():
    from torchleak import config

    before = config.to_dict()
    for bad in (dict(warmup=3, min_bytes="1.2.3MiB"), dict(min_bytes=1e19), dict(warmup=2, min_confidence=7)):
        with pytest.raises(ValueError):
            config.set(**bad)
        assert config.to_dict() == before, bad
    with pytest.raises(ValueError):
        config.warmup = "x"
    with pytest.raises(AttributeError, match="no setting 'warmpu'"):
        config.warmpu = 2
    assert config.to_dict() == before
    config.warmup = 2
    try:
        assert config.warmup == 2
    finally:
        config.reset()


def test_the_cpu_tap_spares_c10s_cpu_reporter_its_bookkeeping():
    # On a CUDA build the CUDA allocator is registered, and asking c10's CPU reporter to keep
    # its mutex-guarded size table for every CPU allocation (whose report the hook drops, the
    # tap carrying CPU events) cost every CPU allocation; CUDA reports without asking.
    with torchleak.track():
        if _core.cpu_tap_installed():
            assert _core.c10_memory_profiling_enabled() is False
    assert _core.c10_memory_profiling_enabled() is False


def test_frees_of_an_earlier_sessions_blocks_make_no_iteration():
    # The CPU tap's deleter stays on blocks allocated while it ran; collected inside a later,
    # empty block they report their frees there. That is no run: 0 iterations (this was a
    # flaky empty report whenever the collector ran inside the block).
    class Cycle:
        pass

    with torchleak.track():
        garbage = Cycle()
        garbage.self, garbage.tensor = garbage, torch.ones(1024)
        del garbage
    with torchleak.track() as tracker:
        gc.collect()
    assert tracker.report().iterations == 0


def test_the_commonest_leak_gets_its_code_and_no_second_holder_for_the_loops_own_name():
    # #62 item 7: the site is the loss's line, the append two lines below it; the fix had no
    # code, and said "clearing losses alone frees only 44 B of 48 B: loss also holds them",
    # `loss` being the newest step's, rebound by the loop.
    model = torch.nn.Linear(64, 64)
    losses = []
    with torchleak.track() as tracker:
        for _ in range(12):
            loss = model(torch.randn(32, 64)).square().mean()
            loss.backward()
            losses.append(loss)
            torchleak.step()
    [leak] = tracker.report().leaks
    assert leak.get("fix_code") == "losses.append(loss.item())"
    assert leak.fix_rule == "kept-with-graph"  # the remedy rule that gave it
    assert leak.suggestion.startswith("store loss.item() (or loss.detach()) in losses")
    assert "also holds" not in leak.suggestion
    losses = []
    with torchleak.track() as tracker:  # the fix, applied
        for _ in range(12):
            loss = model(torch.randn(32, 64)).square().mean()
            loss.backward()
            losses.append(loss.item())
            torchleak.step()
    assert tracker.report().leaks == []


def test_the_fix_quotes_what_the_loop_appends_not_a_loss_it_never_kept():
    # #62 item 3: the loop appends an expression, and has a `loss` of its own that it does not
    # keep. The fix said "store loss.detach() or loss.item() ... in val_losses"; it quotes the
    # appended expression now, and its code rewrites that line. Applied, the next run is flat.
    model = torch.nn.Linear(64, 8)
    xv, yv = torch.randn(256, 64), torch.randint(0, 8, (256,))

    def train(val_losses):
        for _ in range(12):
            loss = model(torch.randn(32, 64)).square().mean()
            loss.backward()
            val_losses.append(torch.nn.functional.cross_entropy(model(xv), yv))
            torchleak.step()

    def train_fixed(val_losses):  # the fix, applied as printed
        for _ in range(12):
            loss = model(torch.randn(32, 64)).square().mean()
            loss.backward()
            val_losses.append(torch.nn.functional.cross_entropy(model(xv), yv).item())
            torchleak.step()

    val_losses = []
    with torchleak.track() as tracker:
        train(val_losses)
    [leak] = tracker.report().leaks
    expression = "torch.nn.functional.cross_entropy(model(xv), yv)"
    assert leak.suggestion.startswith(f"store {expression}.detach() or .item(), not the tensor with its graph")
    assert "loss" not in leak.suggestion.split(", not the tensor")[0]
    assert leak.get("fix_code") == f"val_losses.append({expression}.item())"
    val_losses = []
    with torchleak.track() as tracker:
        train_fixed(val_losses)
    assert tracker.report().leaks == []


def test_the_profiler_slot_holds_the_hook_only_where_a_device_could_report_there():
    # A device allocator (CUDA's, registered whenever torch is built with it, GPU or not)
    # reports only through the thread's PROFILER_STATE slot; on a CPU-only build the tap carries
    # every event and an entry in the slot would only cost c10 a look-up per CPU event.
    device_build = device_allocator_built()
    kept = []
    with torchleak.track() as tracker:
        assert tracker._session.hook_in_profiler_slot is device_build
        assert _core.profiler_state_installed() is device_build
        assert _core.cpu_tap_installed()
        assert tracker._session.hook_on_top
        for _ in range(8):
            kept.append(torch.ones(256, 1024))
            torchleak.step()
    assert not tracker._session.hook_in_profiler_slot
    report = tracker.report()
    assert len(report.leaks) == 1 and not report.warnings, report.warnings
