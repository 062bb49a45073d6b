"""How torchleak scales (`make bench`, issue #15): report time and extra memory against what is
alive and how long the run was, the step's cost late in a long run, and cell watch's cost per
cell with many tensors alive.

Every scenario runs in a fresh interpreter (`python bench_scale.py --one NAME`), so that one
scenario's heap and peak memory do not leak into the next. Memory is the process's peak
resident set during report() less its resident set just before (the kernel's high-water mark
is reset first, /proc/self/clear_refs), so it counts the report's own allocations, C++ ones
included, and nothing the scenario allocated before.
  blocks N          N tensors alive (1-element, one site), 4 iterations; report() with paths.
  iterations N      one 8-byte tensor kept per iteration for N iterations; report(paths=False)
                    and report(); the step's cost around iteration 10^3 and at the run's end,
                    side by side in the same run (the median of 1,000 steps timed one by one).
  rnn N             an unrolled tanh RNN of N steps with its graph alive; report().
  chains N          four autograd chains of N nodes each, kept; report().
  load N            a saved report of N findings (the fixture leaky_loop.json's, repeated;
                    about 5 KiB each): Report.load's extra peak memory against the file's size
                    and against json.loads of the same file, each measured on its own.
  watch N           %leakwatch with N tensors alive: what cell watch adds to a cell that
                    allocates and keeps one tensor, in an in-process IPython shell.
  sites N           N lines of one file each keeping a tensor, 30 iterations: the loop under
                    track() and under watch(sample_bytes=0), which announces all N at once
                    (issue #64: at most 3x); the announcement's own seconds (watch's clock).
  looks N           one look of watch() one step after the last, 600 steps in: N sites that
                    stopped changing beside one leaking line, then N / 10 sites growing at
                    every step (issue #64).
  model N           %leakwatch in a notebook's state (issue #62): a trained 4-layer encoder,
                    AdamW's state and N tensors alive in all; what cell watch adds to a cell
                    that keeps a tensor and to one that rebinds a name to a new tensor, each
                    the median (and minimum) of 20 interleaved rounds of 10 cells, watched
                    against unwatched.
Each scenario is run `--rounds` times (fresh processes); the table prints the median and the
minimum (the maximum for memory: the worse case) over the rounds.
Goals (issue #15): report of 10^6 live blocks <= 1 s and <= 200 MB extra; report time roughly
linear in live blocks; history bounded for any number of iterations; step cost and watch-mode
cost flat as the run grows.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time


def _rss_mib(field="VmRSS"):
    with open("/proc/self/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    return 0.0


def _measure_report(fn):
    """Seconds and extra peak MiB of fn()."""
    import gc

    gc.collect()
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as fh:
            fh.write("5")  # resets VmHWM to the current RSS
    except OSError:
        pass
    before = _rss_mib()
    start = time.perf_counter()
    out = fn()
    seconds = time.perf_counter() - start
    return out, seconds, max(_rss_mib("VmHWM") - before, 0.0)


def scenario_blocks(n):
    import torch
    import torchleak

    keep = []
    with torchleak.track() as t:
        for _ in range(4):
            keep.extend(torch.empty(1) for _ in range(n // 4))
            torchleak.step()
        report, seconds, mib = _measure_report(t.report)
    leak = report.findings[0]
    assert leak.verdict == "leak" and leak.holder is not None, (leak.verdict, leak.holder)
    return {"seconds": seconds, "mib": mib, "live_blocks": n}


def scenario_iterations(n):
    import torch
    import torchleak

    keep = []
    early, late = [], []
    # Each step of the two windows timed alone, and the median taken: Python's full collections
    # (50-65 ms each with 10^5 tensors alive, six in the run) fall where the allocation count
    # puts them, and one inside a window of 1,000 steps read as a step 20 times dearer (95.8 us
    # on 2026-11-29, 4.3 us without it).
    with torchleak.track() as t:
        for i in range(n):
            window = early if 1000 <= i < 2000 else late if i >= n - 1000 else None
            if window is not None:
                mark = time.perf_counter()
            keep.append(torch.ones(2))
            torchleak.step()
            if window is not None:
                window.append(time.perf_counter() - mark)
        early, late = statistics.median(early), statistics.median(late)
        quick, quick_s, quick_mib = _measure_report(lambda: t.report(paths=False))
        full, full_s, full_mib = _measure_report(t.report)
    leak = full.findings[0]
    # 8 B per iteration in the script's own list, no graph: growth in proportion (issue #43),
    # judged by the same rules as a leak.
    assert leak.verdict == "growth" and leak.bytes_per_iteration == 8, (leak.verdict, leak.bytes_per_iteration)
    assert quick.iterations == n
    return {
        "seconds_no_paths": quick_s,
        "mib_no_paths": quick_mib,
        "seconds": full_s,
        "mib": full_mib,
        "kept_points": len(leak.series),
        "step_us_early": early * 1e6,
        "step_us_late": late * 1e6,
    }


def scenario_rnn(n):
    import torch
    import torchleak

    with torchleak.track() as t:
        for _ in range(3):
            w = torch.randn(8, 8, requires_grad=True)
            h = torch.zeros(1, 8)
            for _ in range(n // 3):
                h = torch.tanh(h @ w)
            torchleak.step()
        report, seconds, mib = _measure_report(t.report)
    assert report.findings, "the graph's memory was not reported"
    return {"seconds": seconds, "mib": mib}


def scenario_chains(n):
    import torch
    import torchleak

    keep = []
    with torchleak.track() as t:
        for _ in range(4):
            y = torch.randn(4, requires_grad=True)
            for _ in range(n):
                y = y * 1.0001
            keep.append(y)
            torchleak.step()
        report, seconds, mib = _measure_report(t.report)
    assert any(f.verdict == "leak" for f in report.findings)
    return {"seconds": seconds, "mib": mib}


def scenario_load(n):
    import copy
    import tempfile

    from torchleak import Report

    fixture = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "leaky_loop.json")
    with open(fixture, encoding="utf-8") as fh:
        report = json.load(fh)
    findings = []
    while len(findings) < n:
        for f in report["findings"]:
            f = copy.deepcopy(f)
            f["site"]["line"] = len(findings) + 1
            findings.append(f)
    report["findings"] = findings[:n]
    report["causes"] = []
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "large.json")
        with open(path, "w", encoding="utf-8") as fh:
            json.dump(report, fh, indent=2)
        del report, findings
        size = os.path.getsize(path) / 2**20

        def plain():
            with open(path, "rb") as fh:
                return json.loads(fh.read())

        data, _, json_mib = _measure_report(plain)
        del data
        loaded, seconds, mib = _measure_report(lambda: Report.load(path))
        assert len(loaded.findings) == n
    return {"seconds": seconds, "mib": mib, "json_mib": json_mib, "file_mib": size}


def _notebook_shell():
    """An in-process IPython shell with torchleak's extension loaded, its outputs captured."""
    from IPython.core.displaypub import CapturingDisplayPublisher
    from IPython.core.interactiveshell import InteractiveShell
    from traitlets.config import Config

    cfg = Config()
    cfg.HistoryManager.hist_file = ":memory:"
    shell = InteractiveShell.instance(config=cfg, display_pub_class=CapturingDisplayPublisher)
    shell.run_cell("%load_ext torchleak")
    return shell


def _per_cell(shell, cell, cells=10):
    """Seconds one run of `cell` takes, the mean of `cells` runs."""
    start = time.perf_counter()
    for _ in range(cells):
        shell.run_cell(cell, store_history=True)
    shell.display_pub.outputs.clear()
    return (time.perf_counter() - start) / cells


def scenario_watch(n):
    shell = _notebook_shell()
    shell.run_cell("import torch\nkept = []")

    def per_cell():
        return _per_cell(shell, "kept.append(torch.ones(4))")

    shell.run_cell("%leakwatch on")
    small = per_cell() - _plain(shell, per_cell)
    shell.run_cell(f"many = [torch.ones(1) for _ in range({n})]")
    big = per_cell() - _plain(shell, per_cell)
    shell.run_cell("%leakwatch off")
    return {"ms_few_alive": small * 1e3, "ms_many_alive": big * 1e3, "alive": n}


def _sites_file(n):
    """N lines of one file, each keeping a 256-byte tensor: N allocation sites."""
    import tempfile

    source = "\n".join("keep.append(torch.ones(64))" for _ in range(n))
    path = os.path.join(tempfile.mkdtemp(prefix="tl_sites_"), "many_sites.py")
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(source)
    return compile(source, path, "exec")


def scenario_sites(n, steps=30):
    import torch
    import torchleak

    code = _sites_file(n)

    def loop(mode):
        scope = {"torch": torch, "keep": []}
        start = time.perf_counter()
        with mode as tracking:
            for _ in range(steps):
                exec(code, scope)
                torchleak.step()
            seconds = time.perf_counter() - start
        return seconds, tracking

    tracked, _ = loop(torchleak.track())
    watched, watcher = loop(torchleak.watch(json=None, sample_bytes=0))
    return {
        "track_s": tracked,
        "watch_s": watched,
        "ratio": watched / tracked,
        "judging_s": watcher._spent,  # watch's own clock: its looks and the announcement
        "announced": len(watcher.leaks),
    }


def scenario_looks(n, steps=600, looks=5):
    """What one look of watch() costs late in a run (issue #64): N sites that kept a tensor
    before the first step and never changed again, beside one leaking line; and, in the same
    process after it, N / 10 sites that each keep a tensor at every step. The median and the
    minimum of `looks` looks each (the tracker's own look, as watch takes it: the sites settled
    at an earlier look and unchanged since left out), each one step after the last look, as a
    watch looks: a second look at the same boundary would find every site as the first left
    it."""
    import torch
    import torchleak

    code = _sites_file(n)
    growing = _sites_file(n // 10)
    result = {}
    for name, before, every in (("flat", code, None), ("growing", None, growing)):
        scope = {"torch": torch, "keep": []}
        leak = []
        with torchleak.track() as tracker:
            if before is not None:
                exec(before, scope)
            for _ in range(steps):
                if every is not None:
                    exec(every, scope)
                leak.append(torch.ones(256))
                torchleak.step()
            tracker._verdicts(leave_out_settled=True)
            seconds = []
            for _ in range(looks):
                if every is not None:
                    exec(every, scope)
                leak.append(torch.ones(256))
                torchleak.step()
                start = time.perf_counter()
                tracker._verdicts(leave_out_settled=True)
                seconds.append(time.perf_counter() - start)
        result[f"{name}_s"] = statistics.median(seconds)
        result[f"{name}_min_s"] = min(seconds)
        del scope, leak
    return result


def scenario_model(n, rounds=20):
    shell = _notebook_shell()
    setup = shell.run_cell(
        "import torch\n"
        "torch.manual_seed(0)\n"
        "layer = torch.nn.TransformerEncoderLayer(d_model=128, nhead=4, dim_feedforward=256, batch_first=True)\n"
        "model = torch.nn.TransformerEncoder(layer, num_layers=4)\n"
        "opt = torch.optim.AdamW(model.parameters(), lr=1e-3)\n"
        "for _ in range(3):\n"
        "    loss = model(torch.randn(8, 32, 128)).square().mean()\n"
        "    loss.backward(); opt.step(); opt.zero_grad()\n"
        "owned = len(list(model.parameters())) * 3\n"  # each parameter, its exp_avg, exp_avg_sq
        f"bank = [torch.randn(16) for _ in range({n} - owned)]\n"
        "kept = []\n"
        "x = torch.ones(4)\n"
    )
    setup.raise_error()
    cells = {"keep": "kept.append(torch.ones(4))", "rebind": "x = torch.randn(64)"}

    added = {name: [] for name in cells}
    for _ in range(rounds):  # interleaved: unwatched, then watched, cell by cell
        for name, cell in cells.items():
            shell.run_cell("%leakwatch off")
            plain = _per_cell(shell, cell)
            shell.run_cell("%leakwatch on")
            added[name].append((_per_cell(shell, cell) - plain) * 1e3)
    shell.run_cell("%leakwatch off")
    out = {"alive": n, "rounds": rounds}
    for name, values in added.items():
        out[f"ms_{name}"] = statistics.median(values)
        out[f"ms_{name}_min"] = min(values)
    return out


def _plain(shell, per_cell):
    shell.run_cell("%leakwatch off")
    plain = per_cell()
    shell.run_cell("%leakwatch on")
    return plain


SCENARIOS = {
    "blocks": scenario_blocks,
    "iterations": scenario_iterations,
    "rnn": scenario_rnn,
    "chains": scenario_chains,
    "watch": scenario_watch,
    "model": scenario_model,
    "sites": scenario_sites,
    "looks": scenario_looks,
    "load": scenario_load,
}


def run_one(name, n):
    out = subprocess.run(
        [sys.executable, __file__, "--one", name, str(n)], capture_output=True, text=True, timeout=900, check=False
    )
    if out.returncode != 0:
        raise SystemExit(f"scenario {name} {n} failed:\n{out.stdout}\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--one", nargs=2, metavar=("SCENARIO", "N"), help=argparse.SUPPRESS)
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args()
    if args.one:
        name, n = args.one
        print(json.dumps(SCENARIOS[name](int(n))))
        return

    plan = [
        ("blocks", 250_000),
        ("blocks", 1_000_000),
        ("iterations", 10_000),
        ("iterations", 100_000),
        ("rnn", 40_000),
        ("chains", 30_000),
        ("watch", 100_000),
        ("model", 5_000),
        ("sites", 2_000),
        ("looks", 10_000),
        ("load", 40_000),
    ]
    results = {f"{name} {n}": [] for name, n in plan}
    for _ in range(args.rounds):  # interleaved: machine noise hits every scenario alike
        for name, n in plan:
            results[f"{name} {n}"].append(run_one(name, n))

    def col(key, field):
        return [r[field] for r in results[key]]

    def med_min(key, field, fmt="{:.2f}"):
        values = col(key, field)
        return f"{fmt.format(statistics.median(values))} (min {fmt.format(min(values))})"

    def med_max(key, field):
        values = col(key, field)
        return f"{statistics.median(values):.0f} (max {max(values):.0f})"

    linear = [b / a for a, b in zip(col("blocks 250000", "seconds"), col("blocks 1000000", "seconds"))]
    step_ratio = [r["step_us_late"] / r["step_us_early"] for r in results["iterations 100000"]]
    load_per_file = [r["mib"] / r["file_mib"] for r in results["load 40000"]]
    load_per_json = [r["mib"] / max(r["json_mib"], 1.0) for r in results["load 40000"]]
    sites_ratio = col("sites 2000", "ratio")
    watch_ratio = [r["ms_many_alive"] / max(r["ms_few_alive"], 1e-3) for r in results["watch 100000"]]
    rows = [
        (
            "report, 2.5*10^5 live blocks: s / extra MiB",
            med_min("blocks 250000", "seconds"),
            med_max("blocks 250000", "mib"),
        ),
        (
            "report, 10^6 live blocks: s / extra MiB",
            med_min("blocks 1000000", "seconds"),
            med_max("blocks 1000000", "mib") + "  (goal <= 1 s, <= 200 MB)",
        ),
        (
            "  time ratio 10^6 / 2.5*10^5 blocks (linear: 4)",
            f"{statistics.median(linear):.2f} (min {min(linear):.2f})",
            "",
        ),
        (
            "report(paths=False), 10^4 iterations: s / MiB",
            med_min("iterations 10000", "seconds_no_paths"),
            med_max("iterations 10000", "mib_no_paths"),
        ),
        (
            "report(paths=False), 10^5 iterations: s / MiB",
            med_min("iterations 100000", "seconds_no_paths"),
            med_max("iterations 100000", "mib_no_paths"),
        ),
        (
            "report(), 10^5 iterations: s / MiB",
            med_min("iterations 100000", "seconds"),
            med_max("iterations 100000", "mib"),
        ),
        (
            "  points kept of 10^4 / 10^5 iterations",
            f"{col('iterations 10000', 'kept_points')[0]} / {col('iterations 100000', 'kept_points')[0]}",
            "(bounded: at most 528)",
        ),
        (
            "step at iteration 10^3 / at 10^5: us",
            f"{statistics.median(col('iterations 100000', 'step_us_early')):.1f} / "
            f"{statistics.median(col('iterations 100000', 'step_us_late')):.1f}",
            f"ratio {statistics.median(step_ratio):.2f} median, {min(step_ratio):.2f} min (flat: 1)",
        ),
        ("report, RNN of 40,000 steps: s / extra MiB", med_min("rnn 40000", "seconds"), med_max("rnn 40000", "mib")),
        (
            "report, 4 chains of 30,000 nodes: s / extra MiB",
            med_min("chains 30000", "seconds"),
            med_max("chains 30000", "mib"),
        ),
        (
            f"Report.load, {statistics.median(col('load 40000', 'file_mib')):.0f} MiB file: s / extra MiB",
            med_min("load 40000", "seconds"),
            med_max("load 40000", "mib"),
        ),
        (
            "  load's extra memory / file size; / json.loads'",
            f"{statistics.median(load_per_file):.2f} (max {max(load_per_file):.2f})",
            f"{statistics.median(load_per_json):.2f} median, {max(load_per_json):.2f} max (json.loads alone: 1)",
        ),
        (
            "cell watch per cell, few / 10^5 tensors alive: ms",
            f"{statistics.median(col('watch 100000', 'ms_few_alive')):.1f} / "
            f"{statistics.median(col('watch 100000', 'ms_many_alive')):.1f}",
            f"ratio {statistics.median(watch_ratio):.2f} median, {min(watch_ratio):.2f} min (flat: 1)",
        ),
        (
            "cell watch, trained encoder + AdamW, 5,000 tensors: keep / rebind ms",
            f"{statistics.median(col('model 5000', 'ms_keep')):.1f} / "
            f"{statistics.median(col('model 5000', 'ms_rebind')):.1f}",
            f"min {min(col('model 5000', 'ms_keep_min')):.1f} / {min(col('model 5000', 'ms_rebind_min')):.1f}"
            " (each the median of 20 interleaved rounds; goal <= 20 ms, issue #62)",
        ),
        (
            "watch(sample_bytes=0) / track(), 2,000 leaking sites, 30 steps",
            f"{statistics.median(sites_ratio):.2f}x (min {min(sites_ratio):.2f}x)",
            f"track {statistics.median(col('sites 2000', 'track_s')):.2f} s, watch "
            f"{statistics.median(col('sites 2000', 'watch_s')):.2f} s, of which judging "
            f"{statistics.median(col('sites 2000', 'judging_s')):.2f} s (goal <= 3x, issue #64)",
        ),
        (
            "one look of watch() a step after the last, 600 steps in: 10^4 sites that stopped changing",
            med_min("looks 10000", "flat_s", "{:.3f}") + " s",
            "beside one leaking line (issue #64)",
        ),
        (
            "one look of watch() a step after the last, 600 steps in: 10^3 sites growing at every step",
            med_min("looks 10000", "growing_s", "{:.3f}") + " s",
            "",
        ),
    ]
    width = max(len(r[0]) for r in rows)
    print(
        f"torchleak at scale — {args.rounds} rounds, each scenario in a fresh process; "
        f"median (min) of time, median (max) of memory"
    )
    print(f"{'measure':<{width}}  {'value':>24}  memory / note")
    for name, value, note in rows:
        print(f"{name:<{width}}  {value:>24}  {note}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(results, fh, indent=1)


if __name__ == "__main__":
    main()
