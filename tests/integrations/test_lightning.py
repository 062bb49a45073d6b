"""TorchleakCallback on a real lightning.pytorch.Trainer: a two-layer MLP on random data, on
the CPU, with a CSV logger to see the metrics arrive through Lightning's own logger."""

import csv
import logging

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.loggers import CSVLogger

import torchleak
from torchleak import _core
from torchleak.integrations.lightning import TorchleakCallback


class Regressor(pl.LightningModule):
    def __init__(self, keep_outputs=False, fail_at=None):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
        self.keep_outputs = keep_outputs
        self.fail_at = fail_at
        self.training_outputs = []

    def training_step(self, batch, batch_idx):
        x, y = batch
        prediction = self.net(x)  # SITE
        if self.fail_at is not None and batch_idx == self.fail_at:
            raise RuntimeError("broken batch")
        if self.keep_outputs:
            # The planted leak: outputs kept "for on_train_epoch_end", with their graphs.
            self.training_outputs.append(prediction)
        return torch.nn.functional.mse_loss(prediction, y)

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-3)


def loader():
    generator = torch.Generator().manual_seed(0)
    data = torch.utils.data.TensorDataset(
        torch.randn(512, 32, generator=generator), torch.randn(512, 1, generator=generator)
    )
    return torch.utils.data.DataLoader(data, batch_size=16)


def trainer_for(tmp_path, callback, steps, **kwargs):
    return pl.Trainer(
        max_steps=steps,
        accelerator="cpu",
        devices=1,
        callbacks=[callback],
        logger=CSVLogger(tmp_path, name="run"),
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        **kwargs,
    )


def site_line():
    with open(__file__, encoding="utf-8") as fh:
        return next(i for i, line in enumerate(fh, 1) if line.rstrip().endswith("# SITE"))


def logged_metrics(trainer):
    with open(f"{trainer.logger.log_dir}/metrics.csv", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def test_a_clean_run_has_no_leak_and_logs_through_lightning(tmp_path, caplog):
    torch.manual_seed(0)
    callback = TorchleakCallback(warmup=2)
    trainer = trainer_for(tmp_path, callback, 12)
    with caplog.at_level(logging.INFO, logger="lightning.pytorch.callbacks.torchleak"):
        trainer.fit(Regressor(), loader())
    report = callback.report
    assert report.iterations == 12 and report.leaks == []
    assert any("torchleak (train end): 0 leak(s)" in r.getMessage() for r in caplog.records)
    assert {"torchleak/leaks": "0", "torchleak/leak_bytes_per_step": "0"}.items() <= logged_metrics(trainer)[-1].items()
    assert torchleak.Report.load(f"{trainer.log_dir}/torchleak-report.json").iterations == 12
    assert not _core.profiler_state_installed()


def test_kept_outputs_are_found_with_site_and_path(tmp_path, caplog):
    torch.manual_seed(0)
    confirmed = []
    callback = TorchleakCallback(warmup=2, check_every=5, on_leak=confirmed.append)
    model = Regressor(keep_outputs=True)
    trainer = trainer_for(tmp_path, callback, 20)
    with caplog.at_level(logging.WARNING, logger="lightning.pytorch.callbacks.torchleak"):
        trainer.fit(model, loader())
    assert len(confirmed) == 1 and callback.leak_confirmed_at in (5, 10, 15)
    leak = callback.report.leaks[0]
    assert leak.site["file"] == __file__ and leak.site["line"] == site_line()
    assert ".training_outputs[" in leak.path_text
    assert "detach()" in leak.suggestion
    assert any("training_outputs" in r.getMessage() and "fix:" in r.getMessage() for r in caplog.records)
    last = logged_metrics(trainer)[-1]
    assert int(last["torchleak/leaks"]) >= 1 and int(last["torchleak/leak_bytes_per_step"]) > 0


def test_accumulated_batches_make_one_iteration(tmp_path):
    callback = TorchleakCallback(warmup=1)
    trainer = trainer_for(tmp_path, callback, 6, accumulate_grad_batches=3)
    trainer.fit(Regressor(), loader())
    assert callback.report.iterations == 6  # 18 batches, 6 optimizer steps


def test_a_run_that_raises_is_reported_from_on_exception(tmp_path):
    callback = TorchleakCallback(warmup=1)
    trainer = trainer_for(tmp_path, callback, 20)
    with pytest.raises(RuntimeError, match="broken batch"):
        trainer.fit(Regressor(keep_outputs=True, fail_at=7), loader())
    assert not _core.profiler_state_installed()
    assert callback.report.iterations == 7 and callback.report.leaks
