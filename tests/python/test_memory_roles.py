"""What the memory is made of: every device's bytes by role (parameters, gradients, optimizer
state, activations, temporaries, inputs and outputs, user-held, untracked, reserve) at every
boundary and at each iteration's peak, in the report's JSON. Checked against PyTorch's own
MemTracker on a model it can measure, and on a leaky loop whose leak must show as user-held."""

import json

import pytest
import torch

import torchleak

from live_reports import training_with_a_kept_graph_report

ROLES = [
    "parameters",
    "gradients",
    "optimizer_state",
    "activations",
    "temporaries",
    "inputs_outputs",
    "user_held",
    "untracked",
    "reserve",
]


def roles_of(device):
    return {r["role"]: r for r in device["roles"]}


def mlp(width):
    return torch.nn.Sequential(
        torch.nn.Linear(64, width),
        torch.nn.ReLU(),
        torch.nn.Linear(width, width),
        torch.nn.ReLU(),
        torch.nn.Linear(width, 8),
    )


def measure_with_memtracker(batch, width):
    """One iteration measured by MemTracker and torchleak at once, after one outside it (so
    Adam's state exists): torchleak's roles at that iteration's peak and MemTracker's peak
    snapshot for the CPU."""
    mem_tracker = pytest.importorskip("torch.distributed._tools.mem_tracker")
    torch.manual_seed(0)
    x = torch.randn(batch, 64)
    with torchleak.track(boundary="explicit") as tracker:
        model = mlp(width)
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)

        def iteration():
            optimizer.zero_grad(set_to_none=True)
            model(x).square().mean().backward()
            optimizer.step()

        iteration()
        tracker.step()
        mt = mem_tracker.MemTracker()
        mt.track_external(model, optimizer)
        with mt:
            iteration()
        tracker.step()
    device = tracker.report().to_dict()["devices"][0]
    ours = {name: r["at_peak"][1] for name, r in roles_of(device).items() if "at_peak" in r}
    theirs = {
        str(k.value if hasattr(k, "value") else k): v
        for k, v in mt.get_tracker_snapshot("peak")[torch.device("cpu")].items()
    }
    return ours, theirs, device["peak"][1]


def test_one_iteration_agrees_with_memtrackers_roles_at_the_peak():
    """A peak in backward: the activations still alive, backward's temporaries, the new
    gradients of the last layer. Within 1% of the peak per role (measured: equal)."""
    ours, theirs, peak = measure_with_memtracker(batch=2048, width=512)
    assert theirs["Total"] == pytest.approx(peak, abs=peak * 0.01)
    tolerance = peak * 0.01
    assert ours["parameters"] == pytest.approx(theirs["Parameter"], abs=tolerance)
    assert ours["gradients"] == pytest.approx(theirs["Gradient"], abs=tolerance)
    assert ours["optimizer_state"] == pytest.approx(theirs["Optstate"], abs=tolerance)
    assert ours["activations"] == pytest.approx(theirs["Activation"], abs=tolerance)
    assert ours["temporaries"] == pytest.approx(theirs["Temp"], abs=tolerance)
    assert ours["activations"] > peak * 0.2  # the comparison is about something


def test_a_peak_in_the_optimizers_step_counts_its_scratch_as_temporaries():
    """MemTracker files every tensor the step makes under optimizer state; torchleak counts what
    the step frees again before the iteration ends as temporaries, the state it keeps as state.
    Together they agree."""
    ours, theirs, peak = measure_with_memtracker(batch=64, width=1024)
    tolerance = peak * 0.01
    assert ours["activations"] < peak * 0.05  # a small batch: the step's scratch is the peak
    assert ours["temporaries"] > peak * 0.2
    assert ours["optimizer_state"] + ours["temporaries"] == pytest.approx(
        theirs["Optstate"] + theirs["Temp"], abs=tolerance
    )
    assert ours["optimizer_state"] < theirs["Optstate"]
    assert ours["parameters"] == pytest.approx(theirs["Parameter"], abs=tolerance)


def leaky_training(iterations=6):
    return training_with_a_kept_graph_report(iterations)


def test_roles_add_up_to_the_device_at_every_boundary_and_peak_and_the_leak_is_user_held():
    report, model, losses = leaky_training()
    assert report["devices"][0]["spikes"] == []
    device = report["devices"][0]
    roles = roles_of(device)
    assert [r["role"] for r in device["roles"]] == ROLES
    assert "at_peak" not in roles["reserve"]
    for i, (allocated, reserved, peak) in enumerate(zip(device["allocated"], device["reserved"], device["peak"])):
        at_end = sum(r["at_boundary"][i] for name, r in roles.items() if name != "reserve")
        assert at_end == allocated, (i, {n: r["at_boundary"][i] for n, r in roles.items()})
        assert roles["reserve"]["at_boundary"][i] == reserved - allocated
        assert sum(r["at_peak"][i] for r in roles.values() if "at_peak" in r) == peak
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    assert roles["parameters"]["at_boundary"] == [params] * 6
    assert roles["gradients"]["at_boundary"] == [params] * 6
    assert roles["optimizer_state"]["at_boundary"] == [params] * 6  # SGD's momentum buffers
    # The leak: each kept loss keeps its graph's saved activations (born in forward, inputs and
    # outputs at their own boundary, user-held from the next on); the batch and the loss are
    # the iteration's inputs and outputs.
    held = roles["user_held"]["at_boundary"]
    assert held[0] == 0 and all(b - a >= 128 * 128 * 4 for a, b in zip(held, held[1:]))
    assert roles["inputs_outputs"]["at_boundary"][-1] > 256 * 64 * 4
    leaks = [f for f in report["findings"] if f["verdict"] == "leak"]
    assert leaks and all(f["role"] == "user_held" for f in leaks)
    assert device["roles_text"].startswith("at its highest peak (iteration ")
    assert "user-held" in device["roles_text"]


def test_reports_read_back_keep_their_roles_and_older_reports_have_none():
    report, _, _ = leaky_training(3)
    back = torchleak.Report.from_json(json.dumps(report)).to_dict()
    assert back["devices"][0]["roles"] == report["devices"][0]["roles"]
    del report["devices"][0]["roles"]
    older = torchleak.Report.from_json(json.dumps(report)).to_dict()
    assert "roles" not in older["devices"][0]


def test_an_iteration_whose_peak_jumps_is_a_spike_with_its_role_and_site():
    """One batch 16 times the others: its iteration's peak jumps and comes back down. The
    report names it a spike, its activations as what rose, and the line whose block was the
    biggest at that peak (the model's forward, called from this loop)."""
    torch.manual_seed(0)
    with torchleak.track(boundary="explicit") as tracker:
        model = torch.nn.Sequential(torch.nn.Linear(64, 512), torch.nn.ReLU(), torch.nn.Linear(512, 8))
        optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
        for i in range(10):
            batch = torch.randn(4096 if i == 6 else 256, 64)
            optimizer.zero_grad(set_to_none=True)
            model(batch).square().mean().backward()  # the spike's line
            optimizer.step()
            tracker.step()
    report = tracker.report().to_dict()
    spikes = report["devices"][0]["spikes"]
    assert [s["iteration"] for s in spikes] == [6]
    spike = spikes[0]
    # What the big batch made: its activations, and backward's temporaries (the gradients of
    # those activations), whichever rose more at the peak.
    assert spike["role"] in ("activations", "temporaries")
    assert spike["role_rise_bytes"] > 4 * 4096 * 512
    assert spike["peak_bytes"] > 8 * spike["typical_peak_bytes"]
    # Made in backward (a gradient of the big activations, by the node named) or in forward:
    # either way on this line.
    line = next(
        i for i, text in enumerate(open(__file__).read().splitlines(), 1) if text.endswith("# the spike's line")
    )
    assert (spike["site"]["file"], spike["site"]["line"]) == (__file__, line), spike["site"]
    assert spike["text"].startswith("the peak of iteration 7, ")
    assert f"    spike: {spike['text']}" in torchleak.render.RENDERERS["text"](report)


def test_a_model_built_before_tracking_still_shows_its_parameters():
    """On the CPU the allocator reports no totals: parameters made before tracking are no
    tracked block, and the roles count them from what the optimizer names (then the roles add up
    to the tracked bytes plus those)."""
    torch.manual_seed(0)
    model = mlp(128)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    with torchleak.track(boundary="explicit") as tracker:
        for _ in range(3):
            optimizer.zero_grad(set_to_none=True)
            model(torch.randn(64, 64)).square().mean().backward()
            optimizer.step()
            tracker.step()
    device = tracker.report().to_dict()["devices"][0]
    roles = roles_of(device)
    assert roles["parameters"]["at_boundary"] == [params] * 3
    assert roles["parameters"]["at_peak"] == [params] * 3
    for i, allocated in enumerate(device["allocated"]):
        assert sum(r["at_boundary"][i] for n, r in roles.items() if n != "reserve") == allocated + params
