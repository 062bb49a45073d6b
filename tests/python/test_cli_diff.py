"""python -m torchleak diff: two saved reports of real runs (a script before and after its fix)
compared, as a CI step would."""

import json
import subprocess
import sys

import pytest

import cli_batch

BEFORE = """\
import torch
import torchleak
losses, grads = [], []
w = torch.randn(256, 256, requires_grad=True)
for i in range(8):
    loss = (w @ torch.randn(256, 512)).relu().sum()
    loss.backward()
    losses.append(loss)  # keeps the scalar and its graph
    grads.append(w.grad.clone())
    torchleak.step()
"""
# The fix: losses keeps numbers. An added comment moves every line below it, the other leak
# (grads) stays.
AFTER = BEFORE.replace("losses.append(loss)  # keeps the scalar and its graph", "losses.append(loss.item())").replace(
    "for i in range(8):", "# fixed: numbers only\nfor i in range(8):"
)
# A change that leaks more: every step's activations too.
WORSE = BEFORE.replace("    torchleak.step()", "    acts.append(torch.ones(512, 512))\n    torchleak.step()").replace(
    "losses, grads = [], []", "losses, grads, acts = [], [], []"
)


def run_cli(*args, cwd=None):
    return subprocess.run(
        [sys.executable, "-m", "torchleak", *args], capture_output=True, text=True, cwd=cwd, timeout=300
    )


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    paths = {}
    for name, source in (("before", BEFORE), ("after", AFTER), ("worse", WORSE)):
        (root / name).mkdir()
        script = root / name / "train.py"
        script.write_text(source)
        paths[name] = root / f"{name}.json"
        proc = run_cli("run", "--quiet", "--json", str(paths[name]), str(script))
        assert proc.returncode == 0, proc.stderr
    return paths


def test_a_fix_is_reported_fixed_and_the_remaining_leak_unchanged(reports, tmp_path):
    out = tmp_path / "diff.json"
    proc = run_cli("diff", str(reports["before"]), str(reports["after"]), "--json", str(out))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith("torchleak diff: ")
    assert "FIXED" in proc.stdout and "(held by losses)" in proc.stdout
    assert "result: no regression: 0 new, 0 worse" in proc.stdout
    data = json.loads(out.read_text())
    assert data["schema_version"] == "torchleak.diff/1" and data["regressed"] is False
    kinds = {c["holder"]: c["kind"] for c in data["changes"]}
    assert kinds["losses"] == "fixed" and kinds["grads"] == "same"
    # the comment moved the grads line: still recognised as the same leak
    (grads,) = [c for c in data["changes"] if c["holder"] == "grads"]
    assert grads["matched_by"] in ("source", "holder")
    assert data["before"] == str(reports["before"]) and data["text"] == proc.stdout.rstrip("\n")


def test_a_new_leak_fails_the_diff(reports):
    proc = run_cli("diff", str(reports["before"]), str(reports["worse"]))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "NEW" in proc.stdout and "(held by acts)" in proc.stdout
    assert "1.0 MiB per iteration" in proc.stdout
    assert "result: regression: 1 new" in proc.stdout


def test_the_same_report_twice_is_no_change(reports):
    proc = run_cli("diff", str(reports["before"]), str(reports["before"]))
    assert proc.returncode == 0
    assert "0 new, 0 worse, 0 fixed, 0 better, 2 unchanged" in proc.stdout


def test_undoing_a_fix_is_a_regression(reports):
    proc = run_cli("diff", str(reports["after"]), str(reports["before"]))
    assert proc.returncode == 1 and "NEW" in proc.stdout


DIFF_USAGE_ERRORS = [
    (["only.json"], "diff needs two report files, got 1"),
    (["missing.json", "missing.json"], "cannot read missing.json"),
    (["notareport.json", "notareport.json"], "not a torchleak report"),
    (["{b}", "{b}", "--tolerance", "lots"], "--tolerance needs a percentage"),
    (["{b}", "{b}", "--tolerance", "-5"], "--tolerance must be between 0 and 1000"),
    (["{b}", "{b}", "--json", "out.txt"], "must end in .json"),
    (["{b}", "{b}", "--colour"], "unknown option '--colour'"),
]


@pytest.fixture(scope="module")
def diff_usage_runs(reports, tmp_path_factory):
    """Every DIFF_USAGE_ERRORS command line, run in one process (cli_batch.py), in a folder with
    a JSON file that is not a report."""
    folder = tmp_path_factory.mktemp("diff-usage")
    (folder / "notareport.json").write_text('{"schema_version": "something else"}')
    argvs = [["diff", *(a.format(b=reports["before"]) for a in args)] for args, _ in DIFF_USAGE_ERRORS]
    return cli_batch.run_each(argvs, cwd=folder)


@pytest.mark.parametrize("case", range(len(DIFF_USAGE_ERRORS)), ids=[w for _, w in DIFF_USAGE_ERRORS])
def test_usage_errors_exit_2_with_the_usage(diff_usage_runs, case):
    proc, words = diff_usage_runs[case], DIFF_USAGE_ERRORS[case][1]
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert words in proc.stderr and "python -m torchleak diff before.json" in proc.stderr
