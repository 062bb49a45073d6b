import pytest

import ipython_shell
from torchleak import _core, _tracking


@pytest.fixture(autouse=True)
def no_hook_left_behind():
    """Every test must leave the thread's PROFILER_STATE slot as it found it."""
    assert not _core.profiler_state_installed()
    yield
    assert _tracking._active is None, "a Tracker is still active after the test"
    assert not _core.profiler_state_installed(), "a hook was left installed"
    assert _core.pending_hook_removals() == 0


MiB = 1 << 20


@pytest.fixture
def ipython(tmp_path, monkeypatch):
    """An InteractiveShell of its own per test (see ipython_shell.py)."""
    with ipython_shell.shell_in(tmp_path, monkeypatch) as sh:
        yield sh
