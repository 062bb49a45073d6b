"""torchrun -m torchleak run: every rank tracked, the reports merged at rank 0 (gloo, loopback,
2 and 3 processes, a DDP model on random data)."""

import json
import subprocess
import time

from torchrun_job import SCRIPT, job_env, kill_job, running, torchrun_command

from torchleak import Report


def load(path):
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


def leaks(data):
    return [f for f in data["findings"] if f["verdict"] == "leak"]


def test_leak_on_one_rank_only_is_named_as_such(torchrun, tmp_path):
    out = torchrun(
        2, "--json", str(tmp_path / "job.json"), "--html", str(tmp_path / "job.html"), "--fail-on-leak", LEAK_RANKS="1"
    )
    data = load(tmp_path / "job.json")
    assert data["ranks"]["world_size"] == 2
    [leak] = leaks(data)
    assert leak["ranks"] == [1]
    assert leak["ranks_text"] == "leaks on rank 1 only"
    assert leak["site"]["file"].endswith("ddp_train.py")
    assert leak["holder"]["path_text"] == "kept"
    assert leak["bytes_per_iteration"] >= 256 * 1024
    by_rank = {r["rank"]: r for r in data["ranks"]["ranks"]}
    assert by_rank[0]["leaks"] == 0 and by_rank[1]["leaks"] == 1
    assert by_rank[0]["status"] == by_rank[1]["status"] == "ok"
    assert by_rank[1]["devices"][0]["allocated"]  # per-rank curves
    assert any(line.startswith("leak skew: rank 1 grows") for line in data["ranks"]["skew_text"])
    # One merged text on rank 0's stdout; rank 1 says where its report went.
    assert "leaks on rank 1 only" in out.stdout
    assert "torchleak: rank 1: " in out.stdout and "merged at rank 0" in out.stdout
    html = (tmp_path / "job.html").read_text()
    assert 'data-testid="ranks"' in html and "leaks on rank 1 only" in html
    assert not list(tmp_path.glob("job.rank*"))  # merged: no per-rank fallbacks
    # --fail-on-leak: rank 0 judges the merged report, rank 1 its own: both leak -> 1.
    assert out.returncode != 0
    Report.load(tmp_path / "job.json")  # the C++ schema reads the merged report back


def test_leak_on_every_rank_of_three(torchrun, tmp_path):
    out = torchrun(3, "--json", str(tmp_path / "r{rank}.json"), LEAK_RANKS="0,1,2")
    assert out.returncode == 0, out.stderr[-3000:]
    merged = load(tmp_path / "rmerged.json")
    [leak] = leaks(merged)
    assert leak["ranks"] == [0, 1, 2]
    assert leak["ranks_text"] == "leaks on every rank (3)"
    for rank in range(3):  # {rank}: each rank's own report too
        own = load(tmp_path / f"r{rank}.json")
        assert "ranks" not in own
        assert [f["holder"]["path_text"] for f in leaks(own)] == ["kept"]


def test_clean_job(torchrun, tmp_path):
    out = torchrun(2, "--json", str(tmp_path / "job.json"), "--fail-on-leak")
    assert out.returncode == 0, out.stderr[-3000:]
    data = load(tmp_path / "job.json")
    assert leaks(data) == []
    assert [r["status"] for r in data["ranks"]["ranks"]] == ["ok", "ok"]
    assert [r["iterations"] for r in data["ranks"]["ranks"]] == [12, 12]


def test_a_rank_that_raises_mid_run(torchrun, tmp_path):
    started = time.monotonic()
    out = torchrun(3, "--json", str(tmp_path / "job.json"), "--gather-timeout", "60", RAISE_RANK="2", LEAK_RANKS="1")
    assert time.monotonic() - started < 150
    assert out.returncode != 0
    assert "rank 2 failed on purpose" in out.stderr
    data = load(tmp_path / "job.json")
    by_rank = {r["rank"]: r for r in data["ranks"]["ranks"]}
    assert by_rank[2]["status"] == "failed"
    assert by_rank[2]["note"] == "RuntimeError: rank 2 failed on purpose"
    assert by_rank[2]["iterations"] == 6  # the steps it finished
    # The others were stopped by their all-reduce failing; their reports are there too.
    assert by_rank[0]["status"] != "missing" and by_rank[1]["status"] != "missing"
    assert "the run failed: RuntimeError: rank 2 failed on purpose" in by_rank[2]["text"]


def test_a_hung_rank_does_not_hold_back_the_others(tmp_path):
    """Rank 1 never finishes: rank 0 writes the merged report after the gather timeout,
    naming rank 1 as missing; then the job is stopped (torchrun would wait forever)."""
    cmd = torchrun_command(
        2, "-m", "torchleak", "run", "--json", str(tmp_path / "job.json"), "--gather-timeout", "3", SCRIPT
    )
    proc = subprocess.Popen(
        cmd,
        cwd=tmp_path,
        env=job_env(HANG_RANK="1"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not (tmp_path / "job.json").exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert (tmp_path / "job.json").exists(), "rank 0 never wrote the merged report"
        time.sleep(0.5)  # the write is complete once the file parses
        data = load(tmp_path / "job.json")
    finally:
        killed = kill_job(proc)  # torchrun, and the hung rank in its own session
    # The hung rank outlived the test (and the CI run) before its pid was looked up from /proc.
    deadline = time.monotonic() + 10
    while any(running(pid) for pid in killed) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert killed and not any(running(pid) for pid in killed)
    by_rank = {r["rank"]: r for r in data["ranks"]["ranks"]}
    assert by_rank[0]["status"] == "ok"
    assert by_rank[1]["status"] == "missing"
    assert by_rank[1]["note"] == "timed out after 3 s"


def test_track_inside_a_script_gathers_at_the_end(torchrun, tmp_path):
    """torchleak.track() around a script's own init_process_group ... destroy_process_group:
    rank 0's report() is the job's."""
    out = torchrun(2, cli=False, TRACK_INSIDE="1", LEAK_RANKS="0", REPORT_PATH=str(tmp_path / "inside{rank}.json"))
    assert out.returncode == 0, out.stderr[-3000:]
    merged = load(tmp_path / "inside0.json")
    assert merged["ranks"]["world_size"] == 2
    [leak] = leaks(merged)
    assert leak["ranks_text"] == "leaks on rank 0 only"
    assert "ranks" not in load(tmp_path / "inside1.json")  # other ranks keep their own
    own = load(tmp_path / "insideown0.json")  # rank 0's own report, beside the job's
    assert "ranks" not in own and [f["holder"]["path_text"] for f in leaks(own)] == ["kept"]


def test_a_killed_rank_is_missing_and_the_others_still_report(torchrun, tmp_path):
    """Rank 1 dies by SIGKILL in step 5: the others' all-reduce fails, torchrun sends them
    SIGTERM, and they still write their reports; rank 0 names rank 1 as missing."""
    started = time.monotonic()
    out = torchrun(3, "--json", str(tmp_path / "job.json"), KILL_RANK="1", LEAK_RANKS="2")
    assert time.monotonic() - started < 150
    assert out.returncode != 0
    assert (tmp_path / "job.json").exists(), out.stdout[-3000:] + out.stderr[-5000:]
    data = load(tmp_path / "job.json")
    by_rank = {r["rank"]: r for r in data["ranks"]["ranks"]}
    assert by_rank[1]["status"] == "missing"
    assert by_rank[0]["status"] == by_rank[2]["status"] == "failed"
    assert by_rank[2]["leaks"] == 1 and by_rank[2]["iterations"] == 6
    [leak] = leaks(data)
    assert leak["ranks_text"] == "leaks on rank 2 only"
    assert not list(tmp_path.glob("job.rank*"))  # rank 2's report reached the merge


def test_a_rank_held_past_the_sigterm_still_reaches_the_merge(torchrun, tmp_path):
    """Rank 2's failed all-reduce holds it 12 s after torchrun's SIGTERM (as a rank stuck in C++
    until its collective's timeout): rank 0, whose own all-reduce failed at once, waits until
    20 s after the signal, so rank 2's report is merged instead of named missing."""
    out = torchrun(3, "--json", str(tmp_path / "job.json"), KILL_RANK="1", HELD_RANK="2", LEAK_RANKS="2")
    assert out.returncode != 0
    data = load(tmp_path / "job.json")
    by_rank = {r["rank"]: r for r in data["ranks"]["ranks"]}
    assert by_rank[1]["status"] == "missing"
    assert by_rank[2]["status"] == "failed", by_rank[2]
    assert [f["ranks_text"] for f in leaks(data)] == ["leaks on rank 2 only"]
    assert not list(tmp_path.glob("job.rank*"))
