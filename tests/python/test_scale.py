"""Reports of long runs and big heaps (issue #15): a bounded history that still gives the exact
rate, holders found from a sample of a finding's blocks, and the recorder's counts kept right
by the events that carry no block (frees of empty tensors)."""

import json

import pytest
import torch

import torchleak
from torchleak import Report


def test_a_long_run_keeps_a_bounded_grid_and_the_exact_rate():
    kept = []
    with torchleak.track() as t:
        for _ in range(3000):
            kept.append(torch.ones(2))  # 8 bytes per iteration
            torchleak.step()
        report = t.report(paths=False)
    assert report.iterations == 3000
    at = report.series_iterations
    assert 256 < len(at) <= 528 and at[0] == 0 and at[-16:] == list(range(2984, 3000))
    assert at == sorted(set(at))
    leak = report.leaks[0]
    assert len(leak.series) == len(at)
    assert leak.bytes_per_iteration == 8
    assert leak.series[-1] == 3000 * 8
    assert all(d["allocated"][-1] >= 3000 * 8 and len(d["allocated"]) == len(at) for d in report.devices)
    text = str(report)
    assert "over 3000 iterations" in text
    loaded = Report.from_json(report.to_json())
    assert loaded.series_iterations == at
    assert "series_iterations" in json.loads(report.to_json())


def test_a_cache_that_stops_growing_early_in_a_long_run_is_no_leak():
    cache = []
    with torchleak.track() as t:
        for i in range(2000):
            if i < 50:
                cache.append(torch.ones(256))
            scratch = torch.ones(64)  # noqa: F841
            torchleak.step()
        report = t.report(paths=False)
    assert not report.leaks, str(report)


def test_a_short_run_has_one_point_per_iteration_and_no_extra_field():
    kept = []
    with torchleak.track() as t:
        for _ in range(6):
            kept.append(torch.ones(1024))
            torchleak.step()
        report = t.report(paths=False)
    assert report.series_iterations == list(range(6))
    assert "series_iterations" not in report.to_dict()


def test_the_holder_of_a_big_finding_is_found_from_a_sample_of_its_blocks():
    # 40,000 blocks, 10,000 per iteration: paths are found for a sample of them, and the list
    # still reads as the holder growing 10,000 elements per iteration.
    keep = []
    with torchleak.track() as t:
        for _ in range(4):
            keep.extend(torch.empty(1) for _ in range(10_000))
            torchleak.step()
        report = t.report()
    leak = report.leaks[0]
    assert leak.count == 40_000
    assert leak.holder is not None and leak.holder["path_text"] == "keep"
    assert leak.holder["growth_per_iteration"] >= 5_000
    assert leak.dtype == "float32"


def test_frees_of_empty_tensors_leave_the_counts_alone():
    # c10 reports the free of an empty tensor with a null pointer; it once took a stale record
    # out of a free slot of the live table and wrapped its size below zero.
    with torchleak.track() as t:
        for _ in range(4):
            for _ in range(100):
                x = torch.empty(0)
                del x
            torchleak.step()
        assert t._session.live_blocks < 100
        report = t.report()
    assert not report.leaks


@pytest.mark.parametrize(
    "at, message", [([0, 0, 1], "increasing"), ([0, 9], "below"), ([-1, 0], "increasing"), ([0, 1.5], "integer")]
)
def test_a_loaded_report_checks_its_series_iterations(at, message):
    kept = []
    with torchleak.track() as t:
        for _ in range(3):
            kept.append(torch.ones(1024))
            torchleak.step()
        data = t.report(paths=False).to_dict()
    data["series_iterations"] = at
    with pytest.raises(ValueError, match=message):
        Report.from_json(json.dumps(data))
