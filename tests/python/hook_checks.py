"""The check every in-process tier runs around each test: it starts with no hook installed and
leaves none behind (tests/python, tests/integrations and tests/device use it)."""

import contextlib

from torchleak import _core, _tracking


@contextlib.contextmanager
def nothing_left_installed():
    """Every test must leave the thread's PROFILER_STATE slot as it found it."""
    assert not _core.profiler_state_installed()
    yield
    assert _tracking._active is None, "a Tracker is still active after the test"
    assert not _core.profiler_state_installed(), "a hook was left installed"
    assert _core.pending_hook_removals() == 0
