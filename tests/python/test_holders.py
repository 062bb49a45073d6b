"""One finding per holder, and verdicts that never call flat memory a leak (issue #28).

The two-holder case: one line allocates every output (a shared `fwd()`), one iteration keeps a
512 KiB output in `train_outs` and a 128 KiB one in `val_outs`. Each list is its own finding,
cause and fix, in every place a user reads a verdict.
"""

import collections
import functools
import json
import re

import pytest
import torch

import torchleak
from torchleak import _core

from ipython_shell import ledger, run
from live_reports import fifty_lists_report

KiB = 1024

w = torch.randn(256, 256)
train_outs, val_outs = [], []


def fwd(n):
    return torch.relu(torch.ones(n, 256) @ w)  # the one site


def one_iteration():
    train_outs.append(fwd(512).detach())  # 512 KiB
    val_outs.append(fwd(128).detach())  # 128 KiB


@pytest.fixture(autouse=True)
def empty_lists():
    train_outs.clear()
    val_outs.clear()
    yield
    train_outs.clear()
    val_outs.clear()


def short(name):
    """`test_holders.val_outs` (a module's global, as a script names it) -> `val_outs`."""
    return (name or "").rsplit(".", 1)[-1]


def assert_two_holders(report):
    by_holder = {short((f.get("holder") or {}).get("path_text")): f for f in report.leaks}
    assert set(by_holder) == {"train_outs", "val_outs"}, [repr(f) for f in report.findings]
    train, val = by_holder["train_outs"], by_holder["val_outs"]
    assert train.site == val.site  # one line, two findings
    assert train.bytes_per_iteration == 512 * KiB
    assert val.bytes_per_iteration == 128 * KiB
    assert short(val.path_text).startswith("val_outs[")
    causes = {short(c["holder"]["path_text"]): c for c in report.to_dict()["causes"]}
    assert set(causes) == {"train_outs", "val_outs"}
    assert causes["val_outs"]["bytes_per_iteration"] == 128 * KiB
    text = str(report)
    assert "val_outs" in text and "train_outs" in text


def test_check_gives_each_holder_its_own_finding():
    assert_two_holders(torchleak.check(one_iteration, iterations=12, warmup=2))


def test_track_gives_each_holder_its_own_finding():
    with torchleak.track(warmup=2) as tracker:
        for _ in range(12):
            one_iteration()
            torchleak.step()
    report = tracker.report()
    assert_two_holders(report)
    # The JSON read back keeps both, and a job's merge of this rank keeps them apart.
    again = torchleak.Report(report.to_json())
    assert_two_holders(again)


def test_the_diff_matches_holder_by_holder(tmp_path):
    before = torchleak.check(one_iteration, iterations=8, warmup=2)
    train_outs.clear()
    val_outs.clear()

    def fixed_train():
        train_outs.append(fwd(512).detach())
        train_outs.clear()
        val_outs.append(fwd(128).detach())

    after = torchleak.check(fixed_train, iterations=8, warmup=2)
    diff = json.loads(_core.diff_reports(before.to_json(), after.to_json(), 0.1))
    kinds = {short(c.get("holder")): c["kind"] for c in diff["changes"]}
    assert kinds.get("train_outs") == "fixed", diff["changes"]
    assert kinds.get("val_outs") == "same", diff["changes"]


def test_a_state_passed_inline_is_as_clean_as_one_bound_to_a_name():
    # Flat memory only C++ reaches (the parameters' .grad of a state no name of the caller's
    # holds) is not a leak: growth is the evidence, the path only the explanation.
    def make_state():
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 1))
        return model, torch.optim.SGD(model.parameters(), lr=0.01)

    def iteration(state):
        model, opt = state
        opt.zero_grad()
        model(torch.randn(32, 64)).pow(2).mean().backward()
        opt.step()

    inline = torchleak.check(iteration, make_state(), iterations=12, warmup=2)
    assert inline.leaks == [], [repr(f) for f in inline.leaks]
    state = make_state()
    bound = torchleak.check(iteration, state, iterations=12, warmup=2)
    assert bound.leaks == []


# -- the notebook ------------------------------------------------------------------------------
@pytest.fixture
def shell(shell):
    """conftest's shell, with the one site and its two lists defined."""
    run(
        shell,
        "w = torch.randn(256, 256)\n"
        "def fwd(n):\n    return torch.relu(torch.ones(n, 256) @ w)\n"
        "train_outs, val_outs = [], []",
    )
    yield shell
    run(shell, "%leakwatch off")


CELL = "train_outs.append(fwd(512).detach())\nval_outs.append(fwd(128).detach())"


def _holders(findings):
    return {(f.get("holder") or {}).get("path_text") for f in findings if f["verdict"] == "leak"}


def test_leakcheck_gives_each_holder_its_own_finding(shell, tmp_path):
    out = tmp_path / "r.json"
    assert run(shell, f"%%leakcheck -n 8 --json {out}\n{CELL}").success
    report = json.loads(out.read_text())
    assert _holders(report["findings"]) == {"train_outs", "val_outs"}


def test_the_ledger_and_leakreport_name_each_holder(shell, tmp_path):
    assert run(shell, "%leakwatch on").success
    cells = []
    for _ in range(4):
        cells.append(shell.execution_count)
        run(shell, CELL)
    lines = ledger(shell)
    assert lines[-1] == (
        f"torchleak: In [{cells[-1]}] left 640.0 KiB alive: train_outs 512.0 KiB, val_outs 128.0 KiB"
    ), lines
    out = tmp_path / "nb.json"
    assert run(shell, f"%leakreport --json {out}").success
    report = json.loads(out.read_text())
    assert _holders(report["findings"]) == {"train_outs", "val_outs"}
    rates = {f["holder"]["path_text"]: f["bytes_per_iteration"] for f in report["findings"] if f["verdict"] == "leak"}
    assert rates == {"train_outs": 512 * KiB, "val_outs": 128 * KiB}


def test_rebinding_a_name_is_not_news(shell):
    assert run(shell, "%leakwatch on").success
    first = shell.execution_count
    for _ in range(4):
        run(shell, "y = torch.randn(256, 256)")
    # The first run left y alive; every re-run replaced it: net zero, nothing said.
    assert ledger(shell) == [f"torchleak: In [{first}] left 256.0 KiB alive: y 256.0 KiB"]
    run(shell, "model = torch.nn.Linear(64, 64)\nxb = torch.randn(32, 64)")
    before = len(ledger(shell))
    for _ in range(3):
        run(shell, "out = model(xb)")
    said = ledger(shell)[before:]
    assert len(said) == 1 and said[0].endswith("left 8.0 KiB alive: out 8.0 KiB"), said


def test_the_list_that_keeps_every_run_is_the_holder_not_the_name_of_the_last(shell, tmp_path):
    # The ledger said "left 65.9 MiB alive: logits_for_plot" while all_logits held it:
    # the newest output is reached first through the shorter name, and another cell's run may
    # end the iteration after it.
    run(shell, "model = torch.nn.Linear(512, 1000)\nall_logits = []")
    assert run(shell, "%leakwatch on").success
    cells = []
    for _ in range(4):
        cells.append(shell.execution_count)
        run(
            shell,
            "with torch.no_grad():\n    logits = model(torch.ones(256, 512))\n"
            "all_logits.append(logits)\nlogits_for_plot = logits[:8]",
        )
        run(shell, "z = 1")
    assert ledger(shell)[-1].startswith(f"torchleak: In [{cells[-1]}] left 1000.0 KiB alive: all_logits 1000.0 KiB"), (
        ledger(shell)
    )
    out = tmp_path / "nb.json"
    assert run(shell, f"%leakreport --json {out}").success
    report = json.loads(out.read_text())
    (leak,) = [f for f in report["findings"] if f["verdict"] == "leak"]
    assert leak["holder"]["path_text"] == "all_logits"
    assert leak["bytes_per_iteration"] == 1000 * KiB


def test_fifty_lists_filled_in_turn_are_fifty_leaks_one_group_and_one_score_entry():
    # Before: the blocks outside the path sample went with their neighbour in allocation
    # order, a block of another list; every list's curve was a scramble: 50 plateaus, no leak.
    data = fifty_lists_report()
    leaks = [f for f in data["findings"] if f["verdict"] == "leak"]
    assert len(leaks) == 50
    assert {f["holder"]["path_text"] for f in leaks} == {f"buffers.l{i}" for i in range(50)}
    assert all(f["bytes_per_iteration"] == 10 * KiB and f["count"] == 8 for f in leaks)
    [group] = data["cause_groups"]
    assert group["container"] == "buffers" and sorted(group["causes"]) == list(range(50))
    assert group["text"].startswith("500.0 KiB per iteration: 50 lists in buffers grow every iteration (buffers.l")
    assert len(data["summary"]["recommendations"]) == 1  # one leak for the score, not fifty


def test_a_loop_variable_naming_the_last_of_fifty_lists_is_a_leak_not_a_plateau(shell, tmp_path):
    # `kept`, the loop's name for the last of fifty lists in `stores`, holds one block in
    # fifty: the sample looked 96% right for the nearest-neighbour rule, and `kept`'s curve,
    # a scramble of its own and its neighbours' blocks, was judged a plateau. Judged per
    # holder, its blocks get paths of their own: a leak of one tensor per iteration.
    out = tmp_path / "r.json"
    run(shell, "import torch\nstores = {f's{i}': [] for i in range(50)}")
    assert run(
        shell, f"%%leakcheck -n 8 --json {out}\nfor kept in stores.values():\n    kept.append(torch.ones(2560))"
    ).success
    report = json.loads(out.read_text())
    assert {f["verdict"] for f in report["findings"]} == {"leak"}
    [kept] = [f for f in report["findings"] if f["holder"]["path_text"] == "kept"]
    assert kept["series"] == [10 * KiB * k for k in range(1, 9)]


def test_a_cell_that_runs_backward_and_the_step_says_it_left_gradients_and_optimizer_state(shell):
    run(shell, "model = torch.nn.Linear(256, 256)\nopt = torch.optim.Adam(model.parameters())")
    assert run(shell, "%leakwatch on").success
    cell = shell.execution_count
    run(shell, "model(torch.ones(8, 256)).sum().backward()\nopt.step()")
    (line,) = [text for text in ledger(shell) if text.startswith(f"torchleak: In [{cell}]")]
    # The weight's and the bias's gradients; Adam's two moments of each (and its step counts).
    assert line.endswith("(of which optimizer state 514.0 KiB, gradients 257.0 KiB)"), line


@pytest.mark.parametrize("n", [6, 8, 12, 16])
def test_a_loop_alias_of_the_newest_element_does_not_hide_a_short_leak(n):
    # `prev = hist[-1]; hist.append(prev + 1)`: at each boundary `prev` names the element
    # before the newest, reached first by its shorter path. Left apart, hist's curve had a
    # flat step, and a run of 6 to 16 iterations was called a plateau.
    hist = [torch.zeros(25000)]
    with torchleak.track() as t:
        for _ in range(n):
            prev = hist[-1]
            hist.append(prev + 1)
            torchleak.step()
    del prev
    top = max(t.report().findings, key=lambda f: f.count)
    assert top.verdict == "leak" and top.bytes_per_iteration == 100000, [repr(f) for f in t.report().findings]


def test_leakcheck_sees_the_leak_of_a_list_chained_through_a_local(shell, tmp_path):
    out = tmp_path / "r.json"
    run(shell, "import torch\nhist = [torch.zeros(25000)]")
    assert run(shell, f"%%leakcheck -n 12 --json {out}\nprev = hist[-1]\nhist.append(prev + 1)").success
    report = json.loads(out.read_text())
    leaks = [f for f in report["findings"] if f["verdict"] == "leak"]
    assert leaks and max(f["bytes_per_iteration"] for f in leaks) == 100000, report["findings"]


def test_a_cached_row_of_a_batch_is_said_to_keep_the_batch_and_copied_not_detached():
    # #63 item 2: `cache[text] = embeddings[i]` keeps the whole 192-row batch per entry; a
    # .detach() shares the storage and frees nothing, a .clone() keeps the row alone.
    def cache_rows(store):
        cache = {}
        with torchleak.track() as tracker:
            for it in range(10):
                texts = [f"q{it}-{j}" for j in range(192)]
                embeddings = torch.randn(len(texts), 1024)
                cache[texts[0]] = store(embeddings[0])
                torchleak.step()
        return tracker.report()

    [leak] = cache_rows(lambda row: row).leaks
    assert leak.fix_rule == "view-pins-base"
    assert leak.bytes_per_iteration == 192 * 4096
    assert "it keeps 768.0 KiB, not its own 4.0 KiB" in leak.suggestion
    assert "Store a .clone() of it (a .detach() shares the storage" in leak.suggestion
    [detached] = cache_rows(lambda row: row.detach()).leaks
    assert detached.bytes_per_iteration == 192 * 4096  # what the old advice offered frees nothing
    [cloned] = cache_rows(lambda row: row.clone()).leaks  # the fix, applied: the row alone
    assert cloned.bytes_per_iteration == 4096 and cloned.fix_rule == "growing-holder"


class ServingState:
    def __init__(self):
        self.kv_cache, self.active = {}, {}


def prefill(x):
    return torch.zeros(8, 64) + x


def test_a_per_request_store_is_popped_where_the_loop_ends_the_request():
    # #63 item 1: a continuous-batching loop's per-request cache got `state.kv_cache.clear()`,
    # which frees the leak and drops the caches of the requests still decoding.
    def serve(fixed):
        state = ServingState()
        with torchleak.track() as tracker:
            for new in range(16):
                state.active[new] = 1.0  # a request arrives every step and lasts three
                for rid in list(state.active):
                    if rid not in state.kv_cache:
                        state.kv_cache[rid] = prefill(state.active[rid])
                    state.kv_cache[rid].add_(1)  # decoding reads its cache
                    if rid <= new - 2:
                        state.active.pop(rid)
                        if fixed:
                            state.kv_cache.pop(rid, None)
                torchleak.step()
        return tracker.report()

    [leak] = serve(fixed=False).leaks
    assert leak.holder["path_text"] == "state.kv_cache"
    assert leak.fix_rule == "pop-what-ended"
    assert leak.fix_code == "state.kv_cache.pop(rid, None)"
    assert "ends it: state.active.pop(rid)" in leak.suggestion
    assert ".clear()" not in leak.fix_code
    assert serve(fixed=True).leaks == []  # the printed fix, applied


def test_a_holder_of_many_rows_of_one_batch_counts_its_entries_and_its_storages():
    # #63 item 4: 192 entries per iteration sharing one batch's storage read "+1.1 per iteration".
    cache = {}
    with torchleak.track() as tracker:
        for it in range(10):
            texts = [f"q{it}-{j}" for j in range(192)]
            embeddings = torch.randn(len(texts), 1024)
            for i, text in enumerate(texts):
                cache[text] = embeddings[i]
            torchleak.step()
    report = tracker.report()
    [leak] = report.leaks
    assert leak.holder["entries_per_iteration"] == 192
    assert leak.holder["growth_text"] == "+192 entries per iteration, sharing 1 storage"
    assert "holder: cache (dict, +192 entries per iteration, sharing 1 storage)" in str(report)


class Served:
    """A server's state, made inline for check() in the tests below."""

    def __init__(self):
        self.cache = {}
        self.history = []

    def step(self, scale=1.0):
        self.cache[len(self.cache)] = torch.ones(1 << 14) * scale  # 64 KiB an iteration
        y = (torch.randn(64, 64, requires_grad=True) * scale).sum()
        self.history.append(y)  # with its graph


def serve(state, scale=1.0):
    state.step(scale)


def _paths_and_fixes(report):
    return sorted(
        (f["holder"]["path_text"], f["suggestion"])
        for f in report.to_dict()["findings"]
        if f["verdict"] == "leak" and f.get("holder")
    )


def test_state_passed_inline_is_explained_as_when_it_is_bound_to_a_name():
    # check(serve, Served()): the state is named nowhere but by serve's parameter. It was reached
    # through check()'s own closure ("<cell outside the named roots>"), and the autograd leak's
    # biggest storage read "held only from C++". Now: the parameter is its root, as if bound.
    inline = torchleak.check(serve, Served(), iterations=8, warmup=2)
    state = Served()
    named = torchleak.check(serve, state, iterations=8, warmup=2, roots={"state": state})
    assert _paths_and_fixes(inline) == _paths_and_fixes(named)
    assert {path for path, _ in _paths_and_fixes(inline)} == {"state.cache", "state.history"}
    text = str(inline)
    assert "outside the named roots" not in text and "held only from C++" not in text
    assert "(an argument check() passes to serve())" in text
    fixes = {path: fix for path, fix in _paths_and_fixes(inline)}
    assert fixes["state.cache"].startswith("state.cache grows by 1 per iteration")


@pytest.mark.parametrize(
    "call, root",
    [
        (lambda: torchleak.check(Served().step, iterations=6, warmup=1), "self"),  # a bound method's object
        (lambda: torchleak.check(serve, state=Served(), iterations=6, warmup=1), "state"),  # by keyword
        (lambda: torchleak.check(lambda *parts: serve(parts[1]), 0, Served(), iterations=6, warmup=1), "parts[1]"),
        (lambda: torchleak.check(lambda **named: serve(named["s"]), s=Served(), iterations=6, warmup=1), "named['s']"),
        (
            lambda: torchleak.check(
                __import__("functools").partial(serve, scale=2.0), Served(), iterations=6, warmup=1
            ),
            "state",
        ),
    ],
    ids=["method", "keyword", "star-args", "star-kwargs", "partial"],
)
def test_every_way_of_passing_the_state_names_it_by_its_parameter(call, root):
    paths = {path for path, _ in _paths_and_fixes(call())}
    assert paths == {f"{root}.cache", f"{root}.history"}


def test_a_callable_object_with_a_hostile_signature_gets_its_arguments_by_position():
    # Neither __signature__ nor __call__'s attributes are asked for: user code, which may raise.
    class Hostile:
        @property
        def __signature__(self):
            raise RuntimeError("asked for the signature")

        def __call__(self, state):
            serve(state)

    report = torchleak.check(Hostile(), Served(), iterations=6, warmup=1)
    assert {path for path, _ in _paths_and_fixes(report)} == {"args[0].cache", "args[0].history"}


def _train_with_snapshots(trainer, fix_code=None, steps=40, every=4):
    model = torch.nn.Sequential(torch.nn.Linear(128, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with torchleak.track() as tracker:
        for step in range(steps):
            loss = model(torch.randn(16, 128)).square().mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            if step % every == 0:  # an evaluation: a copy of the weights kept
                trainer.snapshots.append({k: v.detach().clone() for k, v in model.state_dict().items()})
                if fix_code:
                    exec(fix_code, {"trainer": trainer})
            torchleak.step()
    return tracker.report()


def test_copies_kept_at_each_evaluation_keep_the_best_or_the_last_few():
    # #63 item 6: a list that gains a detached copy every 4th iteration had no holder (it grows
    # by 0.25 a step) and got "an attribute keeps the last tensors: set it to None", naming
    # nothing in the loop. The list is the holder; the fix keeps the last few, and applied as
    # printed, the next run is flat.
    class Trainer:
        def __init__(self):
            self.snapshots = []

    trainer = Trainer()
    [leak] = _train_with_snapshots(trainer).leaks
    assert leak.holder["path_text"] == "trainer.snapshots"
    assert leak.fix_rule == "kept-at-intervals"
    assert leak.suggestion.startswith("trainer.snapshots gains an entry every 4 iterations")
    assert "keep the best so far, or the last few" in leak.suggestion
    code = leak.get("fix_code")
    assert code == "del trainer.snapshots[:-3]"
    fixed = Trainer()
    assert _train_with_snapshots(fixed, fix_code=code).leaks == []
    assert len(fixed.snapshots) == 3


shape_cache, size_cache, float_cache = {}, {}, {}


def by_shape(n):
    if (n, 64) not in shape_cache:  # the loop reads it: bound it, never clear it
        shape_cache[(n, 64)] = torch.zeros(16, 64)
    return shape_cache[(n, 64)].sum()


def by_size(n):
    if torch.Size([n, 64]) not in size_cache:
        size_cache[torch.Size([n, 64])] = torch.zeros(16, 64)
    return size_cache[torch.Size([n, 64])].sum()


def by_float(n):
    if (n, 0.5) not in float_cache:
        float_cache[(n, 0.5)] = torch.zeros(16, 64)
    return float_cache[(n, 0.5)].sum()


@pytest.mark.parametrize(
    "fill, name, label",
    [
        (by_shape, "shape_cache", r"\(\d+, 64\)"),
        (by_size, "size_cache", r"torch\.Size\(\[\d+, 64\]\)"),
        (by_float, "float_cache", r"<tuple key>"),
    ],
)
def test_a_cache_keyed_by_shape_is_a_holder_that_grows_bounded_as_a_dict(fill, name, label):
    # Every entry of a dict keyed by a tuple read "<tuple key>": one label for all of them, so the
    # dict never fanned out and the leak had no holder ("something keeps a reference"). Tuples
    # and torch.Size of literals are labelled as Python writes them now; a tuple with anything
    # else in it (a float, whose text may not read back as the same key) keeps the one label.
    runs = iter(range(1, 100))
    report = torchleak.check(lambda: fill(next(runs)), iterations=8)
    [leak] = report.leaks
    assert re.fullmatch(rf"test_holders\.{name}\[{label}\]", leak.path_text), leak.path_text
    if name == "float_cache":
        return
    assert leak.holder["type"] == "dict" and leak.holder["path_text"] == f"test_holders.{name}"
    assert leak.get("fix_rule") == "bound-what-the-loop-reads"
    assert "popitem(last=False)" in leak.suggestion and "deque" not in leak.suggestion
    redacted = report.redacted().to_dict()["findings"][0]
    assert "64" not in redacted["path_text"] and "[<key " in redacted["path_text"], redacted["path_text"]


bounded_cache = collections.OrderedDict()


@functools.lru_cache(maxsize=4)
def zeros_for(shape):
    return torch.zeros(16, 64)


def by_shape_bounded(n):
    if (n, 64) not in bounded_cache:
        bounded_cache[(n, 64)] = torch.zeros(16, 64)
        if len(bounded_cache) > 4:
            bounded_cache.popitem(last=False)
    return bounded_cache[(n, 64)].sum()


@pytest.mark.parametrize("fill", [by_shape_bounded, lambda n: zeros_for((n, 64)).sum()])
def test_the_bound_the_fix_offers_for_a_cache_keyed_by_shape_makes_the_run_flat(fill):
    # The printed fix applied, each way it says: an OrderedDict trimmed with popitem(last=False)
    # past a size, or functools.lru_cache(maxsize=...) on the function that fills it.
    runs = iter(range(1, 100))
    report = torchleak.check(lambda: fill(next(runs)), iterations=12)
    assert report.leaks == [], [(f.path_text, f.verdict) for f in report.leaks]
