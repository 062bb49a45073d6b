"""Bad input on the device path, through the real hook: an allocator's reports that cannot be
right must cost a warning at most, never a crash, a wrong verdict or a lost report."""

import torch

import torchleak
from conftest import DEVICE, MiB, device_of

native = DEVICE.native


def test_frees_of_blocks_never_seen_change_nothing():
    early = torch.ones(1024).to("fakegpu")  # allocated before tracking
    kept = []
    with torchleak.track() as tracker:
        for i in range(4):
            kept.append(torch.ones(256).to("fakegpu"))
            native.report_raw(0xDEAD0000 + i * 4096, -4096, native.memory_allocated(0), native.memory_reserved(0), 0)
            native.report_raw(0xBEEF0000, -512, 0, 0, 1)  # on a device never used
            torchleak.step()
        del early  # its free arrives too: unknown to the recorder
    report = tracker.report()
    assert [f.device for f in report.leaks] == ["fakegpu:0"]
    assert report.leaks[0].count == 4
    assert "fakegpu:1" not in {d["device"] for d in report.devices}


def test_an_allocator_that_reports_no_totals_is_timed_by_tracked_bytes():
    native.set_report_totals(False)
    kept = []
    with torchleak.track() as tracker:
        for _ in range(5):
            kept.append(torch.empty(MiB, dtype=torch.uint8, device="fakegpu"))
            torchleak.step()
    report = tracker.report()
    device = device_of(report, "fakegpu:0")
    assert device["allocated"] == [MiB * (i + 1) for i in range(5)]
    assert device["reserved"] == device["allocated"]
    assert any("fakegpu:0: its allocator reported totals that cannot be right" in w for w in report.warnings)
    assert report.leaks[0].bytes_per_iteration == MiB


def test_totals_that_go_backwards_are_rejected_not_plotted():
    kept = []
    with torchleak.track() as tracker:
        for i in range(4):
            kept.append(torch.empty(MiB, dtype=torch.uint8, device="fakegpu"))
            if i == 2:
                # An allocation whose totals are below its own size, then reserved < allocated.
                native.report_raw(0x7000_0000, 4096, 0, 0, 0)
                native.report_raw(0x7000_0000, -4096, 10 * MiB, MiB, 0)
            torchleak.step()
    report = tracker.report()
    device = device_of(report, "fakegpu:0")
    assert device["allocated"][-1] == 4 * MiB  # tracked, not the bogus 10 MiB
    assert all(a >= 0 for a in device["allocated"])
    assert any("cannot be right" in w for w in report.warnings)


def test_a_device_index_beyond_the_first_and_the_device_count():
    kept = []
    with torchleak.track() as tracker:
        for i in range(3):
            kept.append(torch.ones(64).to("fakegpu:1"))
            # A report for a device the backend does not have (index 9), allocated and freed.
            native.report_raw(0x6000_0000 + i * 4096, 4096, 4096, 2 * MiB, 9)
            native.report_raw(0x6000_0000 + i * 4096, -4096, 0, 2 * MiB, 9)
            torchleak.step()
    report = tracker.report()
    names = {d["device"] for d in report.devices}
    assert {"fakegpu:1", "fakegpu:9"} <= names
    assert [f.device for f in report.leaks] == ["fakegpu:1"]
    assert device_of(report, "fakegpu:9")["capacity_bytes"] == 0  # unknown: no projection
    assert device_of(report, "fakegpu:9")["projection_text"] == ""


def test_an_allocator_that_reports_nothing_leaves_a_cpu_only_report():
    native.set_report_events(False)
    kept = []
    with torchleak.track() as tracker:
        for _ in range(3):
            kept.append(torch.ones(64).to("fakegpu"))
            kept.append(torch.ones(64))
            torchleak.step()
    report = tracker.report()
    assert {f.device for f in report.leaks} == {"cpu"}


def test_an_oom_report_the_program_survives_adds_no_forensics():
    native.set_capacity(0, 4 * MiB)
    kept = []
    with torchleak.track() as tracker:
        for _ in range(3):
            try:
                torch.empty(64 * MiB, dtype=torch.uint8, device="fakegpu")
            except torch.OutOfMemoryError:
                pass  # e.g. a batch-size search that backs off
            kept.append(torch.ones(16).to("fakegpu"))
            torchleak.step()
    report = tracker.report()
    assert report.oom is None
    assert report.leaks
