"""Fast-LLM #486 run to the end: a leak that fills the whole GPU, under torchleak.watch().

Fast-LLM kept each micro-batch's loss inside a custom autograd.Function's ctx, with its graph
(164 MiB per micro-batch), until an 80 GB H100 ran out of memory. Here the same mechanism
(bench_cuda.KeepsLoss) on GPT-2 small in bf16, `--micro` micro-batches per optimizer step, runs
until the device's memory is gone. It prints, and writes with `--json`: the step at which
watch() announced the leak and the share of the device the run held then, the step of the OOM,
and what torchleak's OOM report says (the holder it names, the growth per step). A GPU tool
earns its keep by the distance between the two.

    python bench/bench_cuda_oom.py [--batch 1] [--seq 512] [--micro 2] [--max-steps 400]
"""

import argparse
import json
import os
import sys
import tempfile
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_cuda import GPT2Small, KeepsLoss

import torchleak

GiB = 1 << 30


def run(args, folder):
    model = GPT2Small().cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    total = torch.cuda.get_device_properties(0).total_memory
    logged = []  # the training loop's loss log: each entry keeps its micro-batch's graph
    announced = {}
    state = {"step": 0}

    def on_leak(report):
        if "step" not in announced:
            announced.update(
                step=state["step"],
                allocated=torch.cuda.memory_allocated(),
                at=time.perf_counter(),
                findings=[(f.site_text, (f.holder or {}).get("path_text")) for f in report.leaks[:3]],
            )

    result = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "total_bytes": total}
    begun = time.perf_counter()
    try:
        with torchleak.watch(json=os.path.join(folder, "watch.json"), on_leak=on_leak):
            for step in range(1, args.max_steps + 1):
                state["step"] = step
                for _ in range(args.micro):
                    tokens = torch.randint(0, 50257, (args.batch, args.seq), device="cuda")
                    with torch.autocast("cuda", dtype=torch.bfloat16):
                        logits = model(tokens)
                        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(), tokens.flatten())
                    kept = KeepsLoss.apply(loss)
                    # retain_graph, as bench_cuda's detection run: the activations stay with
                    # the graph the ctx keeps (Fast-LLM's backward ran through the Function later)
                    (kept / args.micro).backward(retain_graph=True)
                    logged.append(kept)  # the leak: the output keeps the ctx, the ctx keeps the loss
                opt.step()
                opt.zero_grad(set_to_none=True)
                torch.cuda.synchronize()
        result["error"] = f"no OOM within {args.max_steps} steps"
    except torch.OutOfMemoryError as error:
        result["oom_step"] = state["step"]
        result["seconds_to_oom"] = time.perf_counter() - begun
        report = getattr(error, "torchleak_report", None)
        oom = report.oom if report is not None else None
        result["oom_report"] = bool(oom)
        if oom:
            result["oom_text"] = oom.get("text")
            result["oom_holders"] = [h.get("holder") for h in oom.get("by_holder", [])[:3]]
            result["oom_findings"] = [
                (report.findings[i].site_text, (report.findings[i].holder or {}).get("path_text"))
                for i in oom.get("findings", [])[:3]
            ]
    result["announced_step"] = announced.get("step")
    result["announced_share"] = announced["allocated"] / total if announced else None
    result["announced_findings"] = announced.get("findings")
    logged.clear()
    return result


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    # About 700 MiB per micro-batch on GPT-2 small: a few hundred micro-batches fill an H100 or
    # an H200, as Fast-LLM's 164 MiB did on its 80 GB.
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--seq", type=int, default=512)
    parser.add_argument("--micro", type=int, default=2)
    parser.add_argument("--max-steps", type=int, default=400)
    parser.add_argument("--json", help="write the result here")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("bench_cuda_oom: no CUDA device: skipped")
        return 0
    with tempfile.TemporaryDirectory() as folder:
        result = run(args, folder)
    print(json.dumps(result, indent=1, default=str))
    if args.json:
        with open(args.json, "w") as out:
            json.dump(result, out, indent=1, default=str)
    if "oom_step" in result and result["announced_step"] is not None:
        print(
            f"{result['device']}: announced at step {result['announced_step']} "
            f"({result['announced_share'] * 100:.1f}% of {result['total_bytes'] / GiB:.0f} GiB held), "
            f"OOM at step {result['oom_step']}; OOM report names {result.get('oom_holders')}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
