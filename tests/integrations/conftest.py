# The integrations tier: torchleak inside the tools users already run (pytest itself, the
# Hugging Face Trainer, Lightning), each against the real, pinned framework.
import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "python"))

import hook_checks

pytest_plugins = ["pytester"]


@pytest.fixture(autouse=True)
def no_hook_left_behind():
    with hook_checks.nothing_left_installed():
        yield
