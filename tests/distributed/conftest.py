# The distributed tier: torchrun jobs of 2 and 3 ranks on 127.0.0.1 (gloo), each bounded by a
# timeout. Helpers live in torchrun_job.py: a module named `conftest` would be another tier's
# when the tiers run in one pytest process.
import subprocess

import pytest

from torchrun_job import SCRIPT, job_env, torchrun_command


@pytest.fixture
def torchrun(tmp_path):
    """Runs the DDP script under torchrun (with `-m torchleak run` unless told otherwise);
    never waits more than `timeout` seconds."""

    def run(nproc, *torchleak_args, timeout=180, cli=True, **knobs):
        args = ["-m", "torchleak", "run", *torchleak_args, SCRIPT] if cli else [SCRIPT]
        return subprocess.run(
            torchrun_command(nproc, *args),
            cwd=tmp_path,
            env=job_env(**knobs),
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    return run
