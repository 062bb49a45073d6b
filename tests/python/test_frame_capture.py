"""Allocation stacks on every supported CPython, and a loud warning (never a silent
`<unknown>:0` site) where they cannot be read."""

import json
import subprocess
import sys
import textwrap

import pytest
import torch

import torchleak
from torchleak import _core, _tracking, _user_code
from torchleak.render import RENDERERS


def test_every_supported_interpreter_reads_its_own_frames():
    # 3.10 to 3.14 have a frame layout; the self-check reads the stack as the hook does
    # inside a torch operator (GIL released) and compares it with the running line.
    assert sys.version_info[:2] <= (3, 14)
    assert _core.capture_strategy() == "interpreter-frames"
    assert _core.check_frame_capture() is None


def test_the_site_is_read_without_the_gil_on_this_interpreter():
    kept = []

    def step():
        kept.append(torch.randn(128, 128))  # ALLOC

    report = torchleak.check(step, iterations=6, warmup=1)
    (leak,) = report.leaks
    line = next(i for i, text in enumerate(open(__file__), 1) if "# ALLOC" in text and "kept.append" in text)
    assert (leak.site["file"], leak.site["line"]) == (__file__, line)
    assert not any("allocation sites" in w for w in report.warnings)


@pytest.fixture
def capture_broken(monkeypatch):
    """Frame capture failing as it would on an interpreter with no known layout."""
    monkeypatch.setattr(_user_code, "_capture_problem", None)
    _core._disable_frame_capture_for_testing(True)
    try:
        yield
    finally:
        _core._disable_frame_capture_for_testing(False)
        _user_code._capture_problem = None


def _leaky_step(kept):
    kept.append(torch.randn(128, 128))


def test_failed_capture_is_a_warning_in_the_report_and_in_every_view(capture_broken):
    kept = []
    with pytest.warns(RuntimeWarning, match="allocation sites are unavailable"):
        report = torchleak.check(_leaky_step, kept, iterations=6, warmup=1)
    version = ".".join(map(str, sys.version_info[:3]))
    (warning,) = [w for w in report.warnings if "allocation sites" in w]
    assert f"{sys.implementation.name} {version}" in warning  # names the interpreter
    # The leak, its holder and its verdict survive; its site says what is missing.
    (leak,) = report.leaks
    assert "kept" in leak.holder["path_text"]
    assert leak.site["text"] == "no Python stack"
    data = json.loads(report.to_json())
    assert "<unknown>:0" not in json.dumps(data)
    for name, render in RENDERERS.items():
        out = render(data)
        shown = out if isinstance(out, str) else json.dumps(out)
        assert "allocation sites are unavailable" in shown, name
        assert "<unknown>:0" not in shown, name


def test_a_warnings_filter_that_raises_leaves_no_hook(capture_broken):
    # The warning is given before the hook is installed (the autouse fixture checks).
    with pytest.warns(RuntimeWarning):
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)
            with pytest.raises(RuntimeWarning):
                torchleak.track().start()
        warnings.warn("the check above raised", RuntimeWarning)
    assert _tracking.active_tracker() is None


def test_the_cli_says_so_on_stderr(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(
        textwrap.dedent("""
        import torch
        import torchleak
        kept = []
        for _ in range(6):
            kept.append(torch.randn(128, 128))
            torchleak.step()
        """)
    )
    # Capture off before the CLI starts tracking, as on an interpreter with no frame layout.
    launcher = (
        "import sys; from torchleak import _core; "
        "_core._disable_frame_capture_for_testing(True); "
        "from torchleak.__main__ import main; sys.exit(main(sys.argv[1:]))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", launcher, "run", "--json", str(tmp_path / "r.json"), str(script)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "allocation sites are unavailable" in proc.stderr
    assert "<unknown>:0" not in proc.stdout + proc.stderr
    data = json.loads((tmp_path / "r.json").read_text())
    assert any("allocation sites are unavailable" in w for w in data["warnings"])
