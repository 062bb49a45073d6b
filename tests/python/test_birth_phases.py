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


def test_a_bad_registry_name_is_a_value_error():
    with torchleak.track(boundary="explicit") as tracker:
        with pytest.raises(ValueError, match="held_as must be one of parameter, gradient, optimizer_state"):
            tracker._session.mark_held_as([], "weights")
