"""The phase each tracked block was born in (forward, backward, the optimizer's step), tagged by
the allocator hook and kept per device at every boundary and at each iteration's peak: the
ground MemTracker stands on to tell activations, gradients and optimizer state apart, checked
on a real training loop."""

import pytest
import torch

import torchleak

PHASES = ("forward", "backward", "optimizer_step")


def born(entry, moment, phase, when):
    """Bytes alive at `moment` ("live": the boundary, "at_peak") born in `phase`, during the
    iteration (`when` "this") or before it ("earlier")."""
    return entry[moment][phase][0 if when == "this" else 1]


def total(entry, moment):
    return sum(sum(entry[moment][p]) for p in PHASES)


def training_run(iterations, boundary="explicit"):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 8))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    kept = []
    with torchleak.track(boundary=boundary) as tracker:
        for _ in range(iterations):
            out = model(torch.randn(512, 64))
            loss = out.square().mean()
            kept.append(out.detach().clone())  # kept on purpose: 512 x 8 floats per iteration
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            if boundary == "explicit":
                tracker.step()
        phases = tracker._session.birth_phases
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    return phases, params, kept


def test_phases_add_up_to_the_tracked_bytes_at_every_boundary_and_peak():
    phases, params, kept = training_run(6)
    cpu = [e for e in phases if e["device"] == "cpu"]
    assert [e["iteration"] for e in cpu] == list(range(6))
    for e in cpu:
        assert total(e, "live") == e["allocated"], e
        assert total(e, "at_peak") == e["peak"], e
    first, later = cpu[0], cpu[1:]
    # Adam's state (exp_avg and exp_avg_sq per parameter) is made in the first step.
    assert born(first, "live", "optimizer_step", "this") >= 2 * params
    assert all(born(e, "live", "optimizer_step", "this") < params for e in later)
    assert all(born(e, "live", "optimizer_step", "earlier") >= 2 * params for e in later)
    # The gradients: made by backward's nodes, alive at the boundary, one set per iteration
    # (zero_grad(set_to_none=True) frees the previous one).
    for e in cpu:
        assert params <= born(e, "live", "backward", "this") + born(e, "live", "backward", "earlier") < 2 * params
    # The kept outputs: born in forward, one more per iteration.
    out_bytes = kept[0].numel() * kept[0].element_size()
    for i, e in enumerate(cpu):
        assert born(e, "live", "forward", "this") >= out_bytes
        assert born(e, "live", "forward", "earlier") >= i * out_bytes
    # At the peak, the iteration's activations are alive: more forward bytes than it kept.
    for e in later:
        assert born(e, "at_peak", "forward", "this") > born(e, "live", "forward", "this")


def test_optimizer_steps_as_boundaries_still_tag_the_step():
    phases, params, _ = training_run(3, boundary="optimizer_step")
    cpu = [e for e in phases if e["device"] == "cpu"]
    assert len(cpu) == 3
    assert born(cpu[0], "live", "optimizer_step", "this") >= 2 * params
    for e in cpu:
        assert total(e, "live") == e["allocated"]


def test_a_step_that_raises_does_not_leave_later_blocks_in_the_step():
    """torch runs post-step hooks only when the step returned: the next boundary ends the
    phase."""

    class Failing(torch.optim.SGD):
        def step(self, closure=None):
            self.scratch = torch.ones(1000)
            raise RuntimeError("diverged")

    model = torch.nn.Linear(4, 4)
    optimizer = Failing(model.parameters(), lr=0.1)
    with torchleak.track(boundary="explicit") as tracker:
        with pytest.raises(RuntimeError, match="diverged"):
            optimizer.step()
        tracker.step()
        later = torch.ones(2000)
        tracker.step()
        phases = [e for e in tracker._session.birth_phases if e["device"] == "cpu"]
    assert born(phases[0], "live", "optimizer_step", "this") >= 4000
    assert born(phases[1], "live", "optimizer_step", "this") == 0
    assert born(phases[1], "live", "forward", "this") >= later.numel() * 4
