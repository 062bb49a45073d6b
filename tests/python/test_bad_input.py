"""Bad input is refused before the run, with the right error (issue #30, item 8): an output path
that cannot be written, a number the core cannot hold, a pattern that is no pattern, a report
that is no report, a file that is no file. The attack run's reproducers, each of which used to
be accepted and fail at the end of a run, block, or raise the wrong exception."""

import json
import os
import subprocess
import sys
import threading

import pytest
import torch

import torchleak
from ipython_shell import run
from torchleak import _core

UNWRITABLE = "/proc/torchleak-x.json"  # a directory root may open, where no file can be made
needs_proc = pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="no /proc")


def cli(*args, cwd=None):
    return subprocess.run(
        [sys.executable, "-m", "torchleak", *args], capture_output=True, text=True, cwd=cwd, timeout=300
    )


# -- output paths, before the run ----------------------------------------------------------------


def test_watch_refuses_a_json_path_in_a_missing_directory_when_called(tmp_path):
    with pytest.raises(ValueError, match="no such directory"):
        torchleak.watch(json=str(tmp_path / "gone" / "w.json"))
    with pytest.raises(ValueError, match="html .* is a directory"):
        (tmp_path / "d.html").mkdir()
        torchleak.watch(json=None, html=str(tmp_path / "d.html"))


@needs_proc
def test_watch_refuses_a_directory_no_file_can_be_made_in():
    with pytest.raises(ValueError, match="cannot write in '/proc'"):
        torchleak.watch(json=UNWRITABLE)


@needs_proc
def test_the_cli_refuses_an_unwritable_json_before_the_script_runs(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("print('the script ran')\n")
    proc = cli("run", "--json", UNWRITABLE, str(script))
    assert proc.returncode == 2, proc.stderr
    assert "the script ran" not in proc.stdout
    assert f"--json '{UNWRITABLE}': cannot write in '/proc'" in proc.stderr
    assert "usage: python -m torchleak run" in proc.stderr


def test_leakcheck_refuses_its_outputs_before_the_cell_runs(shell, tmp_path):
    result = run(shell, "%%leakcheck -n 3 --json /nonexistent/x.json\nran = True")
    assert type(result.error_in_exec).__name__ == "UsageError"
    assert "--json '/nonexistent/x.json': no such directory '/nonexistent'" in str(result.error_in_exec)
    assert "usage: %%leakcheck" in str(result.error_in_exec)
    assert "ran" not in shell.user_ns
    (tmp_path / "d.html").mkdir()
    result = run(shell, f"%%leakcheck -n 3 --html {tmp_path / 'd.html'}\nran = True")
    assert "is a directory" in str(result.error_in_exec) and "ran" not in shell.user_ns


@needs_proc
def test_leakreport_refuses_an_unwritable_output(shell):
    run(shell, "%leakwatch on")
    run(shell, "x = torch.ones(4)")
    result = run(shell, f"%leakreport --json {UNWRITABLE}")
    assert type(result.error_in_exec).__name__ == "UsageError"
    assert "cannot write in '/proc'" in str(result.error_in_exec)
    run(shell, "%leakwatch off")


def test_a_good_output_path_leaves_nothing_behind_when_checked(tmp_path):
    w = torchleak.watch(json=str(tmp_path / "w.json"))
    assert w.tracker is not None and os.listdir(tmp_path) == []  # the trial file is gone


# -- numbers the core cannot hold -----------------------------------------------------------------


class LoudRepr:
    calls = 0

    def __repr__(self):
        LoudRepr.calls += 1
        return "X" * 1_000_000


@pytest.mark.parametrize(
    "kwargs",
    [
        {"min_bytes": 2**70},
        {"min_bytes": 1e19},
        {"min_bytes": 2**63},
        {"warmup": 2**40},
        {"sample_bytes": 2**64},
        {"every": 2**31},
    ],
)
def test_track_and_watch_refuse_numbers_out_of_range_when_called(kwargs):
    name = next(iter(kwargs))
    if name in ("min_bytes", "warmup"):
        with pytest.raises(ValueError, match=f"{name} must be an int between"):
            torchleak.track(**kwargs)
    with pytest.raises(ValueError, match=f"{name} must be an int between"):
        torchleak.watch(json=None, **kwargs)


def test_report_with_a_huge_warmup_is_a_short_value_error_without_user_reprs():
    keep = [LoudRepr()]  # a root the report would walk: its __repr__ must not run
    losses = []
    w = torch.randn(8, 8, requires_grad=True)
    with torchleak.track() as tracker:
        for _ in range(3):
            losses.append((w * 2).sum())
            tracker.step()
    LoudRepr.calls = 0
    with pytest.raises(ValueError) as info:
        tracker.report(warmup=2**40)
    assert len(str(info.value)) < 200 and "warmup must be an int between" in str(info.value)
    with pytest.raises(ValueError, match="got a LoudRepr"):
        tracker.report(warmup=keep[0])
    assert LoudRepr.calls == 0


def test_sizes_past_int64_are_refused_not_stored_as_2_to_the_63():
    with pytest.raises(ValueError, match="out of range"):
        _core.parse_size("10000000000000000000")
    with pytest.raises(ValueError, match="out of range"):
        torchleak.config.set(min_leak_bytes_per_iteration=1e19)
    torchleak.config.set(min_leak_bytes_per_iteration=1e6)  # a whole float is a size
    assert torchleak.config.min_leak_bytes_per_iteration == 1_000_000
    torchleak.config.reset()


def test_leakcheck_refuses_a_min_bytes_past_int64(shell):
    result = run(shell, "%%leakcheck -n 3 --min-bytes 10000000000000000000\nran = True")
    assert type(result.error_in_exec).__name__ == "UsageError"
    assert "out of range" in str(result.error_in_exec) and "ran" not in shell.user_ns


@pytest.mark.parametrize("allow", [None, 3, [None], [""], {"a": 1}])
def test_an_allow_that_is_no_pattern_is_a_value_error(allow):
    before = torchleak.config.allow
    with pytest.raises(ValueError, match="pattern"):
        torchleak.config.set(allow=allow)
    assert torchleak.config.allow == before  # all or nothing


# -- reports that are no reports, files that are no files ------------------------------------------


@pytest.mark.parametrize("version", ["1", "null", '["torchleak.report/1"]', "{}", "true"])
def test_a_schema_version_of_the_wrong_type_is_a_report_schema_error(version, tmp_path):
    text = f'{{"schema_version": {version}}}'
    with pytest.raises(_core.ReportSchemaError, match="not a torchleak.report/1 document"):
        torchleak.Report.from_json(text)
    bad = tmp_path / "bad.json"
    bad.write_text(text)
    good = os.path.join(os.path.dirname(__file__), "..", "fixtures", "empty.json")
    proc = cli("diff", good, str(bad))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert "not a torchleak report" in proc.stderr


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_fifo_is_refused_not_waited_on(tmp_path):
    fifo = tmp_path / "report.json"
    os.mkfifo(fifo)
    outcome = []

    def load():
        try:
            torchleak.Report.load(fifo)
        except ValueError as exc:
            outcome.append(str(exc))

    reader = threading.Thread(target=load, daemon=True)
    reader.start()
    reader.join(timeout=30)
    if reader.is_alive():  # unblock the reader so the test process can end
        with open(fifo, "w"):
            pass
        pytest.fail("Report.load waited on a FIFO")
    assert outcome and "is not a regular file" in outcome[0]
    good = os.path.join(os.path.dirname(__file__), "..", "fixtures", "empty.json")
    proc = cli("diff", str(fifo), good)
    assert proc.returncode == 2 and "is not a regular file" in proc.stderr


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="no /dev/zero")
def test_a_device_is_refused_not_read_without_end():
    with pytest.raises(ValueError, match="is not a regular file"):
        torchleak.Report.load("/dev/zero")


def test_a_report_loaded_from_a_file_is_the_report_written(tmp_path):
    path = tmp_path / "r.json"
    report = torchleak.Report.load(os.path.join(os.path.dirname(__file__), "..", "fixtures", "leaky_loop.json"))
    report.save(path)
    again = torchleak.Report.load(path)
    assert json.loads(again.to_json()) == json.loads(report.to_json())


@pytest.mark.parametrize("magic", ["leakcheck", "leakreport"])
def test_a_magic_writes_every_output_it_can_and_says_which_failed(shell, tmp_path, monkeypatch, magic):
    # #46: --html was not written when --json was on a full disk, and the error was a
    # UsageError with the usage line though the usage was right.
    import errno

    from torchleak import _report

    full = str(tmp_path / "full" / "r.json")
    os.mkdir(tmp_path / "full")
    real_replace = _report.os.replace

    def replace(src, dst):
        if dst == full:
            os.remove(src)
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_replace(src, dst)

    monkeypatch.setattr(_report.os, "replace", replace)
    html = tmp_path / "r.html"
    if magic == "leakcheck":
        result = run(shell, f"%%leakcheck -n 3 --json {full} --html {html}\nx = torch.ones(4)")
    else:
        run(shell, "%leakwatch on")
        run(shell, "x = torch.ones(4)")
        result = run(shell, f"%leakreport --json {full} --html {html}")
        run(shell, "%leakwatch off")
    assert result.error_in_exec is None, result.error_in_exec
    assert f"torchleak: could not write {full}: [Errno 28] No space left on device" in result.output
    assert "usage:" not in result.output
    assert html.read_text().startswith("<!DOCTYPE html>")
    assert os.listdir(tmp_path / "full") == []


def test_from_json_of_a_parsed_report_says_so_in_a_line():
    # #46: pybind11's TypeError repeated repr() of the whole argument (a 195 MiB report: a
    # 195 MiB message), running the objects' own __repr__.
    class Loud:
        def __repr__(self):
            raise AssertionError("a user __repr__ ran")

    data = {"schema_version": "torchleak.report/1", "findings": [Loud()] * 1000}
    with pytest.raises(TypeError) as info:
        torchleak.Report.from_json(data)
    assert (
        str(info.value)
        == "Report.from_json takes the JSON text (str or bytes), not a dict: for a parsed report, Report(data)"
    )
    with pytest.raises(TypeError, match="not a list$"):
        torchleak.Report.from_json([Loud()])


@pytest.mark.parametrize("name", ["__builtins__", "__name__", "__x__", "class", "1x", "print", "len", "list"])
def test_leakcheck_o_refuses_a_name_that_is_not_the_users(shell, name):
    # #46: `-o __builtins__` replaced the namespace's builtins and every later cell failed.
    # #64: `-o print` put the report over print() for every later cell.
    result = run(shell, f"%%leakcheck -n 2 -o {name}\nx = 1")
    assert type(result.error_in_exec).__name__ == "UsageError"
    assert "-o needs a Python name of your own" in str(result.error_in_exec)
    assert run(shell, "print(len([1, 2]))").error_in_exec is None


def test_a_long_option_value_is_not_echoed_whole(shell, tmp_path):
    long = "9" * 5000
    for argv in (["--warmup", long], ["--min-bytes", long], ["--gather-timeout", long], ["--every", long]):
        proc = subprocess.run(
            [sys.executable, "-m", "torchleak", "run", *argv, "x.py"], capture_output=True, text=True, timeout=120
        )
        assert proc.returncode == 2, proc.stderr
        assert long not in proc.stderr and "5,000 characters" in proc.stderr, argv
    proc = subprocess.run([sys.executable, "-m", "torchleak", long], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and long not in proc.stderr
    for cell in (f"%%leakcheck -n {long}\nx = 1", f"%leakconfig {long}"):
        result = run(shell, cell)
        assert type(result.error_in_exec).__name__ == "UsageError" and long not in str(result.error_in_exec), cell


def test_a_metaclass_is_never_run_by_the_report_and_never_costs_it(monkeypatch):
    """Reproducer U5 (#64): the roots' scan read type(value).__mro__, which runs a metaclass's
    property or __getattribute__; one that raised made report() raise."""
    import __main__

    calls = []

    class Meta(type):
        @property
        def __mro__(cls):
            calls.append("__mro__")
            raise RuntimeError("user metaclass code ran")

    class LoudMeta(type):
        def __getattribute__(cls, name):
            calls.append(name)
            return super().__getattribute__(name)

    class Config(metaclass=Meta):
        pass

    class Loud(metaclass=LoudMeta):
        pass

    monkeypatch.setattr(__main__, "hostile_config", Config(), raising=False)
    monkeypatch.setitem(sys.modules, "hostile_loud_entry", Loud())
    kept = []
    with torchleak.track() as tracker:
        for _ in range(6):
            kept.append(torch.ones(10000))
            torchleak.step()
    report = tracker.report()
    assert report.leaks and "kept" in report.leaks[0].holder["path_text"]
    assert calls == []
