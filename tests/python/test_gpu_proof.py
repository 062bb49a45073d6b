"""tests/cuda/gpu_proof.sh's control flow, on the CPU (the whole script runs in `make
gpu-proof-dry`): a build whose extension crashes stops the proof after the smoke test, says why
for every step it skipped, and the summary check calls it incomplete."""

import json
import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_a_crashing_smoke_test_skips_the_rest_and_says_why(tmp_path):
    # A python3 that dies of SIGSEGV when it runs the smoke test, as the GPU machine's build did.
    wrapper = tmp_path / "python"
    wrapper.write_text(
        f'#!/usr/bin/env bash\ncase "$*" in *smoke.py*) kill -SEGV $$ ;; esac\nexec {sys.executable} "$@"\n'
    )
    wrapper.chmod(0o755)
    out = tmp_path / "out"
    env = dict(os.environ, OUT=str(out), PYTHON=str(wrapper), PROOF_TARGET=str(tmp_path / "target"))
    env["PROOF_STEPS"] = "smoke cuda_tier leak_cases truth bench"
    proc = subprocess.run(
        ["bash", str(ROOT / "tests" / "cuda" / "gpu_proof.sh")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary = json.loads((out / "summary.json").read_text())
    steps = summary["steps"]
    assert steps["smoke"]["status"] == "failed"
    assert "exit status 139" in steps["smoke"]["why"]
    for name in ("cuda_tier", "leak_cases", "truth", "bench"):
        assert steps[name]["status"] == "skipped", steps
        assert steps[name]["why"].startswith("the smoke test failed"), steps[name]
    assert summary["ok"] is False
    check = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "cuda" / "proof_summary.py"), str(out), "--check"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert check.returncode == 1
    assert "failed steps: ['smoke']" in check.stderr
