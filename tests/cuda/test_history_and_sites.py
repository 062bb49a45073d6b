"""CUDA allocation sites come from PyTorch's history recording: shared with a user who records
too, C++ frames never a site, blocks made on autograd's device threads sited at backward()."""

import torch

import backward_sites
import torchleak
from conftest import MiB, line_of


def keep_per_step(kept, iterations=6):
    for _ in range(iterations):
        kept.append(torch.empty(2 * MiB, dtype=torch.uint8, device="cuda"))  # LEAK
        torchleak.step()


def test_a_history_the_user_started_before_track_is_used_and_left_on():
    torch.cuda.memory._record_memory_history()  # torch's defaults: stacks="all", C++ frames too
    try:
        kept = []
        with torchleak.track() as tracker:
            keep_per_step(kept)
        assert torch._C._cuda_isHistoryEnabled(), "torchleak turned off the user's recording"
        leak = next(f for f in tracker.report().leaks if f.device == "cuda:0")
        assert leak.site["file"].endswith(".py"), leak.site  # not CUDACachingAllocator.cpp
        assert leak.site["line"] == line_of(keep_per_step, "# LEAK"), leak.site
        assert leak.holder["path_text"] == "kept"
    finally:
        torch.cuda.memory._record_memory_history(enabled=None)
    del kept


def test_torchleak_turns_its_own_recording_off_at_stop():
    assert not torch._C._cuda_isHistoryEnabled()
    with torchleak.track():
        assert torch._C._cuda_isHistoryEnabled()
    assert not torch._C._cuda_isHistoryEnabled()


def test_a_cuda_gradient_kept_per_step_is_sited_at_the_backward_call_with_its_node():
    backward_sites.check_a_gradient_kept_per_step_is_sited_at_backward("cuda", size=512, batch=64)


def test_a_retained_graph_on_cuda_is_found_through_autograd():
    model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1)).cuda()
    history = []

    def step():
        # No backward: the graph keeps its saved activations (backward() would free them and
        # leave only the 4-byte loss to find, held by history[i] itself).
        out = model(torch.randn(128, 256, device="cuda")).mean()
        history.append(out)  # the loss with its graph

    report = torchleak.check(step, iterations=8, warmup=2)
    leaks = [f for f in report.leaks if f.device == "cuda:0"]
    assert leaks, str(report)
    kinds = {step["kind"] for f in leaks for step in f.path}
    assert "grad_fn" in kinds, [f.path_text for f in leaks]
    assert any("history" in (f.holder or {}).get("path_text", "") for f in leaks)
