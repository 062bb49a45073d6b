"""TorchleakCallback on a real transformers.Trainer: a one-layer GPT-2 built from a config
(nothing downloaded), trained on random token ids on the CPU."""

import json
import logging

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

import torchleak
from torchleak import _core
from torchleak.integrations.huggingface import TorchleakCallback


class RandomTokens(torch.utils.data.Dataset):
    def __len__(self):
        return 256

    def __getitem__(self, i):
        ids = torch.randint(0, 64, (16,), generator=torch.Generator().manual_seed(i))
        return {"input_ids": ids, "labels": ids}


def tiny_gpt2():
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=64, n_positions=32, n_embd=32, n_layer=1, n_head=2, bos_token_id=0, eos_token_id=0)
    return GPT2LMHeadModel(config)


def arguments(tmp_path, steps):
    return TrainingArguments(
        output_dir=str(tmp_path / "run"),
        max_steps=steps,
        per_device_train_batch_size=4,
        report_to=[],
        use_cpu=True,
        save_strategy="no",
        logging_strategy="no",
        disable_tqdm=True,
        dataloader_num_workers=0,
    )


class LogitsKeepingTrainer(Trainer):
    """The planted leak: a metric that keeps every step's logits, graph and all, for later."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.step_logits = []

    def compute_loss(self, model, inputs, return_outputs=False, **kwargs):
        loss, outputs = super().compute_loss(model, inputs, return_outputs=True, **kwargs)  # SITE
        self.step_logits.append(outputs.logits)
        return (loss, outputs) if return_outputs else loss


def site_line():
    with open(__file__, encoding="utf-8") as fh:
        return next(i for i, line in enumerate(fh, 1) if line.rstrip().endswith("# SITE"))


def test_a_clean_run_has_no_finding_to_fix_and_saves_its_report(tmp_path, caplog):
    callback = TorchleakCallback(warmup=2)
    trainer = Trainer(
        model=tiny_gpt2(), args=arguments(tmp_path, 10), train_dataset=RandomTokens(), callbacks=[callback]
    )
    with caplog.at_level(logging.INFO, logger="transformers.integrations.torchleak"):
        trainer.train()
    report = callback.report
    assert report.iterations == 10 and report.to_dict()["boundary"] == "explicit"
    assert report.leaks == []
    saved = json.loads((tmp_path / "run" / "torchleak-report.json").read_text())
    assert saved["iterations"] == 10 and not [f for f in saved["findings"] if f["verdict"] == "leak"]
    assert (tmp_path / "run" / "torchleak-report.html").is_file()
    assert any("torchleak (train end): 0 leak(s)" in r.getMessage() for r in caplog.records)
    assert not _core.profiler_state_installed()


def test_a_kept_loss_is_found_with_its_site_and_path_while_the_run_goes_on(tmp_path, caplog):
    confirmed = []
    callback = TorchleakCallback(warmup=2, check_every=4, on_leak=confirmed.append)
    trainer = LogitsKeepingTrainer(
        model=tiny_gpt2(), args=arguments(tmp_path, 16), train_dataset=RandomTokens(), callbacks=[callback]
    )
    with caplog.at_level(logging.WARNING, logger="transformers.integrations.torchleak"):
        trainer.train()
    # THEN the leak is confirmed mid-run, before the last step, and reported again at the end
    assert len(confirmed) == 1 and 4 <= callback.leak_confirmed_at < 16
    report = callback.report
    leak = report.leaks[0]
    assert leak.site["file"] == __file__ and leak.site["line"] == site_line()
    assert leak.path_text.startswith("trainer.step_logits[")
    assert leak.bytes_per_iteration == 4 * 16 * 64 * 4  # one [4, 16, 64] float32 per step
    assert "detach()" in leak.suggestion
    messages = [r.getMessage() for r in caplog.records]
    assert any(m.startswith(f"torchleak (leak confirmed at step {callback.leak_confirmed_at})") for m in messages)
    assert any("trainer.step_logits" in m and "fix:" in m for m in messages)
    assert torchleak.Report.load(tmp_path / "run" / "torchleak-report.json").leaks


def test_a_run_that_raises_stops_tracking_and_gets_its_report(tmp_path):
    class Failing(LogitsKeepingTrainer):
        def compute_loss(self, model, inputs, *args, **kwargs):
            if len(self.step_logits) == 5:
                raise RuntimeError("broken batch")
            return super().compute_loss(model, inputs, *args, **kwargs)

    callback = TorchleakCallback(warmup=1)
    trainer = Failing(
        model=tiny_gpt2(), args=arguments(tmp_path, 20), train_dataset=RandomTokens(), callbacks=[callback]
    )
    with pytest.raises(RuntimeError, match="broken batch"):
        with callback:
            trainer.train()
    assert not _core.profiler_state_installed()
    assert callback.report.iterations == 5
    assert callback.report.leaks  # five steps' logits kept by then
    assert (tmp_path / "run" / "torchleak-report.json").is_file()


@pytest.mark.parametrize(
    "kwargs, error",
    [
        ({"check_every": 0}, ValueError),
        ({"warmup": -1}, ValueError),
        ({"on_leak": "print"}, TypeError),
    ],
)
def test_bad_options_fail_at_set_up(kwargs, error):
    with pytest.raises(error):
        TorchleakCallback(**kwargs)


def test_each_rank_of_a_job_saves_its_own_report(tmp_path, monkeypatch):
    """Every rank of a multi-GPU run shares args.output_dir: rank 1 of a job saves beside rank
    0's file instead of over it (the job stood in for: its exchange is tests/distributed's)."""
    import torch.distributed as dist

    from torchleak import _job

    monkeypatch.setattr(_job.Job, "current", classmethod(lambda cls: _job.Job(1, 2, dist.HashStore())))
    callback = TorchleakCallback(warmup=2)
    Trainer(model=tiny_gpt2(), args=arguments(tmp_path, 6), train_dataset=RandomTokens(), callbacks=[callback]).train()
    assert sorted(p.name for p in (tmp_path / "run").glob("torchleak-report*")) == [
        "torchleak-report.rank1.html",
        "torchleak-report.rank1.json",
    ]


def test_an_on_leak_callback_that_raises_does_not_stop_training(tmp_path, caplog):
    def webhook_down(report):
        raise ConnectionError("webhook unreachable")

    callback = TorchleakCallback(warmup=2, check_every=4, on_leak=webhook_down)
    trainer = LogitsKeepingTrainer(
        model=tiny_gpt2(), args=arguments(tmp_path, 12), train_dataset=RandomTokens(), callbacks=[callback]
    )
    with caplog.at_level(logging.WARNING, logger="transformers.integrations.torchleak"):
        trainer.train()  # would raise ConnectionError at the step the leak was confirmed
    assert callback.leak_confirmed_at is not None and trainer.state.global_step == 12
    assert callback.report.iterations == 12 and callback.report.leaks
    assert any(
        "on_leak raised ConnectionError: webhook unreachable; the run goes on" in r.getMessage() for r in caplog.records
    )


def test_a_run_that_raised_without_with_does_not_block_later_tracking(tmp_path):
    class Failing(Trainer):
        def compute_loss(self, model, inputs, *args, **kwargs):
            if self.state.global_step == 3:
                raise RuntimeError("broken batch")
            return super().compute_loss(model, inputs, *args, **kwargs)

    stale = TorchleakCallback(warmup=1)
    trainer = Failing(model=tiny_gpt2(), args=arguments(tmp_path, 10), train_dataset=RandomTokens(), callbacks=[stale])
    with pytest.raises(RuntimeError, match="broken batch"):
        trainer.train()  # no `with stale:`: on_train_end never runs, tracking stays on
    # THEN a later track() starts (the stale tracking steps aside with a warning) ...
    with pytest.warns(RuntimeWarning, match="tracking was still on"):
        with torchleak.track() as tracker:
            torch.ones(4)
    assert tracker.report().iterations >= 0
    # ... and so does a later Trainer, with two callbacks on it: the second one's tracking wins.
    first, second = TorchleakCallback(warmup=1), TorchleakCallback(warmup=1)
    with pytest.warns(RuntimeWarning, match="tracking was still on"):
        Trainer(
            model=tiny_gpt2(), args=arguments(tmp_path, 4), train_dataset=RandomTokens(), callbacks=[first, second]
        ).train()
    assert second.report.iterations == 4
    assert not _core.profiler_state_installed()
