"""torchrun jobs for the distributed tier: loopback only, a free port each, bounded."""

import os
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
