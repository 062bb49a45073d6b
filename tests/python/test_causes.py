"""One leak, one entry: a cause that leaks through several allocation sites is one cause in the
JSON and one LEAK block in the text, with its sites listed under it."""

import torch

import torchleak


def test_a_loss_kept_with_its_graph_is_one_cause_across_its_sites():
    first, last = torch.nn.Linear(128, 512), torch.nn.Linear(512, 8)
    x = torch.randn(128, 128)
    loss_history = []

    def step():
        hidden = first(x)  # saved by GeluBackward0
        active = torch.nn.functional.gelu(hidden)  # saved by the last layer's AddmmBackward0
        loss_history.append(last(active).square().mean())

    report = torchleak.check(step, iterations=6)
    assert len(report.leaks) >= 2  # the graph's activations come from several sites
    (cause,) = report.causes
    assert cause["keeper"] == "loss_history"
    assert cause["holder"]["path_text"] == "loss_history"
    assert sorted(cause["findings"]) == sorted(i for i, f in enumerate(report.findings) if f.verdict == "leak")
    assert cause["bytes_per_iteration"] == sum(f.bytes_per_iteration for f in report.leaks)
    assert cause["text"].endswith(
        f"loss_history keeps every iteration's autograd graph, across {len(report.leaks)} allocation sites"
    )
    assert "loss.detach() or loss.item()" in cause["suggestion"]
    assert {f.severity for f in report.leaks} == {cause["severity"]}
    text = str(report)
    assert text.count("\nLEAK  ") == 1
    assert "allocation sites (biggest first):" in text
    assert f"1 leak ({len(report.leaks)} allocation sites)" in text
    summary = report.summary
    assert len(summary["recommendations"]) == 1
    assert sorted(summary["recommendations"][0]["findings"]) == sorted(cause["findings"])


def test_two_holders_are_two_causes_biggest_first():
    small, big = [], []

    def step():
        small.append(torch.ones(16, 256))
        big.append(torch.ones(256, 256))

    report = torchleak.check(step, iterations=5)
    assert [c["keeper"] for c in report.causes] == ["big", "small"]
    assert str(report).count("\nLEAK  ") == 2


def test_a_clean_run_has_no_causes():
    report = torchleak.check(lambda: torch.ones(64, 64).sum(), iterations=4)
    assert report.causes == []
    assert report.summary["score"] == 100
