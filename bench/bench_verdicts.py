"""How often torchleak's verdicts cry wolf, and how fast they confirm a real leak (`make bench`,
issue #28). Counts, not timings: nothing here depends on how loaded the machine is.

False alarms: clean training and inference loops, each run from its own seed,
  transformer  2 encoder layers, d=128, AdamW, 150 steps (the issue's reproducer)
  cnn          3 conv layers on 3x32x32 batches, SGD with momentum
  rnn          an LSTM over 32-step sequences, Adam, the hidden state detached each step
  kv-cache     inference that keeps the keys and values of the last 16 requests (a bounded cache)
  dataloader   an MLP fed by a shuffling DataLoader over a TensorDataset
  batch-sizes  an MLP on batches of 4-4096 rows, the last batch kept across the boundary as a
               script's loop variable keeps it (one block alive, 1 KiB-1 MiB: sampled or not;
               issue #30's watch-mode reproducer)
  - under torchleak.watch() with its defaults (every block recorded, since issue #61) but judged
    at every iteration (budget=1.0: the most looks a run can get, so the most chances to cry
    wolf);
  - under torchleak.check(iteration, state, iterations=20, warmup=2).
A run is a false alarm when anything is called a leak. Goal: 0 in at least 200 clean watch runs.
Time to verdict: every visible leak case of the suite (LEAK_CASES, which `make bench` sets) that runs under check() (the
notebook cases have no iterations to count), run with WARMUP + k iterations for k = 1, 2, ...:
the smallest k whose report calls the case's `# ALLOC` line a leak. Goal: k <= 5 for every case.
"""

import argparse
import collections
import contextlib
import importlib.util
import io
import json
import os
import subprocess
import sys
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
CASES = os.environ.get("LEAK_CASES", "")


# -- clean loops ---------------------------------------------------------------------------------
def transformer(torch):
    layer = torch.nn.TransformerEncoderLayer(d_model=128, nhead=4, dim_feedforward=256, dropout=0.1, batch_first=True)
    model = torch.nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
    head = torch.nn.Linear(128, 10)
    opt = torch.optim.AdamW(list(model.parameters()) + list(head.parameters()), lr=1e-3)

    def step():
        x = torch.randn(8, 32, 128)
        y = torch.randint(0, 10, (8,))
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(head(model(x).mean(1)), y)
        loss.backward()
        opt.step()

    return step, 150, False


def cnn(torch):
    nn = torch.nn
    model = nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(32, 32, 3, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(32, 10),
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def step():
        x = torch.randn(16, 3, 32, 32)
        y = torch.randint(0, 10, (16,))
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()

    return step, 100, False


def rnn(torch):
    lstm = torch.nn.LSTM(32, 64, batch_first=True)
    head = torch.nn.Linear(64, 1)
    opt = torch.optim.Adam(list(lstm.parameters()) + list(head.parameters()), lr=1e-3)
    state = {"h": None}

    def step():
        x = torch.randn(8, 32, 32)
        out, (h, c) = lstm(x, state["h"])
        state["h"] = (h.detach(), c.detach())
        loss = head(out[:, -1]).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()

    return step, 100, False


def kv_cache(torch):
    proj = torch.nn.Linear(64, 128)
    cache = collections.deque(maxlen=16)

    def step():
        with torch.no_grad():
            tokens = torch.randn(int(torch.randint(8, 64, ()).item()), 64)
            k, v = proj(tokens).chunk(2, dim=-1)
            cache.append((k, v))
            keys = torch.cat([kk for kk, _ in cache])
            values = torch.cat([vv for _, vv in cache])
            attn = torch.softmax(tokens[:, :64] @ keys.T / 8.0, dim=-1) @ values
            attn.sum().item()

    return step, 120, True


def dataloader(torch):
    data = torch.utils.data.TensorDataset(torch.randn(2048, 64), torch.randint(0, 4, (2048,)))
    loader = torch.utils.data.DataLoader(data, batch_size=32, shuffle=True)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    batches = iter(())

    def step():
        nonlocal batches
        try:
            x, y = next(batches)
        except StopIteration:
            batches = iter(loader)
            x, y = next(batches)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()

    return step, 120, False


def batch_sizes(torch):
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 4))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    last = {}

    def step():
        n = int(torch.randint(4, 4097, ()).item())
        # The new batch is made while the previous one is still held, as `x = ...` in a loop.
        last["x"], last["y"] = torch.randn(n, 64), torch.randint(0, 4, (n,))
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(last["x"]), last["y"]).backward()
        opt.step()

    return step, 200, False


LOOPS = {
    "transformer": transformer,
    "cnn": cnn,
    "rnn": rnn,
    "kv-cache": kv_cache,
    "dataloader": dataloader,
    "batch-sizes": batch_sizes,
}


def _clean_runs(name, seeds, mode):
    """One child process per loop and mode: (runs, false alarms, looks, what was called)."""
    import torch
    import torchleak

    torch.set_num_threads(1)
    alarms, looks, called = 0, 0, []
    for seed in seeds:
        torch.manual_seed(seed)
        # explicit: no optimizer marks the iterations (inference), torchleak.step() does.
        step, steps, explicit = LOOPS[name](torch)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if mode == "watch":
                with torchleak.watch(json=None, budget=1.0) as watch:
                    for _ in range(steps):
                        step()
                        if explicit:
                            torchleak.step()
                looks += watch.checks
                leaks = watch.leaks
            else:
                report = torchleak.check(step, iterations=20, warmup=2)
                looks += 1
                leaks = [f"{f.site_text} held by {(f.get('holder') or {}).get('path_text')}" for f in report.leaks]
        if leaks:
            alarms += 1
            called.append(f"seed {seed}: {leaks[0]}")
    return {"runs": len(seeds), "alarms": alarms, "looks": looks, "called": called}


# -- time to verdict ---------------------------------------------------------------------------
def _load_case(path):
    spec = importlib.util.spec_from_file_location(os.path.basename(path)[:-3], path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _alloc_line(path):
    with open(path, encoding="utf-8") as fh:
        return next((n for n, line in enumerate(fh, 1) if "# ALLOC" in line), None)


def _time_to_verdict(path, most):
    """The smallest k (iterations past warm-up) at which check() calls the ALLOC line a leak."""
    import torchleak

    case = _load_case(path)
    line = _alloc_line(path)
    for k in range(1, most + 1):
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            report = torchleak.check(case.iteration, case.make(), iterations=case.WARMUP + k, warmup=case.WARMUP)
        if any(
            f.site.get("line") == line and os.path.samefile(f.site.get("file", ""), path)
            for f in report.leaks
            if os.path.exists(f.site.get("file", ""))
        ):
            return k
    return None


def _leak_cases():
    if not os.path.isdir(CASES):
        return []
    found = []
    for name in sorted(os.listdir(CASES)):
        path = os.path.join(CASES, name)
        if not name.endswith(".py") or name == "run.py":
            continue
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
        if 'KIND = "leak"' in text and "CELLS" not in text and 'DEVICE = "cpu"' in text:
            found.append(path)
    return found


def _child(args):
    if args.one_loop:
        name, mode, first, count = args.one_loop
        seeds = range(int(first), int(first) + int(count))
        result = _clean_runs(name, list(seeds), mode)
    else:
        result = {"k": _time_to_verdict(args.one_case, args.most)}
    print(json.dumps(result))


def _run_child(extra, timeout):
    out = subprocess.run(
        [sys.executable, os.path.abspath(__file__)] + extra,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(extra)} failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--watch-runs", type=int, default=40, help="clean watch runs per loop")
    parser.add_argument("--check-runs", type=int, default=20, help="clean check runs per loop")
    parser.add_argument("--most", type=int, default=10, help="most iterations past warm-up tried")
    parser.add_argument("--json", help="also write the results to this file")
    parser.add_argument("--one-loop", nargs=4, help=argparse.SUPPRESS)
    parser.add_argument("--one-case", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one_loop or args.one_case:
        return _child(args)

    results = {"false_alarms": {}, "time_to_verdict": {}}
    started = time.perf_counter()
    print("False alarms over clean runs (a run is a false alarm if anything is called a leak)")
    print(f"{'loop':<12} {'mode':<6} {'runs':>5} {'looks':>7} {'false alarms':>13}")
    totals = {"watch": [0, 0, 0], "check": [0, 0, 0]}
    for name in LOOPS:
        for mode, runs in (("watch", args.watch_runs), ("check", args.check_runs)):
            r = _run_child(["--one-loop", name, mode, "1000", str(runs)], timeout=3000)
            results["false_alarms"][f"{name}/{mode}"] = r
            for i, key in enumerate(("runs", "looks", "alarms")):
                totals[mode][i] += r[key]
            print(f"{name:<12} {mode:<6} {r['runs']:>5} {r['looks']:>7} {r['alarms']:>13}")
            for line in r["called"][:3]:
                print(f"{'':<12} called: {line}")
    for mode, (runs, looks, alarms) in totals.items():
        print(f"{'all':<12} {mode:<6} {runs:>5} {looks:>7} {alarms:>13}")
    results["false_alarms"]["totals"] = totals

    print("\nIterations past warm-up until check() confirms each visible leak case")
    print(f"{'case':<48} {'k':>4}")
    worst = 0
    for path in _leak_cases():
        r = _run_child(["--one-case", path, "--most", str(args.most)], timeout=600)
        k = r["k"]
        results["time_to_verdict"][os.path.basename(path)] = k
        worst = max(worst, k if k is not None else args.most + 1)
        print(f"{os.path.basename(path)[:-3]:<48} {k if k is not None else f'>{args.most}':>4}")
    print(f"{'worst':<48} {worst if worst <= args.most else f'>{args.most}':>4}")
    print(f"\n({time.perf_counter() - started:.0f} s)")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(results, fh, indent=2)


if __name__ == "__main__":
    sys.exit(main())
