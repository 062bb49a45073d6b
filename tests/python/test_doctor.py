"""`python -m torchleak doctor`: one screen that says whether torchleak works here, and names a
child that crashed (the step, the signal, the first frames)."""

import os
import subprocess
import sys
import textwrap

from torchleak import _doctor


def doctor(*args, env=None, timeout=600):
    return subprocess.run(
        [sys.executable, "-m", "torchleak", "doctor", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        check=False,
    )


def test_the_doctor_says_torchleak_works_here():
    proc = doctor()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "torchleak doctor"
    assert any(line.startswith("built with    torch ") for line in lines), lines
    assert any(line.startswith("linkage       ok: _core exports 1 symbol(s)") for line in lines), lines
    assert "frame reader  ok (allocation sites come from the Python stack)" in lines
    (cpu,) = [line for line in lines if line.startswith("cpu ")]
    assert cpu.startswith("cpu           ok: a leak at doctor_child.py:"), cpu
    assert "held by kept" in cpu and "report written" in cpu
    assert "result        torchleak works here." in lines
    assert lines[-2].startswith("bug report")


def test_a_child_that_crashes_is_named_with_its_step_signal_and_frames(tmp_path):
    # The doctor's children say they are; this sitecustomize makes theirs die of SIGSEGV at the
    # planted leak, as the H200's build did at its first call into _core.
    (tmp_path / "sitecustomize.py").write_text(
        textwrap.dedent(
            """
            import os
            if os.environ.get("TORCHLEAK_DOCTOR_CHILD"):
                import ctypes
                import torchleak
                def planted_crash(*args, **kwargs):
                    ctypes.string_at(0)
                torchleak.check = planted_crash
            """
        )
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), *sys.path]))
    proc = doctor(env=env)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    crashed = [i for i, line in enumerate(lines) if line.startswith("cpu           CRASHED:")]
    assert crashed, proc.stdout
    assert lines[crashed[0]].endswith("CRASHED: the child died of SIGSEGV at step 'a planted leak on cpu'")
    frames = lines[crashed[0] + 1 : crashed[0] + 9]
    assert frames and all(line.startswith(" " * 14) for line in frames[:1]), proc.stdout
    assert any("#0" in line or "planted_crash" in line or "File" in line for line in frames), frames
    assert "result        torchleak does NOT work here:" in lines
    assert any("SIGSEGV" in line for line in lines[lines.index("result        torchleak does NOT work here:") :])


def test_arguments_are_a_usage_error():
    proc = doctor("--json", "x")
    assert proc.returncode == 2
    assert "unexpected arguments: --json x" in proc.stderr
    assert "python -m torchleak doctor" in proc.stderr


def test_home_folders_and_the_user_name_are_left_out(monkeypatch):
    monkeypatch.setenv("HOME", "/home/alice")
    monkeypatch.setattr(_doctor.getpass, "getuser", lambda: "alice")
    shown = _doctor.private("/home/alice/venv/lib/torchleak and /srv/alice-data")
    assert shown == "~/venv/lib/torchleak and /srv/<user>-data"
