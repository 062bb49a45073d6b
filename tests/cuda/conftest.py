"""The CUDA tier: torchleak on a real GPU and PyTorch's caching allocator (`make test-cuda`,
and `tests/cuda/gpu_proof.sh` on a GPU machine). Every test carries the `cuda` marker and is
skipped, with its reason, where torch sees no CUDA device: the CPU tiers cover the same
contracts with stand-ins (tests/python/test_cuda_stacks.py, the fake accelerator of
tests/device), and this tier checks them against the real allocator."""

import gc
import json
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest
import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "python"))

import hook_checks

MiB = 1 << 20
HAS_CUDA = torch.cuda.is_available()
NO_CUDA = (
    "no CUDA device (torch.cuda.is_available() is false; torch "
    f"{torch.__version__}, CUDA build: {torch.version.cuda is not None}): the CUDA tier runs on a GPU "
    "machine, through tests/cuda/gpu_proof.sh"
)
HERE = pathlib.Path(__file__).resolve().parent


def pytest_collection_modifyitems(config, items):
    for item in items:
        if pathlib.Path(str(item.fspath)).resolve().parent == HERE:
            item.add_marker(pytest.mark.cuda)
            if not HAS_CUDA:
                item.add_marker(pytest.mark.skip(reason=NO_CUDA))


@pytest.fixture(autouse=True)
def clean_gpu():
    """Each test leaves no hook, no wrapped torch function and no memory cap behind, and the
    cache emptied, so that one test's reserve is not the next one's."""
    if not HAS_CUDA:
        yield
        return
    with hook_checks.nothing_left_installed():
        yield
        gc.collect()
        torch.cuda.synchronize()
        torch.cuda.set_per_process_memory_fraction(1.0)
        torch.cuda.empty_cache()


def run_script(tmp_path, source, *, env=None, args=(), timeout=240, cli=False):
    """Runs `source` in a fresh interpreter (allocator settings are read once per process),
    with this interpreter's sys.path. Returns (the JSON object the script printed last, the
    completed process). With cli=True, runs it under `python -m torchleak run` instead."""
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(source))
    environment = dict(os.environ)
    environment["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    environment.update(env or {})
    command = [sys.executable]
    command += ["-m", "torchleak", "run", *args, str(script)] if cli else [str(script), *args]
    proc = subprocess.run(
        command, cwd=tmp_path, env=environment, capture_output=True, text=True, timeout=timeout, check=False
    )
    last = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    result = json.loads(last[-1]) if last else None
    return result, proc


def script_line(source, marker):
    """The line number, in the file run_script writes, of `source`'s line holding `marker`."""
    lines = textwrap.dedent(source).splitlines()
    return 1 + next(i for i, text in enumerate(lines) if marker in text)


def device_of(report, name="cuda:0"):
    return next(d for d in report.devices if d["device"] == name)


def line_of(function, marker):
    """The line number of the line of `function`'s source that contains `marker`."""
    import inspect

    lines, first = inspect.getsourcelines(function)
    return first + next(i for i, text in enumerate(lines) if marker in text)
