"""Verdicts on the growth shapes real runs have (`make bench`, issue #43). Counts, not timings.

Each shape is a real training loop (an MLP, 1024 wide, Adam: about 32 MiB tracked) that keeps
tensors in the shape's pattern, run from its own seeds:
  leaks   late onset at 10%, 50% and 90% of the run (384 KiB per step, 1.2% of the tracked
          total, recorded whole under watch's sampling); a staircase (1 MiB every 25 steps,
          an evaluation epoch's leak, from step 100); a rising floor under a saw-tooth (a
          buffer cleared every 10 steps that leaves one block behind); a slow leak under
          transients ten times its size (16 KiB kept per step, 0-160 KiB kept across one
          boundary); sampled small blocks (4 KiB per step from step 150, under watch's 256 KiB
          sampling)
  clean   warm-up (lazy buffers in the first 5 steps); a cache of 256 KiB entries that fills
          for 90% of the run and stops; evaluation spikes (outputs of an evaluation pass every
          50 steps, kept one step); variable batch shapes; an LRU cache of 100 entries of
          random sizes
Under track(): the verdict at the end of the run, and the onset it names (its error in
iterations). Under watch() with its defaults (sampling, the 0.5% time budget, the memory cue):
the iterations from the onset to the announcement, and for clean shapes what was announced and
what withdrawn; then watch() again with every block recorded (sample_bytes=0), to tell what
sampling costs from what the rule does. A clean run is a false alarm when anything is a leak at its
end. A cache that grew for most of the run and stopped in its last stretch is `undecided` at the
end (too soon to tell from a leak that pauses): counted apart, with what watch() announced while
it grew and what it withdrew (a withdrawal waits until the growth is a plateau: flat for eight
times as long as it grew).
"""

import argparse
import collections
import statistics
import sys
import warnings

STEPS = 300


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


def late_onset(fraction):
    def shape(loop, state, step):
        if step >= int(STEPS * fraction):
            state.setdefault("kept", []).append(loop.torch.ones(96 * 1024))  # 384 KiB

    return shape, int(STEPS * fraction)


def staircase(loop, state, step):
    if step >= 100 and (step - 100) % 25 == 0:
        state.setdefault("kept", []).append(loop.torch.ones(256 * 1024))  # 1 MiB


def rising_floor(loop, state, step):
    buf = state.setdefault("buffer", [])
    buf.append(loop.torch.ones(16 * 1024))  # 64 KiB
    if len(buf) == 10:
        state.setdefault("floor", []).append(buf[-1])  # one block stays behind
        buf.clear()


def slow_leak_under_noise(loop, state, step):
    state.setdefault("kept", []).append(loop.torch.ones(4 * 1024))  # 16 KiB
    state["transient"] = loop.torch.ones(loop.randint(0, 40 * 1024 + 1))  # 0-160 KiB


def sampled_blocks(loop, state, step):
    if step >= 150:
        state.setdefault("kept", []).append(loop.torch.ones(1024))  # 4 KiB


def warmup(loop, state, step):
    if step < 5:
        state.setdefault("buffers", []).append(loop.torch.ones(64 * 1024))


def bounded_cache(loop, state, step):
    cache = state.setdefault("cache", collections.OrderedDict())
    cache[step] = loop.torch.ones(64 * 1024)  # 256 KiB
    while len(cache) > int(STEPS * 0.9):
        cache.popitem(last=False)


def evaluation_spikes(loop, state, step):
    state.pop("eval", None)
    if step % 50 == 49:
        with loop.torch.no_grad():
            state["eval"] = [loop.model(loop.torch.randn(256, 1024)) for _ in range(8)]


def variable_batches(loop, state, step):
    state["last"] = loop.torch.randn(loop.randint(4, 1025), 1024)


def lru_churn(loop, state, step):
    cache = state.setdefault("lru", collections.OrderedDict())
    cache[step] = loop.torch.ones(loop.randint(1024, 64 * 1024))
    key = loop.randint(0, step + 1)
    if key in cache:
        cache.move_to_end(key)  # a hit
    while len(cache) > 100:
        cache.popitem(last=False)


def shapes():
    """(name, shape, onset step or None for clean, seeds)."""
    out = []
    for fraction in (0.1, 0.5, 0.9):
        fn, onset = late_onset(fraction)
        out.append((f"late onset at {int(fraction * 100)}%", fn, onset, 2))
    out += [
        ("staircase, 1 MiB every 25 steps", staircase, 100, 2),
        ("rising floor under a saw-tooth", rising_floor, 0, 2),
        ("slow leak under 10x transients", slow_leak_under_noise, 0, 5),
        ("sampled 4 KiB blocks from step 150", sampled_blocks, 150, 5),
        ("warm-up", warmup, None, 2),
        ("cache filling 90% of the run", bounded_cache, None, 2),
        ("evaluation spikes", evaluation_spikes, None, 5),
        ("variable batch shapes", variable_batches, None, 5),
        ("LRU churn", lru_churn, None, 5),
    ]
    return out


def _biggest_leak(report):
    leaks = [f for f in report.leaks if f.site["line"]]
    return max(leaks, key=lambda f: f.total_bytes) if leaks else None


def run_shape(torch, torchleak, shape, seed, mode):
    loop, state = Loop(torch, seed), {}
    announced, withdrawn = [], []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if mode == "track":
            with torchleak.track() as session:
                for step in range(STEPS):
                    loop.step()
                    shape(loop, state, step)
            report = session.report(paths=False)
        else:
            with torchleak.watch(
                json=None,
                sample_bytes=0 if mode == "watch-unsampled" else torchleak.DEFAULT_SAMPLE_BYTES,
                on_leak=lambda r: announced.append(r.iterations),
                on_withdrawn=lambda r: withdrawn.append(r.iterations),
            ) as session:
                for step in range(STEPS):
                    loop.step()
                    shape(loop, state, step)
            report = session.report(paths=False)
    leak = _biggest_leak(report)
    onset = (leak.get("growth_since") or {}).get("iteration") if leak else None
    undecided = any(f.verdict == "undecided" for f in report.findings)
    return {
        "leak": leak is not None,
        "onset": onset,
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


def _median(values):
    return statistics.median(values) if values else None


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=0, help="seeds per shape (0: each shape's own)")
    args = parser.parse_args(argv)
    import torch

    import torchleak

    torch.set_num_threads(1)
    rows = []
    for name, shape, onset, seeds in shapes():
        n = args.seeds or seeds
        track = [run_shape(torch, torchleak, shape, seed, "track") for seed in range(n)]
        watch = [run_shape(torch, torchleak, shape, 100 + seed, "watch") for seed in range(n)]
        whole = [run_shape(torch, torchleak, shape, 100 + seed, "watch-unsampled") for seed in range(n)]
        if onset is not None:
            # Kept after step `onset`: in iteration onset + 1, whose boundary is the (onset + 2)th.
            errors = [abs(r["onset"] - (onset + 1)) for r in track if r["leak"] and r["onset"] is not None]
            delays = [r["announced"][0] - (onset + 1) for r in watch if r["announced"]]
            unsampled = [r["announced"][0] - (onset + 1) for r in whole if r["announced"]]
            rows.append(
                (
                    name,
                    "leak",
                    f"{sum(r['leak'] for r in track)}/{n}",
                    f"{_median(errors)} / {max(errors) if errors else None}",
                    f"{sum(bool(r['announced']) for r in watch)}/{n}",
                    f"{_median(delays)} / {max(delays) if delays else None}",
                    f"{sum(r['leak'] for r in watch)}/{n}",
                    f"{sum(bool(r['announced']) for r in whole)}/{n}, {_median(unsampled)}",
                )
            )
        else:
            said = sum(len(r["announced"]) for r in watch)
            taken = sum(len(r["withdrawn"]) for r in watch)
            rows.append((name, "clean", _ended(track), "-", f"{said} / {taken}", "-", _ended(watch), _ended(whole)))
        print(f"  {name}: done", file=sys.stderr, flush=True)
    head = (
        "shape",
        "kind",
        "track(): leak at the end",
        "onset error (median / max)",
        "watch(): announced (clean: announced / withdrawn)",
        "onset to announcement (median / max)",
        "watch(): leak at the end (clean: false, and undecided)",
        "watch(sample_bytes=0): announced, median onset to announcement (clean: false)",
    )
    print(f"Verdicts on growth shapes: {STEPS} steps each, torch {torch.__version__}")
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for row in rows:
        print("| " + " | ".join(str(c) for c in row) + " |")


if __name__ == "__main__":
    main()
