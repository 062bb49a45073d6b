"""A gradient kept per step on an accelerator, and what its finding must say. An accelerator's
autograd thread has no Python stack (on CUDA the hook captures none at all): the gradient is
attributed to the line that called backward(), named by the node that made it, not to a bare
"backward (MmBackward0)". Shared by the device tier (the fake accelerator) and the CUDA tier."""

import torch

import torchleak


def check_a_gradient_kept_per_step_is_sited_at_backward(device, size, batch):
    w = torch.randn(size, size, device=device, requires_grad=True)
    x = torch.randn(batch, size, device=device)
    grads = []

    def step():
        (x @ w).sum().backward()  # BACKWARD
        grads.append(w.grad)
        w.grad = None

    report = torchleak.check(step, iterations=6, warmup=1)
    leaks = [f for f in report.leaks if f.device == f"{device}:0"]
    assert leaks, str(report)
    leak = leaks[0]
    assert (leak.site["file"], leak.site["line"]) == (__file__, step.__code__.co_firstlineno + 1), leak.site
    assert leak.site["function"].endswith("Backward0") or "Accumulate" in leak.site["function"], leak.site
    assert "grads" in leak.holder["path_text"]
