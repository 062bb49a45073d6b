"""Leaks that start late, and caches that fill and stop, end to end: track(), check(), watch(),
%%leakcheck and %leakwatch on real loops name the onset of a leak and its rate from there, and a
bounded cache is a plateau that says how much it grew (undecided until it has been flat for eight
times as long as it grew); watch withdraws an announcement whose growth became a plateau, and
never a staircase's between its steps."""

import collections
import json
import logging

import pytest
import torch

import torchleak
from ipython_shell import run

KEPT = 300_000 * 4  # one float32 tensor of 300,000 elements


def loop(total, start, late, model=None):
    """The issue's loop: a tiny model trained for `total` steps, keeping a 1.2 MB tensor after
    every step from step `start` on (so each lands in the iteration the next step ends)."""
    model = model or torch.nn.Linear(4, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for i in range(total):
        model(torch.randn(2, 4)).sum().backward()
        opt.step()
        opt.zero_grad()
        if i >= start:
            late.append(torch.ones(300_000))


def biggest(report):
    return max(report.findings, key=lambda f: f.total_bytes)


def test_track_calls_a_leak_that_starts_late_a_leak_with_its_onset():
    late = []
    with torchleak.track() as t:
        loop(200, 120, late)
    report = t.report()
    f = biggest(report)
    assert f.verdict == "leak"
    assert f.bytes_per_iteration == KEPT
    since = f.growth_since
    assert since["iteration"] == 121 and since["stopped_at"] is None
    assert since["bytes_per_iteration"] == KEPT and since["grown_bytes"] == 79 * KEPT
    assert since["text"] == "leaking since iteration 122, 1.1 MiB per iteration"
    # Every view says it in the core's words.
    assert since["text"] in str(report)
    assert since["text"] in report.to_html()
    back = json.loads(report.to_json())
    assert back["findings"][0]["growth_since"] == since


def test_check_names_the_onset_of_a_leak_that_starts_on_the_fifteenth_call():
    kept, calls = [], []

    def step():
        calls.append(1)
        if len(calls) > 15:
            kept.append(torch.ones(256, 1024))

    report = torchleak.check(step, iterations=30)
    [leak] = report.leaks
    assert leak.bytes_per_iteration == 1 << 20
    assert leak.growth_since["iteration"] == 15  # the 16th call, counted from 0


def test_watch_announces_a_late_leak_within_ten_boundaries_of_its_onset(tmp_path, caplog):
    late, announced = [], []

    def on_leak(report):
        announced.append(report.iterations)

    with caplog.at_level(logging.WARNING, logger="torchleak"):
        with torchleak.watch(json=str(tmp_path / "w.json"), on_leak=on_leak) as w:  # the default budget
            loop(3000, 2000, late)
    # The first kept tensor ends iteration 2001 (0-based): its boundary is the 2002nd.
    [at] = announced
    assert 2002 <= at <= 2002 + 10, at
    [line] = w.leaks
    assert "leaking since iteration 2,002, 1.1 MiB per iteration" in line
    assert w.cued_checks >= 1  # the budget alone would not have looked in time
    final = json.loads((tmp_path / "w.json").read_text())
    f = max(final["findings"], key=lambda f: f["total_bytes"])
    assert f["verdict"] == "leak" and f["growth_since"]["iteration"] == 2001
    assert not w.withdrawn


def test_watch_withdraws_a_cache_that_filled_up_and_stopped(tmp_path, caplog):
    path = tmp_path / "cache.json"
    calls = []

    def on_leak(report):
        calls.append(("leak", report.iterations))

    def on_withdrawn(report):
        on_disk = json.loads(path.read_text())  # the report written with the withdrawal
        calls.append(("withdrawn", report.iterations, biggest(report).verdict, on_disk))

    model = torch.nn.Linear(4, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    cache = collections.OrderedDict()
    with caplog.at_level(logging.WARNING, logger="torchleak"):
        with torchleak.watch(json=str(path), on_leak=on_leak, on_withdrawn=on_withdrawn) as w:
            for i in range(250):
                model(torch.randn(2, 4)).sum().backward()
                opt.step()
                opt.zero_grad()
                cache[i] = torch.ones(65536)  # 256 KiB; the cache holds the last 20
                while len(cache) > 20:
                    cache.popitem(last=False)
    kinds = [c[0] for c in calls]
    assert kinds == ["leak", "withdrawn"], calls  # announced while it grew, withdrawn once
    _, at, verdict, on_disk = calls[1]
    # Full at iteration 20 (0-based); eight flat boundaries later, its oldest entries evicted
    # as new ones come, it is a cache, not a leak (one that pauses would keep them).
    assert 20 + 8 <= at <= 20 + 20, at
    assert verdict == "plateau"
    f = max(on_disk["findings"], key=lambda f: f["total_bytes"])
    assert f["verdict"] == "plateau" and f["growth_since"]["stopped_at"] == 20
    [line] = w.withdrawn
    assert line.startswith(f"torchleak: leak withdrawn after {at} iterations: ")
    assert "held by cache: grew 5.0 MiB until iteration 21, flat since; not a leak" in line
    messages = [r.getMessage() for r in caplog.records if r.name == "torchleak"]
    assert messages == w.leaks + w.withdrawn
    final = json.loads(path.read_text())
    f = max(final["findings"], key=lambda f: f["total_bytes"])
    assert f["verdict"] == "plateau"
    assert f["growth_since"]["text"] == "grew 5.0 MiB until iteration 21, flat since"


def test_a_failing_withdrawal_callback_does_not_stop_the_run():
    def on_withdrawn(report):
        raise RuntimeError("callback bug")

    cache = collections.OrderedDict()
    model = torch.nn.Linear(4, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.warns(RuntimeWarning, match="on_withdrawn raised RuntimeError: callback bug"):
        with torchleak.watch(json=None, on_withdrawn=on_withdrawn) as w:
            for i in range(150):
                model(torch.randn(2, 4)).sum().backward()
                opt.step()
                opt.zero_grad()
                cache[i] = torch.ones(65536)
                while len(cache) > 10:
                    cache.popitem(last=False)
    assert len(w.withdrawn) == 1


def test_leakcheck_names_the_onset_of_a_late_leak(shell):
    run(shell, "kept, calls = [], []")
    result = run(
        shell,
        "%%leakcheck -n 30\ncalls.append(1)\nif len(calls) > 15:\n    kept.append(torch.ones(256, 1024))\n",
    )
    assert result.success, result.output
    report = shell.display_pub.outputs[-1]["data"]["application/vnd.torchleak.report+json"]
    [leak] = [f for f in report["findings"] if f["verdict"] == "leak"]
    assert leak["growth_since"]["text"] == "leaking since iteration 16, 1.0 MiB per iteration"
    assert "leaking since iteration 16, 1.0 MiB per iteration" in shell.display_pub.outputs[-1]["data"]["text/html"]


def test_leakwatch_names_the_onset_of_a_cell_that_starts_leaking(shell, tmp_path):
    run(shell, "kept, runs = [], []")
    assert run(shell, "%leakwatch on").success
    for _ in range(24):
        run(shell, "runs.append(1)\nif len(runs) > 10:\n    kept.append(torch.ones(256, 1024))")
    out = tmp_path / "watch.json"
    assert run(shell, f"%leakreport --json {out}").success
    run(shell, "%leakwatch off")
    report = json.loads(out.read_text())
    [leak] = [f for f in report["findings"] if f["verdict"] == "leak"]
    assert leak["bytes_per_iteration"] == 1 << 20
    assert leak["growth_since"]["text"].startswith("leaking since cell run ")


def test_a_record_the_loop_keeps_on_purpose_is_growth_with_its_projection_not_a_leak():
    # An optimisation history: 8 B (the loss) and 48 B (the parameters) per trial, read back
    # by the loop to pick its step size.
    x = torch.zeros(6, dtype=torch.float64, requires_grad=True)
    opt = torch.optim.SGD([x], lr=0.1)
    losses, params = [], []
    with torchleak.track() as t:
        for _ in range(50):
            loss = ((x - 1) ** 2).sum()
            loss.backward()
            opt.step()
            opt.zero_grad()
            losses.append(loss.detach())
            params.append(x.detach().clone())
            best = min(range(len(losses)), key=lambda i: float(losses[i]))
            opt.param_groups[0]["lr"] = 0.1 if best == len(losses) - 1 else 0.05
    report = t.report()
    assert not report.leaks
    grown = {f.holder["path_text"]: f for f in report.findings if f.verdict == "growth"}
    assert set(grown) == {"losses", "params"}
    f = grown["params"]
    assert f.bytes_per_iteration == 48 and not f.get("fix_code")
    assert ".clear()" not in f.suggestion and "nothing to fix" in f.suggestion
    assert f.growth_since["text"].startswith("growing 48 B per iteration since iteration ")
    assert f.growth_since["text"].endswith("cpu would take over 100,000,000 iterations to fill")
    assert f.growth_since["text"] in str(report)
    assert report.summary["score"] == 100


def test_the_same_record_keeping_graphs_is_still_a_leak():
    x = torch.zeros(6, requires_grad=True)
    losses = []
    with torchleak.track() as t:
        for _ in range(30):
            loss = ((x - 1) ** 2).sum()
            losses.append(loss)  # keeps each step's graph
            torchleak.step()
    [leak] = t.report().leaks
    assert leak.holder["path_text"] == "losses"


def test_a_rise_far_above_the_last_look_is_cued_whatever_the_back_off():
    from torchleak._watch import _CheckCue

    cue = _CheckCue()
    total = 100_000_000
    for i in range(40):
        cue.observe(i, total)
    for _ in range(8):  # eight cued looks that found nothing: the back-off is 512 boundaries
        cue._rising.taken(0, changed=False)
    cue.looked(total)
    fired = []
    for i in range(40, 80):  # 1% per boundary: a quarter above the last look at boundary 65
        total += 1_000_000
        cue.observe(i, total)
        if cue.due(i, announced=False):
            fired.append(i)
            cue.taken(i, changed=False)
            cue.looked(total)
    assert fired and fired[0] == 40 + 24, fired


def test_the_check_cue_rises_settles_and_backs_off():
    from torchleak._watch import _CheckCue

    cue = _CheckCue()
    total, fired = 100_000_000, []
    for i in range(200):  # flat: nothing standing, nothing rising
        cue.observe(i, total)
        assert not cue.due(i, announced=False)
    for i in range(200, 260):  # 1% per boundary from 200 on
        total += 1_000_000
        cue.observe(i, total)
        if cue.due(i, announced=False):
            fired.append(i)
            cue.taken(i, changed=False)
            cue.looked(total)  # as Watch does after each look
    # Cued at the rise's 5th boundary (4% of the total), then backing off: 4, 8, 16 apart.
    assert fired[0] == 204 and [b - a for a, b in zip(fired, fired[1:])] == [4, 8, 16][: len(fired) - 1]
    cue.taken(fired[-1], changed=True)  # it was announced
    looks = []
    for i in range(260, 320):  # flat again, a leak standing
        cue.observe(i, total)
        if cue.due(i, announced=True):
            looks.append(i)
            cue.taken(i, changed=False)
            cue.looked(total)
    # The span still shows the rise at 260; from 267 on (no new high since 259) the settled
    # cue, backing off on its own: 267, 271, 279, 295.
    assert looks == [260, 259 + _CheckCue.SPAN, 271, 279, 295]


def test_an_oscillation_whose_peaks_rise_says_it_grew():
    # A list rebuilt every step whose size swings with a rising amplitude: its mean and peak
    # rise linearly. It was a `plateau` of 0 B per iteration with no word of growth; it now
    # says how much it grew, and until when.
    import math

    state = {}
    with torchleak.track() as t:
        for i in range(300):
            k = int((1 + i // 20) * (1 + math.sin(i / 3)))
            state["keep"] = [torch.ones(16 * 1024) for _ in range(k)]
            torchleak.step()
    f = max(t.report().findings, key=lambda f: f.count)
    assert f.verdict in ("leak", "undecided", "plateau"), f.verdict
    assert (f.get("growth_since") or {}).get("text", "").startswith("grew "), f.to_dict()
