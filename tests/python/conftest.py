import signal

import pytest

import hook_checks
import ipython_shell

# A run started in the background of a non-interactive shell (`make test &`, nohup) inherits
# SIGINT ignored, and Python then installs no KeyboardInterrupt handler: the tests of Stop
# (a SIGINT at a boundary) would test the launcher. Python's own default is what a user has.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


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


@pytest.fixture
def shell(ipython):
    """The shell with torchleak's extension loaded and torch imported; unloaded after, with the
    settings the test changed reset."""
    ipython_shell.run(ipython, "%load_ext torchleak")
    ipython_shell.run(ipython, "import torch")
    yield ipython
    ipython_shell.run(ipython, "%unload_ext torchleak")
    import torchleak

    torchleak.config.reset()
