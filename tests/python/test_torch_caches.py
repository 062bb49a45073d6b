"""The evidence a report needs before it names one of torch's C++ caches as a keeper."""

import collections
import sys
import types

import torch

from torchleak import _torch_caches


def test_autocast_is_evidence_only_inside_an_open_region_with_its_cache_on():
    assert _torch_caches.autocast_devices() == []
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert _torch_caches.autocast_devices() == ["cpu"]
    with torch.autocast("cpu", dtype=torch.bfloat16, cache_enabled=False):
        assert _torch_caches.autocast_devices() == []
    assert _torch_caches.autocast_devices() == []


def test_dynamo_counts_only_what_its_own_counters_say(monkeypatch):
    monkeypatch.delitem(sys.modules, "torch._dynamo.utils", raising=False)
    assert _torch_caches.dynamo_compiled_frames() == 0  # never loaded: never compiled
    fake = types.ModuleType("torch._dynamo.utils")
    fake.counters = collections.defaultdict(collections.Counter)
    monkeypatch.setitem(sys.modules, "torch._dynamo.utils", fake)
    assert _torch_caches.dynamo_compiled_frames() == 0  # loaded (a disable wrapper) but idle
    assert "frames" not in fake.counters  # reading the counters adds no key
    fake.counters["frames"]["ok"] = 3
    assert _torch_caches.dynamo_compiled_frames() == 3
    fake.counters = "not counters"
    assert _torch_caches.dynamo_compiled_frames() == 0


def test_fill_sets_the_report_inputs_caches_fields():
    from torchleak import _core

    inputs = _core.ReportInputs()
    _torch_caches.fill(inputs)
    assert inputs.dynamo_compiled_frames == _torch_caches.dynamo_compiled_frames()
    assert inputs.torchscript_functions == _torch_caches.torchscript_functions()
    assert inputs.autocast_devices == _torch_caches.autocast_devices()
