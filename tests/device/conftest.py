"""The device tier: torchleak on a fake accelerator (fake_accelerator.cpp, renamed "fakegpu"),
so the device paths run on real tensors without a GPU. It runs in a pytest process of its own
(`make test-device`): registering a device allocator changes how torchleak's hook listens to
CPU events, which the other tiers must not see."""

import gc
import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "python"))

import fakegpu
import hook_checks
import ipython_shell

DEVICE = fakegpu.install()
DEFAULT_CAPACITY = DEVICE.native.capacity(0)
MiB = 1 << 20


def device_of(report, name):
    """A report's timeline of device `name` ("fakegpu:0")."""
    return next(d for d in report.devices if d["device"] == name)


@pytest.fixture(autouse=True)
def clean_device():
    """Each test starts with both fake devices empty, at their default capacity, reporting
    normally; and leaves no hook behind."""
    native = DEVICE.native
    with hook_checks.nothing_left_installed():
        yield DEVICE
        # An exception kept by a test (pytest.raises) forms a cycle with the test's frame,
        # which holds its tensors until a collection.
        gc.collect()
        native.set_report_totals(True)
        native.set_report_events(True)
        for i in range(native.device_count()):
            native.set_capacity(i, DEFAULT_CAPACITY)
            native.empty_cache(i)


@pytest.fixture
def ipython(tmp_path, monkeypatch):
    with ipython_shell.shell_in(tmp_path, monkeypatch) as sh:
        yield sh
