"""tests/cuda/gpu_proof.sh's control flow, on the CPU (the whole script runs in `make
gpu-proof-dry`): a build whose extension crashes stops the proof after the smoke test, says why
for every step it skipped, and the summary check calls it incomplete; carried Python headers of
another patch release are refused."""

import json
import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]


def run_proof(env):
    return subprocess.run(
        ["bash", str(ROOT / "tests" / "cuda" / "gpu_proof.sh")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


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
    proc = run_proof(env)
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


def test_carried_python_headers_of_another_patch_release_are_refused(tmp_path):
    # A python3 without Python.h (the GPU machine's may lack it) and carried headers of another
    # patch release: frame_layout.h reads CPython's internal frame structs, which a patch
    # release may change, so the proof refuses them and says so.
    wrapper = tmp_path / "python"
    wrapper.write_text(
        "#!/usr/bin/env bash\n"
        'case "$*" in *sysconfig.get_paths*include*) echo /nonexistent/include; exit 0 ;; esac\n'
        'case "$*" in *platform.python_version*) echo 3.12.3; exit 0 ;; esac\n'
        f'exec {sys.executable} "$@"\n'
    )
    wrapper.chmod(0o755)
    headers = tmp_path / "headers"
    headers.mkdir()
    (headers / "Python.h").write_text("")
    (headers / "patchlevel.h").write_text('#define PY_VERSION "3.12.1"\n')
    out = tmp_path / "out"
    env = dict(os.environ, OUT=str(out), PYTHON=str(wrapper), PROOF_TARGET=str(tmp_path / "target"))
    env.update(PROOF_STEPS="none", PROOF_PYTHON_HEADERS=str(headers))
    proc = run_proof(env)
    log = (out / "proof.log").read_text()
    assert "is Python 3.12.1's, not 3.12.3's: refused" in " ".join(log.split()), log[-2000:]
    assert "using the carried" not in log
    (headers / "patchlevel.h").write_text('#define PY_VERSION "3.12.3"\n')
    run_proof(env)
    assert f"using the carried {headers} (Python 3.12.3)" in (out / "proof.log").read_text()
    assert proc.returncode == 0
