"""Verdicts on the growth shapes real runs have (`make bench`, issues #43 and #61). Counts, not timings.

Each shape is a real training loop (an MLP, 1024 wide, Adam: about 32 MiB tracked) that keeps
tensors in the shape's pattern, run from its own seeds, at three run lengths (300, 1,500 and
5,000 steps; onsets and periods scale with the run where they are fractions of it):
  leaks   late onset at 10%, 50% and 90% of the run (384 KiB per step, 1.2% of the tracked
          total); a staircase (1 MiB every 25 steps, an evaluation epoch's leak, from a third
          of the run); a slow staircase (4 MiB every 40 steps from 30%); a rising floor under a
          saw-tooth (a buffer cleared every 10 steps that leaves one block behind); a slow leak
          under transients ten times its size (16 KiB kept per step, 0-160 KiB kept across one
          boundary); 4 KiB blocks from the middle of the run; 64 KiB blocks from the middle
          under 1 MiB of noise; a restart after a pause (384 KiB per step from 20% to 40% and
          again from 60%)
  clean   warm-up (lazy buffers in the first 5 steps); caches of 256 KiB entries that fill for
          90% and for 95% of the run and stop; evaluation spikes (outputs of an evaluation pass
          every 50 steps, kept one step); variable batch shapes; an LRU cache of 100 entries of
          random sizes
Modes: `watch()` looking at every boundary (budget=1.0: it records as track() does, so its
first announcement is the boundary at which track() would confirm the leak, and its final
report is track()'s: the verdict at the end and the onset it names, against the truth: for a
leak that paused and grew again, the stretch growing now, and whether the earlier one is named);
`watch()` with its defaults (every block recorded, the 0.5% time budget, the memory cues): the
boundaries from the onset to its announcement, and past the one track() would confirm; and at
the first run length `watch(sample_bytes=262144)`, the sampling that was the default before
issue #61. A clean run is a false alarm when anything is a leak at its end. Growth that stopped
in the run's last stretch is `undecided` at the end (too soon to tell a filled cache from a
leak that pauses): counted apart, with what watch() announced while it grew and what it
withdrew. A staircase's announcement is also counted in its steps.
"""

import argparse
import collections
import statistics
import sys
import warnings

LENGTHS = (300, 1500, 5000)


class Loop:
    """A small model's training loop; `keep(step)` is the shape, run after each optimizer step
    (so what it keeps lands in the next iteration: onset o means iteration o + 1)."""

    def __init__(self, torch, seed):
        torch.manual_seed(seed)
        self.torch = torch
        nn = torch.nn
        self.model = nn.Sequential(nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 1024))
        self.opt = torch.optim.Adam(self.model.parameters(), lr=1e-4)
        self.gen = torch.Generator().manual_seed(seed)

    def step(self, rows=32):
        x = self.torch.randn(rows, 1024)
        self.opt.zero_grad()
        self.model(x).square().mean().backward()
        self.opt.step()

    def randint(self, low, high):
        return int(self.torch.randint(low, high, (), generator=self.gen))


# Each shape: steps -> (keep(loop, state, step), onset step or None for clean, period of a
# staircase, and for a leak that paused and resumed the step it resumed at: its onset as named).
def late_onset(fraction):
    def make(steps):
        onset = int(steps * fraction)

        def shape(loop, state, step):
            if step >= onset:
                state.setdefault("kept", []).append(loop.torch.ones(96 * 1024))  # 384 KiB

        return shape, onset, None, None

    return make


def staircase(every, mib, start):
    def make(steps):
        onset = int(steps * start)

        def shape(loop, state, step):
            if step >= onset and (step - onset) % every == 0:
                state.setdefault("kept", []).append(loop.torch.ones(mib * 256 * 1024))

        return shape, onset, every, None

    return make


def rising_floor(steps):
    def shape(loop, state, step):
        buf = state.setdefault("buffer", [])
        buf.append(loop.torch.ones(16 * 1024))  # 64 KiB
        if len(buf) == 10:
            state.setdefault("floor", []).append(buf[-1])  # one block stays behind
            buf.clear()

    return shape, 0, None, None


def slow_leak_under_noise(steps):
    def shape(loop, state, step):
        state.setdefault("kept", []).append(loop.torch.ones(4 * 1024))  # 16 KiB
        state["transient"] = loop.torch.ones(loop.randint(0, 40 * 1024 + 1))  # 0-160 KiB

    return shape, 0, None, None


def small_blocks_late(kib, noise_kib):
    def make(steps):
        onset = steps // 2

        def shape(loop, state, step):
            if noise_kib:
                state["noise"] = loop.torch.ones(noise_kib * 256)
            if step >= onset:
                state.setdefault("kept", []).append(loop.torch.ones(kib * 256))

        return shape, onset, None, None

    return make


def restart_after_pause(steps):
    first, pause, again = int(steps * 0.2), int(steps * 0.4), int(steps * 0.6)

    def shape(loop, state, step):
        if first <= step < pause or step >= again:
            state.setdefault("kept", []).append(loop.torch.ones(96 * 1024))  # 384 KiB

    return shape, first, None, again


def warmup(steps):
    def shape(loop, state, step):
        if step < 5:
            state.setdefault("buffers", []).append(loop.torch.ones(64 * 1024))

    return shape, None, None, None


def bounded_cache(fraction):
    def make(steps):
        def shape(loop, state, step):
            cache = state.setdefault("cache", collections.OrderedDict())
            cache[step] = loop.torch.ones(64 * 1024)  # 256 KiB
            while len(cache) > int(steps * fraction):
                cache.popitem(last=False)

        return shape, None, None, None

    return make


def evaluation_spikes(steps):
    def shape(loop, state, step):
        state.pop("eval", None)
        if step % 50 == 49:
            with loop.torch.no_grad():
                state["eval"] = [loop.model(loop.torch.randn(256, 1024)) for _ in range(8)]

    return shape, None, None, None


def variable_batches(steps):
    def shape(loop, state, step):
        state["last"] = loop.torch.randn(loop.randint(4, 1025), 1024)

    return shape, None, None, None


def lru_churn(steps):
    def shape(loop, state, step):
        cache = state.setdefault("lru", collections.OrderedDict())
        cache[step] = loop.torch.ones(loop.randint(1024, 64 * 1024))
        key = loop.randint(0, step + 1)
        if key in cache:
            cache.move_to_end(key)  # a hit
        while len(cache) > 100:
            cache.popitem(last=False)

    return shape, None, None, None


def shapes():
    """(name, make(steps), seeds at the first run length)."""
    out = [(f"late onset at {int(f * 100)}%", late_onset(f), 2) for f in (0.1, 0.5, 0.9)]
    out += [
        ("staircase, 1 MiB every 25 steps from 33%", staircase(25, 1, 1 / 3), 2),
        ("slow staircase, 4 MiB every 40 steps from 30%", staircase(40, 4, 0.3), 2),
        ("rising floor under a saw-tooth", rising_floor, 2),
        ("slow leak under 10x transients", slow_leak_under_noise, 5),
        ("4 KiB blocks from 50%", small_blocks_late(4, 0), 5),
        ("64 KiB blocks from 50% under 1 MiB of noise", small_blocks_late(64, 1024), 2),
        ("restart after a pause (20-40%, 60%-)", restart_after_pause, 2),
        ("warm-up", warmup, 2),
        ("cache filling 90% of the run", bounded_cache(0.9), 2),
        ("cache filling 95% of the run", bounded_cache(0.95), 2),
        ("evaluation spikes", evaluation_spikes, 5),
        ("variable batch shapes", variable_batches, 5),
        ("LRU churn", lru_churn, 5),
    ]
    return out


def _biggest_leak(report):
    leaks = [f for f in report.leaks if f.site["line"]]
    return max(leaks, key=lambda f: f.total_bytes) if leaks else None


MODES = {"every": {"budget": 1.0}, "watch": {}, "sampled": {"sample_bytes": 256 * 1024}}


def run_shape(torch, torchleak, shape, steps, seed, mode):
    loop, state = Loop(torch, seed), {}
    announced, withdrawn = [], []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with torchleak.watch(
            json=None,
            on_leak=lambda r: announced.append(r.iterations),
            on_withdrawn=lambda r: withdrawn.append(r.iterations),
            **MODES[mode],
        ) as session:
            for step in range(steps):
                loop.step()
                shape(loop, state, step)
        report = session.report(paths=False)
    leak = _biggest_leak(report)
    since = (leak.get("growth_since") or {}) if leak else {}
    onset, earlier = since.get("iteration"), since.get("earlier")
    undecided = any(f.verdict == "undecided" for f in report.findings)
    return {
        "leak": leak is not None,
        "onset": onset,
        "earlier": earlier,
        "announced": announced,
        "withdrawn": withdrawn,
        "undecided": undecided,
    }


def _ended(runs):
    """A clean shape's end: how many runs had a leak (false alarms), and how many ended undecided."""
    n = len(runs)
    alarms = sum(r["leak"] for r in runs)
    undecided = sum(r["undecided"] and not r["leak"] for r in runs)
    return f"{alarms}/{n} false" + (f", {undecided}/{n} undecided" if undecided else "")


def _spread(values):
    return f"{statistics.median(values):g} / {max(values)}" if values else "-"


def leak_row(name, steps, onset, period, resumed, every, watch, sampled):
    n = len(every)
    truth = onset + 1  # kept after step `onset`: in iteration onset + 1
    named = (resumed if resumed is not None else onset) + 1
    errors = [abs(r["onset"] - named) for r in every if r["leak"] and r["onset"] is not None]
    confirm = [r["announced"][0] - truth for r in every if r["announced"]]
    delays = [r["announced"][0] - truth for r in watch if r["announced"]]
    past = [w["announced"][0] - e["announced"][0] for e, w in zip(every, watch) if e["announced"] and w["announced"]]
    said = f"{sum(bool(r['announced']) for r in watch)}/{n}"
    sampled_delays = [r["announced"][0] - truth for r in sampled if r["announced"]]
    if period and delays:
        said += f" (step {statistics.median(d // period + 1 for d in delays):g})"
    return (
        name,
        steps,
        f"{sum(r['leak'] for r in every)}/{n}",
        _spread(errors) + (f" (earlier stretch named {sum(bool(r['earlier']) for r in every)}/{n})" if resumed else ""),
        _spread(confirm),
        said,
        _spread(delays),
        _spread(past),
        f"{sum(r['leak'] for r in watch)}/{n}",
        f"{sum(bool(r['announced']) for r in sampled)}/{len(sampled)}, {_spread(sampled_delays)}" if sampled else "-",
    )


def clean_row(name, steps, every, watch, sampled):
    said = sum(len(r["announced"]) for r in watch)
    taken = sum(len(r["withdrawn"]) for r in watch)
    return (
        name,
        steps,
        _ended(every),
        "-",
        "-",
        f"{said} / {taken}",
        "-",
        "-",
        _ended(watch),
        _ended(sampled) if sampled else "-",
    )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--seeds", type=int, default=0, help="seeds per shape at the first run length (0: each shape's own)"
    )
    parser.add_argument("--lengths", default=",".join(map(str, LENGTHS)), help="run lengths in steps (comma-separated)")
    parser.add_argument("--long-seeds", type=int, default=1, help="seeds per shape at the longer run lengths")
    parser.add_argument("--only", default="", help="run only the shapes whose name contains this")
    args = parser.parse_args(argv)
    lengths = [int(x) for x in args.lengths.split(",")]
    import torch

    import torchleak

    torch.set_num_threads(1)
    rows = []
    for k, steps in enumerate(lengths):
        for name, make, seeds in [s for s in shapes() if args.only in s[0]]:
            n = (args.seeds or seeds) if k == 0 else args.long_seeds
            shape, onset, period, resumed = make(steps)
            every = [run_shape(torch, torchleak, shape, steps, seed, "every") for seed in range(n)]
            watch = [run_shape(torch, torchleak, shape, steps, 100 + seed, "watch") for seed in range(n)]
            sampled = (
                [run_shape(torch, torchleak, shape, steps, 100 + seed, "sampled") for seed in range(n)]
                if k == 0
                else []
            )
            if onset is not None:
                rows.append(leak_row(name, steps, onset, period, resumed, every, watch, sampled))
            else:
                rows.append(clean_row(name, steps, every, watch, sampled))
            print(f"  {steps} steps, {name}: done", file=sys.stderr, flush=True)
    head = (
        "shape",
        "steps",
        "track(): leak at the end",
        "onset error (median / max)",
        "track() would confirm, boundaries after the onset (median / max)",
        "watch(): announced",
        "onset to announcement (median / max)",
        "announcement past track()'s confirmation (median / max)",
        "watch(): leak at the end (clean: false, and undecided)",
        "watch(sample_bytes=262144): announced, onset to announcement (clean: false)",
    )
    print(f"Verdicts on growth shapes at {', '.join(map(str, lengths))} steps, torch {torch.__version__}")
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for row in rows:
        print("| " + " | ".join(str(c) for c in row) + " |")


if __name__ == "__main__":
    main()
