"""Allocator settings read once per process (PYTORCH_CUDA_ALLOC_CONF), each in a fresh one:
expandable segments, the cudaMallocAsync backend, and torch.compile's CUDA graphs."""

from conftest import run_script, script_line

LEAK = """
import json, torch, torchleak
kept = []
def loop():
    for _ in range(8):
        kept.append(torch.empty(4 << 20, dtype=torch.uint8, device="cuda"))  # LEAK
        torchleak.step()
with torchleak.track() as tracker:
    loop()
report = tracker.report()
leaks = [f for f in report.leaks if f.device == "cuda:0"]
history_on = False
try:
    history_on = bool(torch._C._cuda_isHistoryEnabled())
except RuntimeError:
    pass
print(json.dumps({
    "backend": str(torch._C._cuda_getAllocatorBackend()),
    "devices": [d["device"] for d in report.devices],
    "leak": leaks[0].to_dict() if leaks else None,
    "warnings": report.warnings,
    "addresses": sorted(t.data_ptr() for t in kept),
    "history_on_after": history_on,
}))
"""
LEAK_LINE = script_line(LEAK, "# LEAK")


def test_expandable_segments_keep_sites_and_addresses(tmp_path):
    result, proc = run_script(tmp_path, LEAK, env={"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"})
    assert result, proc.stdout + proc.stderr
    leak = result["leak"]
    assert leak, result
    assert leak["site"]["line"] == LEAK_LINE
    assert leak["holder"]["path_text"] == "kept"
    assert not [w for w in result["warnings"] if "freed on a thread" in w], result["warnings"]


def test_cuda_malloc_async_tracks_without_history_and_restores_everything(tmp_path):
    result, proc = run_script(tmp_path, LEAK, env={"PYTORCH_CUDA_ALLOC_CONF": "backend:cudaMallocAsync"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert result["backend"] == "cudaMallocAsync"
    assert [w for w in result["warnings"] if "CUDA allocation sites are unavailable" in w], result["warnings"]
    assert not result["history_on_after"]
    # torch 2.11 on an H200: this backend sends no event to the hook, and the warning says so;
    # a torch whose backend does must find the leak
    print("cudaMallocAsync: devices in the report:", result["devices"], "leak:", bool(result["leak"]))
    if "cuda:0" in result["devices"]:
        assert result["leak"] and result["leak"]["holder"]["path_text"] == "kept", result
    else:
        assert [w for w in result["warnings"] if "reports no allocation to torchleak's hook" in w], result


def test_reduce_overhead_outputs_kept_are_named_as_graph_replays(tmp_path):
    source = """
import json, torch, torchleak

@torch.compile(mode="reduce-overhead")
def f(x):
    return (x * 2).sin() + 1

x = torch.randn(1024, 1024, device="cuda")
for _ in range(3):  # compile and record the graph before tracking
    torch.compiler.cudagraph_mark_step_begin()
    f(x)
kept = []
with torchleak.track() as tracker:
    for _ in range(6):
        torch.compiler.cudagraph_mark_step_begin()  # a new iteration: replay, outputs kept
        kept.append(f(x))
        torchleak.step()
report = tracker.report()
print(json.dumps({"warnings": report.warnings, "leaks": len(report.leaks)}))
"""
    result, proc = run_script(tmp_path, source, timeout=420)
    assert result, proc.stdout[-2000:] + proc.stderr[-4000:]
    replays = [w for w in result["warnings"] if "CUDA graphs were replayed" in w]
    assert replays, result
