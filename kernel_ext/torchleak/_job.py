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
import weakref

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


# Each store this process joined a job on, and that job's number on it.
_job_numbers = weakref.WeakKeyDictionary()


def _elastic_run_id():
    """torchrun's run id of an elastic job; None for its default "none" or outside torchrun."""
    run_id = os.environ.get("TORCHELASTIC_RUN_ID", "")
    return run_id if run_id and run_id != "none" else None


def _job_number(store, world_size):
    """This rank's job's number on `store`: the ranks counted in before it, divided by the job's
    size. Once per process and store; "0" when the store cannot count (a stand-in store)."""
    if store is None:
        return 0
    try:
        return _job_numbers[store]
    except (KeyError, TypeError):
        pass
    try:
        number = (int(store.add("torchleak/ranks_joined", 1)) - 1) // world_size
    except Exception:  # noqa: BLE001 - a store without add(): the keys as before
        return 0
    try:
        _job_numbers[store] = number
    except TypeError:  # a store that takes no weak reference: counted again next time
        pass
    return number


class Job:
    """The rank, world size and store of an initialised torch.distributed job of two or more
    ranks, and the run id torchrun gave it. The store is kept from the moment it is seen: a
    script that calls destroy_process_group() before the tracked block ends still has its
    reports gathered."""

    def __init__(self, rank, world_size, store, run_id=None):
        self.rank, self.world_size, self.store = rank, world_size, store
        # Two jobs that share one store must not merge each other's ranks: every key carries
        # the job's id. An elastic job's is torchrun's run id. Outside elastic mode (plain
        # torchrun --master-addr/--master-port, init_process_group itself) torchrun says
        # "none", so the id is the job's number on its store: each rank counts itself in once
        # (an atomic add on the store the job's rendezvous made), and the ranks of the n-th
        # job on a store agree that they are its n-th job (a later job on a long-lived store, a
        # script that initialises a second process group, reads none of an earlier one's keys).
        if run_id is None:
            run_id = _elastic_run_id() or f"job{_job_number(store, world_size)}"
        self.run_id = run_id

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
    """What one rank got out of the exchange: rank 0's merged report (None elsewhere); whether
    rank 0 confirmed that this rank's report is in the merge (``confirmed``) and whether all
    of it is (``complete``: false when a summary went instead); ``note`` says why not. A rank
    keeps its own report unless both hold."""

    def __init__(self, merged, confirmed, note="", complete=None):
        self.merged, self.confirmed, self.note = merged, confirmed, note
        self.complete = confirmed if complete is None else complete


# The TCPStore refuses a value over 8 MiB and drops the connection with it (the rank then reads
# "store unreachable"): a rank's report travels in parts well under that.
PART_BYTES = 4 * 1024 * 1024
# Rank 0 holds every rank's post at once, and so does the store's server: past this size a rank
# sends a summary (its leaks, largest first) and keeps its whole report in its own file.
MAX_POST_BYTES = 64 * 1024 * 1024


def _keys(job):
    """Each rank's key and rank 0's confirmation key for this rank's next exchange (a restarted
    torchrun job keeps its store: the restart count keeps the attempts apart)."""
    restart = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    prefix = f"torchleak/{job.run_id}/{restart}/{_exchanges.get(job.rank, 0)}/"
    return [f"{prefix}rank/{r}" for r in range(job.world_size)], f"{prefix}merged"


# After torchrun's SIGTERM its agent kills what still runs 30 s later (the failed-worker path
# of torch.distributed.elastic's agent: _stop_workers -> _shutdown(timeout=30)). Rank 0 waits
# for the others until this long after the signal, which leaves it 10 s to merge and write;
# the others wait 5 s longer for its merge. Counted from the signal, not from the wait: a rank
# whose report took seconds to build after the SIGTERM must not wait into the SIGKILL, and one
# held in a collective until its timeout (the others' failed at once) still has its report
# merged when it posts 15 s after the signal.
HURRY_SECONDS = 20.0


def exchange(
    job,
    report,
    *,
    status="ok",
    note="",
    timeout=DEFAULT_GATHER_TIMEOUT,
    hurry=None,
    hurry_seconds=HURRY_SECONDS,
    max_post_bytes=None,
):
    """Post this rank's report; on rank 0, wait up to ``timeout`` seconds for the others' and
    merge; elsewhere, wait a little longer than that for rank 0 to say whether this rank's
    report is in the merge. ``hurry``: a callable that turns true when the job is being stopped
    (SIGTERM); a wait then ends ``hurry_seconds`` after the signal when what it returns is the
    signal's ``time.monotonic()`` (a float), else after the wait notices. Never raises for the
    job's sake: a store that is gone (rank 0's process died) leaves each rank with its own
    report."""
    rank_keys, merged_key = _keys(job)
    _exchanges[job.rank] = _exchanges.get(job.rank, 0) + 1
    post, sent_note = _post(job, report, status, note, MAX_POST_BYTES if max_post_bytes is None else max_post_bytes)
    try:
        _put(job.store, rank_keys[job.rank], post)
    except Exception as exc:  # noqa: BLE001 - the store's own errors: it is unreachable
        return Exchange(None, False, f"the job's store is unreachable: {exc}")
    if job.rank != 0:
        # Rank 0 may use its whole timeout waiting for a rank that will never come, then merge:
        # the others wait a little longer than that before keeping their reports on their own.
        patience = timeout + max(5.0, timeout / 4)
        if _wait_for(job.store, [merged_key], time.monotonic() + patience, hurry, hurry_seconds + 5.0) != [merged_key]:
            return Exchange(None, False, f"rank 0 did not merge within {patience:g} s")
        return _confirmation(job, merged_key, sent_note)
    arrived = _wait_for(job.store, rank_keys, time.monotonic() + timeout, hurry, hurry_seconds)
    stopped = hurry is not None and hurry()
    inputs, versions = [], {}
    for r, key in enumerate(rank_keys):
        if key not in arrived:
            inputs.append(
                (
                    r,
                    None,
                    "missing",
                    "not posted before the job was stopped (SIGTERM)" if stopped else f"timed out after {timeout:g} s",
                )
            )
            continue
        try:
            posted = json.loads(_take(job.store, key))
            versions[r] = posted.get("version")
            if posted.get("world_size", job.world_size) != job.world_size:
                raise ValueError(f"posted by a job of {posted['world_size']} ranks")
            inputs.append((r, posted["report"], posted["status"], posted["note"]))
        except Exception as exc:  # noqa: BLE001 - a rank's post that cannot be read
            inputs.append((r, None, "missing", f"its report could not be read: {exc}"))
    merged = Report(_core.merge_rank_reports(inputs, job.world_size, _config.snapshot()))
    # Each rank learns whether its own report is in the merge, and if not, rank 0's reason.
    said = {
        str(r["rank"]): {"merged": r["status"] != "missing", "note": r.get("note", "")}
        for r in merged.to_dict()["ranks"]["ranks"]
    }
    for r, version in versions.items():
        if not said[str(r)]["merged"] and version != _version():
            said[str(r)]["note"] += f" (that rank runs torchleak {version}, rank 0 {_version()})"
    try:
        job.store.set(merged_key, json.dumps({"ranks": said}))
    except Exception:  # noqa: BLE001 - the others fall back to their own reports
        pass
    mine = said.get("0", {})
    return Exchange(
        merged,
        bool(mine.get("merged")),
        "" if mine.get("merged") else mine.get("note", ""),
        complete=bool(mine.get("merged")) and not sent_note,
    )


def _post(job, report, status, note, max_bytes):
    """The rank's post and, when it is a summary, the note saying so (else ""). The post names
    the sender's torchleak version, so a report rank 0 cannot read says whose it was."""
    text = report.to_json()
    summary_note = ""
    if len(text) > max_bytes:
        text, summary_note = _summary(report, len(text), max_bytes)
    return json.dumps(
        {"status": status, "note": note, "report": text, "version": _version(), "world_size": job.world_size}
    ), summary_note


def _version():
    return getattr(sys.modules.get("torchleak"), "__version__", "unknown")


def _summary(report, size, max_bytes):
    """The report with only its leaks, largest first, as many as fit in ``max_bytes`` (None
    when not even its frame fits), and the note that says so: it rides in the report's
    warnings, so the merged report says which rank sent less than all. The core cuts the
    report (a copy: the rank's own report, and the file it writes, stay whole) and renumbers
    the causes and sections that name findings, so rank 0 can read what arrives."""
    findings = report.to_dict().get("findings", [])
    leaks = sorted(
        (i for i, f in enumerate(findings) if f.get("verdict") == "leak"),
        key=lambda i: -(findings[i].get("bytes_per_iteration") or 0),
    )
    note = (
        f"this rank's report ({size / 2**20:.0f} MiB) is over the "
        f"{max_bytes / 2**20:g} MiB a rank sends; rank 0 got a summary"
    )
    text = report.to_json()
    frame = len(_core.keep_findings(text, [], note))
    budget = max_bytes - frame - 200
    kept = []
    for i in leaks:
        cost = len(json.dumps(findings[i])) + 2
        if cost > budget:
            break
        kept.append(i)
        budget -= cost
    if budget < 0:
        return None, note + " of nothing (even its curves do not fit)"
    while True:  # the estimate leaves room for the causes; fewer leaks until it fits
        said = note + f" of {len(kept)} of its {len(findings)} findings (its largest leaks)"
        summary = _core.keep_findings(text, kept, said + "; the whole report is in its own file")
        if len(summary) <= max_bytes or not kept:
            return (summary, said) if len(summary) <= max_bytes else (None, note + " of nothing")
        kept.pop()


def _put(store, key, value):
    """``value`` under ``key`` in parts of at most PART_BYTES: the parts first, then the head
    that counts them, so a reader that sees the head finds every part."""
    data = value.encode()
    parts = [data[i : i + PART_BYTES] for i in range(0, len(data), PART_BYTES)] or [b""]
    for i, part in enumerate(parts):
        store.set(f"{key}/{i}", part)
    store.set(key, json.dumps({"parts": len(parts), "bytes": len(data)}))


def _take(store, key):
    """What _put posted under ``key``, its parts removed from the store once read."""
    head = json.loads(store.get(key))
    data = b"".join(store.get(f"{key}/{i}") for i in range(head["parts"]))
    if len(data) != head["bytes"]:
        raise ValueError(f"{len(data)} of its {head['bytes']} bytes arrived")
    for i in range(head["parts"]):
        try:
            store.delete_key(f"{key}/{i}")
        except Exception:  # noqa: BLE001 - a store without deletion keeps them; no harm
            break
    return data.decode()


def _confirmation(job, merged_key, sent_note):
    """This rank's entry in rank 0's answer: merged (whole, or the summary it sent), or not and
    why. An answer this version cannot read is not taken for a merge."""
    try:
        said = json.loads(job.store.get(merged_key))["ranks"][str(job.rank)]
        merged = bool(said["merged"])
        reason = str(said.get("note", ""))
    except Exception:  # noqa: BLE001 - another torchleak version's answer, or none
        return Exchange(None, False, "rank 0 did not say whether it merged this rank's report")
    if not merged:
        return Exchange(None, False, f"rank 0 could not merge it: {reason}" if reason else "rank 0 could not merge it")
    return Exchange(None, True, sent_note, complete=not sent_note)


def _wait_for(store, keys, deadline, hurry=None, hurry_seconds=HURRY_SECONDS):
    """The keys present by the deadline (polled: the store's own wait() cannot say which keys
    are missing when it times out); once ``hurry()`` is true, by ``hurry_seconds`` after the
    time it returns (a float), or after now."""
    arrived = []
    pending = list(keys)
    hurried = False
    while True:
        stopped = None if hurried or hurry is None else hurry()
        if stopped:
            hurried = True
            since = stopped if isinstance(stopped, float) else time.monotonic()
            deadline = min(deadline, since + hurry_seconds)
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
    """ "RuntimeError: boom": the exception's type and first line, for the merged report."""
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
