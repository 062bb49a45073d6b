"""torchleak on a GPU: the cost of a GPT-2-small-size bf16 training step, and how fast a leak is
found (run on a CUDA machine: `tests/cuda/gpu_proof.sh` runs it; skipped where there is none).

The model is GPT-2 small built from its configuration (no download): 12 layers, d=768, 12 heads,
vocabulary 50257, learned positions, tied embeddings, about 124M parameters; bf16 autocast,
AdamW (fused where torch has it). Modes, interleaved in every round so that the machine's drift
hits all alike:
  untracked   the step alone;
  history     torch.cuda.memory._record_memory_history alone, with the settings torchleak uses
              (enabled="state", context="state", stacks="python"): what PyTorch's own recorder
              costs, the part of torchleak's cost that is not torchleak's;
  track       torchleak.track(), an iteration per optimizer step;
  watch       torchleak.watch() with its defaults (blocks under 256 KiB sampled, verdicts on a
              0.5% time budget).
Each round runs `--steps` timed steps per mode (after one untimed step in that mode); forward,
backward and the whole step are timed apart (CUDA events for forward and backward, wall time for
the step, which ends with a synchronize in every mode). Each mode's ratio to the untracked run of
the same round gives one sample a round; the table prints the median and the minimum.

Then detection, on the same model with a leak planted the way Fast-LLM #486 leaked: a custom
autograd.Function whose ctx keeps the loss with its graph (each step's activations stay alive):
  - under watch(): boundaries from the leak's onset to the announcement, and the time from the end
    of the iteration that confirmed it (torchleak.step()) to on_leak (a confirmed verdict and
    the full report with paths, written);
  - under track(), at the same point: a verdict alone (report(paths=False)) and a full report
    with paths, each timed.
ImpactArbiter (an autograd-hook leak detector, 2026) claims about 5% backward overhead and 9-45
ms detection on LLMs; the table prints those beside torchleak's figures. `--json PATH` writes
every number.
"""

import argparse
import contextlib
import json
import math
import os
import statistics
import sys
import tempfile
import time

import torch

import torchleak

MiB = 1 << 20
IMPACTARBITER = {"backward_overhead": 0.05, "detection_ms": (9, 45)}


class Block(torch.nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.ln1 = torch.nn.LayerNorm(d)
        self.qkv = torch.nn.Linear(d, 3 * d)
        self.proj = torch.nn.Linear(d, d)
        self.ln2 = torch.nn.LayerNorm(d)
        self.fc = torch.nn.Linear(d, 4 * d)
        self.out = torch.nn.Linear(4 * d, d)
        self.heads = heads

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.out(torch.nn.functional.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT2Small(torch.nn.Module):
    """GPT-2 small's configuration: n_layer=12, n_embd=768, n_head=12, vocab 50257, n_ctx 1024."""

    def __init__(self, layers=12, d=768, heads=12, vocab=50257, context=1024):
        super().__init__()
        self.wte = torch.nn.Embedding(vocab, d)
        self.wpe = torch.nn.Embedding(context, d)
        self.blocks = torch.nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln_f = torch.nn.LayerNorm(d)
        self.head = torch.nn.Linear(d, vocab, bias=False)
        self.head.weight = self.wte.weight

    def forward(self, idx):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


class KeepsLoss(torch.autograd.Function):
    """Fast-LLM #486's mechanism: the Function's ctx keeps the loss it was given, with its graph;
    the output logged per step keeps the ctx (its grad_fn), so every step's activations stay."""

    @staticmethod
    def forward(ctx, loss):
        ctx.loss = loss
        return loss.clone()

    @staticmethod
    def backward(ctx, grad):
        return grad


class Marks:
    """Time marks inside a step: CUDA events on the GPU (no synchronize between forward and
    backward), the wall clock on the CPU (the smoke run)."""

    def __init__(self, device):
        self.cuda = device == "cuda"
        self.events = [torch.cuda.Event(enable_timing=True) for _ in range(3)] if self.cuda else None
        self.times = [0.0] * 3

    def mark(self, i):
        if self.cuda:
            self.events[i].record()
        else:
            self.times[i] = time.perf_counter()

    def spans_ms(self):
        """(forward, backward) in ms, once the step is synchronized."""
        if self.cuda:
            return self.events[0].elapsed_time(self.events[1]), self.events[1].elapsed_time(self.events[2])
        return (self.times[1] - self.times[0]) * 1000, (self.times[2] - self.times[1]) * 1000


def make_training(args, leak=None):
    device = args.device
    model = GPT2Small(layers=args.layers, d=args.width, heads=args.heads, vocab=args.vocab).to(device)
    try:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=device == "cuda")
    except (RuntimeError, TypeError):
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    idx = torch.randint(0, args.vocab, (args.batch, args.seq), device=device)
    target = torch.randint(0, args.vocab, (args.batch, args.seq), device=device)
    marks = Marks(device)

    def step():
        """(forward ms, backward ms) of one optimizer step; the step ends synchronized."""
        marks.mark(0)
        with torch.autocast(device, dtype=torch.bfloat16):
            logits = model(idx)
            loss = torch.nn.functional.cross_entropy(logits.view(-1, logits.shape[-1]).float(), target.view(-1))
        if leak is not None:
            loss = KeepsLoss.apply(loss)
            leak.append(loss)  # logged per step: the output, its ctx, the loss and its graph
        marks.mark(1)
        loss.backward(retain_graph=leak is not None)
        marks.mark(2)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if device == "cuda":
            torch.cuda.synchronize()
        return marks.spans_ms()

    return model, opt, step


class History:
    """PyTorch's recorder alone, as torchleak starts it."""

    def __enter__(self):
        torch.cuda.memory._record_memory_history(enabled="state", context="state", stacks="python")
        return self

    def __exit__(self, *exc):
        torch.cuda.memory._record_memory_history(enabled=None)
        return False


def mode_context(mode, tmp):
    if mode == "untracked":
        return contextlib.nullcontext()
    if mode == "history":
        return History()
    if mode == "track":
        return torchleak.track()
    return torchleak.watch(json=os.path.join(tmp, "watch.json"))


def overhead(args, tmp):
    # PyTorch's recorder exists for CUDA only
    modes = ["untracked", "history", "track", "watch"] if args.device == "cuda" else ["untracked", "track", "watch"]
    _, _, step = make_training(args)
    for _ in range(3):
        step()  # cuBLAS/cuDNN plans, the allocator's pool, AdamW's state
    samples = {m: {"step": [], "forward": [], "backward": []} for m in modes}
    for r in range(args.rounds):
        order = modes[r % len(modes) :] + modes[: r % len(modes)]
        per_round = {}
        for mode in order:
            with mode_context(mode, tmp):
                step()
                walls, forwards, backwards = [], [], []
                for _ in range(args.steps):
                    begun = time.perf_counter()
                    f_ms, b_ms = step()
                    walls.append((time.perf_counter() - begun) * 1000)
                    forwards.append(f_ms)
                    backwards.append(b_ms)
            per_round[mode] = (statistics.median(walls), statistics.median(forwards), statistics.median(backwards))
        for mode in modes:
            for i, part in enumerate(("step", "forward", "backward")):
                samples[mode][part].append(per_round[mode][i] / per_round["untracked"][i])
        samples["untracked"].setdefault("ms", []).append(per_round["untracked"])
    result = {}
    for mode in modes[1:]:
        result[mode] = {
            part: {"median": statistics.median(v) - 1, "min": min(v) - 1} for part, v in samples[mode].items()
        }
    ms = samples["untracked"]["ms"]
    result["untracked_ms"] = {
        part: statistics.median(row[i] for row in ms) for i, part in enumerate(("step", "forward", "backward"))
    }
    return result


def detection(args, tmp):
    """Boundaries and milliseconds from a planted leak's onset to its announcement."""
    kept = []
    sized = argparse.Namespace(**{**vars(args), "batch": args.detect_batch, "seq": args.detect_seq})
    _, _, step = make_training(sized, leak=kept)
    announced = {}

    def on_leak(report):
        announced.setdefault("at", time.perf_counter())
        announced.setdefault("iteration", report.iterations)
        announced.setdefault(
            "findings", [(f.site_text, (f.holder or {}).get("path_text"), f.path_text) for f in report.leaks]
        )

    latency_ms = None
    boundaries = 0
    with torchleak.watch(json=os.path.join(tmp, "detect.json"), on_leak=on_leak) as watcher:
        for _ in range(args.detect_steps):
            step()
            end = time.perf_counter()
            torchleak.step()
            boundaries += 1
            if "at" in announced:
                latency_ms = (announced["at"] - end) * 1000
                break
        allocated = torch.cuda.memory_allocated() if args.device == "cuda" else 0
        per_step = allocated / max(len(kept), 1)
        verdict_ms = full_ms = None
        if "at" in announced:
            begun = time.perf_counter()
            watcher.report(paths=False)
            verdict_ms = (time.perf_counter() - begun) * 1000
            begun = time.perf_counter()
            full = watcher.report()
            full_ms = (time.perf_counter() - begun) * 1000
            paths = [f.path_text for f in full.leaks]
        else:
            paths = []
    kept.clear()
    return {
        "announced_after_boundaries": boundaries if "at" in announced else None,
        "step_end_to_on_leak_ms": latency_ms,
        "verdict_ms": verdict_ms,
        "full_report_ms": full_ms,
        "findings": announced.get("findings", []),
        "paths": paths,
        "allocated_per_step_bytes": per_step,
    }


def table(result):
    o, d = result["overhead"], result["detection"]
    ms = o["untracked_ms"]
    lines = [
        f"{result['device']}; torch {result['torch']}; {result['model']}, bf16 autocast, AdamW, "
        f"batch {result['batch']} x {result['seq']} tokens; {result['rounds']} rounds x {result['steps']} steps",
        f"untracked: step {ms['step']:.1f} ms (forward {ms['forward']:.1f}, backward {ms['backward']:.1f})",
        "overhead vs untracked, median (min) over rounds:",
        f"{'mode':<10}{'step':>18}{'forward':>18}{'backward':>18}",
    ]
    for mode in ("history", "track", "watch"):
        if mode not in o:
            continue
        row = o[mode]
        cells = [
            f"{row[p]['median'] * 100:+.1f}% ({row[p]['min'] * 100:+.1f}%)" for p in ("step", "forward", "backward")
        ]
        lines.append(f"{mode:<10}" + "".join(f"{c:>18}" for c in cells))
    lines.append(f"ImpactArbiter (claimed): backward about +{IMPACTARBITER['backward_overhead'] * 100:.0f}%")
    if "error" in d:
        lines.append(f"detection: failed: {d['error']}")
    elif d["announced_after_boundaries"] is None:
        lines.append("detection: the planted leak was NOT announced")
    else:
        lines.append(
            f"detection (leak in a custom Function's ctx, {d['allocated_per_step_bytes'] / MiB:.0f} MiB per step): "
            f"announced after {d['announced_after_boundaries']} boundaries; step end to on_leak "
            f"{d['step_end_to_on_leak_ms']:.1f} ms; a verdict {d['verdict_ms']:.1f} ms, a full report with "
            f"paths {d['full_report_ms']:.1f} ms (ImpactArbiter claims {IMPACTARBITER['detection_ms'][0]}-"
            f"{IMPACTARBITER['detection_ms'][1]} ms)"
        )
        for path in d["paths"][:3]:
            lines.append(f"  path: {path}")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=1024)
    parser.add_argument("--detect-steps", type=int, default=60)
    # Each leaking step keeps its activations: batch 1 x 512 keeps about 280 MiB a step on GPT-2
    # small (Fast-LLM #486 kept 164 MiB per micro-batch), so 60 steps fit any GPU it runs on.
    parser.add_argument("--detect-batch", type=int, default=1)
    parser.add_argument("--detect-seq", type=int, default=512)
    parser.add_argument("--json", help="write every number here")
    # A smaller model, and the CPU: for the smoke test that keeps this script working where
    # there is no GPU (tests/python/test_bench_cuda.py); the numbers of such a run mean nothing.
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--width", type=int, default=768)
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--vocab", type=int, default=50257)
    args = parser.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        reason = f"no CUDA device (torch {torch.__version__}): bench_cuda.py runs on a GPU machine"
        print(f"bench_cuda: skipped: {reason}")
        if args.json:
            with open(args.json, "w") as fh:
                json.dump({"skipped": reason}, fh, indent=2)
        return 0
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as tmp:
        gpt2 = (args.layers, args.width, args.heads, args.vocab) == (12, 768, 12, 50257)
        result = {
            "device": torch.cuda.get_device_name(0) if args.device == "cuda" else "CPU (smoke run)",
            "model": "GPT-2 small (124M)" if gpt2 else f"GPT-2 shape, {args.layers} layers, d={args.width}",
            "torch": torch.__version__,
            "batch": args.batch,
            "seq": args.seq,
            "rounds": args.rounds,
            "steps": args.steps,
            "overhead": overhead(args, tmp),
        }
        if args.device == "cuda":
            torch.cuda.empty_cache()
        try:
            result["detection"] = detection(args, tmp)
        except torch.OutOfMemoryError as error:  # the numbers above still count
            result["detection"] = {"error": str(error).splitlines()[0], "announced_after_boundaries": None}
    print(table(result))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(result, fh, indent=2, default=lambda v: None if isinstance(v, float) and math.isnan(v) else v)
    return 0


if __name__ == "__main__":
    sys.exit(main())
