"""Retaining paths: why is this tensor still alive (issue 3)."""

import dataclasses
import gc
import json
import re
import sys

import pytest
import torch

import torchleak
from ipython_shell import run
from torchleak import _core

MiB = 1 << 20


def kinds(finding):
    return [step["kind"] for step in finding.path]


def test_loss_list_keeps_activations_through_the_graph():
    w = torch.randn(512, 512, requires_grad=True)
    x = torch.randn(256, 512)
    losses = []

    def step():
        h = torch.tanh(x @ w)  # saved by TanhBackward0 as its result
        losses.append(h.sum())

    report = torchleak.check(step, iterations=6)
    leak = max(report.leaks, key=lambda f: f.total_bytes)
    assert leak.bytes_per_iteration == 256 * 512 * 4
    assert leak.retention == "reachable"
    assert leak.path_text.startswith("losses[4].grad_fn")
    assert {"grad_fn", "saved"} <= set(kinds(leak))
    assert leak.holder == {
        "path_text": "losses",
        "path_short": "losses",
        "type": "list",
        "growth_per_iteration": 1.0,
        "growth_text": "+1 per iteration",
    }
    assert "store h.sum().detach() or .item()" in leak.suggestion  # as the loop appends it
    last = leak.path[-1]
    assert last["tensor"]["shape"] == [256, 512] and last["tensor"]["dtype"] == "float32"
    assert last["tensor"]["site"]["line"] == step.__code__.co_firstlineno + 1


class StageOut(torch.autograd.Function):
    """Keeps its activation as a ctx attribute (the Fast-LLM #486 mechanism)."""

    @staticmethod
    def forward(ctx, x):
        stage_out = x * 3
        ctx.stage_out = stage_out  # the bug
        return stage_out.sum(dim=1)

    @staticmethod
    def backward(ctx, grad):
        return grad[:, None].expand_as(ctx.stage_out) * 3


@dataclasses.dataclass
class MicroBatchMetrics:
    outputs: dict = dataclasses.field(default_factory=lambda: {"stage": []})


def test_an_autograd_node_on_the_path_names_the_module_that_made_it():
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 1))
    x = torch.randn(256, 64)
    losses = []

    def step():
        losses.append(model(x).pow(2).mean())

    report = torchleak.check(step, iterations=5)
    notes = {step["type"]: step.get("note", "") for leak in report.leaks for step in leak.path}
    assert notes.get("AddmmBackward0", "").endswith("made by model[2] (Linear)"), notes
    # Nodes whose inputs are no module's parameters say nothing of modules.
    assert "made by" not in notes.get("MeanBackward0", "") + notes.get("PowBackward0", "")


def test_custom_function_ctx_attribute_through_a_dataclass_dict_of_lists():
    x = torch.randn(512, 512, requires_grad=True)
    metrics = MicroBatchMetrics()  # held by this frame's local variable

    def step():
        metrics.outputs["stage"].append(StageOut.apply(x))

    report = torchleak.check(step, iterations=5)
    leak = max(report.leaks, key=lambda f: f.total_bytes)
    assert leak.bytes_per_iteration == MiB
    assert leak.path_text.startswith("metrics.outputs['stage'][3].grad_fn.stage_out"), leak.path_text
    assert leak.path[0]["kind"] == "frame"
    assert "ctx" in kinds(leak)
    assert leak.holder["path_text"] == "metrics.outputs['stage']"
    assert leak.holder["growth_per_iteration"] == 1.0
    assert "save_for_backward" in leak.suggestion


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(256, 256)
        self.last_hidden = torch.zeros(128, 256)

    def forward(self, x):
        # keeps every step's result alive through TanhBackward0's saved result
        self.last_hidden = torch.tanh(self.lin(x) + self.last_hidden)
        return self.last_hidden


def test_module_attribute():
    model = Net()
    x = torch.randn(128, 256)
    report = torchleak.check(lambda: model(x), iterations=5)
    leak = max(report.leaks, key=lambda f: f.total_bytes)
    assert leak.path_text.startswith("model.last_hidden"), leak.path_text
    assert kinds(leak)[:3] == ["frame", "attr", "grad_fn"]
    assert "saved" in kinds(leak)


def test_closure_captured_by_a_forward_hook():
    model = torch.nn.Linear(256, 1024)

    def make_hook():
        buf = []

        def hook(module, inputs, output):
            buf.append(output.detach())

        return hook

    handle = model.register_forward_hook(make_hook())
    try:
        x = torch.randn(256, 256)
        report = torchleak.check(lambda: model(x), iterations=4)
    finally:
        handle.remove()
    (leak,) = report.leaks
    assert "closure" in kinds(leak)
    closure = next(s for s in leak.path if s["kind"] == "closure")
    assert "'buf'" in closure["note"]
    assert ".<cell buf>[2]" in leak.path_text
    assert leak.holder["growth_per_iteration"] == 1.0


def test_a_small_view_keeps_its_base_alive():
    keep = []

    def step():
        big = torch.randn(1024, 256)  # 1 MiB
        keep.append(big[0])  # 1 KiB view of it

    report = torchleak.check(step, iterations=5)
    (leak,) = report.leaks
    assert leak.bytes_per_iteration == MiB
    assert leak.path_text == "keep[3]._base"
    view, base = leak.path[-2], leak.path[-1]
    assert view["tensor"]["shape"] == [256] and view["tensor"]["nbytes"] == MiB
    assert "._base" in view["note"]
    assert base["kind"] == "base" and base["tensor"]["shape"] == [1024, 256]
    assert base["tensor"]["site"]["line"] == step.__code__.co_firstlineno + 1


def test_reference_cycle_freed_only_by_gc_collect():
    gc.disable()
    try:

        def step():
            node = {"t": torch.ones(256, 1024)}
            node["self"] = node  # a cycle, dropped at once

        report = torchleak.check(step, iterations=4)
        (leak,) = report.leaks
        assert leak.retention == "cycle"
        # Named by its members (issue 9): the dict that refers to itself through 'self'.
        assert leak.path_text == "<cycle: dict>['self']['t']", leak.path_text
        assert "gc.collect()" in leak.suggestion
        assert "break it at ['self']" in leak.suggestion
    finally:
        gc.enable()
        gc.collect()


class SaveViewOfOutput(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        out = x * 2
        ctx.save_for_backward(out[:])  # a view of the output: a C++ reference cycle
        return out

    @staticmethod
    def backward(ctx, grad):
        return grad * 2


def test_memory_held_only_from_cpp():
    w = torch.randn(256, 1024, requires_grad=True)
    report = torchleak.check(lambda: SaveViewOfOutput.apply(w), iterations=4)
    (leak,) = report.leaks
    assert leak.retention == "cpp_only"
    assert leak.path_text == "<Tensor held only from C++>"
    assert "only C++ refers to this tensor" in leak.path[0]["note"]
    assert "ctx saved a view of this output" in leak.path[0]["note"]
    assert "save the output itself" in leak.suggestion
    assert leak.site["line"] == SaveViewOfOutput.forward.__code__.co_firstlineno + 2


def test_one_graph_held_only_from_cpp_is_one_cause_with_one_fix():
    # #47 item 5: one graph a custom Function's cycle keeps gave three "held only from C++"
    # entries, two of them with the generic "C++ state torch does not expose" fix.
    w1 = torch.randn(256, 256, requires_grad=True)
    w2 = torch.randn(256, 256, requires_grad=True)

    def step():
        h = torch.randn(64, 256) @ w1
        h = SaveViewOfOutput.apply(h)
        h = torch.relu(h @ w2)
        SaveViewOfOutput.apply(h).sum()

    report = torchleak.check(step, iterations=5)
    assert len(report.leaks) == 3, str(report)  # three lines' tensors, all kept by one graph
    assert all(leak.retention == "cpp_only" for leak in report.leaks)
    assert "1 leak (3 allocation sites)" in str(report)
    (cause,) = report.causes
    assert cause["keeper"] == "the autograd graph of SaveViewOfOutputBackward", cause["keeper"]
    assert len(cause["findings"]) == len(report.leaks)
    for leak in report.leaks:
        assert "save the output itself" in leak.suggestion, (leak.path_text, leak.suggestion)
        assert "C++ state torch does not expose" not in leak.suggestion


def test_two_graphs_that_share_only_parameters_are_not_one_graph():
    # A parameter's AccumulateGrad is in every graph that uses it: two custom Functions' cycles
    # over one weight are two graphs, each named by its own Function.
    class SaveViewAgain(SaveViewOfOutput):
        @staticmethod
        def forward(ctx, x):
            out = x * 3
            ctx.save_for_backward(out[:])
            return out

    w = torch.randn(256, 1024, requires_grad=True)

    def step():
        SaveViewOfOutput.apply(w * 1)
        SaveViewAgain.apply(w * 1)

    report = torchleak.check(step, iterations=4)
    assert sorted(c["keeper"] for c in report.causes) == [
        "the autograd graph of SaveViewAgainBackward",
        "the autograd graph of SaveViewOfOutputBackward",
    ], str(report)


def test_a_report_built_after_the_holder_let_go_blames_no_one():
    # Issue #30: after the block ends no free is seen, and a block freed since read "held
    # only from C++"; its address may hold another tensor by then, whose holder would be named.
    kept = []
    with torchleak.track() as tracker:
        for _ in range(8):
            kept.append(torch.ones(64, 1024))
            torchleak.step()
    kept.clear()
    newcomers = [torch.ones(64, 1024) for _ in range(8)]  # may take the freed addresses
    report = tracker.report()
    (leak,) = report.leaks  # the run's verdict stands
    assert leak.bytes_per_iteration == 256 * 1024
    assert leak.path == [] and leak.get("holder") is None
    assert "newcomers" not in report.to_json() and "C++" not in report.to_json()
    [warning] = report.to_dict()["warnings"]
    assert warning.startswith(
        "8 block(s) (2.0 MiB) alive when tracking stopped were freed before this report was built"
    )
    del newcomers


def test_a_report_built_after_the_block_while_the_holder_lives_has_its_path():
    kept = []
    with torchleak.track() as tracker:
        for _ in range(6):
            kept.append(torch.ones(64, 1024))
            torchleak.step()
    scratch = [torch.ones(64, 1024) for _ in range(3)]
    del scratch  # blocks made and freed after the block: none of the run's
    report = tracker.report()
    (leak,) = report.leaks
    assert leak["holder"]["path_text"] == "kept" and report.to_dict()["warnings"] == []


def test_frees_after_the_session_is_gone_are_safe():
    # The tap's deleter outlives the session; the session's note of late frees must not.
    kept = []
    with torchleak.track():
        for _ in range(4):
            kept.append(torch.ones(64, 1024))
    gc.collect()
    kept.clear()  # frees through the tap's deleter, no session, no log
    with torchleak.track() as tracker:  # a later session sees its own frees only
        x = torch.ones(64, 1024)
        del x
    assert tracker.report().leaks == []


def test_notebook_output_cache(ipython):
    run(ipython, "import torch")
    with torchleak.track() as tracker:
        for _ in range(3):
            run(ipython, "torch.ones(256, 1024)")  # displayed: kept in Out[n]
            torchleak.step()
    # three runs of the same cell are one site that grows, held by the output cache
    (leak,) = tracker.report().leaks
    assert leak.series == [MiB, 2 * MiB, 3 * MiB]
    assert leak.path_text.startswith("Out["), leak.path_text
    assert leak.site["cell"] is not None
    assert "%reset -f out" in leak.suggestion


def test_an_underscore_the_users_code_assigns_is_theirs_not_the_output_cache(ipython):
    # #62 item 2: `xb, _ = get_batch()` in a cell gave "the notebook's output cache (_) keeps
    # results" and a fix that runs %reset -f out, which would wipe the user's Out history.
    run(ipython, "import torch")
    with torchleak.track() as tracker:
        for _ in range(4):
            # `_` is the user's own list, the only thing that keeps the batches: it grows
            run(ipython, "_ = (_ if isinstance(_, list) else []) + [torch.ones(64, 1024)]")
            torchleak.step()
    report = tracker.report().to_dict()
    (leak,) = [f for f in report["findings"] if f["verdict"] == "leak"]
    assert leak["path"][0]["label"] == "_", leak["path_text"]
    assert leak["holder"]["path_text"] == "_"
    assert "output cache" not in json.dumps(report["causes"])
    assert "reset" not in (leak.get("fix_code") or "") and "%reset" not in leak["suggestion"]


def test_what_reset_out_leaves_in_ipythons_hidden_namespace_is_the_output_cache(ipython):
    # %reset -f out clears Out and the user's _, __ and ___, but IPython keeps copies of the
    # last three outputs in user_ns_hidden. They were named "InteractiveShell._instance.
    # user_ns_hidden grows" with "call ...reset()" as the fix; now they are the output cache
    # and the fix, run as written, frees them.
    run(ipython, "import torch")
    with torchleak.track() as tracker:
        for _ in range(3):
            run(ipython, "torch.ones(256, 1024)")
            torchleak.step()
        run(ipython, "%reset -f out")
        torchleak.step()
        report = tracker.report().to_dict()
        held = [f for f in report["findings"] if f["verdict"] == "leak"]
        assert held and all(f["path"][0]["label"].startswith("get_ipython().user_ns_hidden[") for f in held), [
            f["path_text"] for f in held
        ]
        assert all("output cache" in c["text"] for c in report["causes"])
        [code] = {f["fix_code"] for f in held}
        assert code == "get_ipython().user_ns_hidden.update(_='', __='', ___='')"
        assert run(ipython, code).success
        torchleak.step()
    assert tracker.report().leaks == []


def test_last_exception_keeps_the_failed_frame(ipython):
    run(ipython, "import torch\ndef train_step():\n    x = torch.ones(1024, 1024)\n    raise ValueError('bad batch')\n")
    with torchleak.track() as tracker:
        run(ipython, "train_step()")
        torchleak.step()
    report = tracker.report()
    (finding,) = [f for f in report.findings if f.total_bytes == 4 * MiB]
    assert finding.verdict == "leak"  # held only by the last exception, even without growth
    assert finding.path_text == "<last exception> frame train_step: local 'x'"
    assert finding.path[0]["kind"] == "frame"
    assert "sys.last_value" in finding.suggestion


def test_the_last_exception_fix_frees_what_ipython_keeps_too(ipython):
    """IPython's traceback printer keeps the traceback a second time (InteractiveTB.tb): the
    fix clears both, and memory still held after clearing only sys.last_* is still named as
    the last exception's, not "C++ only" or a cycle."""
    run(ipython, "import torch\ndef train_step():\n    x = torch.ones(1024, 1024)\n    raise ValueError('bad batch')\n")
    with torchleak.track() as tracker:
        run(ipython, "train_step()")
        torchleak.step()
        (finding,) = [f for f in tracker.report().findings if f.total_bytes == 4 * MiB]
        assert "InteractiveTB.tb" in finding.path[0]["note"]
        fix = finding.suggestion.split("`")[1]
        assert "get_ipython().InteractiveTB.tb = None" in fix

        run(ipython, "import sys; sys.last_value = sys.last_traceback = sys.last_exc = None")
        torchleak.step()
        (still,) = [f for f in tracker.report().findings if f.total_bytes == 4 * MiB]
        assert still.path_text == "<last exception> frame train_step: local 'x'"
        assert still.retention == "reachable"
        assert still.path[0]["note"].startswith("kept by IPython's InteractiveTB.tb")

        assert run(ipython, fix).success
        torchleak.step()
        left = [f for f in tracker.report().findings if f.total_bytes == 4 * MiB]
        assert not left, [(f.path_text, f.path) for f in left]


def test_find_paths_directly_and_the_walk_keeps_nothing_alive():
    import weakref

    t = torch.ones(64, 64)
    holder = {"a": [t]}
    block = t.untyped_storage().data_ptr()
    paths, stats = _core.find_paths([("holder", "root", "", holder)], [block])
    retention, text, steps = paths[block]
    assert (retention, text) == ("reachable", "holder['a'][0]")
    assert stats["python_objects"] >= 2
    ref = weakref.ref(t)
    del t, holder, paths, steps
    gc.collect()
    assert ref() is None


def test_the_walk_stops_when_it_meets_its_last_target_not_after_queueing_every_root():
    # A watched cell's new tensor one step below `kept`, beside a root list of 10^5 tensors:
    # the target was found only once its turn to be expanded came, after every other root's
    # children were queued (8 ms of a 9 ms walk). Now: two Python objects expanded.
    kept = [torch.ones(4)]
    many = [torch.ones(1) for _ in range(100_000)]
    block = kept[0].untyped_storage().data_ptr()
    paths, stats = _core.find_paths([("kept", "root", "", kept), ("many", "root", "", many)], [block])
    assert paths[block][1] == "kept[0]"
    assert stats["python_objects"] <= 2, stats
    # The shortest path still wins over a root met first: the tensor itself, a root later on.
    paths, _ = _core.find_paths([("many", "root", "", many), ("x", "root", "", kept[0])], [block])
    assert paths[block][1] == "x"


def test_module_kinds_are_remembered_without_keeping_a_module_alive():
    import types
    import weakref
    from torchleak import _roots
    from torchleak._user_code import library_prefixes, package_prefixes

    library, packages = library_prefixes(), package_prefixes()

    def load(name, path):
        """A module in sys.modules, classified, and a weak reference to it (no local of this
        test holds it: collect() reads live frames' locals)."""
        mod = types.ModuleType(name)
        mod.__file__ = path
        mod.cache = [torch.ones(8)]
        sys.modules[name] = mod
        return weakref.ref(mod), _roots._module_kind(name, mod, library, packages)[0]

    try:
        first, kind = load("userland_mod", "/home/someone/project/userland_mod.py")
        assert kind == "user"
        assert any(root[0] == "userland_mod." for root in _roots.collect(library, packages))
        # Another module under the same name is classified again; the first one is freed.
        second, kind = load("userland_mod", "<frozen thing>")
        assert kind is None
        gc.collect()
        assert first() is None and second() is not None
    finally:
        sys.modules.pop("userland_mod", None)


def test_a_namespace_root_is_one_root_per_global_without_dunders_or_modules():
    import types

    t = torch.ones(64, 64)
    block = t.untyped_storage().data_ptr()
    module = types.ModuleType("mypkg.cache")
    namespace = vars(module)
    namespace.update({"__hidden__": [t], "os": gc, 42: [t], "store": {"k": [t]}})
    paths, _ = _core.find_paths([("mypkg.cache.", "namespace", "", namespace)], [block])
    assert paths[block][:2] == ("reachable", "mypkg.cache.store['k'][0]")
    with pytest.raises(ValueError, match="namespace root's object is a dict"):
        _core.find_paths([("x.", "namespace", "", [t])], [block])
    with pytest.raises(ValueError, match="'root', 'frame' or 'namespace'"):
        _core.find_paths([("x", "global", "", t)], [block])


class Sneaky:
    """Every attribute access or repr would run user code: the walk must not trigger them."""

    calls = []

    def __init__(self, t):
        self.t = t

    def __getattribute__(self, name):
        Sneaky.calls.append(name)
        return object.__getattribute__(self, name)

    def __repr__(self):
        Sneaky.calls.append("repr")
        return "Sneaky"

    @property
    def __class__(self):
        Sneaky.calls.append("__class__")
        return Sneaky


def test_walk_runs_no_user_code():
    t = torch.ones(32, 32)
    obj = Sneaky(t)
    block = t.untyped_storage().data_ptr()
    Sneaky.calls.clear()
    paths, _ = _core.find_paths([("obj", "root", "", {Sneaky: obj, "k": obj})], [block])
    assert paths[block][1] in ("obj['k'].t", "obj[<type key>].t")
    assert Sneaky.calls == []


def test_roots_are_read_without_running_user_code_of_modules_or_metaclasses():
    import sys
    import types

    calls = []

    class LazyModule(types.ModuleType):
        def __getattribute__(self, name):
            calls.append(name)
            raise RuntimeError("a lazy module that imports on first touch")

    class Meta(type):
        @property
        def __name__(cls):
            calls.append("__name__")
            raise RuntimeError("a metaclass with a raising __name__")

    class Odd(metaclass=Meta):
        pass

    lazy = LazyModule("lazy_thing")
    sys.modules["lazy_thing"] = lazy
    sys.modules["not_a_module"] = Sneaky(None)
    sneaky_calls = len(Sneaky.calls)
    try:
        odd = Odd()  # noqa: F841 - a local: a frame root
        kept = []
        report = torchleak.check(lambda: kept.append(torch.ones(16, 1024)), iterations=4)
        assert report.leaks and report.leaks[0].path_text.startswith("kept[")
        assert calls == [] and len(Sneaky.calls) == sneaky_calls
    finally:
        del sys.modules["lazy_thing"], sys.modules["not_a_module"]


def test_a_bad_argument_to_report_is_a_short_error_that_runs_no_repr():
    class Loud:
        def __repr__(self):
            raise AssertionError("repr ran")

    loud = Loud()  # noqa: F841 - a root
    with torchleak.track() as tracker:
        torch.ones(4)
    for bad in ({"warmup": "2"}, {"warmup": -1}, {"paths": "yes"}):
        with pytest.raises(ValueError) as info:
            tracker.report(**bad)
        assert len(str(info.value)) < 80


def test_the_collector_never_runs_inside_the_walk():
    # A collection triggered by an allocation in the walk would run finalizers (user code) that
    # can free what the walk is labelling; with the threshold at 1 any allocation would do it.
    t = torch.ones(64, 64)
    block = t.untyped_storage().data_ptr()
    roots = [
        ("holder", "root", "", {"a": [[t] for _ in range(200)]}),
        ("other", "root", "", [object() for _ in range(2000)]),
    ]
    blocks = [block]
    seen = []

    def note(phase, info):
        seen.append(phase)

    call, args = _core.find_paths, (roots, blocks)
    threshold = gc.get_threshold()
    gc.callbacks.append(note)
    gc.set_threshold(1)
    try:
        # Nothing around the call allocates a gc-tracked object: only the walk could collect.
        seen.clear()
        result = call(*args)
        collections = seen.count("start")
    finally:
        gc.set_threshold(*threshold)
        gc.callbacks.remove(note)
    assert result[0][block][1] == "holder['a'][0][0]"
    # Paused, the walk's allocations only count towards the next collection, which runs once
    # right after the call returns; unpaused, threshold 1 collects inside the walk again and
    # again (3 times here when the pause is taken out).
    assert collections <= 1, seen
    assert gc.isenabled()


@pytest.mark.parametrize(
    "form, expected",
    [
        ("sparse", r"kept\[\d\]\._(values|indices)\(\)"),
        ("csr", r"kept\[\d\]\.(values|crow_indices|col_indices)\(\)"),
        ("numpy", r"kept\[\d\]\.base"),
        ("storage", r"kept\[\d\]"),
    ],
)
def test_sparse_tensors_numpy_arrays_and_raw_storages_are_explained(form, expected):
    # Each keeps tensor memory through something that is not a plain tensor's storage: a sparse
    # tensor's values, an ndarray's base, an UntypedStorage. They read "held only from C++"
    # before the walk knew them.
    kept = []

    def step():
        dense = torch.ones(64, 256)
        if form == "sparse":
            kept.append(dense.to_sparse())
        elif form == "csr":
            kept.append(dense.to_sparse_csr())
        elif form == "numpy":
            kept.append(dense.numpy())
        else:
            kept.append(dense.untyped_storage())

    report = torchleak.check(step, iterations=5)
    paths = sorted(leak.path_text for leak in report.leaks)
    assert paths and all(re.fullmatch(expected, p) for p in paths), paths
    assert all(leak.retention == "reachable" for leak in report.leaks), paths


def test_the_fix_of_a_loss_kept_with_its_graph_is_a_line_of_code():
    w = torch.randn(64, 64, requires_grad=True)
    losses, acts = [], []

    def step():
        losses.append((torch.randn(32, 64) @ w).sum())
        acts.append(torch.tanh(torch.randn(32, 64) @ w))

    report = torchleak.check(step, iterations=6)
    codes = {f.get("fix_code") for f in report.leaks}
    assert codes == {
        "losses.append((torch.randn(32, 64) @ w).sum().item())",
        "acts.append(torch.tanh(torch.randn(32, 64) @ w).detach())",
    }
    for code in codes:
        compile(code, "<fix>", "exec")  # runs as written
    text = str(report)
    assert "       losses.append((torch.randn(32, 64) @ w).sum().item())" in text
    assert all("fix_code" not in f for f in report.redacted().to_dict()["findings"])


class Level:
    pass


def nested(names, last, value):
    """A root object and a chain of attributes `names` below it, the deepest holding `last` =
    `value`; and a function that walks down to the deepest each time (nothing else names it,
    as the notebook's deepest() does)."""
    root = cur = Level()
    for name in names:
        setattr(cur, name, Level())
        cur = getattr(cur, name)
    setattr(cur, last, value)

    def deepest():
        node = root
        for name in names:
            node = getattr(node, name)
        return node

    return root, deepest


def test_a_holder_26_attributes_deep_keeps_its_whole_name_and_its_clear_code():
    # The middle of any path over 49 walk nodes was cut to "...": a list 26 attributes deep got
    # no fix code (the holder read "root.child_level_0....child_level_15..."). Only a run through
    # the autograd graph is cut now; the holder is named whole and its .clear() runs as written.
    root, deep = nested([f"child_level_{i}" for i in range(26)], "items", [])
    whole = "root." + ".".join(f"child_level_{i}" for i in range(26)) + ".items"
    report = torchleak.check(lambda: deep().items.append(torch.ones(64, 1024)), iterations=6, roots={"root": root})
    [leak] = report.leaks
    assert leak.holder["path_text"] == whole
    assert "elided" not in kinds(leak)
    assert leak.get("fix_code") == whole + ".clear()"

    def fixed():
        deep().items.append(torch.ones(64, 1024))
        exec(leak.get("fix_code"), {"root": root})

    assert torchleak.check(fixed, iterations=6, roots={"root": root}).leaks == []


def test_a_path_through_a_long_graph_is_cut_inside_the_graph_only():
    # An RNN-like chain of 300 nodes, its output kept in an object 30 attributes deep: the graph's
    # middle is one step, the Python part before it whole.
    root, deep = nested([f"a{i}" for i in range(30)], "outputs", [])
    w = torch.randn(16, 16, requires_grad=True)

    def step():
        h = torch.randn(4, 16)
        for _ in range(300):
            h = h @ w
        deep().outputs.append(h.sum())  # the 300 products stay alive through its graph

    report = torchleak.check(step, iterations=5, roots={"root": root})
    leak = max(report.leaks, key=lambda f: len(f.path))  # the input, under all 300 products
    steps = [s["kind"] for s in leak.path]
    assert steps.count("elided") == 1, steps
    before = "".join(s["label"] for s in leak.path[: steps.index("elided")])
    assert before.startswith("root." + ".".join(f"a{i}" for i in range(30)) + ".outputs["), before
    assert len(leak.path) < 100
