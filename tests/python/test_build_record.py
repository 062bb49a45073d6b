"""The build's record (build_info.json) as the import, `version` and `doctor` read it: a broken
record is said to be broken, never taken for an old install and never a crash; under another
torch the import refuses, and `version` and `doctor` still say what the build is."""

import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

import torch

import torchleak

PACKAGE = pathlib.Path(torchleak.__file__).parent


@pytest.fixture
def installed_copy(tmp_path):
    """A copy of the installed package whose record a test rewrites."""
    shutil.copytree(PACKAGE, tmp_path / "torchleak", ignore=shutil.ignore_patterns("__pycache__"))

    def write(content):
        (tmp_path / "torchleak" / "build_info.json").write_text(content)

    def run(*args, timeout=300):
        env = dict(os.environ, PYTHONPATH=str(tmp_path))
        return subprocess.run(
            [sys.executable, *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=timeout, check=False
        )

    return write, run


def test_a_record_that_is_a_list_is_said_to_be_broken(installed_copy):
    write, run = installed_copy
    write('["torch", "2.11.0"]')
    assert run("-c", "import torchleak").returncode == 0
    proc = run("-m", "torchleak", "version")
    assert proc.returncode == 0, proc.stderr
    assert "built with: unknown (build_info.json holds a JSON list, not an object)" in proc.stdout


def test_a_truncated_record_is_not_taken_for_a_missing_one(installed_copy):
    write, run = installed_copy
    write('{"torch": "2.1')
    proc = run("-m", "torchleak", "version")
    assert "built with: unknown (build_info.json is not valid JSON" in proc.stdout
    assert "no build_info.json" not in proc.stdout


def test_fields_that_are_null_read_not_recorded(installed_copy):
    write, run = installed_copy
    write(json.dumps({"torch": None, "python": None, "compiler": None, "headers": {"xtl": None}}))
    proc = run("-m", "torchleak", "version")
    assert proc.returncode == 0, proc.stderr
    assert "built against torch not recorded, Python not recorded, not recorded" in proc.stdout
    assert "None" not in proc.stdout


def test_under_another_torch_import_refuses_and_version_and_doctor_say_why(installed_copy):
    write, run = installed_copy
    major, minor = (int(x) for x in torch.__version__.split(".")[:2])
    other = f"{major}.{minor + 1}.0+cu121"  # a minor release that is not the installed one
    write(json.dumps({"torch": other, "python": "3.11", "compiler": "GNU 13.3.0"}))
    imported = run("-c", "import torchleak")
    assert imported.returncode != 0
    assert f"TorchMismatchError: torchleak 0.1.0 was built against torch {other}" in imported.stderr
    version = run("-m", "torchleak", "version")
    assert version.returncode == 0 and "Traceback" not in version.stderr, version.stderr
    assert f"built against torch {other}" in version.stdout
    assert f"refused: torchleak 0.1.0 was built against torch {other}" in version.stdout
    doctor = run("-m", "torchleak", "doctor")
    assert doctor.returncode == 1 and "Traceback" not in doctor.stderr, doctor.stderr
    assert "planted leaks: not run (torchleak refuses to load here)" in doctor.stdout
    assert f"built against torch {other}, running on" in doctor.stdout
