"""bench/bench_cuda.py kept working where there is no GPU: a smoke run of its code on the CPU
with a tiny model (its numbers mean nothing), and the skip it says without CUDA."""

import json
import pathlib
import subprocess
import sys

import pytest
import torch

BENCH = pathlib.Path(__file__).resolve().parents[2] / "bench" / "bench_cuda.py"
TINY = ["--layers", "1", "--width", "32", "--heads", "2", "--vocab", "128", "--batch", "1", "--seq", "16"]


def run(tmp_path, *args):
    out = tmp_path / "bench.json"
    proc = subprocess.run(
        [sys.executable, str(BENCH), *args, "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(out.read_text()), proc.stdout


def test_the_bench_runs_its_modes_and_detection_on_the_cpu(tmp_path):
    args = ["--device", "cpu", *TINY, "--rounds", "2", "--steps", "1", "--detect-steps", "3", "--detect-seq", "16"]
    result, printed = run(tmp_path, *args)
    assert set(result["overhead"]) == {"track", "watch", "untracked_ms"}  # no history on the CPU
    for mode in ("track", "watch"):
        for part in ("step", "forward", "backward"):
            assert set(result["overhead"][mode][part]) == {"median", "min"}
    assert "announced_after_boundaries" in result["detection"]
    assert "overhead vs untracked, median (min) over rounds:" in printed


def test_without_cuda_the_bench_says_it_skipped(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("CUDA is available here: the bench runs instead of skipping")
    result, printed = run(tmp_path, *TINY)
    assert result["skipped"].startswith("no CUDA device")
    assert printed.startswith("bench_cuda: skipped: no CUDA device")
