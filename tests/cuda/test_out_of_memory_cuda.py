"""A real CUDA out-of-memory error, under set_per_process_memory_fraction, in a fresh process:
the forensics in track() and in the CLI, the OOM observer's arguments read as what they are."""

import json

from conftest import run_script, script_line

MiB = 1 << 20

# A leak of 3 MiB blocks: a 1-10 MiB request, for which the allocator reserves a 20 MiB
# segment (what the observer is told), so the request and the segment differ.
LEAKY_SCRIPT = """
import json, torch, torchleak
torch.cuda.set_per_process_memory_fraction(0.02)
kept = []
measured = {}
def loop():
    for _ in range(100000):
        measured["allocated"] = torch.cuda.memory_allocated()
        measured["reserved"] = torch.cuda.memory_reserved()
        kept.append(torch.empty(3 << 20, dtype=torch.uint8, device="cuda"))  # CULPRIT
        torchleak.step()
"""
CULPRIT_LINE = script_line(LEAKY_SCRIPT, "# CULPRIT")


def test_a_real_oom_in_track_carries_the_allocators_own_numbers(tmp_path):
    source = (
        LEAKY_SCRIPT
        + """
try:
    with torchleak.track():
        loop()
except torch.OutOfMemoryError as error:
    oom = error.torchleak_report.oom
    culprit = error.torchleak_report.findings[oom["findings"][0]] if oom["findings"] else None
    print(json.dumps({"oom": oom, "measured": measured, "kept": len(kept),
                      "cap": int(0.02 * torch.cuda.get_device_properties(0).total_memory),
                      "culprit_line": culprit.site["line"] if culprit else None,
                      "notes": getattr(error, "__notes__", [])}))
"""
    )
    result, proc = run_script(tmp_path, source)
    assert result, proc.stdout + proc.stderr
    oom = result["oom"]
    assert oom["device"] == "cuda:0"
    assert oom["error"] == "OutOfMemoryError"
    assert oom["requested_bytes"] == 3 * MiB  # the request, not the 20 MiB segment
    assert oom["totals_from"] == "allocator"
    assert oom["allocated_bytes"] == result["measured"]["allocated"]
    # the allocator empties its cache and retries before it reports: reserved is what is left
    assert result["measured"]["allocated"] <= oom["reserved_bytes"] < result["cap"]
    assert result["culprit_line"] == CULPRIT_LINE, result
    assert oom["by_holder"][0]["holder"] == "kept"
    assert oom["text"].startswith("Out of memory on cuda:0")
    assert result["notes"] == [f"torchleak: {oom['text']}"]


def test_the_cli_reports_a_real_cuda_oom(tmp_path):
    source = LEAKY_SCRIPT + "\nloop()\n"
    _, proc = run_script(tmp_path, source, cli=True, args=("--json", str(tmp_path / "r.json")), timeout=300)
    assert proc.returncode == 3, proc.stdout + proc.stderr  # the script failed: its OOM
    assert "OUT OF MEMORY: Out of memory on cuda:0" in proc.stdout, proc.stdout[-3000:]
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["oom"]["device"] == "cuda:0"
    assert report["oom"]["requested_bytes"] == 3 * MiB
    assert report["oom"]["by_holder"][0]["holder"] == "kept"
