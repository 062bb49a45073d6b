"""The one translation table from C++ exceptions to Python exceptions (kernel_ext/src/bindings/python.cpp)."""

import json
import os

import pytest

from hook_checks import hook_installed
from torchleak import _core, _testing


@pytest.mark.parametrize(
    "kind, exc_type",
    [
        ("state", RuntimeError),
        ("invalid", ValueError),
        ("schema", _core.ReportSchemaError),
        ("io", OSError),
        ("base", RuntimeError),
        ("std", RuntimeError),
    ],
)
def test_cpp_exceptions_become_these_python_exceptions(kind, exc_type):
    with pytest.raises(exc_type, match=r"from C\+\+|error"):
        _testing.raise_error(kind)


def test_schema_error_is_a_value_error():
    assert issubclass(_core.ReportSchemaError, ValueError)


def test_bad_report_inputs_are_value_errors():
    session = _core.Session()
    weekly = _core.ReportInputs()
    weekly.boundary = "weekly"
    with pytest.raises(ValueError, match="boundary must be one of explicit"):
        session.report_json(weekly)
    negative = _core.ReportInputs()
    negative.warmup = -1
    with pytest.raises(ValueError, match="warmup"):
        session.report_json(negative)
    unknown = _core.ReportInputs()
    unknown.capacities = {"tpu:0": 1}
    with pytest.raises(ValueError, match="tpu"):
        session.report_json(unknown)
    with pytest.raises(TypeError):
        unknown.warmup = "3"  # a field takes its own type only


def test_diff_of_bad_documents_or_tolerance_is_a_value_error():
    with open(os.path.join(os.path.dirname(__file__), "..", "fixtures", "empty.json"), encoding="utf-8") as fh:
        empty = fh.read()
    assert '"regressed":false' in _core.diff_reports(empty, empty)
    with pytest.raises(_core.ReportSchemaError):
        _core.diff_reports(empty, "[]")
    with pytest.raises(ValueError, match="tolerance"):
        _core.diff_reports(empty, empty, tolerance=-1.0)


def test_merge_of_ranks_outside_the_job_is_a_value_error():
    with pytest.raises(ValueError, match="rank 5 is not in a job of 2 ranks"):
        _core.merge_rank_reports([(5, None, "missing", "")], 2)
    with pytest.raises(ValueError, match="at least one rank"):
        _core.merge_rank_reports([], 0)
    # A rank's unreadable report is named in the merge, not raised.
    merged = json.loads(_core.merge_rank_reports([(0, "{", "ok", "")], 1))
    assert merged["ranks"]["ranks"][0]["status"] == "missing"


def test_session_misuse_is_a_runtime_error():
    session = _core.Session()
    with pytest.raises(RuntimeError, match="outside"):
        session.step()
    session.start()
    try:
        with pytest.raises(RuntimeError, match="already"):
            session.start()
    finally:
        assert session.stop() == "removed"


def test_a_session_that_cannot_install_gives_the_process_back():
    import torch

    refused = _core.Session()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]):
        with pytest.raises(RuntimeError, match="profiler"):
            refused.start()
    assert not hook_installed()
    # The claim on the process's one session went with the failure: another session starts.
    other = _core.Session()
    other.start()
    try:
        assert other.active
        second = _core.Session()
        with pytest.raises(RuntimeError, match="already tracking"):
            second.start()
    finally:
        assert other.stop() == "removed"
    third = _core.Session()
    third.start_paused()
    assert third.stop() == "removed"
    fourth = _core.Session()
    fourth.start()
    assert fourth.stop() == "removed"


def test_stack_capture_sees_python_frames():
    def nested(depth):
        return nested(depth - 1) if depth else _testing.capture_depth()

    assert nested(10) >= 11


def test_a_call_keeps_one_stack_once_the_interpreter_specializes_it():
    # CPython 3.11 turns PRECALL into a variant that calls a builtin itself after 8 runs of a
    # line, and the frame then rests on PRECALL instead of CALL: every site allocating under an
    # exec() in a loop got a second stack at the 8th iteration, and its group crossed watch's
    # steady cue a second time. Same lines, same stacks, whichever instruction the call rests on.
    import torch

    import torchleak

    code = compile("\n".join("keep.append(torch.ones(16))" for _ in range(20)), "many_sites.py", "exec")
    g = {"torch": torch, "keep": []}
    stacks = []
    with torchleak.track() as t:
        for _ in range(20):
            exec(code, g)
            torchleak.step()
            stacks.append(t._session.stacks)
    assert stacks[-1] == stacks[0], stacks
