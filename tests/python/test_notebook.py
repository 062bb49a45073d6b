"""The IPython extension without a kernel: magics, MIME bundles, usage errors, unload."""

import json
import pathlib
import re
import signal
import sys

import pytest

from ipython_shell import ledger, run
from hook_checks import hook_installed
from torchleak import _core

WIDGET = "application/vnd.jupyter.widget-view+json"
REPORT = "application/vnd.torchleak.report+json"


def last_bundle(shell):
    return shell.display_pub.outputs[-1]["data"]


def test_leakcheck_shows_a_live_widget_then_a_report_that_needs_no_kernel(shell):
    run(shell, "store = {'<b>x</b>': []}")
    number = shell.execution_count
    before = len(shell.display_pub.outputs)
    result = run(shell, "%%leakcheck -n 5\nt = torch.ones(256, 1024)\nstore['<b>x</b>'].append(t)\n")
    assert result.success, result.output
    shown = shell.display_pub.outputs[before:]
    assert WIDGET in shown[0]["data"]  # live while the cell runs
    # The final bundle replaces it in place: no widget view (a saved notebook keeps no widget
    # state) and no plain application/json (JupyterLab ranks it above text/html).
    assert shown[-1]["update"] is True
    data = last_bundle(shell)
    assert set(data) == {"text/plain", "text/html", REPORT}
    report = data[REPORT]
    (leak,) = [f for f in report["findings"] if f["verdict"] == "leak"]
    assert leak["site"]["cell"] == number and leak["site"]["line"] == 2
    assert leak["path_text"] == "store['<b>x</b>'][3]"
    assert leak["bytes_per_iteration"] == 1 << 20
    html = data["text/html"]
    assert f"In [{number}], line 2" in html
    assert "store[&#x27;&lt;b&gt;x&lt;/b&gt;&#x27;][3]" in html
    assert "<b>x</b>" not in html
    assert "<script" not in html and "<style" not in html
    assert "data:image/svg+xml;base64," in html and "<details" in html
    assert f"In [{number}], line 2" in data["text/plain"]
    # The run's line rides in the output metadata (the lab extension shows it after reopen).
    progress = shown[-1]["metadata"][REPORT]["progress"]
    assert progress["done"] and progress["k"] == progress["n"] == 5 and not progress["stopped"]
    assert "5 iterations in " in data["text/plain"]
    assert not hook_installed()


def test_leakcheck_writes_json_and_html(shell, tmp_path):
    out_json, out_html = tmp_path / "r.json", tmp_path / "r.html"
    run(shell, "kept = []")
    result = run(shell, f"%%leakcheck -n 4 --json {out_json} --html {out_html}\nkept.append(torch.ones(64, 1024))\n")
    assert result.success, result.output
    assert json.loads(out_json.read_text())["schema_version"] == "torchleak.report/1"
    assert out_html.read_text().startswith("<!DOCTYPE html>")


def test_leakcheck_o_keeps_the_report_under_the_users_name(shell):
    run(shell, "kept = []")
    result = run(shell, "%%leakcheck -n 4 -o checked\nkept.append(torch.ones(64, 1024))\n")
    assert result.success, result.output
    checked = shell.user_ns["checked"]
    assert type(checked).__name__ == "Report"
    (leak,) = checked.leaks
    assert leak.holder["path_text"] == "kept"


@pytest.mark.parametrize(
    "line",
    [
        "-n 0",
        "-n 10000000000000",
        "--warmup 99999999999",
        "-n many",
        "--bogus",
        "--min-bytes lots",
        "-n 3 --warmup 3",
        "--json",
        "-n '2",
        "-o",
        "-o 1x",
        "-o class",
        "-o a.b",
    ],
)
def test_bad_leakcheck_options_are_usage_errors_with_the_usage_line(shell, line):
    result = run(shell, f"%%leakcheck {line}\nx = 1\n")
    assert not result.success
    assert type(result.error_in_exec).__name__ == "UsageError"
    assert "usage: %%leakcheck [-n N]" in str(result.error_in_exec)
    assert not hook_installed()


@pytest.mark.parametrize(
    "source, usage",
    [
        ("%leakwatch on off", "%leakwatch [on|off|reset]"),
        ("%leakwatch maybe", "%leakwatch [on|off|reset]"),
        ("%leakreport --bogus", "%leakreport [--json PATH]"),
        ("%leakreport", "%leakreport [--json PATH]"),
        ("%leakconfig colour=red", "%leakconfig [KEY=VALUE"),
        ("%leakconfig min_confidence=9", "%leakconfig [KEY=VALUE"),
        ("%leakconfig warmup", "%leakconfig [KEY=VALUE"),
    ],
)
def test_other_magics_reject_bad_input_with_usage_errors(shell, source, usage):
    result = run(shell, source)
    assert type(result.error_in_exec).__name__ == "UsageError", result.output
    assert usage in str(result.error_in_exec)


def test_leakconfig_sets_values_and_validates_all_before_changing_any(shell):
    import torchleak

    assert run(shell, "%leakconfig min_leak_bytes_per_iteration=1MiB allow=kv_cache*").success
    assert torchleak.config.min_leak_bytes_per_iteration == 1 << 20
    assert torchleak.config.get("allow") == ["kv_cache*"]
    result = run(shell, "%leakconfig warmup=2 min_confidence=7")
    assert not result.success
    assert torchleak.config.warmup == 0  # nothing changed


def test_leakwatch_on_and_off_say_so_at_once(shell):
    # #62: nothing showed that watch was on until a cell left something alive.
    on = run(shell, "%leakwatch on")
    assert on.output.startswith("torchleak: cell watch is on: every cell run is an iteration"), on.output
    assert run(shell, "%leakwatch on").output.startswith("torchleak: cell watch is on already")
    assert run(shell, "%leakwatch off").output == "torchleak: cell watch is off\n"
    assert run(shell, "%leakwatch off").output == "torchleak: cell watch is off already\n"


def test_watch_mode_ledger_and_leakreport(shell, tmp_path):
    assert run(shell, "%leakwatch on").success
    run(shell, "losses = []")
    first = shell.execution_count
    for _ in range(4):
        run(shell, "losses.append(torch.ones(256, 1024))")
    lines = ledger(shell)
    assert any(f"In [{first}] left 1.0 MiB alive: losses 1.0 MiB" in line for line in lines), (first, lines)
    out = tmp_path / "nb.json"
    assert run(shell, f"%leakreport --json {out}").success
    report = json.loads(out.read_text())
    assert report["boundary"] == "cell"
    leaks = [f for f in report["findings"] if f["verdict"] == "leak"]
    assert any(f["path_text"].startswith("losses[") for f in leaks)
    assert run(shell, "%leakwatch off").success
    assert not hook_installed()
    # the report of the watched cells stays available
    assert run(shell, "%leakreport").success


def test_watch_mode_rates_a_rerun_cell_per_run_and_names_every_run(shell, tmp_path):
    # Defect 8: a cell re-run between others that adds 1 MiB each time grows 1 MiB per run of
    # that cell, not 1 MiB divided by every cell executed; its site names all its runs.
    run(shell, "kept = []")
    assert run(shell, "%leakwatch on").success
    runs = []
    for _ in range(4):
        runs.append(shell.execution_count)
        run(shell, "kept.append(torch.ones(256, 1024))")
        run(shell, "y = 2")
        run(shell, "z = 3")
    out = tmp_path / "watch.json"
    assert run(shell, f"%leakreport --json {out}").success
    run(shell, "%leakwatch off")
    report = json.loads(out.read_text())
    assert report["iteration_unit"] == "cell run"
    [leak] = [f for f in report["findings"] if f["verdict"] == "leak"]
    assert leak["bytes_per_iteration"] == 1 << 20
    assert leak["site"]["runs"] == runs
    assert leak["site"]["text"] == "In " + ", ".join(f"[{n}]" for n in runs) + ", line 1"
    assert report["causes"][0]["text"].startswith("1.0 MiB per cell run: kept")


def test_watch_mode_skips_the_report_for_a_cell_that_changed_nothing(shell, monkeypatch):
    # The <= 20 ms per trivial cell goal: the recorder's counts decide, no report is built.
    from torchleak import _tracking

    built = []
    original = _tracking.Tracker._build_report  # report() goes through it too
    monkeypatch.setattr(_tracking.Tracker, "_build_report", lambda self, **kw: built.append(kw) or original(self, **kw))
    run(shell, "%leakwatch on")
    before = len(ledger(shell))
    for _ in range(3):
        run(shell, "x = 1 + 1")
    assert built == [] and len(ledger(shell)) == before
    run(shell, "kept = [torch.ones(64, 1024)]")
    assert len(built) == 1 and "left 256.0 KiB alive: kept 256.0 KiB" in ledger(shell)[-1]
    run(shell, "%leakwatch off")


def test_the_ledger_says_what_a_cell_freed(shell):
    run(shell, "%leakwatch on")
    run(shell, "kept = [torch.ones(256, 1024) for _ in range(4)]")
    cleared = shell.execution_count
    run(shell, "kept.clear()")
    assert ledger(shell)[-1] == f"torchleak: In [{cleared}] freed 4.0 MiB"
    run(shell, "%leakwatch off")


def test_the_ledger_says_when_an_output_keeps_its_autograd_graph(shell):
    # "In [13] left 19.1 MiB alive: Out[13] 19.1 MiB" under a displayed [16, 64] tensor did not
    # say that the 19 MiB is the graph the output keeps (#62 item 8).
    run(shell, "w = torch.randn(256, 256, requires_grad=True)")
    run(shell, "%leakwatch on")
    shown = shell.execution_count
    run(shell, "h = torch.randn(512, 256)\nfor _ in range(8):\n    h = (h @ w).relu()\n(h @ w).relu().sum(dim=1)")
    assert re.fullmatch(
        rf"torchleak: In \[{shown}\] left [\d.]+ MiB alive: h [\d.]+ MiB with its autograd graph, "
        rf"Out\[{shown}\] [\d.]+ KiB with its autograd graph .*",
        ledger(shell)[-1],
    ), ledger(shell)[-1]
    plain = shell.execution_count
    run(shell, "z = torch.randn(512, 256)")
    assert ledger(shell)[-1] == f"torchleak: In [{plain}] left 512.0 KiB alive: z 512.0 KiB"
    viewed = shell.execution_count
    run(shell, "(h @ w).relu()[:16]")  # a view keeps its base: that is no graph of its own
    assert re.fullmatch(
        rf"torchleak: In \[{viewed}\] left [\d.]+ KiB alive: Out\[{viewed}\] [\d.]+ KiB.*", ledger(shell)[-1]
    )
    assert "autograd graph" not in ledger(shell)[-1], ledger(shell)[-1]
    run(shell, "%leakwatch off")


def test_leakwatch_without_argument_shows_state_and_reset_starts_over(shell):
    result = run(shell, "%leakwatch")
    assert result.success and "cell watch is off" in result.output
    run(shell, "%leakwatch on")
    run(shell, "kept = []")
    for _ in range(3):
        run(shell, "kept.append(torch.ones(256, 1024))")
    state = run(shell, "%leakwatch").output
    assert "cell watch is on" in state and "1 leak(s) so far" in state, state
    assert "cell run(s) recorded" in state
    result = run(shell, "%leakwatch reset")
    assert result.success and "reset" in result.output
    assert hook_installed()  # still watching
    assert "0 leak(s) so far" in run(shell, "%leakwatch").output
    run(shell, "%leakwatch off")
    assert not hook_installed()
    assert "cell watch is off" in run(shell, "%leakwatch").output


def test_leakcheck_inside_watch_mode_pauses_and_resumes_watching(shell):
    run(shell, "%leakwatch on")
    run(shell, "kept = []")
    result = run(shell, "%%leakcheck -n 3\nkept.append(torch.ones(16, 1024))\n")
    assert result.success, result.output
    run(shell, "y = 1")
    assert hook_installed()  # watching again
    run(shell, "%leakwatch off")


def test_an_exception_in_the_cell_still_reports_and_restores_the_hook(shell):
    result = run(
        shell,
        "%%leakcheck -n 5\nkept = globals().setdefault('kept', [])\nkept.append(torch.ones(8, 1024))\n"
        "if len(kept) == 3:\n    raise RuntimeError('boom')\n",
    )
    assert type(result.error_in_exec).__name__ == "RuntimeError"
    report = last_bundle(shell)[REPORT]
    assert report["iterations"] == 2
    assert any("RuntimeError" in w for w in report["warnings"])
    assert not hook_installed()


def test_a_failing_body_shows_the_users_frames_and_names_cells_as_in_n(shell):
    import traceback

    number = shell.execution_count
    result = run(
        shell, "%%leakcheck -n 4\nimport sys\ndef f():\n    raise ValueError(sys._getframe().f_code.co_filename)\nf()\n"
    )
    exc = result.error_in_exec
    assert type(exc).__name__ == "ValueError"
    # Below the magic's own raise (hidden from IPython's display) only the cell's frames.
    files = [frame.filename for frame in traceback.extract_tb(exc.__traceback__)]
    assert files[-2:] == [files[-1]] * 2 and "torchleak" not in files[-1], files
    assert not any(name.endswith("_tracking.py") for name in files), files
    if sys.version_info >= (3, 11):  # exception notes (add_note) are 3.11's
        assert any(f"In [{number}]" in note and "iteration 1 of 4" in note for note in getattr(exc, "__notes__", []))
    shown = "\n".join(shell.InteractiveTB.structured_traceback(type(exc), exc, exc.__traceback__))
    assert "_notebook.py" not in shown and "_tracking.py" not in shown
    # the report's warning names the cell as the user sees it, not the compiled file name
    [warning] = last_bundle(shell)[REPORT]["warnings"]
    assert warning == f"stopped in iteration 1 of 4 by ValueError: In [{number}]", warning


def test_after_stop_the_traceback_begins_at_the_cells_own_line(shell):
    # Before: it began at `get_ipython().run_cell_magic('leakcheck', ...)`, the cell's outer
    # frame, which every exception leaving a cell magic passes through.
    shown = []
    plain = lambda stb: re.sub(r"\x1b\[[0-9;]*m", "", "\n".join(stb))  # noqa: E731
    shell._showtraceback = lambda etype, value, stb: shown.append(plain(stb))
    result = run(shell, "%%leakcheck -n 4\nx = 1\nraise KeyboardInterrupt\n")
    assert type(result.error_in_exec) is KeyboardInterrupt  # the cell still fails (run-all stops)
    [text] = shown
    assert "run_cell_magic" not in text and "raise KeyboardInterrupt" in text, text
    assert "_notebook.py" not in text and "_tracking.py" not in text
    assert sys.last_value is result.error_in_exec
    assert shell.custom_exceptions == ()  # the one-shot handler is gone
    # The next error is IPython's own business again, shown in full.
    result = run(shell, "def g():\n    raise KeyError('next')\ng()\n")
    assert type(result.error_in_exec) is KeyError and "g()" in shown[-1]
    assert shell.custom_exceptions == ()


def test_a_stop_while_the_live_view_is_drawn_keeps_the_report(shell, monkeypatch):
    # Stop lands wherever the kernel is: here while the live view of iteration 2 is sent.
    # Before, the KeyboardInterrupt left torchleak's own code and the cell showed no report.
    from torchleak import _notebook

    drawn = []

    def update(self, live, progress=None):
        drawn.append(progress["k"])
        if progress["k"] == 2:
            signal.raise_signal(signal.SIGINT)

    monkeypatch.setattr(_notebook._LiveDisplay, "due", lambda self: True)
    monkeypatch.setattr(_notebook._LiveDisplay, "update", update)
    shown = []
    monkeypatch.setattr(shell, "_showtraceback", lambda etype, value, stb: shown.append("\n".join(stb)))
    run(shell, "held = []")
    number = shell.execution_count
    result = run(shell, "%%leakcheck -n 6\nheld.append(torch.ones(4096))\n")
    assert type(result.error_in_exec) is KeyboardInterrupt  # the cell still fails (run-all stops)
    assert drawn == [1, 2]
    progress = shell.display_pub.outputs[-1]["metadata"][REPORT]["progress"]
    assert progress["done"] and progress["stopped"] and progress["k"] == 2, progress
    assert last_bundle(shell)[REPORT]["warnings"] == ["stopped after iteration 2 of 6 by KeyboardInterrupt"]
    # Stop is the user's act, said once, by the run line; the report keeps its warning for files.
    assert progress["said"] == ["stopped after iteration 2 of 6 by KeyboardInterrupt"]
    assert re.fullmatch(r"stopped after iteration 2 of 6, \d+\.\d s", progress["text"]), progress["text"]
    static = shell.display_pub.outputs[-1]["data"]["text/html"]
    assert 'data-testid="warning"' not in static and "stopped after iteration 2 of 6, " in static
    if sys.version_info >= (3, 11):
        assert f"stopped after iteration 2 of 6 of In [{number}]" in result.error_in_exec.__notes__[0]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    # No frame is the user's: the error is the interrupt and the note, not the magic's frames.
    [text] = shown
    text = re.sub(r"\x1b\[[0-9;]*m", "", text)
    assert "KeyboardInterrupt" in text and "run_cell_magic" not in text and "_notebook.py" not in text, text


def test_a_shells_own_exception_handler_is_left_alone(shell):
    calls = []
    shell.set_custom_exc((ZeroDivisionError,), lambda self, *args, **kwargs: calls.append(args[1]))
    try:
        result = run(shell, "%%leakcheck -n 2\n1/0\n")
        assert type(result.error_in_exec) is ZeroDivisionError
        assert calls == [result.error_in_exec]
        assert shell.custom_exceptions == (ZeroDivisionError,)
    finally:
        shell.set_custom_exc((), None)


def test_a_syntax_error_in_the_body_names_the_cell_not_a_file(shell):
    number = shell.execution_count
    result = run(shell, "%%leakcheck -n 2\nx = 1\ny = (\n")
    assert type(result.error_in_exec).__name__ == "UsageError"
    message = str(result.error_in_exec)
    assert f"(In [{number}], line 3)" in message and "y = (" in message, message
    assert "ipython-input" not in message and "ipykernel" not in message


def test_unload_removes_every_hook_and_reload_does_not_double(shell):
    run(shell, "%leakwatch on")
    assert hook_installed()
    handlers = len(shell.events.callbacks["post_run_cell"])
    run(shell, "%unload_ext torchleak")
    assert not hook_installed()
    assert len(shell.events.callbacks["post_run_cell"]) == handlers - 1
    run(shell, "%load_ext torchleak")
    run(shell, "%reload_ext torchleak")
    run(shell, "%leakwatch on")
    run(shell, "%leakwatch on")
    assert len(shell.events.callbacks["post_run_cell"]) == handlers
    run(shell, "%leakwatch off")


def test_torchleak_check_in_a_watched_notebook_preempts_watch_mode(shell):
    run(shell, "%leakwatch on")
    result = run(
        shell,
        "import torchleak\nkept = []\n"
        "r = torchleak.check(lambda: kept.append(torch.ones(64, 1024)), iterations=4)\n"
        "assert len(r.leaks) == 1",
    )
    assert result.success, result.output
    run(shell, "y = 2")
    assert hook_installed()  # watching again after the cell
    run(shell, "%leakwatch off")
    assert not hook_installed()


def test_magics_work_with_an_initialised_single_rank_process_group(shell, tmp_path):
    """A notebook that called init_process_group (one rank, as for FSDP-style code on one
    GPU): nothing is gathered, nothing waits, both magics report as usual."""
    run(
        shell,
        "import torch.distributed as dist\n"
        "dist.init_process_group('gloo', store=dist.HashStore(), rank=0, world_size=1)",
    )
    try:
        assert run(shell, "dist.is_initialized() and dist.get_world_size() == 1").result
        out = tmp_path / "pg.json"
        run(shell, "kept = []")
        result = run(shell, f"%%leakcheck -n 6 --json {out}\nkept.append(torch.ones(256, 1024))")
        assert result.success
        report = json.loads(out.read_text())
        assert "ranks" not in report
        [leak] = [f for f in report["findings"] if f["verdict"] == "leak"]
        assert leak["holder"]["path_text"] == "kept"
        assert run(shell, "%leakwatch on").success
        run(shell, "history = []")
        for _ in range(3):
            run(shell, "history.append(torch.ones(256, 1024))")
        assert any("left 1.0 MiB alive: history 1.0 MiB" in line for line in ledger(shell))
        assert run(shell, "%leakwatch off").success
    finally:
        run(shell, "dist.destroy_process_group()")


def test_a_report_holds_no_notebook_tensor_once_built_even_without_a_collection(shell):
    # The roots a report walks from (the notebook's names, each with its value) must not
    # outlive it in a reference cycle: a rebound name would read as two tensors alive until
    # the next collection.
    run(shell, "import gc, weakref, torchleak\ngc.collect()\ngc.disable()")
    try:
        result = run(
            shell,
            "kept = torch.ones(1024, 256)\n"
            "with torchleak.track() as tracker:\n"
            "    scratch = torch.ones(64)\n"
            "    torchleak.step()\n"
            "tracker.report(paths=True)\n"
            "ref = weakref.ref(kept)\n"
            "del kept\n"
            "assert ref() is None, [type(r).__name__ for r in gc.get_referrers(ref())]",
        )
        assert result.success, result.output
    finally:
        run(shell, "gc.enable()")


def test_a_live_view_updates_in_place_and_sends_no_live_blocks(shell):
    # Issue #31: every update replaced the display (a new view each time: 32 roots for one
    # 30-iteration run, rows the user opened closed, Stop replaced under the pointer) and sent
    # the report twice, live blocks and all.
    import torch

    import torchleak
    from torchleak import _notebook

    kept = []
    with torchleak.track(boundary="explicit") as tracker:
        for _ in range(4):
            kept.append(torch.ones(64, 1024))
            torchleak.step()
        live_view = tracker._build_report(paths=False, live_findings=_notebook.LIVE_FINDINGS).to_dict()
    report = tracker.report().to_dict()
    assert any(f.get("live_blocks") for f in report["findings"])
    before = len(shell.display_pub.outputs)
    live = _notebook._LiveDisplay()
    live.show(live_view, {"k": 0, "n": 30})
    assert len(shell.display_pub.outputs) == before + 1
    shown = shell.display_pub.outputs[-1]["data"]
    assert all("live_blocks" not in f for f in shown[REPORT]["findings"])
    if live.widget is None:
        pytest.skip("anywidget is not installed")
    assert all("live_blocks" not in f for f in live.widget.report["findings"])
    # Updates change the widget's traits only: no display is replaced until the end.
    for k in range(1, 30):
        live.update(live_view, {"k": k, "n": 30})
    assert len(shell.display_pub.outputs) == before + 1
    progress = live.widget.progress
    assert (progress["k"], progress["n"]) == (29, 30)
    assert progress["text"].startswith("29/30 iterations [")  # format.progress_text's line
    assert all("live_blocks" not in f for f in live.widget.report["findings"])
    # The end replaces the display once, with the whole report.
    live.finish(report, {"k": 30, "n": 30, "done": True})
    assert len(shell.display_pub.outputs) == before + 2
    final = shell.display_pub.outputs[-1]
    assert final["update"] is True and WIDGET not in final["data"]
    assert any(f.get("live_blocks") for f in final["data"][REPORT]["findings"])


def test_a_live_update_is_bounded_and_still_a_valid_report():
    # The core cuts the live view (ReportInputs::live_findings): no live-block lists, the first
    # findings only, the causes and their groups renumbered, a warning saying so.
    import torch

    import torchleak
    from live_reports import Buffers

    buffers = Buffers()
    for i in range(50):
        setattr(buffers, f"l{i}", [])
    tracker = torchleak.track(boundary="explicit")
    with tracker:
        for _ in range(8):
            for i in range(50):
                getattr(buffers, f"l{i}").append(torch.ones(2560))
            torchleak.step()
        whole = tracker._build_report(live_findings=100, roots={"buffers": buffers}).to_dict()
        live = tracker._build_report(live_findings=10, roots={"buffers": buffers}).to_dict()
    data = tracker.report(roots={"buffers": buffers}).to_dict()
    assert any(f.get("live_blocks") for f in data["findings"])
    assert len(whole["findings"]) == 50 and whole["causes"] == data["causes"]
    assert not any(f.get("live_blocks") for f in whole["findings"] + live["findings"])
    assert whole["warnings"] == data["warnings"]
    assert len(live["findings"]) == 10 and len(live["causes"]) == 10
    assert all(0 <= i < 10 for c in live["causes"] for i in c["findings"])
    [group] = live["cause_groups"]
    assert sorted(group["causes"]) == list(range(10))
    assert live["warnings"][-1] == (
        "while the cell runs: the first 10 of 50 findings; the finished report lists every one"
    )
    # The core reads it back as a report: every index names what it has.
    back = json.loads(_core.normalize_report(json.dumps(live)))
    assert len(back["findings"]) == 10
    assert len(json.dumps(live)) < len(json.dumps(whole)) / 3
    assert len(data["findings"]) == 50


def test_each_magics_usage_and_help_come_from_its_parser_and_the_docs_quote_them():
    # The usage lines were a hand-kept copy of the parsers (#48 item 10): now each is the
    # parser's, `%magic?` lists every option the parser takes, and docs/notebook.md quotes them.
    from torchleak import _notebook

    docs = (pathlib.Path(__file__).resolve().parents[2] / "docs" / "notebook.md").read_text()
    for magic, usage in _notebook.USAGE.items():
        parser = _notebook._PARSERS[magic]
        assert usage.startswith(("%%" if magic == "leakcheck" else "%") + magic)
        assert f"`{usage}`" in docs, usage
        help_text = getattr(_notebook.LeakMagics, magic).__doc__
        for action in parser._actions:
            for option in action.option_strings or [action.metavar]:
                assert option in help_text and option in usage, (magic, option)


def test_the_live_view_names_the_holder_and_groups_as_the_report_does(shell, monkeypatch):
    # Issue #62 item 4: mid-run the view said "4 leak(s)", each "tensors allocated at In [1],
    # line 7 stay alive, at In [1], line 7", while the finished report said one leak held by
    # val_losses. A live update now has the report's causes, holder and headline.
    from torchleak import _notebook

    views = []

    def update(self, live, progress=None):
        views.append(live)

    monkeypatch.setattr(_notebook._LiveDisplay, "due", lambda self: True)
    monkeypatch.setattr(_notebook._LiveDisplay, "update", update)
    run(
        shell,
        "import torch.nn.functional as F\n"
        "model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 8))\n"
        "val_losses = []",
    )
    result = run(
        shell,
        "%%leakcheck -n 10\n"
        "xv, yv = torch.randn(16, 32), torch.randint(0, 8, (16,))\n"
        "val_losses.append(F.cross_entropy(model(xv), yv))\n",
    )
    assert result.success, result.output
    final = last_bundle(shell)[REPORT]
    [cause] = final["causes"]
    assert cause["keeper"] == "val_losses"
    live = views[-1]
    assert live["summary"]["headline"] == final["summary"]["headline"]
    assert [c["keeper"] for c in live["causes"]] == ["val_losses"]
    assert live["causes"][0]["text"].split(":", 1)[1] == cause["text"].split(":", 1)[1]
    assert all("live_blocks" not in f for f in live["findings"])


def test_a_cause_without_a_path_says_its_place_once():
    import torch

    import torchleak

    kept = []
    with torchleak.track(boundary="explicit") as tracker:
        for _ in range(6):
            kept.append(torch.ones(1024))
            torchleak.step()
    [cause] = tracker.report(paths=False).to_dict()["causes"]
    site = cause["text"].split("tensors allocated at ", 1)[1].split(" stay alive", 1)[0]
    assert cause["text"].endswith(" stay alive") and cause["text"].count(site) == 1, cause["text"]


def test_one_exception_is_one_leak_whichever_locals_hold_its_sites(shell, tmp_path):
    # %leakreport listed the last exception as two leaks, one per local of the failed frame
    # (`big`, `acts`), each with the same fix.
    run(shell, "%leakwatch on")
    run(
        shell,
        "def f():\n    big = torch.ones(1024, 1024)\n    acts = [torch.ones(256, 1024)]\n    raise ValueError('x')\n",
    )
    for _ in range(3):
        assert type(run(shell, "f()").error_in_exec) is ValueError
    out = tmp_path / "r.json"
    assert run(shell, f"%leakreport --json {out}").success
    run(shell, "%leakwatch off")
    report = json.loads(out.read_text())
    held = [f for f in report["findings"] if f["verdict"] == "leak"]
    assert {f["path_text"].split(": ", 1)[1] for f in held} == {"local 'big'", "local 'acts'[0]"}
    [cause] = report["causes"]
    assert "the last exception keeps the failed frame's locals, across 2 allocation sites" in cause["text"]
    assert report["summary"]["headline"].startswith("1 leak (2 allocation sites)")


def test_a_leak_held_without_growing_says_held_where_its_rate_would_read_0_b(shell, tmp_path):
    # The last exception's locals are a leak that does not grow per cell run: its rows read
    # "0 B per cell run" beside 4.0 MiB kept. Every view shows the core's word instead.
    from torchleak import Report
    from torchleak.render import notebook, page, plain

    run(shell, "%leakwatch on")
    run(shell, "kept = []")
    for _ in range(3):
        run(shell, "kept.append(torch.ones(64, 1024))")
    run(shell, "def f():\n    big = torch.ones(1024, 1024)\n    raise ValueError('x')\n")
    assert type(run(shell, "f()").error_in_exec) is ValueError
    out = tmp_path / "r.json"
    assert run(shell, f"%leakreport --json {out}").success
    run(shell, "%leakwatch off")
    report = Report.load(out)
    data = report.to_dict()
    rates = {f["path_text"]: f["rate_text"] for f in data["findings"] if f["verdict"] == "leak"}
    assert rates["<last exception> frame f: local 'big'"] == "held"
    growing = [text for path, text in rates.items() if path.startswith("kept")]
    assert growing and all(text.endswith("KiB") for text in growing), rates
    for view in (str(report), plain.render(data), notebook.render(data), page.render(data)):
        assert not any(said in view for said in ("0 B per cell run", "0 B/it", "0 B/cell run")), view
    assert "leak: 4.0 MiB held at " in plain.render(data)


def test_a_live_update_sends_each_sites_stack_once_in_a_stable_order():
    # Fifty stores filled by one line are fifty findings once holders are named: the same 32
    # frames went fifty times into every update (150 KB of 270), and ties came in the order the
    # split by holder made them, so an opened row moved under the pointer.
    import torch

    import torchleak

    stores = {f"s{i}": [] for i in range(50)}
    tracker = torchleak.track(boundary="explicit")
    views = []
    with tracker:
        for _ in range(6):
            for kept in stores.values():
                kept.append(torch.ones(256))
            torchleak.step()
            views.append(tracker._build_report(live_findings=100, roots={"stores": stores}).to_dict())
    final = tracker.report(roots={"stores": stores}).to_dict()
    live = views[-1]
    assert len(live["findings"]) == len(final["findings"]) >= 50
    assert sum(bool(f.get("stack")) for f in live["findings"]) == 1
    assert all(f.get("stack") for f in final["findings"])
    order = [[(f.get("holder") or {}).get("path_text") for f in v["findings"]] for v in views[-3:]]
    assert order[0] == order[1] == order[2]
    assert order[0] == sorted(order[0], key=lambda p: p or "")
