"""What a user whose machine cannot build torchleak sees: one sentence naming what is missing,
not CMake's trace. `pip install` runs this same configure step (scikit-build-core)."""

import os
import pathlib
import shutil
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.mark.skipif(shutil.which("cmake") is None, reason="cmake is not installed")
def test_no_cxx_compiler_is_one_clear_sentence(tmp_path):
    env = dict(os.environ, CXX=str(tmp_path / "no-such-compiler" / "g++"))
    proc = subprocess.run(
        ["cmake", "-S", str(ROOT), "-B", str(tmp_path / "build"), "-DTORCHLEAK_BUILD_PYTHON=OFF"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode != 0
    said = " ".join(proc.stderr.split())
    assert "torchleak builds a C++20 extension against your installed torch and found no C++ compiler" in said
    assert "apt-get install g++" in said
