"""A DDP job on random data, for the torchrun tests. Environment knobs:
LEAK_RANKS=1,2   ranks that keep 256 KiB per step alive (in `kept`, with the graph)
RAISE_RANK=r     this rank raises in step 5
HANG_RANK=r      this rank hangs after training (never reaches the end)
KILL_RANK=r      this rank dies in step 5 (SIGKILL: no report, no exit handler)
HELD_RANK=r      when its collective fails, this rank is held 12 s more with signals blocked (a
                 rank stuck in C++ until its collective's timeout, deaf to torchrun's SIGTERM)
STEPS=n          optimizer steps (default 12)
TRACK_INSIDE=1   the script tracks itself with torchleak.track() (run without the CLI)
"""

import datetime
import os
import signal
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def ranks(name):
    return [int(r) for r in os.environ.get(name, "").split(",") if r]


def train():
    # Short collective timeout: a rank that raised must not leave the others in an all-reduce
    # for gloo's 30-minute default.
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=15))
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    kept = []
    for step in range(int(os.environ.get("STEPS", "12"))):
        x, y = torch.randn(32, 64), torch.randn(32, 1)
        loss = torch.nn.functional.mse_loss(model(x), y)
        try:
            loss.backward()
        except RuntimeError:
            if rank in ranks("HELD_RANK"):
                signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
                time.sleep(12)
                signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
            raise
        opt.step()
        opt.zero_grad()
        if rank in ranks("LEAK_RANKS"):
            kept.append(torch.ones(256, 256) * loss)  # the leak: 256 KiB and a graph per step
        if rank in ranks("RAISE_RANK") and step == 5:
            raise RuntimeError(f"rank {rank} failed on purpose")
        if rank in ranks("KILL_RANK") and step == 5:
            os.kill(os.getpid(), signal.SIGKILL)
    if rank in ranks("HANG_RANK"):
        time.sleep(600)
    dist.destroy_process_group()
    return kept


if os.environ.get("TRACK_INSIDE"):
    import torchleak

    with torchleak.track(gather_timeout=30) as tracker:
        kept = train()
    report = tracker.report()
    report.save(os.environ["REPORT_PATH"].replace("{rank}", os.environ["RANK"]))
    tracker.rank_report().save(os.environ["REPORT_PATH"].replace("{rank}", "own" + os.environ["RANK"]))
else:
    kept = train()
