"""The exchange of a torch.distributed job's reports through its store, in one process: a
HashStore stands for the job's TCPStore, threads for the ranks (the torchrun tests in
tests/distributed run the real thing)."""
import json
import threading
import time

import pytest
import torch
import torch.distributed as dist

import torchleak
from torchleak import _job


def rank_report(keep=None):
    def body():
        if keep is not None:
            keep.append(torch.ones(64, 1024))
    return torchleak.check(body, iterations=6, warmup=1)


def run_ranks(world_size, store, posts, timeout=5.0):
    """Each rank in `posts` (rank -> (report, status, note)) exchanges in a thread of its own."""
    results = {}

    def one(rank, report, status, note):
        results[rank] = _job.exchange(_job.Job(rank, world_size, store), report, status=status,
                                      note=note, timeout=timeout)

    threads = [threading.Thread(target=one, args=(rank, *post)) for rank, post in posts.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
        assert not t.is_alive()
    return results


def test_rank_zero_merges_and_the_others_are_told():
    kept = []
    reports = {0: (rank_report(), "ok", ""), 1: (rank_report(kept), "ok", ""),
               2: (rank_report(), "failed", "RuntimeError: <b>boom</b>")}
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
    result = _job.exchange(_job.Job(0, 2, dist.HashStore()), rank_report(), timeout=60,
                           hurry=stopping.is_set, hurry_seconds=0.5)
    assert time.monotonic() - started < 10
    [_, missing] = result.merged.to_dict()["ranks"]["ranks"]
    assert missing["status"] == "missing"
    assert missing["note"] == "not posted before the job was stopped (SIGTERM)"


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


@pytest.mark.parametrize("path, rank, expected", [
    ("r{rank}.json", 2, "r2.json"),
    ("out/job.json", 0, "out/job.json"),
    ("out/job.json", 3, "out/job.rank3.json"),
    ("job.html", "1", "job.rank1.html"),
])
def test_where_a_rank_writes_its_own_report(path, rank, expected):
    assert _job.rank_path(path, rank) == expected


def test_no_job_without_a_process_group_or_with_a_single_rank():
    assert _job.Job.current() is None
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        assert _job.Job.current() is None
    finally:
        dist.destroy_process_group()
