"""Verdicts from growth curves with real torch loops (issue 4)."""

import functools
import json

import pytest
import torch

import torchleak

MiB = 1 << 20


@pytest.fixture(autouse=True)
def fresh_config():
    torchleak.config.reset()
    yield
    torchleak.config.reset()


def test_a_1mib_leak_is_a_leak_by_the_fifth_iteration_after_warmup():
    state = []
    kept = []

    def step():
        if not state:
            state.append(torch.zeros(2048, 1024))  # 8 MiB created once: warm-up
        kept.append(torch.ones(256, 1024))  # 1 MiB per iteration: the leak

    report = torchleak.check(step, iterations=7, warmup=2)
    (leak,) = report.leaks
    assert leak.bytes_per_iteration == MiB
    assert leak.trend["p_value"] < 0.05
    verdicts = {f.verdict for f in report.findings}
    assert verdicts == {"leak", "warmup"}


def test_adam_state_created_at_step_one_is_warmup():
    model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 256))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x, y = torch.randn(256, 256), torch.randn(256, 256)

    def step():
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()

    report = torchleak.check(step, iterations=12)
    assert report.leaks == []
    adam = [f for f in report.findings if f.verdict == "warmup"]
    assert sum(f.total_bytes for f in adam) >= 4 * MiB  # exp_avg + exp_avg_sq of 2 MiB of params


def test_lru_cache_of_tensors_is_a_plateau():
    @functools.lru_cache(maxsize=8)
    def mask(n):
        return torch.full((256, 1024), float(n))  # 1 MiB whatever the key

    counter = iter(range(10_000))

    def step():
        mask(256 + next(counter))  # a new key every time: fills to 8 entries, then evicts

    report = torchleak.check(step, iterations=30)
    assert report.leaks == [], str(report)
    (cache,) = [f for f in report.findings if f.total_bytes > MiB]
    assert cache.verdict == "plateau"  # it evicts: a cache, full
    mask.cache_clear()


def test_a_cache_that_filled_and_keeps_all_it_took_is_undecided_until_flat_for_long_enough():
    # Eight keys, then only hits: it keeps every block it took, as a leak between two of its
    # steps does. Flat for 22 iterations after 8 of growth is too soon to tell the two apart.
    @functools.lru_cache(maxsize=8)
    def mask(n):
        return torch.full((256, 1024), float(n))

    counter = iter(range(10_000))

    def step():
        mask(next(counter) % 8)

    report = torchleak.check(step, iterations=30)
    assert report.leaks == [], str(report)
    (cache,) = [f for f in report.findings if f.total_bytes > MiB]
    assert cache.verdict == "undecided"
    assert cache.growth_since["text"].endswith(": too soon to tell a filled cache from a pause")
    assert "fix_code" not in cache.to_dict() and "nothing to fix yet" in cache.suggestion
    mask.cache_clear()
    report = torchleak.check(step, iterations=80)  # flat for eight times as long: full
    (cache,) = [f for f in report.findings if f.total_bytes > MiB]
    assert cache.verdict == "plateau"
    mask.cache_clear()


def test_kv_cache_reset_per_request_is_not_a_leak():
    def request():
        cache = []
        for _ in range(16):  # one token at a time
            cache.append(torch.ones(8, 128, 64))
            torch.cat(cache, dim=1)
        cache.clear()  # reset at the end of the request

    report = torchleak.check(request, iterations=10)
    assert report.leaks == []


def test_long_clean_training_loop_has_no_leak():
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 64))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x, y = torch.randn(32, 64), torch.randn(32, 64)
    losses = []

    def step():
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())  # the right way

    report = torchleak.check(step, iterations=500)
    assert report.iterations == 500
    assert report.leaks == [], str(report)


def test_allow_list_marks_an_intentional_cache():
    kv_cache = []

    def step():
        kv_cache.append(torch.ones(256, 1024))

    torchleak.config.allow("kv_cache*")
    report = torchleak.check(step, iterations=5)
    assert report.leaks == []
    (allowed,) = report.findings
    assert allowed.verdict == "allowed"
    assert allowed.path_text.startswith("kv_cache[")


def test_min_leak_bytes_per_iteration_threshold():
    kept = []
    torchleak.config.set(min_leak_bytes_per_iteration="2MiB")
    report = torchleak.check(lambda: kept.append(torch.ones(256, 1024)), iterations=5)
    assert report.leaks == []
    torchleak.config.set(min_leak_bytes_per_iteration="1MiB")
    report = torchleak.check(lambda: kept.append(torch.ones(256, 1024)), iterations=5)
    assert len(report.leaks) == 1


@pytest.mark.parametrize(
    "settings, message",
    [
        ({"colour": "red"}, "unknown setting 'colour'"),
        ({"min_confidence": 3}, "between 0 and 1"),
        ({"min_leak_bytes_per_iteration": "lots"}, "not a size"),
        ({"warmup": -2}, "warmup"),
        ({"critical_bytes": None}, "needs a number"),
    ],
)
def test_bad_settings_are_clear_value_errors(settings, message):
    with pytest.raises(ValueError, match=message):
        torchleak.config.set(**settings)


def test_config_reads_back_typed_values():
    torchleak.config.set(min_leak_bytes_per_iteration="1MiB", warmup=3, min_confidence=0.7)
    assert torchleak.config.min_leak_bytes_per_iteration == MiB
    assert torchleak.config.warmup == 3
    assert torchleak.config.min_confidence == 0.7
    assert "min_confidence=0.7" in repr(torchleak.config)


def test_text_report_shows_verdict_slope_and_oom_projection():
    kept = []
    report = torchleak.check(lambda: kept.append(torch.ones(2048, 1024)), iterations=5)
    text = str(report)
    assert "LEAK  8.0 MiB per iteration" in text
    assert "at 8.0 MiB per iteration, cpu is full in ~" in text
    device = json.loads(report.to_json())["devices"][0]
    assert device["verdict"] == "ok"
    assert device["leak_bytes_per_iteration"] == 8 * MiB
    assert device["projected_oom_iteration"] > 5
