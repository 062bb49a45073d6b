"""report.save("x.pickle"): the live blocks in the snapshot structure PyTorch's memory viewer
reads, checked by feeding the file to torch.cuda._memory_viz's own functions (offline: the
flamegraph step is replaced by returning its input lines)."""

import json
import pickle

import pytest
import torch
from torch.cuda import _memory_viz

import torchleak
from torchleak.render import memory_snapshot

KiB = 1024


def lines_of(text):
    return text  # _memory_viz's flamegraph input, "stack;frames size" per line


def leaky_report():
    kept = []

    def step():
        kept.append(torch.ones(64, 1024))  # LEAK 256 KiB
        return float(torch.randn(128, 128).sum())

    return torchleak.check(step, iterations=6, warmup=1), kept


def test_the_pickle_opens_in_memory_viz_with_every_live_block_at_its_line(tmp_path):
    report, kept = leaky_report()
    path = report.save(tmp_path / "leak.pickle")
    with open(path, "rb") as fh:
        snapshot = pickle.load(fh)
    leak = report.leaks[0]
    # segsum checks the accounting itself (it raises on a mismatch) and sums the active bytes
    summary = _memory_viz.segsum(snapshot)
    assert f"total_allocated: {_memory_viz.Bytes(leak.total_bytes)}" in summary
    # the trace: one allocation per kept tensor, in run order
    trace = _memory_viz.trace(snapshot)
    assert trace.count("= seg_") == len(kept) == 6
    # the "memory" flamegraph: every byte attributed to the leaking line
    flame = _memory_viz.memory(snapshot, format_flamegraph=lines_of)
    line = leak.site["line"]
    at_site = [ln for ln in flame.splitlines() if f"test_memory_snapshot.py:{line}:" in ln]
    assert len(at_site) == 6
    assert sum(int(ln.rsplit(" ", 1)[1]) for ln in at_site) == 6 * 256 * KiB
    assert _memory_viz.segments(snapshot, format_flamegraph=lines_of).count("active_allocated") == 6
    # addresses are the tensors' own
    assert {s["address"] for s in snapshot["segments"]} == {t.data_ptr() for t in kept}


def test_every_block_says_its_holder_and_verdict_in_a_protocol_4_pickle(tmp_path, monkeypatch):
    """The viewer reads pickle protocol 4 at most; Python 3.14 writes 5 unless told: the file is
    4 whatever the interpreter's default (here made 5, as on 3.14)."""
    dumps = pickle.dumps
    monkeypatch.setattr(pickle, "dumps", lambda obj, protocol=5, **kw: dumps(obj, protocol=protocol, **kw))
    report, kept = leaky_report()
    report.save(tmp_path / "leak.pickle")
    raw = (tmp_path / "leak.pickle").read_bytes()
    assert raw[:2] == b"\x80\x04"  # PROTO 4
    snapshot = pickle.loads(raw)
    leak = report.leaks[0]
    label = leak["block_label"]
    assert label == f"torchleak: held by {leak['holder']['path_short']} (leak, user-held)"
    # The label is the tip of each of the leak's blocks' stacks, where the viewer shows it.
    flame = _memory_viz.memory(snapshot, format_flamegraph=lines_of)
    at_site = [ln for ln in flame.splitlines() if f"test_memory_snapshot.py:{leak.site['line']}:" in ln]
    assert len(at_site) == len(kept) == 6
    assert all(ln.rsplit(" ", 1)[0].endswith(label) for ln in at_site), at_site[:1]
    tips = [b["frames"][0]["name"] for seg in snapshot["segments"] for b in seg["blocks"]]
    assert tips.count(label) == 6


def test_a_saved_json_report_gives_the_same_snapshot(tmp_path):
    report, _ = leaky_report()
    report.save(tmp_path / "r.json")
    loaded = torchleak.Report.load(tmp_path / "r.json")
    assert loaded.to_memory_snapshot() == report.to_memory_snapshot()
    loaded.save(tmp_path / "r.pkl")
    assert pickle.loads((tmp_path / "r.pkl").read_bytes()) == report.to_memory_snapshot()


def test_a_clean_run_is_an_empty_snapshot_the_viewer_still_reads(tmp_path):
    report = torchleak.check(lambda: float(torch.ones(100).sum()), iterations=3)
    snapshot = report.to_memory_snapshot()
    assert snapshot["segments"] == []
    assert "total_allocated: 0" in _memory_viz.segsum(snapshot)


def test_unlisted_blocks_become_one_block_that_says_so():
    frame = {"file": "train.py", "line": 7, "function": "step", "text": "train.py:7"}
    data = {
        "iterations": 3,
        "findings": [
            {
                "device": "cuda:1",
                "stack": [frame],
                "live_blocks": [
                    {"address": 4096, "size": 512, "iteration": 0, "sequence": 1},
                    {"address": 8192, "size": 512, "iteration": 2, "sequence": 9},
                ],
                "live_blocks_unlisted": {"count": 5000, "bytes": 5000 * 512},
            },
            {
                "device": "cpu",
                "stack": [frame],
                "live_blocks": [{"address": 100, "size": 8, "iteration": 1, "sequence": 4}],
            },
        ],
    }
    snapshot = memory_snapshot.render(data)
    assert snapshot["torchleak"]["devices"] == {"1": "cuda:1", "2": "cpu"}
    assert [len(t) for t in snapshot["device_traces"]] == [0, 2, 1]
    assert "total_allocated: 2.4MiB" in _memory_viz.segsum(snapshot)
    flame = _memory_viz.memory(snapshot, format_flamegraph=lines_of)
    assert "5,000 more live blocks of this site, not listed" in flame
    addresses = [s["address"] for s in snapshot["segments"]]
    assert len(set(addresses)) == len(addresses)


@pytest.mark.parametrize("name", ["r.txt", "r", "r.pickle.gz"])
def test_an_unknown_extension_names_the_three_formats(tmp_path, name):
    report = torchleak.check(lambda: None, iterations=2)
    with pytest.raises(ValueError, match=r"\.json, \.html or \.pickle"):
        report.save(tmp_path / name)


def report_data_on(device):
    """A small leak's report as a received one could name its device."""
    keep = []
    with torchleak.track() as t:
        for _ in range(4):
            keep.append(torch.ones(100))
            torchleak.step()
    data = json.loads(t.report().to_json())
    for f in data["findings"]:
        f["device"] = device
    return data


@pytest.mark.parametrize("device", ["cuda:2000000000", "cuda:\u00b2"])
def test_a_received_report_with_a_device_index_out_of_range_is_refused_at_load(device):
    # #46: the export built one trace list per index up to two billion (MemoryError or the
    # machine's memory); a superscript digit gave a bare int() error.
    data = report_data_on(device)
    with pytest.raises(torchleak._core.ReportSchemaError, match=r"findings\[\]\.device '.*' is not a device"):
        torchleak.Report.from_json(json.dumps(data))


def test_a_report_made_from_a_dict_with_a_huge_device_index_exports_without_sizing_by_it():
    data = report_data_on("cuda:2000000000")
    snapshot = torchleak.Report(data).to_memory_snapshot()  # Report(dict) does not validate
    assert len(snapshot["device_traces"]) <= 2
