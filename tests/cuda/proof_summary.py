#!/usr/bin/env python3
"""The GPU proof's summary: reads what tests/cuda/gpu_proof.sh left in its output folder and
writes summary.json beside it, or, with --check, says whether a summary is complete.

    python tests/cuda/proof_summary.py OUT [--fold]   write OUT/summary.json, print its lines;
                                                      --fold removes the parts it holds
    python tests/cuda/proof_summary.py OUT --check [--expect-gpu | --expect-no-gpu]

summary.json: {"machine": {...}, "steps": {name: {"status", "seconds", "why"?}}, "cuda_tier":
{"passed", "failed", "skipped", "tests": [{"name", "outcome", "seconds", "message"?}]},
"leak_cases": run.py's summary and rows, "truth": the same for --truth, "bench": bench_cuda's
numbers, "skipped": [what did not run, and why], "ok": true when nothing that ran failed}.
"""

import argparse
import json
import pathlib
import sys
import xml.etree.ElementTree as ET

STEPS = ("install", "doctor", "smoke", "cuda_tier", "leak_cases", "truth", "bench")
# Run only when the smoke test failed (gpu_proof.sh): a build against the bundled headers.
RETRY_STEPS = ("install_bundled", "smoke_bundled")
# What summary.json holds whole: removed with --fold, since at most eight files come back from
# the GPU machine (the logs, the JUnit XML and the summary stay).
PARTS = ("machine.json", "steps.txt", "leak-cases.json", "truth.json", "bench.json")


def read_json(path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def read_steps(out):
    """The script's step log: one line per step, 'name status seconds [why]'."""
    steps = {}
    path = out / "steps.txt"
    if path.exists():
        for line in path.read_text().splitlines():
            parts = line.split(" ", 3)
            if len(parts) >= 3:
                steps[parts[0]] = {"status": parts[1], "seconds": float(parts[2])}
                if len(parts) == 4:
                    steps[parts[0]]["why"] = parts[3]
    return steps


def read_junit(path):
    if not path.exists():
        return None
    try:
        root = ET.parse(path).getroot()
    except ET.ParseError as error:
        return {"error": f"{path.name} is not readable JUnit XML: {error}"}
    tests = []
    for case in root.iter("testcase"):
        entry = {
            "name": f"{case.get('classname', '')}::{case.get('name', '')}",
            "seconds": float(case.get("time", 0) or 0),
            "outcome": "passed",
        }
        for tag in ("failure", "error", "skipped"):
            node = case.find(tag)
            if node is not None:
                entry["outcome"] = "skipped" if tag == "skipped" else "failed"
                entry["message"] = (node.get("message") or node.text or "").strip()[:2000]
                break
        tests.append(entry)
    count = {k: sum(t["outcome"] == k for t in tests) for k in ("passed", "failed", "skipped")}
    return {**count, "tests": tests}


def summarize(out):
    machine = read_json(out / "machine.json") or {}
    steps = read_steps(out)
    tier = read_junit(out / "cuda-tier.xml")
    cases = read_json(out / "leak-cases.json")
    truth = read_json(out / "truth.json")
    bench = read_json(out / "bench.json")
    skipped = [f"step {name}: {step['why']}" for name, step in steps.items() if step["status"] == "skipped"]
    if tier and "tests" in tier:
        skipped += [f"{t['name']}: {t.get('message', '')}" for t in tier["tests"] if t["outcome"] == "skipped"]
    for name, data in (("leak_cases", cases), ("truth", truth)):
        for row in (data or {}).get("cases", []):
            if row.get("status") == "skip":
                skipped.append(f"{name} {row.get('id')}: {row.get('note', '')}")
    if bench and "skipped" in bench:
        skipped.append(f"bench: {bench['skipped']}")
    failed_steps = [name for name, step in steps.items() if step["status"] == "failed"]
    if "smoke_bundled" in steps and steps["smoke_bundled"]["status"] == "passed":
        failed_steps.remove("smoke")  # the proof went on with the bundled build; said in steps
    ok = not failed_steps and bool(tier) and not tier.get("failed") and "error" not in tier
    backtrace = out / "backtrace.txt"
    return {
        "machine": machine,
        "steps": steps,
        "cuda_tier": tier,
        "leak_cases": cases,
        "truth": truth,
        "bench": bench,
        "skipped": skipped,
        "failed_steps": failed_steps,
        "backtrace": [line for line in backtrace.read_text(errors="replace").splitlines() if line.startswith("#")][:60]
        if backtrace.exists()
        else None,
        "ok": ok,
    }


def lines(summary):
    m = summary["machine"]
    yield f"machine: {m.get('gpu') or 'no GPU'}; torch {m.get('torch')}; Python {m.get('python')}"
    for name in STEPS + RETRY_STEPS:
        step = summary["steps"].get(name)
        if step:
            why = f" ({step['why']})" if "why" in step else ""
            yield f"step {name}: {step['status']} in {step['seconds']:.0f} s{why}"
    tier = summary["cuda_tier"] or {}
    if "tests" in tier:
        yield f"CUDA tier: {tier['passed']} passed, {tier['failed']} failed, {tier['skipped']} skipped"
        for t in tier["tests"]:
            if t["outcome"] == "failed":
                yield f"  FAILED {t['name']}: {t.get('message', '').splitlines()[0] if t.get('message') else ''}"
    for name in ("leak_cases", "truth"):
        data = summary[name]
        if data and "summary" in data:
            s = data["summary"]
            parts = []
            for key, value in s.items():
                if isinstance(value, list) and len(value) == 2 and all(isinstance(v, int) for v in value):
                    parts.append(f"{key} {value[0]}/{value[1]}")
                elif not isinstance(value, (list, dict)):
                    parts.append(f"{key} {value}")
            yield f"{name}: " + ", ".join(parts)
    bench = summary["bench"] or {}
    if "overhead" in bench:
        for mode in ("history", "track", "watch"):
            row = bench["overhead"][mode]
            yield (
                f"bench {mode}: step {row['step']['median'] * 100:+.1f}% (min {row['step']['min'] * 100:+.1f}%), "
                f"backward {row['backward']['median'] * 100:+.1f}%"
            )
        d = bench.get("detection", {})
        yield (
            f"bench detection: after {d.get('announced_after_boundaries')} boundaries, "
            f"{d.get('step_end_to_on_leak_ms')} ms to on_leak"
        )
    yield f"skipped: {len(summary['skipped'])}"
    for reason in summary["skipped"]:
        yield f"  {reason}"
    yield f"ok: {summary['ok']}"


def check(summary, expect, out):
    """What a complete summary must hold; a list of what is missing or wrong."""
    problems = []
    for name in STEPS:
        if name not in summary["steps"]:
            problems.append(f"step {name} is not in steps.txt")
    if not summary["machine"].get("torch"):
        problems.append("machine.json has no torch version")
    tier = summary["cuda_tier"]
    if not tier or "tests" not in tier or not tier["tests"]:
        problems.append("no CUDA tier results (cuda-tier.xml)")
    elif expect == "no-gpu":
        ran = [t["name"] for t in tier["tests"] if t["outcome"] != "skipped"]
        if ran:
            problems.append(f"without a GPU every CUDA test must be skipped; these were not: {ran}")
        if any(not t.get("message") for t in tier["tests"]):
            problems.append("a skipped CUDA test gives no reason")
    elif expect == "gpu" and tier.get("skipped", 0) == len(tier["tests"]):
        problems.append("on a GPU every CUDA test was skipped")
    for name in ("leak_cases", "truth"):
        data = summary[name]
        if not data or "summary" not in data:
            problems.append(f"no {name} results")
        elif expect == "no-gpu":
            cuda_rows = [r for r in data.get("cases", []) if str(r.get("id", "")).startswith("C")]
            if any(r.get("status") != "skip" for r in cuda_rows):
                problems.append(f"{name}: a CUDA case ran without a GPU")
    log = out / "install.log"
    if log.exists() and "werror=ON" in log.read_text(errors="replace"):
        problems.append("the sdist's build turned warnings into errors: a user's newer compiler would fail it")
    if summary["bench"] is None:
        problems.append("no bench results (bench.json)")
    elif expect == "no-gpu" and "skipped" not in summary["bench"]:
        problems.append("bench_cuda ran without a GPU")
    if summary["failed_steps"]:
        problems.append(f"failed steps: {summary['failed_steps']}")
    return problems


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=pathlib.Path)
    parser.add_argument("--check", action="store_true", help="check OUT/summary.json is complete")
    parser.add_argument("--fold", action="store_true", help="remove the parts summary.json holds")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--expect-gpu", dest="expect", action="store_const", const="gpu")
    group.add_argument("--expect-no-gpu", dest="expect", action="store_const", const="no-gpu")
    args = parser.parse_args(argv)
    if args.check:
        summary = read_json(args.out / "summary.json")
        if summary is None:
            print(f"proof_summary: no readable {args.out / 'summary.json'}", file=sys.stderr)
            return 1
        problems = check(summary, args.expect, args.out)
        for problem in problems:
            print(f"proof_summary: incomplete: {problem}", file=sys.stderr)
        print(f"proof_summary: {'complete' if not problems else 'INCOMPLETE'} ({args.out / 'summary.json'})")
        return 1 if problems else 0
    summary = summarize(args.out)
    (args.out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    if args.fold:
        for name in PARTS:
            (args.out / name).unlink(missing_ok=True)
    for line in lines(summary):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
