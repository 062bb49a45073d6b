"""torchleak for ``lightning.pytorch.Trainer``.

    from torchleak.integrations.lightning import TorchleakCallback

    callback = TorchleakCallback(check_every=50)
    trainer = lightning.pytorch.Trainer(callbacks=[callback], ...)
    trainer.fit(model, data)
    print(callback.report)

An iteration ends at every optimizer step (``trainer.global_step``: with
``accumulate_grad_batches`` several batches make one). The summary goes through Lightning's
rank-zero logging, the leak metrics to ``trainer.logger``; the report is saved as
``torchleak-report.json`` / ``.html`` in the trainer's log directory. A run that raises (an
out-of-memory error included) is reported from ``on_exception``.
"""

import logging

from lightning.pytorch import Callback
from lightning.pytorch.utilities import rank_zero_only

from ._training_run import TrackedRunCallback

logger = logging.getLogger("lightning.pytorch.callbacks.torchleak")


class TorchleakCallback(TrackedRunCallback, Callback):
    """Tracks tensor leaks over ``trainer.fit``.

    warmup: optimizer steps recorded but not judged (default: torchleak.config's).
    check_every: judge the run every N optimizer steps while it trains and, once a leak is
        confirmed, log it, save the report and call ``on_leak(report)`` (None: only at the end).
    save: write the report into the trainer's log directory.
    """

    def __init__(self, *, warmup=None, check_every=None, min_bytes=0, save=True, on_leak=None):
        super().__init__(
            warmup=warmup, check_every=check_every, min_bytes=min_bytes, save=save, on_leak=on_leak, log=_log
        )
        self._last_step = None

    def on_train_start(self, trainer, pl_module):
        self._last_step = trainer.global_step
        self._run.start()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        # global_step counts optimizer steps: a batch that only accumulated leaves it as it was.
        if trainer.global_step != self._last_step:
            self._last_step = trainer.global_step
            self._run.optimizer_step(trainer.global_step, _output_dir(trainer))

    def on_train_end(self, trainer, pl_module):
        report = self._run.finish(_output_dir(trainer))
        _log_metrics(trainer, report)

    def on_exception(self, trainer, pl_module, exception):
        if self._run.active:
            report = self._run.finish(_output_dir(trainer), exception)
            _log_metrics(trainer, report)


def _output_dir(trainer):
    return trainer.log_dir or trainer.default_root_dir


def _log_metrics(trainer, report):
    if report is None or trainer.logger is None:
        return
    per_step = sum(f.bytes_per_iteration for f in report.leaks)
    trainer.logger.log_metrics(
        {"torchleak/leaks": len(report.leaks), "torchleak/leak_bytes_per_step": per_step}, step=trainer.global_step
    )


@rank_zero_only
def _log(level, message):
    getattr(logger, level)(message)
