import json
import os
import pathlib
import subprocess
import sys

import pytest

import cli_batch

MiB = 1 << 20
LEAKY = """\
import torch
import torchleak
history = []
for i in range(6):
    history.append(torch.ones(256, 1024))  # the leak
    torchleak.step()
"""
CLEAN = """\
import torch
import torchleak
for i in range(6):
    x = torch.ones(256, 1024) * 2
    torchleak.step()
"""


def run_cli(*args, cwd=None):
    return subprocess.run(
        [sys.executable, "-m", "torchleak", *args], capture_output=True, text=True, cwd=cwd, timeout=300
    )


def test_leaky_script_fails_with_fail_on_leak_and_writes_json(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(LEAKY)
    out = tmp_path / "out.json"
    html = tmp_path / "out.html"
    proc = run_cli("run", "--json", str(out), "--html", str(html), "--fail-on-leak", str(script))
    assert proc.returncode == 1, proc.stderr
    assert "LEAK" in proc.stdout and "train.py:5" in proc.stdout
    report = json.loads(out.read_text())
    assert report["schema_version"] == "torchleak.report/1"
    (leak,) = [f for f in report["findings"] if f["verdict"] == "leak"]
    assert leak["site"]["file"] == str(script) and leak["site"]["line"] == 5
    assert leak["bytes_per_iteration"] == MiB
    assert leak["path_text"] == "history[4]"  # the script's global, by name
    assert leak["holder"]["path_text"] == "history"
    assert html.read_text().startswith("<!DOCTYPE html>")


def test_leaky_script_without_fail_on_leak_exits_0(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(LEAKY)
    assert run_cli("run", "--quiet", str(script)).returncode == 0


def test_clean_script_exits_0(tmp_path):
    script = tmp_path / "clean.py"
    script.write_text(CLEAN)
    proc = run_cli("run", "--fail-on-leak", str(script))
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_everything_after_the_script_is_the_scripts_own(tmp_path):
    # The convention of python -m cProfile and memray run: torchleak's options before the
    # script; after it, `--json` and `--` included, the script's arguments untouched.
    script = tmp_path / "args.py"
    script.write_text("import sys\nassert sys.argv[1:] == ['--json', 'x', '--', 'y'], sys.argv\n")
    proc = run_cli("run", "--quiet", str(script), "--json", "x", "--", "y")
    assert proc.returncode == 0, proc.stderr
    assert not (tmp_path / "x").exists()


def test_a_script_refusing_a_torchleak_option_gets_a_hint(tmp_path):
    script = tmp_path / "strict.py"
    script.write_text("import argparse\nargparse.ArgumentParser().parse_args()\n")
    proc = run_cli("run", str(script), "--json", "out.json", cwd=tmp_path)
    assert proc.returncode == 3
    assert "unrecognized arguments: --json out.json" in proc.stderr  # the script's own parser
    assert (
        "torchleak: the script failed after it was given --json, torchleak's option too: "
        "torchleak's options go before the script"
    ) in proc.stderr
    assert not (tmp_path / "out.json").exists()
    # A script that takes its own --json gets no hint.
    script.write_text("import argparse\np = argparse.ArgumentParser()\np.add_argument('--json')\np.parse_args()\n")
    proc = run_cli("run", "--quiet", str(script), "--json", "out.json", cwd=tmp_path)
    assert proc.returncode == 0 and "torchleak's options go before" not in proc.stderr


def test_a_script_ignoring_a_torchleak_option_gets_a_hint_when_no_report_appears(tmp_path):
    # The order before this release (options after the script): a script that ignores its
    # arguments runs, and the report the user asked for is nowhere.
    script = tmp_path / "loose.py"
    script.write_text("import torch\nx = torch.ones(4)\n")
    proc = run_cli("run", "--quiet", str(script), "--json", "out.json", cwd=tmp_path)
    assert proc.returncode == 0
    assert proc.stderr.strip().splitlines()[-1] == (
        "torchleak: no report was written to out.json: --json came after the script, so the "
        f"script got it; torchleak's options go before the script (python -m torchleak run "
        f"[options] {script} [its arguments])"
    )
    # One that writes that file itself (its own --json) gets none.
    script.write_text("import sys\nopen(sys.argv[2], 'w').write('{}')\n")
    proc = run_cli("run", "--quiet", str(script), "--json", "out.json", cwd=tmp_path)
    assert proc.returncode == 0 and "torchleak:" not in proc.stderr, proc.stderr


PACKAGE_MAIN = """\
import sys
import torch
import torchleak
from . import helpers
print("argv", sys.argv[1:], __name__, __package__, sys.argv[0].endswith(FILE))
kept = []
for _ in range(6):
    kept.append(helpers.block())
    torchleak.step()
"""


@pytest.mark.parametrize("target, file", [("trainer.train", "train.py"), ("trainer", "__main__.py")])
def test_run_m_runs_a_module_as_python_m_does(tmp_path, target, file):
    package = tmp_path / "trainer"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "helpers.py").write_text("import torch\ndef block():\n    return torch.ones(64, 1024)  # LEAK\n")
    (package / file).write_text(PACKAGE_MAIN.replace("FILE", repr(file)))
    out = tmp_path / "r.json"
    proc = run_cli("run", "--json", str(out), "-m", target, "--epochs", "3", "--", "x", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "argv ['--epochs', '3', '--', 'x'] __main__ trainer True" in proc.stdout
    (leak,) = [f for f in json.loads(out.read_text())["findings"] if f["verdict"] == "leak"]
    assert leak["site"]["file"] == str(package / "helpers.py") and leak["site"]["line"] == 3
    assert leak["holder"]["path_text"] == "kept"


def test_run_h_prints_runs_usage_and_how_it_works():
    for flag in ("-h", "--help"):
        proc = run_cli("run", flag)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.startswith("usage: python -m torchleak run ")
        assert "(script.py | -m module) [ARGS...]" in proc.stdout
        assert "Runs a script under torchleak.track()" in proc.stdout
        assert "python -m torchleak diff" not in proc.stdout  # run's, not every command's


def test_failing_script_exits_3_and_still_reports(tmp_path):
    script = tmp_path / "bad.py"
    script.write_text("import torch\nkeep = torch.ones(10)\nraise RuntimeError('script bug')\n")
    out = tmp_path / "r.json"
    proc = run_cli("run", "--json", str(out), str(script))
    assert proc.returncode == 3
    assert "script bug" in proc.stderr
    assert json.loads(out.read_text())["schema_version"] == "torchleak.report/1"


BAD_ARGUMENTS = [
    [],
    ["frobnicate"],
    ["run"],
    ["run", "--json"],
    ["run", "--warmup", "x", "s.py"],
    ["run", "--bogus", "s.py"],
    ["run", "does-not-exist.py"],
    ["run", "--json", "missing-dir/r.json", "s.py"],  # checked before the script runs
    ["run", "--json", "r.txt", "s.py"],  # unknown extension
    ["run", "--html", ".", "s.py"],  # a directory
    ["run", "--warmup", str(10**12), "s.py"],
    ["run", "--warmup", "-1", "s.py"],
    ["run", "--every", "2", "s.py"],  # belongs to --watch
    ["run", "-m"],
    ["run", "-m", "no_such_module_torchleak_test"],
    ["run", "--quiet", "--"],
]


@pytest.fixture(scope="module")
def bad_argument_runs(tmp_path_factory):
    """Every BAD_ARGUMENTS command line, run in one process (cli_batch.py), in a folder with s.py."""
    folder = tmp_path_factory.mktemp("bad-arguments")
    (folder / "s.py").write_text("pass\n")
    return cli_batch.run_each(BAD_ARGUMENTS, cwd=folder)


@pytest.mark.parametrize("case", range(len(BAD_ARGUMENTS)), ids=[" ".join(a) or "(none)" for a in BAD_ARGUMENTS])
def test_bad_arguments_print_usage_and_exit_2(bad_argument_runs, case):
    proc = bad_argument_runs[case]
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "usage: python -m torchleak run" in proc.stdout + proc.stderr


def test_an_unwritable_output_is_a_usage_error_before_the_script_runs(tmp_path):
    if os.geteuid() == 0:
        pytest.skip("root writes everywhere")
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    script = tmp_path / "s.py"
    script.write_text("open('ran', 'w').close()\n")
    proc = run_cli("run", "--json", str(locked / "r.json"), str(script), cwd=tmp_path)
    assert proc.returncode == 2 and "not writable" in proc.stderr
    assert not (tmp_path / "ran").exists()


def test_relative_outputs_resolve_where_the_command_ran_not_after_the_scripts_chdir(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    script = tmp_path / "moves.py"
    script.write_text(LEAKY + f"import os\nos.chdir({str(elsewhere)!r})\n")
    proc = run_cli("run", "--quiet", "--json", "r.json", str(script), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "r.json").exists() and not (elsewhere / "r.json").exists()


def test_os_exit_in_the_script_still_writes_the_report(tmp_path):
    script = tmp_path / "bail.py"
    script.write_text(LEAKY + "import os\nos._exit(7)\nprint('not reached')\n")
    out = tmp_path / "r.json"
    proc = run_cli("run", "--json", str(out), str(script))
    assert proc.returncode == 3  # as documented: the run failed, by sys.exit or os._exit
    assert "not reached" not in proc.stdout and "LEAK" in proc.stdout
    report = json.loads(out.read_text())
    assert report["iterations"] == 6 and any(f["verdict"] == "leak" for f in report["findings"])
    # os._exit(0) is a finished run: its status is the verdict's, as after sys.exit(0).
    script.write_text(LEAKY + "import os\nos._exit(0)\n")
    assert run_cli("run", "--quiet", str(script)).returncode == 0
    assert run_cli("run", "--quiet", "--fail-on-leak", str(script)).returncode == 1


def test_the_scripts_traceback_begins_at_the_script_not_at_torchleak(tmp_path):
    script = tmp_path / "broken.py"
    script.write_text("def f():\n    raise KeyError('no such batch')\nf()\n")
    proc = run_cli("run", "--quiet", str(script))
    assert proc.returncode == 3
    lines = proc.stderr.splitlines()
    start = lines.index("Traceback (most recent call last):")
    assert lines[start + 1].startswith(f'  File "{script}", line 3'), proc.stderr
    assert "torchleak" not in "\n".join(lines[start : start + 4])
    assert "KeyError: 'no such batch'" in proc.stderr


def test_sys_exit_with_a_message_shows_it(tmp_path):
    script = tmp_path / "quit.py"
    script.write_text("import sys\nsys.exit('config file missing')\n")
    proc = run_cli("run", "--quiet", str(script))
    assert proc.returncode == 3
    assert "config file missing" in proc.stderr


def test_the_installed_kernelspec_is_readable_by_other_users(tmp_path):
    env = dict(os.environ, JUPYTER_DATA_DIR=str(tmp_path))
    proc = subprocess.run(
        [sys.executable, "-m", "torchleak", "install-kernel", "--user"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    spec = tmp_path / "kernels" / "torchleak"
    assert (spec.stat().st_mode & 0o777) == 0o755
    installed = json.loads((spec / "kernel.json").read_text())
    assert installed["display_name"] == "Python 3 (torchleak)"
    # One kernelspec: the repository's, with this interpreter in it.
    ours = json.loads(
        (pathlib.Path(__file__).resolve().parents[2] / "share/jupyter/kernels/torchleak/kernel.json").read_text()
    )
    assert installed == dict(ours, argv=[sys.executable, *ours["argv"][1:]])


FORKS = """\
import os, sys
import torch
import torchleak
history = []
for i in range(6):
    history.append(torch.ones(256, 1024))
    torchleak.step()
    if i == 2:
        pid = os.fork()
        if pid == 0:
            sys.exit({child_exit})  # a helper that ends as scripts do
        os.waitpid(pid, 0)
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
@pytest.mark.parametrize("child_exit", ["0", "3", "'done'", "os._exit(0)"])
def test_a_forked_child_that_exits_reports_nothing(tmp_path, child_exit):
    script = tmp_path / "forks.py"
    code = FORKS.format(child_exit=child_exit)
    if child_exit.startswith("os."):
        code = code.replace("sys.exit(os._exit(0))", "os._exit(0)")
    script.write_text(code)
    out = tmp_path / "out.json"
    proc = run_cli("run", "--json", str(out), str(script))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("torchleak report:") == 1, proc.stdout
    assert json.loads(out.read_text())["iterations"] == 6  # the parent's, not the child's 3


def test_ctrl_c_while_the_report_is_built_still_saves_it_without_paths(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(LEAKY)
    out, html = tmp_path / "out.json", tmp_path / "out.html"
    # Ctrl-C lands in the first (path-walking) report; the one without paths must still come.
    code = (
        "import sys, torchleak._tracking as t, torchleak.__main__ as m\n"
        "real, pressed = t.Tracker.report, []\n"
        "def report(self, *a, **k):\n"
        "    if k.get('paths', True) and not self.active and not pressed:\n"
        "        pressed.append(1)\n"
        "        raise KeyboardInterrupt\n"
        "    return real(self, *a, **k)\n"
        "t.Tracker.report = report\n"
        f"sys.exit(m.main(['run', '--json', {str(out)!r}, "
        f"'--html', {str(html)!r}, {str(script)!r}]))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 3, proc.stdout + proc.stderr  # the run did not finish cleanly
    assert "interrupted (Ctrl-C) while retaining paths were walked" in proc.stderr
    report = json.loads(out.read_text())
    (leak,) = [f for f in report["findings"] if f["verdict"] == "leak"]
    assert leak["site"]["line"] == 5 and not leak.get("path")
    assert any("saved without them" in w for w in report["warnings"])
    assert html.read_text().startswith("<!DOCTYPE html>")


def test_a_folder_with_a_main_runs_as_python_runs_it(tmp_path):
    # `python app` runs app/__main__.py with app/ first on sys.path (#64, reproducer U13).
    app = tmp_path / "app"
    app.mkdir()
    (app / "helper.py").write_text("KEPT = []\n")
    (app / "__main__.py").write_text(
        LEAKY.replace("import torchleak", "import torchleak, helper") + "print('MAIN RAN')\n"
    )
    out = tmp_path / "r.json"
    proc = run_cli("run", "--json", str(out), "app", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "MAIN RAN" in proc.stdout
    (leak,) = [f for f in json.loads(out.read_text())["findings"] if f["verdict"] == "leak"]
    assert leak["site"]["file"].endswith("__main__.py")
    (tmp_path / "empty").mkdir()
    proc = run_cli("run", "empty", cwd=tmp_path)
    assert proc.returncode == 2
    assert "empty is a folder without a __main__.py: nothing to run" in proc.stderr
