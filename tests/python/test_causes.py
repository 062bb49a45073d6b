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
    # The fix quotes what the loop appends, not a `loss` it never kept (#62 item 3).
    assert "store last(active).square().mean().detach() or .item()" in cause["suggestion"]
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


def test_a_group_of_nine_lists_offers_the_code_that_frees_all_nine():
    # Before: the group's text showed its biggest member's `holders[8].clear()`, which freed one
    # list in nine, and the ninth list, past the eight biggest, had no proven code at all.
    holders = [[] for _ in range(9)]
    with torchleak.track() as t:
        for _ in range(12):
            for k, kept in enumerate(holders):
                kept.append(torch.ones(10000 + k * 100))
            torchleak.step()
    del kept
    report = t.report()
    (group,) = report.to_dict()["cause_groups"]
    assert group["fix_code"].splitlines() == [f"holders[{k}].clear()" for k in range(8, -1, -1)]
    text = str(report).split("lists in holders grow", 1)[1]
    code = [line.strip() for line in text.splitlines() if line.strip().endswith(".clear()")]
    assert code == group["fix_code"].splitlines()
    for line in code:
        exec(line, {"holders": holders})
    assert not any(holders)
    assert "holders[8].clear()\nholders[7].clear()" in report.to_html()
