"""Where each device's tracked bytes come from, kept at every boundary and at each iteration's
peak: the blocks the optimizers seen stepping name (their parameters, the parameters' gradients,
their state), and the others by the phase they were born in (forward, backward, the optimizer's
step), tagged by the allocator hook. The ground MemTracker stands on to tell activations,
gradients and optimizer state apart, checked on a real training loop."""

import pytest
import torch

import torchleak

PHASES = ("forward", "backward", "optimizer_step")
NAMED = ("parameter", "gradient", "optimizer_state")


def born(entry, moment, phase, when="any"):
    """Unnamed bytes alive at `moment` ("live": the boundary, "at_peak") born in `phase`,
    during the iteration ("this"), before it ("earlier") or either ("any")."""
    this, earlier = entry[moment][phase]
    return {"this": this, "earlier": earlier, "any": this + earlier}[when]


def named(entry, moment, held):
    return entry[moment]["registered"][held]


def total(entry, moment):
    return sum(born(entry, moment, p) for p in PHASES) + sum(named(entry, moment, h) for h in NAMED)


def training_run(iterations, boundary="explicit", model_inside=False):
    torch.manual_seed(0)

    def build():
        model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 8))
        return model, torch.optim.Adam(model.parameters(), lr=1e-3)

    if not model_inside:
        model, optimizer = build()
    kept = []
    with torchleak.track(boundary=boundary) as tracker:
        if model_inside:
            model, optimizer = build()
        for _ in range(iterations):
            out = model(torch.randn(512, 64))
            loss = out.square().mean()
            kept.append(out.detach().clone())  # kept on purpose: 512 x 8 floats per iteration
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            if boundary == "explicit":
                tracker.step()
        phases = [e for e in tracker._session.birth_phases if e["device"] == "cpu"]
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    return phases, params, kept


def test_origins_add_up_to_the_tracked_bytes_at_every_boundary_and_peak():
    phases, params, kept = training_run(6)
    assert [e["iteration"] for e in phases] == list(range(6))
    out_bytes = kept[0].numel() * kept[0].element_size()
    for i, e in enumerate(phases):
        assert total(e, "live") == e["allocated"], e
        assert total(e, "at_peak") == e["peak"], e
        # Made before tracking: the parameters are no tracked block.
        assert named(e, "live", "parameter") == 0
        # The gradients (zero_grad(set_to_none=True) frees the last ones) and Adam's moments.
        assert named(e, "live", "gradient") == params
        assert named(e, "live", "optimizer_state") >= 2 * params
        # Named, they are no longer counted by phase.
        assert born(e, "live", "backward") == 0 and born(e, "live", "optimizer_step") == 0
        # The kept outputs: born in forward, one more per iteration.
        assert born(e, "live", "forward", "this") >= out_bytes
        assert born(e, "live", "forward", "earlier") >= i * out_bytes
    # Adam's state is born in the first step (named at its boundary), not later.
    assert all(born(e, "at_peak", "optimizer_step", "this") == 0 for e in phases)
    # At the peak, in backward: the iteration's activations (more forward bytes than it
    # keeps), the new gradients and backward's temporaries, not yet named.
    for e in phases[1:]:
        assert born(e, "at_peak", "forward", "this") > 10 * born(e, "live", "forward", "this")
        assert born(e, "at_peak", "backward", "this") >= params
        assert named(e, "at_peak", "optimizer_state") >= 2 * params


def test_parameters_made_while_tracked_are_named_as_parameters():
    phases, params, _ = training_run(3, model_inside=True)
    for e in phases:
        assert named(e, "live", "parameter") == params
        assert total(e, "live") == e["allocated"]


def test_optimizer_steps_as_boundaries_still_tag_the_step():
    phases, params, _ = training_run(3, boundary="optimizer_step")
    assert len(phases) == 3
    for e in phases:
        assert named(e, "live", "optimizer_state") >= 2 * params
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


def test_each_block_is_named_once_and_what_has_no_block_is_skipped():
    """Parameters that share a block, and state entries that do, name the block once; a meta
    tensor, a step count and a parameter group's non-tensor entries name nothing."""
    torch.manual_seed(0)
    with torchleak.track(boundary="explicit") as tracker:
        weight = torch.nn.Parameter(torch.randn(32, 32))
        rows = torch.nn.Parameter(weight.detach()[:8])  # a second parameter on weight's block
        optimizer = torch.optim.SGD([weight, rows], lr=0.1, momentum=0.9)
        (weight.sum() + rows.sum()).backward()
        optimizer.step()
        optimizer.param_groups[0]["params"].append("not a tensor")
        state = optimizer.state[weight]
        state["alias"] = state["momentum_buffer"][:4]  # a view of another state entry's block
        state["shape"] = torch.empty(8, device="meta")
        state["count"] = 7
        tracker.step()
        phases = [e for e in tracker._session.birth_phases if e["device"] == "cpu"]
    assert named(phases[0], "live", "parameter") == 32 * 32 * 4
    assert named(phases[0], "live", "gradient") == (32 + 8) * 32 * 4  # two gradients
    assert named(phases[0], "live", "optimizer_state") == (32 + 8) * 32 * 4  # two momentum buffers
    assert total(phases[0], "live") == phases[0]["allocated"]
    assert not tracker._warnings, tracker._warnings


@pytest.mark.parametrize(
    "break_it",
    [
        lambda o: setattr(o, "param_groups", "not a list"),
        lambda o: o.param_groups.append({"lr": 0.1}),
        lambda o: setattr(o, "state", ["not", "a", "dict"]),
    ],
    ids=["param_groups", "a group without params", "state"],
)
def test_an_optimizer_shaped_otherwise_is_said_once_and_its_memory_counted_by_phase(break_it):
    model = torch.nn.Linear(16, 16)
    with torchleak.track(boundary="explicit") as tracker:
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        optimizer.step()  # seen stepping: the registry reads it at every boundary from now on
        break_it(optimizer)
        for _ in range(3):
            kept = torch.ones(256)
            tracker.step()
        phases = [e for e in tracker._session.birth_phases if e["device"] == "cpu"]
    said = [w for w in tracker._warnings if "optimizers' parameters could not be read" in w]
    assert len(said) == 1 and "their memory is counted by phase" in said[0], tracker._warnings
    for e in phases:
        assert all(named(e, "live", h) == 0 for h in NAMED)
        assert total(e, "live") == e["allocated"]
    assert kept.numel() == 256
