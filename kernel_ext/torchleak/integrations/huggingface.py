"""torchleak for the Hugging Face ``transformers.Trainer``.

    from torchleak.integrations.huggingface import TorchleakCallback

    callback = TorchleakCallback(check_every=50)
    trainer = Trainer(model=model, args=args, train_dataset=data, callbacks=[callback])
    with callback:          # optional: a run that raises still gets its report (OOM forensics)
        trainer.train()
    print(callback.report)

An iteration ends at every optimizer step (the Trainer's ``global_step``: gradient accumulation
is one step). The report is logged through transformers' logger and saved as
``torchleak-report.json`` / ``.html`` in ``args.output_dir``.
"""

from transformers import TrainerCallback
from transformers.utils import logging as _hf_logging

from ._training_run import TrackedRunCallback

logger = _hf_logging.get_logger("transformers.integrations.torchleak")


class TorchleakCallback(TrackedRunCallback, TrainerCallback):
    """Tracks tensor leaks over a Trainer run.

    warmup: optimizer steps recorded but not judged (default: torchleak.config's).
    check_every: judge the run every N optimizer steps while it trains and, once a leak is
        confirmed, log it, save the report and call ``on_leak(report)`` (None: only at the end).
    save: write the report into ``args.output_dir``.
    """

    def __init__(self, *, warmup=None, check_every=None, min_bytes=0, save=True, on_leak=None):
        super().__init__(
            warmup=warmup, check_every=check_every, min_bytes=min_bytes, save=save, on_leak=on_leak, log=_log
        )
        self._output_dir = None

    def on_train_begin(self, args, state, control, **kwargs):
        self._output_dir = args.output_dir
        self._run.start()

    def on_step_end(self, args, state, control, **kwargs):
        self._run.optimizer_step(state.global_step, args.output_dir)

    def on_train_end(self, args, state, control, **kwargs):
        self._run.finish(args.output_dir)

    # The Trainer has no event for a run that raises: `with callback:` around train() ends the
    # tracking there and gives the exception its report.
    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if self._run.active:
            try:
                self._run.finish(self._output_dir, exc)
            except Exception as error:  # noqa: BLE001 - never replace the run's own error
                logger.warning(f"torchleak could not report this run: {error}")
        return False


def _log(level, message):
    getattr(logger, level)(message)
