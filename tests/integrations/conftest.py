# The integrations tier: torchleak inside the tools users already run (pytest itself, the
# Hugging Face Trainer, Lightning), each against the real, pinned framework.
import pytest

from torchleak import _core, _tracking

pytest_plugins = ["pytester"]


@pytest.fixture(autouse=True)
def no_hook_left_behind():
    """Every test must leave the thread's PROFILER_STATE slot as it found it."""
    assert not _core.profiler_state_installed()
    yield
    assert _tracking._active is None, "a Tracker is still active after the test"
    assert not _core.profiler_state_installed(), "a hook was left installed"
    assert _core.pending_hook_removals() == 0
