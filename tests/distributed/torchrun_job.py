"""torchrun jobs for the distributed tier: loopback only, a free port each, bounded."""

import os
import signal
import socket
import sys

SCRIPT = os.path.join(os.path.dirname(__file__), "scripts", "ddp_train.py")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun_command(nproc, *args):
    """torchrun on the loopback interface only, with a port of its own."""
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nproc-per-node={nproc}",
        "--master-addr=127.0.0.1",
        f"--master-port={free_port()}",
        "--max-restarts=0",
        *args,
    ]


def job_env(**knobs):
    env = dict(os.environ, GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    env.update({k: str(v) for k, v in knobs.items()})
    return env


def descendants(pid):
    """Every live process below `pid` (read from /proc): torchrun starts its workers in
    sessions of their own, so killing torchrun's process group leaves a hung rank running
    after the test, and after the CI run."""
    children = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue  # gone meanwhile
        # The command name is in parentheses and may hold spaces: the parent follows the last ')'.
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(parent, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def kill_job(proc):
    """Kills a torchrun started with start_new_session=True, its workers and theirs; returns
    the pids it killed below torchrun."""
    below = descendants(proc.pid)
    os.killpg(proc.pid, signal.SIGKILL)
    for pid in below:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait(timeout=30)
    return below


def running(pid):
    """Whether `pid` is a process that still runs (a zombie waiting for its reaping does not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
