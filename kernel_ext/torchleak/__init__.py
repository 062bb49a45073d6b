"""torchleak: find tensor memory leaks in PyTorch programs.

For every leak it answers where the memory was allocated (file:line), why it is still alive, and
whether it really is a leak (its growth across iterations).

    import torchleak

    with torchleak.track() as tracker:
        for batch in data:
            train_step(batch)          # optimizer.step() marks an iteration by itself
    print(tracker.report())

    report = torchleak.check(train_step, model, batch, iterations=20, warmup=2)
"""

import torch  # noqa: F401  (loads libtorch before the extension that links it)

# pyproject.toml's version (tests/python/test_house.py holds them equal). Not read from the
# installed metadata: `make wheel` tags the wheel's version with its torch (0.1.0+torch2.13.0.cpu),
# and the version torchleak names in its messages is the release's.
__version__ = "0.1.0"

from ._build import check_torch, describing_itself

# Before the extension loads: built for another torch, it says so here. `python -m torchleak
# version` and `doctor` must still say what the build is: for them nothing else is loaded, and
# they report the refusal (_build.refusal) themselves.
if check_torch(__version__, refuse=not describing_itself()) is None:
    from ._config import config
    from ._report import Finding, Report
    from ._tracking import Tracker, check, step, track
    from ._watch import DEFAULT_SAMPLE_BYTES, Watch, watch

__all__ = [
    "DEFAULT_SAMPLE_BYTES",
    "Finding",
    "Report",
    "Tracker",
    "Watch",
    "check",
    "config",
    "step",
    "track",
    "watch",
    "__version__",
]


def load_ipython_extension(shell):
    """`%load_ext torchleak`: the %%leakcheck, %leakwatch, %leakreport and %leakconfig magics."""
    from ._notebook import load_ipython_extension as load

    load(shell)


def unload_ipython_extension(shell):
    from ._notebook import unload_ipython_extension as unload

    unload(shell)
