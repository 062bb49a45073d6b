"""A torch.distributed job's report: each rank's own report reaches rank 0 through the job's
store, and rank 0 merges them (the C++ core's mergeRankReports).

The exchange goes through the store of the job's default process group (the TCPStore that
torchrun or init_process_group set up), not through a collective: a collective blocks until
every rank joins, so one crashed or hung rank would hang the others, and a rank that raised in
the middle of a collective would pair its gather with another rank's all-reduce. The store is
point to point: each rank posts its report under its own key and goes on; rank 0 waits for the
keys with a deadline, merges what came and names the ranks that did not.
"""

import json
import os
import sys
import time

from . import _core
from ._config import config as _config
from ._report import Report

_POLL_SECONDS = 0.05
# Seconds rank 0 waits for the other ranks' reports unless told otherwise (API and CLI alike).
DEFAULT_GATHER_TIMEOUT = 60.0
# How many exchanges each rank has made (a process is one rank): every rank runs the same code,
# so the n-th exchange of each rank meets under the same keys, and a second tracked block does
# not read the first's reports.
_exchanges = {}


class Job:
    """The rank, world size and store of an initialised torch.distributed job of two or more
    ranks. The store is kept from the moment it is seen: a script that calls
    destroy_process_group() before the tracked block ends still has its reports gathered."""

    def __init__(self, rank, world_size, store):
        self.rank, self.world_size, self.store = rank, world_size, store

    @classmethod
    def current(cls):
        """The running job, or None outside one (no process group, or a single rank)."""
        dist = sys.modules.get("torch.distributed")  # never imported here for a plain run
        if dist is None or not dist.is_available() or not dist.is_initialized():
            return None
        try:
            world_size = dist.get_world_size()
            if world_size < 2:
                return None
            from torch.distributed import distributed_c10d
            return cls(dist.get_rank(), world_size, distributed_c10d._get_default_store())
        except Exception:  # noqa: BLE001 - a group being torn down: not a job we can use
            return None


class Exchange:
    """What one rank got out of the exchange: rank 0's merged report (None elsewhere), and
    whether rank 0 confirmed the merge (else each rank keeps its own report)."""

    def __init__(self, merged, confirmed, note=""):
        self.merged, self.confirmed, self.note = merged, confirmed, note


def _keys(job):
    """Each rank's key and rank 0's confirmation key for this rank's next exchange (a restarted
    torchrun job keeps its store: the restart count keeps the attempts apart)."""
    restart = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    prefix = f"torchleak/{restart}/{_exchanges.get(job.rank, 0)}/"
    return [f"{prefix}rank/{r}" for r in range(job.world_size)], f"{prefix}merged"


# After torchrun's SIGTERM its agent kills what still runs 30 s later: rank 0 then waits at
# most this long for the others, and the others a little longer for its merge.
HURRY_SECONDS = 10.0


def exchange(job, report, *, status="ok", note="", timeout=DEFAULT_GATHER_TIMEOUT, hurry=None,
             hurry_seconds=HURRY_SECONDS):
    """Post this rank's report; on rank 0, wait up to ``timeout`` seconds for the others' and
    merge; elsewhere, wait a little longer than that for rank 0 to confirm. ``hurry``: a
    callable that turns true when the job is being stopped (SIGTERM); a wait under way then
    ends within ``hurry_seconds``. Never raises for the job's sake: a store that is gone (rank
    0's process died) leaves each rank with its own report."""
    rank_keys, merged_key = _keys(job)
    _exchanges[job.rank] = _exchanges.get(job.rank, 0) + 1
    envelope = json.dumps({"status": status, "note": note, "report": report.to_json()})
    try:
        job.store.set(rank_keys[job.rank], envelope)
    except Exception as exc:  # noqa: BLE001 - the store's own errors: it is unreachable
        return Exchange(None, False, f"the job's store is unreachable: {exc}")
    if job.rank != 0:
        # Rank 0 may use its whole timeout waiting for a rank that will never come, then merge:
        # the others wait a little longer than that before keeping their reports on their own.
        patience = timeout + max(5.0, timeout / 4)
        confirmed = _wait_for(job.store, [merged_key], time.monotonic() + patience, hurry,
                              hurry_seconds + 5.0) == [merged_key]
        return Exchange(None, confirmed,
                        "" if confirmed else f"rank 0 did not merge within {patience:g} s")
    arrived = _wait_for(job.store, rank_keys, time.monotonic() + timeout, hurry, hurry_seconds)
    stopped = hurry is not None and hurry()
    inputs = []
    for r, key in enumerate(rank_keys):
        if key not in arrived:
            inputs.append((r, None, "missing", "not posted before the job was stopped (SIGTERM)"
                           if stopped else f"timed out after {timeout:g} s"))
            continue
        try:
            posted = json.loads(job.store.get(key))
            inputs.append((r, posted["report"], posted["status"], posted["note"]))
        except Exception as exc:  # noqa: BLE001 - a rank's post that cannot be read
            inputs.append((r, None, "missing", f"its report could not be read: {exc}"))
    merged = Report(_core.merge_rank_reports(inputs, job.world_size, _config.snapshot()))
    try:
        job.store.set(merged_key, str(len(arrived)))
    except Exception:  # noqa: BLE001 - the others fall back to their own reports
        pass
    return Exchange(merged, True)


def _wait_for(store, keys, deadline, hurry=None, hurry_seconds=HURRY_SECONDS):
    """The keys present by the deadline (polled: the store's own wait() cannot say which keys
    are missing when it times out); once ``hurry()`` is true, by ``hurry_seconds`` from then."""
    arrived = []
    pending = list(keys)
    hurried = False
    while True:
        if not hurried and hurry is not None and hurry():
            hurried = True
            deadline = min(deadline, time.monotonic() + hurry_seconds)
        for key in list(pending):
            try:
                present = store.check([key])
            except Exception:  # noqa: BLE001 - the store went away: nothing more arrives
                return arrived
            if present:
                arrived.append(key)
                pending.remove(key)
        if not pending or time.monotonic() >= deadline:
            return arrived
        time.sleep(_POLL_SECONDS)


def describe_failure(exc):
    """"RuntimeError: boom": the exception's type and first line, for the merged report."""
    try:
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    except Exception:  # noqa: BLE001 - a user __str__ that raises
        message = ""
    name = type(exc).__name__
    return f"{name}: {message}" if message else name


def beside(path, rank):
    """Where a rank writes its own report when no merged one takes the path:
    "report.json" -> "report.rank1.json"."""
    root, ext = os.path.splitext(path)
    return f"{root}.rank{rank}{ext}"


def rank_path(path, rank):
    """Where rank ``rank`` writes its own report asked for at ``path``: ``{rank}`` filled in,
    else the path itself on rank 0 and a name beside it on the others (ranks never write over
    each other)."""
    if "{rank}" in path:
        return path.replace("{rank}", str(rank))
    return path if int(rank) == 0 else beside(path, rank)
