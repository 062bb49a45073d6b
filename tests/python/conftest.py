import pytest

import hook_checks
import ipython_shell


@pytest.fixture(autouse=True)
def no_hook_left_behind():
    with hook_checks.nothing_left_installed():
        yield


MiB = 1 << 20


@pytest.fixture
def ipython(tmp_path, monkeypatch):
    """An InteractiveShell of its own per test (see ipython_shell.py)."""
    with ipython_shell.shell_in(tmp_path, monkeypatch) as sh:
        yield sh
