"""The exchange of a torch.distributed job's reports through its store, in one process: a
HashStore stands for the job's TCPStore, threads for the ranks (the torchrun tests in
tests/distributed run the real thing)."""

import json
import re
import threading
import time

import pytest
import torch
import torch.distributed as dist

import torchleak
from torchleak import _job


@pytest.fixture(autouse=True)
def fresh_exchanges():
    """Every test starts at each rank's first exchange: here one process plays every rank, and
    a test that ran only rank 0 would leave the ranks' counts apart."""
    _job._exchanges.clear()


def rank_report(keep=None):
    def body():
        if keep is not None:
            keep.append(torch.ones(64, 1024))

    return torchleak.check(body, iterations=6, warmup=1)


def in_threads(exchanges, **options):
    """Each (key, job, report[, its own options]) exchanges in a thread of its own, as the
    job's ranks would; returns each key's result. Never waits more than 90 s."""
    results = {}

    def one(key, job, report, own=None):
        results[key] = _job.exchange(job, report, **options, **(own or {}))

    threads = [threading.Thread(target=one, args=e) for e in exchanges]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=90)
        assert not t.is_alive()
    return results


def run_ranks(world_size, store, posts, timeout=5.0):
    """Each rank in `posts` (rank -> (report, status, note)) exchanges in a thread of its own."""
    return in_threads(
        [
            (rank, _job.Job(rank, world_size, store), report, {"status": status, "note": note})
            for rank, (report, status, note) in posts.items()
        ],
        timeout=timeout,
    )


def test_rank_zero_merges_and_the_others_are_told():
    kept = []
    reports = {
        0: (rank_report(), "ok", ""),
        1: (rank_report(kept), "ok", ""),
        2: (rank_report(), "failed", "RuntimeError: <b>boom</b>"),
    }
    results = run_ranks(3, dist.HashStore(), reports)
    merged = results[0].merged.to_dict()
    assert results[1].confirmed and results[2].confirmed and results[1].merged is None
    assert [r["status"] for r in merged["ranks"]["ranks"]] == ["ok", "ok", "failed"]
    [leak] = [f for f in merged["findings"] if f["verdict"] == "leak"]
    assert leak["ranks_text"] == "leaks on rank 1 only"


def test_a_rank_that_never_posts_is_missing_after_the_timeout():
    started = time.monotonic()
    results = run_ranks(2, dist.HashStore(), {0: (rank_report(), "ok", "")}, timeout=0.5)
    assert time.monotonic() - started < 10
    [_, missing] = results[0].merged.to_dict()["ranks"]["ranks"]
    assert missing["status"] == "missing" and missing["note"] == "timed out after 0.5 s"


def test_a_sigterm_during_the_wait_shortens_it():
    # torchrun's agent kills a rank 30 s after its SIGTERM: a rank 0 already waiting its full
    # gather timeout for a rank that died must stop waiting and merge well before that (the
    # killed-rank torchrun test failed whenever the SIGTERM came after the wait began).
    stopping = threading.Event()
    threading.Timer(0.3, stopping.set).start()
    started = time.monotonic()
    result = _job.exchange(
        _job.Job(0, 2, dist.HashStore()), rank_report(), timeout=60, hurry=stopping.is_set, hurry_seconds=0.5
    )
    assert time.monotonic() - started < 10
    [_, missing] = result.merged.to_dict()["ranks"]["ranks"]
    assert missing["status"] == "missing"
    assert missing["note"] == "not posted before the job was stopped (SIGTERM)"


def test_the_wait_after_a_sigterm_counts_from_the_signal_not_from_the_wait():
    # A rank 0 whose report took longer to build than the hurry after the signal must not wait
    # into torchrun's SIGKILL: its wait ends at once, with what has arrived merged.
    store = dist.HashStore()
    signalled = time.monotonic() - 30
    started = time.monotonic()
    result = _job.exchange(_job.Job(0, 2, store), rank_report(), timeout=60, hurry=lambda: signalled, hurry_seconds=20)
    assert time.monotonic() - started < 10
    [_, missing] = result.merged.to_dict()["ranks"]["ranks"]
    assert missing["note"] == "not posted before the job was stopped (SIGTERM)"
    # A rank that posts well after the wait began, within the time after the signal, is merged:
    # rank 0 waits until the signal's time plus hurry_seconds, not that long after it looked.
    _job._exchanges.clear()
    store, reports = dist.HashStore(), [rank_report(), rank_report()]
    signalled = time.monotonic()
    late = threading.Timer(1.0, lambda: _job.exchange(_job.Job(1, 2, store), reports[1], timeout=0.1))
    late.start()
    time.sleep(0.5)  # rank 0's own report is built after the signal
    result = _job.exchange(_job.Job(0, 2, store), reports[0], timeout=60, hurry=lambda: signalled, hurry_seconds=5)
    late.join(timeout=30)
    assert [r["status"] for r in result.merged.to_dict()["ranks"]["ranks"]] == ["ok", "ok"]


def test_a_rank_is_told_when_rank_zero_never_merges():
    results = run_ranks(2, dist.HashStore(), {1: (rank_report(), "ok", "")}, timeout=0.3)
    assert not results[1].confirmed
    assert results[1].note == "rank 0 did not merge within 5.3 s"


def test_an_unreadable_post_and_a_store_that_is_gone():
    store = dist.HashStore()
    keys, _ = _job._keys(_job.Job(0, 2, store))
    store.set(keys[1], "{not json")
    result = _job.exchange(_job.Job(0, 2, store), rank_report(), timeout=0.5)
    [_, bad] = result.merged.to_dict()["ranks"]["ranks"]
    assert bad["status"] == "missing" and bad["note"].startswith("its report could not be read")

    class GoneStore:
        def set(self, key, value):
            raise RuntimeError("Connection reset by peer")

    gone = _job.exchange(_job.Job(1, 2, GoneStore()), rank_report(), timeout=0.5)
    assert not gone.confirmed and "unreachable" in gone.note


@pytest.mark.parametrize(
    "path, rank, expected",
    [
        ("r{rank}.json", 2, "r2.json"),
        ("out/job.json", 0, "out/job.json"),
        ("out/job.json", 3, "out/job.rank3.json"),
        ("job.html", "1", "job.rank1.html"),
    ],
)
def test_where_a_rank_writes_its_own_report(path, rank, expected):
    assert _job.rank_path(path, rank) == expected


def test_no_job_without_a_process_group_or_with_a_single_rank():
    assert _job.Job.current() is None
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        assert _job.Job.current() is None
    finally:
        dist.destroy_process_group()


class ForeignReport:
    """A report from a torchleak whose schema rank 0 does not read."""

    def to_json(self):
        return json.dumps({"schema_version": "torchleak.report/9", "findings": []})


def test_a_rank_whose_report_rank_zero_rejects_is_told_so_and_keeps_its_own():
    # It used to be told "merged at rank 0" and keep nothing.
    results = run_ranks(2, dist.HashStore(), {0: (rank_report(), "ok", ""), 1: (ForeignReport(), "ok", "")})
    assert results[0].confirmed and results[0].complete
    assert not results[1].confirmed and not results[1].complete
    assert results[1].note.startswith("rank 0 could not merge it: its report could not be read")
    [_, rejected] = results[0].merged.to_dict()["ranks"]["ranks"]
    assert rejected["status"] == "missing"


def test_an_answer_rank_zero_of_another_version_gave_is_not_taken_for_a_merge():
    store = dist.HashStore()
    _, merged_key = _job._keys(_job.Job(1, 2, store))
    store.set(merged_key, "2")  # what rank 0 of the previous version answered: a count
    result = _job.exchange(_job.Job(1, 2, store), rank_report(), timeout=0.3)
    assert not result.confirmed
    assert result.note == "rank 0 did not say whether it merged this rank's report"


def large_report(findings=400):
    """A rank report of a few MiB: one real leak, and many findings that are not leaks."""
    kept = []
    report = rank_report(kept)
    data = report.to_dict()
    [leak] = [f for f in data["findings"] if f["verdict"] == "leak"]
    # Distinct sites: the merge keeps one finding per site and verdict.
    data["findings"] = [
        dict(leak, verdict="plateau", text="x" * 20000, site=dict(leak["site"], line=10000 + i))
        for i in range(findings)
    ]
    data["findings"].append(leak)
    return torchleak.Report(json.dumps(data))


@pytest.fixture
def tcp_store():
    """A real TCPStore on 127.0.0.1 (its server refuses values over 8 MiB, a HashStore does
    not), on a free port, every call bounded."""
    from datetime import timedelta

    server = dist.TCPStore("127.0.0.1", 0, 1, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=30))
    yield lambda: dist.TCPStore("127.0.0.1", server.port, 1, is_master=False, timeout=timedelta(seconds=30))


def test_a_report_over_the_stores_8_mib_arrives_in_parts(tcp_store):
    # One set() over 8 MiB made the server drop the connection: the merged report showed no
    # leak, rank 1 read "store unreachable" and rank 0 "timed out".
    big = large_report(findings=500)
    assert len(big.to_json()) > 9 * 2**20
    keys, _ = _job._keys(_job.Job(1, 2, None))  # the keys of the exchange about to be made
    results = in_threads(
        [(0, _job.Job(0, 2, tcp_store()), rank_report()), (1, _job.Job(1, 2, tcp_store()), big)], timeout=20
    )
    assert results[1].confirmed and results[1].complete, results[1].note
    merged = results[0].merged.to_dict()
    assert [r["status"] for r in merged["ranks"]["ranks"]] == ["ok", "ok"]
    assert len(merged["findings"]) == 501
    [leak] = [f for f in merged["findings"] if f["verdict"] == "leak"]
    assert leak["ranks"] == [1]
    # Rank 0 removed the parts it read: the store does not keep a copy of every report.
    store = tcp_store()
    assert store.check([keys[1]]) and not store.check([f"{keys[1]}/0"])


def test_a_report_over_the_post_limit_sends_its_leaks_and_the_rank_keeps_the_whole():
    big = large_report(findings=200)
    store = dist.HashStore()
    results = in_threads(
        [(0, _job.Job(0, 2, store), rank_report()), (1, _job.Job(1, 2, store), big)], timeout=5, max_post_bytes=2**20
    )
    assert results[1].confirmed and not results[1].complete
    assert "rank 0 got a summary of 1 of its 201 findings (its largest leaks)" in results[1].note
    merged = results[0].merged.to_dict()
    [leak] = merged["findings"]
    assert leak["verdict"] == "leak" and leak["ranks"] == [1]
    [warning] = merged["warnings"]
    assert re.fullmatch(
        r"rank 1: this rank's report \(\d+ MiB\) is over the 1 MiB a rank "
        r"sends; rank 0 got a summary of 1 of its 201 findings \(its largest "
        r"leaks\); the whole report is in its own file",
        warning,
    ), warning


def many_leaks_report(sites=40):
    """A rank report with `sites` leaks at distinct lines, each with its own cause."""
    code = compile("\n".join(f"keep{i}.append(torch.ones({64 + i}))" for i in range(sites)), "layers.py", "exec")
    namespace = {"torch": torch, **{f"keep{i}": [] for i in range(sites)}}
    with torchleak.track(gather_timeout=None) as t:
        for _ in range(6):
            exec(code, namespace)
            torchleak.step()
    return t.report()


def test_a_summary_is_cut_from_a_copy_and_its_causes_are_renumbered():
    # The summary was cut from the report's own dict: the rank's "whole report" file was the
    # summary, and its causes named dropped findings, so neither it nor rank 0's copy could be
    # read (#46: 19,907 of 22,000 findings lost, the merged report said 0 leaks).
    report = many_leaks_report()
    whole = report.to_json()
    leaks = len(report.leaks)
    assert leaks == 40 and len(report.to_dict()["causes"]) >= 40
    store = dist.HashStore()
    results = in_threads(
        [(0, _job.Job(0, 2, store), rank_report()), (1, _job.Job(1, 2, store), report)],
        timeout=5,
        max_post_bytes=len(whole) // 3,
    )
    assert report.to_json() == whole  # the rank's own report, and so its own file, whole
    assert torchleak.Report(whole).to_json() == whole
    assert results[1].confirmed and not results[1].complete
    sent = int(re.search(r"a summary of (\d+) of its", results[1].note).group(1))
    assert 1 <= sent < leaks
    merged = results[0].merged.to_dict()
    assert [r["status"] for r in merged["ranks"]["ranks"]] == ["ok", "ok"]
    from_rank1 = [f for f in merged["findings"] if f["verdict"] == "leak" and f["ranks"] == [1]]
    assert len(from_rank1) == sent
    assert {i for c in merged["causes"] for i in c["findings"]} >= {merged["findings"].index(f) for f in from_rank1}


def test_two_jobs_sharing_a_store_do_not_merge_each_others_ranks():
    store = dist.HashStore()
    kept = []
    results = in_threads(
        [
            (("a", 0), _job.Job(0, 2, store, run_id="a"), rank_report()),
            (("a", 1), _job.Job(1, 2, store, run_id="a"), rank_report(kept)),
            (("b", 0), _job.Job(0, 2, store, run_id="b"), rank_report()),
            (("b", 1), _job.Job(1, 2, store, run_id="b"), rank_report()),
        ],
        timeout=5,
    )
    leaking = {
        name: [f["ranks"] for f in results[name, 0].merged.to_dict()["findings"] if f["verdict"] == "leak"]
        for name in "ab"
    }
    assert leaking == {"a": [[1]], "b": []}


def test_a_later_job_on_the_same_store_reads_none_of_an_earlier_jobs_keys(tcp_store, monkeypatch):
    # #46: outside torchrun's elastic mode the run id was "none" for every job, so a second job
    # on a long-lived store (or a script's second process group) met the first one's keys: its
    # rank 0 merged the first job's reports, its rank 1 took the first job's answer.
    monkeypatch.delenv("TORCHELASTIC_RUN_ID", raising=False)
    kept = []
    first = in_threads(
        [(0, _job.Job(0, 2, tcp_store()), rank_report()), (1, _job.Job(1, 2, tcp_store()), rank_report(kept))],
        timeout=10,
    )
    assert [f["ranks"] for f in first[0].merged.to_dict()["findings"] if f["verdict"] == "leak"] == [[1]]
    jobs = [_job.Job(0, 2, tcp_store()), _job.Job(1, 2, tcp_store())]  # each rank a process: a client each
    assert jobs[0].run_id == jobs[1].run_id == "job1"
    second = in_threads([(0, jobs[0], rank_report()), (1, jobs[1], rank_report())], timeout=10)
    merged = second[0].merged.to_dict()
    assert [f for f in merged["findings"] if f["verdict"] == "leak"] == []
    assert [r["status"] for r in merged["ranks"]["ranks"]] == ["ok", "ok"]
    assert second[1].confirmed and second[1].complete


def test_an_elastic_jobs_run_id_is_torchruns_and_none_is_not_an_id(monkeypatch):
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "5f3a")
    assert _job.Job(0, 2, dist.HashStore()).run_id == "5f3a"
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "none")
    store = dist.HashStore()
    assert [_job.Job(r, 2, dist.PrefixStore("", store)).run_id for r in (0, 1, 0, 1)] == [
        "job0",
        "job0",
        "job1",
        "job1",
    ]


class TrackerOfRank1:
    """What the CLI's end of run sees on rank 1 of a job whose exchange went as told."""

    def __init__(self, exchange):
        self.job = _job.Job(1, 2, None)
        self._exchange = exchange
        self._own = rank_report([])

    def report(self):
        return self._own

    def gather(self, **_):
        return self._exchange


@pytest.mark.parametrize(
    "exchange, keeps, says",
    [
        (_job.Exchange(None, True), False, "; merged at rank 0\n"),
        (
            _job.Exchange(
                None,
                True,
                "this rank's report (90 MiB) is over the 64 MiB a rank sends; "
                "rank 0 got a summary of 1 of its 9 findings",
                complete=False,
            ),
            True,
            "; merged at rank 0 in part (this rank's report (90 MiB) is over the 64 MiB a rank sends; "
            "rank 0 got a summary of 1 of its 9 findings); the whole report is kept on its own\n",
        ),
        (
            _job.Exchange(None, False, "rank 0 could not merge it: its report could not be read"),
            True,
            "; not merged (rank 0 could not merge it: its report could not be read); this "
            "rank's report is kept on its own\n",
        ),
    ],
)
def test_the_cli_keeps_a_ranks_own_report_unless_all_of_it_was_merged(tmp_path, capsys, exchange, keeps, says):
    from torchleak.__main__ import _finish

    opts = {"json": str(tmp_path / "job.json"), "html": None, "quiet": False, "redact": False}
    _finish(TrackerOfRank1(exchange), opts, None, 1.0)
    assert capsys.readouterr().out.endswith(says)
    assert (tmp_path / "job.rank1.json").exists() == keeps
    assert not (tmp_path / "job.json").exists()  # rank 0's path: never written by rank 1
