"""The pytest plugin (pytest_torchleak, a pytest11 entry point), run through pytest's own
pytester: the inner sessions are real pytest runs of the test files written here."""

import pytest

import torchleak

LEAKY = """
import pytest
import torch

kept = []

@pytest.mark.no_tensor_leak(iterations=6, warmup=1)
def test_keeps_losses():
    w = torch.randn(64, 64, requires_grad=True)
    loss = (w @ torch.randn(64, 256)).relu().sum()  # ALLOC
    kept.append(loss)
"""


def run_inline(pytester, source, *args):
    pytester.makepyfile(test_inner=source)
    return pytester.runpytest("-p", "no:cacheprovider", *args)


def line_of(source, marker):
    return next(i for i, line in enumerate(source.splitlines(), 1) if line.endswith(marker))


def test_a_leaking_marked_test_fails_with_site_path_and_fix(pytester):
    result = run_inline(pytester, LEAKY)
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert "tensors leaked across iterations" in out
    assert f"test_inner.py:{line_of((pytester.path / 'test_inner.py').read_text(), '# ALLOC')}" in out
    assert "kept[" in out and ".grad_fn" in out
    assert "detach()" in out  # the fix


def test_a_clean_marked_test_passes(pytester):
    result = run_inline(
        pytester,
        """
import pytest
import torch

log = []

@pytest.mark.no_tensor_leak(iterations=6, warmup=1)
def test_logs_numbers():
    w = torch.randn(64, 64, requires_grad=True)
    loss = (w @ torch.randn(64, 256)).relu().sum()
    loss.backward()
    log.append(loss.item())
""",
    )
    result.assert_outcomes(passed=1)


def test_warm_up_is_not_a_leak_and_the_body_runs_iterations_times(pytester):
    result = run_inline(
        pytester,
        """
import pytest
import torch

cache = {}
calls = []

@pytest.mark.no_tensor_leak(iterations=4, warmup=1)
def test_fills_a_cache_once():
    calls.append(1)
    cache.setdefault("table", torch.ones(512, 512))

def test_it_ran_four_times():
    assert len(calls) == 4
""",
    )
    result.assert_outcomes(passed=2)


def test_what_a_fixture_holds_is_named_by_the_fixture(pytester):
    # GIVEN a fixture's list the test body appends graphs to; pytest, not the user, holds it
    result = run_inline(
        pytester,
        """
import pytest
import torch

@pytest.fixture
def history():
    return []

@pytest.mark.no_tensor_leak(iterations=5, warmup=1)
def test_appends_to_fixture(history):
    x = torch.randn(128, 128, requires_grad=True)
    history.append((x * 2).sum())
""",
    )
    result.assert_outcomes(failed=1)
    # THEN the path starts at the fixture's name
    assert "history[" in result.stdout.str()


def test_the_fixture_checks_a_callable_and_returns_the_report(pytester):
    result = run_inline(
        pytester,
        """
import torch

kept = []

def leaky_step():
    kept.append(torch.randn(100, 100, requires_grad=True) * 3)  # LEAK

def clean_step():
    return float(torch.randn(100, 100).sum())

def test_clean(assert_no_tensor_leak):
    report = assert_no_tensor_leak(clean_step, iterations=4)
    assert report.iterations == 4 and not report.leaks

def test_leaky(assert_no_tensor_leak):
    assert_no_tensor_leak(leaky_step, iterations=5, warmup=1)
""",
    )
    result.assert_outcomes(passed=1, failed=1)
    out = result.stdout.str()
    assert "test_leaky" in out and "tensors leaked across iterations" in out
    assert "kept[" in out


# The file stem of test_inner.py::test_keeps_losses: readable, then 8 hex of its node id.
KEEPS_LOSSES = "test_inner.py_test_keeps_losses-e08852b5"


def test_report_dir_gets_json_and_html_of_each_leaking_test_only(pytester, tmp_path):
    source = (
        LEAKY
        + """
@pytest.mark.parametrize("name", ["a/b", "a_b", "a b", "<x y>"])
@pytest.mark.no_tensor_leak(iterations=4, warmup=1)
def test_param(name):
    kept.append(torch.randn(32, 32, requires_grad=True) * 2)

@pytest.mark.no_tensor_leak(iterations=3)
def test_clean():
    torch.ones(10)
"""
    )
    out_dir = tmp_path / "reports"
    result = run_inline(pytester, source, f"--torchleak-report={out_dir}")
    result.assert_outcomes(failed=5, passed=1)
    names = sorted(p.name for p in out_dir.iterdir())
    assert len(names) == 10, names  # [a/b], [a_b] and [a b] each have their own files
    assert all("/" not in n and "<" not in n for n in names)
    assert f"{KEEPS_LOSSES}.torchleak.json" in names
    for name in names:
        if name.endswith(".json"):
            report = torchleak.Report.load(out_dir / name)
            assert report.leaks
        else:
            assert (out_dir / name).read_text(encoding="utf-8").lstrip().startswith("<!DOCTYPE")
    assert "saved: " in result.stdout.str()


@pytest.mark.parametrize(
    "marker, words",
    [
        ("iterations=0", "iterations"),
        ("warmup=5, iterations=5", "warmup < iterations"),
        ("5", "keyword arguments only"),
        ("iterations=3, repeat=2", "unknown argument(s) repeat"),
        ("iterations='3'", "iterations must be an int"),
        # #46: past torchleak's limits, an internal traceback from check() instead of the usage
        (
            "min_bytes=2**70",
            "min_bytes must be an int between 0 and 9,223,372,036,854,775,807, got 1180591620717411303424",
        ),
        ("iterations=10**5000", "got an int of 16610 bits"),
    ],
)
def test_a_bad_marker_fails_that_test_with_the_usage(pytester, marker, words):
    result = run_inline(
        pytester,
        f"""
import pytest

@pytest.mark.no_tensor_leak({marker})
def test_bad():
    pass

def test_other():
    pass
""",
    )
    result.assert_outcomes(failed=1, passed=1)
    out = result.stdout.str()
    assert words in out and "usage: @pytest.mark.no_tensor_leak(" in out


def test_a_failing_body_fails_with_its_own_error_and_restores_the_hooks(pytester):
    result = run_inline(
        pytester,
        """
import pytest
import torch
from torchleak import _core

runs = []

@pytest.mark.no_tensor_leak(iterations=5)
def test_breaks_in_third_run():
    runs.append(torch.ones(4))
    assert len(runs) < 3, "third run"

def test_after():
    assert not _core.profiler_state_installed()
""",
    )
    result.assert_outcomes(failed=1, passed=1)
    out = result.stdout.str()
    assert "AssertionError: third run" in out
    assert "tensors leaked" not in out


def test_an_unusable_report_dir_is_a_usage_error(pytester, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    result = run_inline(pytester, LEAKY, f"--torchleak-report={blocker / 'sub'}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "--torchleak-report" in result.stderr.str()


def test_the_plugin_loads_without_importing_torch(pytester):
    # A run of its own: the plugin is loaded by every pytest in the environment, and projects
    # that never ask for it must not pay for torch's import.
    pytester.makepyfile(
        test_inner="""
import sys

def test_nothing_imported():
    assert "pytest_torchleak" in sys.modules
    assert "torch" not in sys.modules and "torchleak" not in sys.modules
"""
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)


def test_the_marker_is_registered(pytester):
    pytester.makepyfile(test_inner="def test_x():\n    pass\n")
    result = pytester.runpytest("--markers")
    assert "@pytest.mark.no_tensor_leak(iterations=5, warmup=1, min_bytes=0)" in result.stdout.str()


def test_a_report_that_cannot_be_saved_still_fails_with_the_leak(pytester, tmp_path):
    out_dir = tmp_path / "reports"
    out_dir.mkdir()
    # The JSON's name is taken by a directory: that save fails, the HTML is still written.
    (out_dir / f"{KEEPS_LOSSES}.torchleak.json").mkdir()
    result = run_inline(pytester, LEAKY, f"--torchleak-report={out_dir}")
    out = result.stdout.str()
    result.assert_outcomes(failed=1)
    assert "tensors leaked across iterations" in out and "OSError" not in out
    assert "could not save " in out and f"{KEEPS_LOSSES}.torchleak.json" in out
    assert (out_dir / f"{KEEPS_LOSSES}.torchleak.html").is_file()
