"""Memory that grows outside tensors (#47 item 8): when the process's resident set grows over the
judged iterations and the tracked CPU memory does not account for it, the report says so in
its warnings, so that "no leak" is never read as "nothing grows"."""

import html
import mmap
import sys

import pytest
import torch

import torchleak

MiB = 1 << 20
pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the resident set is read from /proc")


def test_python_objects_that_grow_while_no_tensor_does_are_said():
    kept = []

    def step():
        # A native buffer, written so that it is resident: not a tensor. (mmap, not a bytes
        # object: after a test suite's frees, malloc serves 12 MiB from memory already resident.)
        buffer = mmap.mmap(-1, 12 * MiB)
        buffer.write(b"x" * (12 * MiB))
        kept.append(buffer)

    report = torchleak.check(step, iterations=12, warmup=1)
    assert not report.leaks
    said = [w for w in report.warnings if "resident memory grew" in w]
    assert len(said) == 1, report.warnings
    assert "grew outside tensors" in said[0] and "which no finding covers" in said[0]
    assert said[0] in str(report) and html.escape(said[0]) in report.to_html()
    # a warning, not a reason to re-run without a profiler
    assert not [r for r in report.summary["recommendations"] if "profiler" in r["text"]]
    for buffer in kept:
        buffer.close()


def test_a_tensor_leak_of_the_same_size_is_a_leak_and_no_such_warning():
    kept = []

    def step():
        kept.append(torch.ones(3 * MiB))  # 12 MiB, tracked

    report = torchleak.check(step, iterations=12, warmup=1)
    assert report.leaks
    assert not [w for w in report.warnings if "resident memory grew" in w], report.warnings
    kept.clear()


def test_a_run_that_keeps_nothing_says_nothing_of_resident_memory():
    def step():
        torch.ones(3 * MiB).sum()
        bytes(4 * MiB)

    report = torchleak.check(step, iterations=12, warmup=1)
    assert not [w for w in report.warnings if "resident memory" in w], report.warnings
