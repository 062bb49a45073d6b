"""Every way a tensor stays alive, named: one test per retention form, each asserting the path
text, the holder, the site (the line marked `# ALLOC`) and the fix.

Each form leaks one tensor per iteration through one mechanism; the names the test function
binds are the roots a user would have (locals of a live frame in user code)."""

import asyncio
import collections
import dataclasses
import functools
import inspect
import itertools
import sys

import pytest
import torch

import torchleak

ITERATIONS = 5


def alloc_line(fn):
    """The line marked `# ALLOC` in fn's source."""
    lines, first = inspect.getsourcelines(fn)
    (offset,) = [i for i, text in enumerate(lines) if "# ALLOC" in text]
    return first + offset


def the_leak(step, **kwargs):
    report = torchleak.check(step, iterations=ITERATIONS, **kwargs)
    assert report.leaks, str(report)
    return max(report.leaks, key=lambda f: f.total_bytes)


def assert_form(leak, *, path, holder, site_of, fix, retention="reachable"):
    """path: the path text's start; holder: its path text (None: no holder); site_of: the
    function whose `# ALLOC` line is the site; fix: a phrase of the suggestion."""
    assert leak.path_text.startswith(path), leak.path_text
    assert (leak.holder or {}).get("path_text") == holder, (leak.holder, leak.path_text)
    assert leak.site["line"] == alloc_line(site_of), (leak.site, leak.path_text)
    assert fix in leak.suggestion, leak.suggestion
    assert leak.retention == retention


# -- containers --------------------------------------------------------------------------------


def test_list_append():
    kept = []

    def step():
        kept.append(torch.ones(64, 256))  # ALLOC

    assert_form(the_leak(step), path="kept[", holder="kept", site_of=step, fix=".clear() it")


def test_dict_keyed_by_iteration():
    cache = {}

    def step():
        cache[len(cache)] = torch.ones(64, 256)  # ALLOC

    assert_form(the_leak(step), path="cache[", holder="cache", site_of=step, fix=".clear() it")


def test_weak_key_dictionary_whose_keys_outlive_the_loop():
    # Before: "an attribute keeps the last tensors: set it to None" for `wkd.data`, which
    # breaks the dictionary's next insertion.
    import weakref

    class Key:
        pass

    keys, wkd = [], weakref.WeakKeyDictionary()

    def step():
        keys.append(Key())
        wkd[keys[-1]] = torch.ones(64, 256)  # ALLOC

    leak = the_leak(step)
    assert_form(
        leak,
        path="wkd.data[<weakref to Key key>]",
        holder=leak.holder and leak.holder.get("path_text"),
        site_of=step,
        fix="wkd is a WeakKeyDictionary",
    )
    assert "(Key objects) outlive the loop" in leak.suggestion and "None" not in leak.suggestion
    assert not leak.to_dict().get("fix_code")


def test_dict_of_lists():
    store = {"train": []}

    def step():
        store["train"].append(torch.ones(64, 256))  # ALLOC

    assert_form(
        the_leak(step),
        path="store['train'][",
        holder="store['train']",
        site_of=step,
        fix="store['train'] grows by 1 per iteration",
    )


def test_defaultdict_of_lists():
    stats = collections.defaultdict(list)

    def step():
        stats["grad_norm"].append(torch.ones(64, 256))  # ALLOC

    assert_form(
        the_leak(step), path="stats['grad_norm'][", holder="stats['grad_norm']", site_of=step, fix=".clear() it"
    )


def test_deque_without_maxlen():
    window = collections.deque()

    def step():
        window.append(torch.ones(64, 256))  # ALLOC

    assert_form(the_leak(step), path="window[", holder="window", site_of=step, fix="collections.deque(maxlen=...)")


def test_tuples_in_a_list():
    pairs = []

    def step():
        pred = torch.ones(64, 256)  # ALLOC
        pairs.append((pred, 0))

    assert_form(the_leak(step), path="pairs[", holder="pairs", site_of=step, fix=".clear() it")


# -- objects -----------------------------------------------------------------------------------


class Trainer:
    def __init__(self):
        self.history = []

    def step(self):
        self.history.append(torch.ones(64, 256))  # ALLOC


def test_instance_attribute_list():
    trainer = Trainer()
    assert_form(
        the_leak(trainer.step),
        path="trainer.history[",
        holder="trainer.history",
        site_of=Trainer.step,
        fix="trainer.history grows",
    )


class Registry:
    items = []


def test_class_attribute_list():
    registry = Registry

    def step():
        registry.items.append(torch.ones(64, 256))  # ALLOC

    try:
        # The module's own global outranks the test's local alias of it.
        assert_form(
            the_leak(step),
            path="test_retention_forms.Registry.items[",
            holder="test_retention_forms.Registry.items",
            site_of=step,
            fix=".clear() it",
        )
    finally:
        Registry.items.clear()


@dataclasses.dataclass
class Metric:
    values: list = dataclasses.field(default_factory=list)


def test_dataclass_field():
    metric = Metric()

    def step():
        metric.values.append(torch.ones(64, 256))  # ALLOC

    assert_form(the_leak(step), path="metric.values[", holder="metric.values", site_of=step, fix=".clear() it")


def test_module_attribute():
    model = torch.nn.Linear(8, 8)
    model.seen = []

    def step():
        model.seen.append(torch.ones(64, 256))  # ALLOC

    assert_form(the_leak(step), path="model.seen[", holder="model.seen", site_of=step, fix=".clear() it")


# -- functions ---------------------------------------------------------------------------------


def make_recorder():
    buf = []

    def record():
        buf.append(torch.ones(64, 256))  # ALLOC

    return record


def test_closure_variable():
    record = make_recorder()
    leak = the_leak(record)
    assert_form(leak, path="record.<cell buf>[", holder="record.<cell buf>", site_of=record, fix=".clear() it")
    assert leak.path[1]["note"] == (
        "closure variable 'buf' of make_recorder.<locals>.record (read it as __closure__[0].cell_contents)"
    )


def remember(seen=[]):  # noqa: B006 - the form under test
    seen.append(torch.ones(64, 256))  # ALLOC


def test_mutable_default_argument():
    try:
        leak = the_leak(remember)
        assert_form(
            leak,
            path="test_retention_forms.remember.__defaults__[0][",
            holder="test_retention_forms.remember.__defaults__[0]",
            site_of=remember,
            fix="a default argument is made once",
        )
    finally:
        remember.__defaults__[0].clear()


def append_to(store):
    store.append(torch.ones(64, 256))  # ALLOC


def test_functools_partial_arguments():
    callback = functools.partial(append_to, [])
    assert_form(
        the_leak(callback),
        path="callback.args[0][",
        holder="callback.args[0]",
        site_of=append_to,
        fix="the functools.partial callback keeps the arguments",
    )


def test_unbounded_lru_cache():
    sizes = iter(range(64, 64 * 20, 64))

    @functools.cache
    def causal_mask(n):
        return torch.ones(n, 256)  # ALLOC

    def step():
        causal_mask(next(sizes))

    assert_form(
        the_leak(step),
        path="causal_mask<lru_cache entries>[",
        holder="causal_mask<lru_cache entries>",
        site_of=causal_mask,
        fix="maxsize=N",
    )


def test_forward_hook_closure_on_a_module():
    model = torch.nn.Linear(256, 256)
    activations = []

    def keep(module, args, output):
        activations.append(output)

    model.register_forward_hook(keep)
    x = torch.ones(64, 256)
    del keep

    def step():
        with torch.no_grad():
            model(x)  # ALLOC: the output is allocated inside, under this line

    assert_form(the_leak(step), path="activations[", holder="activations", site_of=step, fix=".clear() it")


# -- exceptions, frames, generators -------------------------------------------------------------


class Classifier(torch.nn.Module):
    def forward(self, x):
        logits = torch.ones(64, 256) * 2  # ALLOC  # noqa: F841 - the failed frame keeps it
        raise ValueError(f"bad batch {x.shape}")


def test_exception_kept_with_its_traceback():
    model = Classifier()
    failed_batches = []

    def step():
        try:
            model(torch.ones(2))
        except ValueError as exc:
            failed_batches.append(exc)

    leak = the_leak(step)
    assert_form(
        leak, path="failed_batches[", holder="failed_batches", site_of=Classifier.forward, fix="keeps its traceback"
    )
    assert ".__traceback__.tb_next" in leak.path_text
    assert leak.path_text.endswith(".tb_frame.f_locals['logits']")
    assert leak.path[-1]["note"] == "local 'logits' in Classifier.forward"
    assert leak.path[-1]["kind"] == "frame"
    assert "local 'logits' in Classifier.forward" in leak.suggestion


def load(batch):
    decoded = torch.ones(64, 256)  # ALLOC  # noqa: F841 - the failed frame keeps it
    raise KeyError(batch)


def test_exception_context_chain():
    errors = []

    def step():
        try:
            try:
                load(3)
            except KeyError:
                raise RuntimeError("loader failed")  # noqa: B904 - the implicit chain under test
        except RuntimeError as exc:
            errors.append(exc)

    leak = the_leak(step)
    assert_form(leak, path="errors[", holder="errors", site_of=load, fix="keeps its traceback")
    assert ".__context__.__traceback__" in leak.path_text
    assert leak.path_text.endswith(".f_locals['decoded']")


def test_exception_cause_chain():
    errors = []

    def step():
        try:
            try:
                load(3)
            except KeyError as inner:
                raise RuntimeError("loader failed") from inner
        except RuntimeError as exc:
            errors.append(exc)

    leak = the_leak(step)
    assert_form(leak, path="errors[", holder="errors", site_of=load, fix="keeps its traceback")
    assert ".__cause__.__traceback__" in leak.path_text or ".__context__." in leak.path_text


def batches():
    buffer = torch.ones(64, 256)  # ALLOC
    yield buffer.sum()
    yield buffer.mean()


def test_suspended_generator():
    pending = []

    def step():
        gen = batches()
        next(gen)  # suspended at its first yield, buffer alive in its frame
        pending.append(gen)

    leak = the_leak(step)
    assert_form(leak, path="pending[", holder="pending", site_of=batches, fix="suspended generator or coroutine")
    assert leak.path_text.endswith(".gi_frame.f_locals['buffer']")
    assert leak.path[-1]["note"] == "local 'buffer' in suspended generator batches"


async def fetch():
    payload = torch.ones(64, 256)  # ALLOC
    await asyncio.sleep(0)
    return payload.sum()


def test_suspended_coroutine():
    inflight = []

    def step():
        coro = fetch()
        coro.send(None)  # runs to its first await and suspends there
        inflight.append(coro)

    try:
        leak = the_leak(step)
        assert_form(leak, path="inflight[", holder="inflight", site_of=fetch, fix="suspended generator or coroutine")
        assert leak.path_text.endswith(".cr_frame.f_locals['payload']")
    finally:
        for coro in inflight:
            coro.close()


# -- autograd ----------------------------------------------------------------------------------


def test_loss_kept_with_its_graph():
    w = torch.randn(256, 256, requires_grad=True)
    x = torch.randn(64, 256)
    losses = []

    def step():
        h = torch.tanh(x @ w)  # ALLOC
        losses.append(h.sum())

    leak = the_leak(step)
    assert_form(leak, path="losses[", holder="losses", site_of=step, fix="store h.sum().detach() or .item()")
    assert ".grad_fn" in leak.path_text and "._saved_result" in leak.path_text


def test_recurrent_state_not_detached():
    w = torch.randn(256, 256, requires_grad=True)
    state = {"hidden": torch.zeros(64, 256)}

    def step():
        state["hidden"] = torch.tanh(state["hidden"] @ w)  # ALLOC

    leak = the_leak(step)
    assert_form(leak, path="state['hidden'].grad_fn", holder=None, site_of=step, fix="detach() the recurrent state")


def test_grad_built_with_create_graph():
    w = torch.randn(128, 128, requires_grad=True)
    x = torch.randn(64, 128)

    def step():
        y = torch.tanh(x @ w)  # ALLOC
        y.sum().backward(create_graph=True)

    leak = the_leak(step)
    assert_form(leak, path="w.grad.grad_fn", holder=None, site_of=step, fix="create_graph=True")


class KeepOutput(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        out = x * 2  # ALLOC
        ctx.out = out
        return out

    @staticmethod
    def backward(ctx, grad):
        return grad * 2


def test_custom_function_ctx_attribute_cycle():
    import gc

    x = torch.randn(64, 256, requires_grad=True)
    gc.disable()
    try:

        def step():
            KeepOutput.apply(x).sum()

        leak = the_leak(step)
    finally:
        gc.enable()
        gc.collect()
    assert_form(
        leak, path="<cycle: ", holder=None, site_of=KeepOutput.forward, fix="ctx.save_for_backward()", retention="cycle"
    )


def test_small_view_keeps_its_big_base():
    views = []

    def step():
        big = torch.ones(256, 1024)  # ALLOC
        views.append(big[0])

    leak = the_leak(step)
    # A row keeps its whole base: a copy of the row, not a .clear() of every row (#63 item 2).
    assert_form(leak, path="views[", holder="views", site_of=step, fix="it keeps 1.0 MiB, not its own 4.0 KiB")
    assert leak.fix_rule == "view-pins-base" and "Store a .clone() of it" in leak.suggestion
    assert leak.path_text.endswith("._base")


# -- reference cycles, explained by their members ----------------------------------------------


class Attention:
    def __init__(self):
        self.mask_cache = torch.ones(64, 256)  # ALLOC
        self.score_fn = self.score  # a bound method of itself: a cycle

    def score(self, q):
        return q * self.mask_cache


def run_without_gc(step):
    import gc

    gc.disable()
    try:
        return the_leak(step)
    finally:
        gc.enable()
        gc.collect()


def test_cycle_through_a_bound_method_names_the_entry_and_the_edge():
    def step():
        Attention()  # dropped at once, but the cycle keeps it until gc runs

    leak = run_without_gc(step)
    assert_form(
        leak,
        path="<cycle: Attention>.score_fn.__self__.mask_cache",
        holder=None,
        site_of=Attention.__init__,
        fix="keep a weakref.WeakMethod",
        retention="cycle",
    )
    assert "a reference cycle (<cycle: Attention> \u21c4 .score_fn.__self__)" in leak.suggestion
    assert "it stores a bound method of itself (.score_fn)" in leak.suggestion
    assert leak.path[2]["note"] == "back to the Attention the cycle started from: an edge to break"


def test_a_cycle_is_one_cause_named_by_its_entry():
    report_step = lambda: Attention()  # noqa: E731
    import gc

    gc.disable()
    try:
        report = torchleak.check(report_step, iterations=ITERATIONS)
    finally:
        gc.enable()
        gc.collect()
    (cause,) = report.causes
    assert cause["keeper"] == "<cycle: Attention>"
    assert cause["text"].startswith(
        "64.0 KiB per iteration: a reference cycle of Attention objects that only gc.collect() frees, at "
    ), cause["text"]


class Pipeline:
    def __init__(self):
        self.buffer = torch.ones(64, 256)  # ALLOC
        pipeline = self
        self.on_done = lambda: pipeline.buffer.sum()  # a closure that refers back: a cycle


def test_cycle_through_a_closure_names_the_variable():
    leak = run_without_gc(lambda: Pipeline())
    assert_form(
        leak,
        path="<cycle: Pipeline>.on_done.<cell pipeline>.buffer",
        holder=None,
        site_of=Pipeline.__init__,
        fix="a closure refers back to it",
        retention="cycle",
    )
    assert "closure variable 'pipeline' of Pipeline.__init__.<locals>.<lambda>" in leak.suggestion


def add_recording_hook(module):
    seen = []

    def record(mod, args, output):
        seen.append(output)

    module.register_forward_hook(record)


def test_a_hook_reachable_only_through_its_module_names_the_hooks_remedy():
    model = torch.nn.Linear(256, 256)
    add_recording_hook(model)
    x = torch.ones(64, 256)

    def step():
        with torch.no_grad():
            model(x)  # ALLOC: the output, kept by the hook's closure

    leak = the_leak(step)
    holder = leak.path_text[: leak.path_text.index(".<cell seen>") + len(".<cell seen>")]
    assert holder.startswith("model._forward_hooks[")  # the hook's id is the key
    assert_form(
        leak,
        path="model._forward_hooks[",
        holder=holder,
        site_of=step,
        fix="a hook registered on the module model (_forward_hooks)",
    )
    assert "handle.remove()" in leak.suggestion and "module.training" in leak.suggestion
    assert ".<cell seen>[" in leak.path_text


def test_a_tensor_hooks_closure_kept_by_the_graph():
    x = torch.randn(64, 256, requires_grad=True)
    kept_states = {}

    def step():
        scale = torch.ones(64, 256)  # ALLOC
        h = x * 2
        h.register_hook(lambda grad: grad * scale)  # the closure keeps `scale`
        kept_states[len(kept_states)] = h.sum().grad_fn  # the graph, and with it the hook

    leak = the_leak(step)
    assert_form(
        leak,
        path="kept_states[",
        holder="kept_states",
        site_of=step,
        fix="kept_states keeps autograd nodes (SumBackward0, a grad_fn)",
    )
    hooks = [s for s in leak.path if s["label"] == "<tensor hooks>"]
    assert hooks and "kept by this autograd node in C++" in hooks[0]["note"], leak.path_text
    assert leak.path_text.endswith(".<cell scale>")
    assert leak.path[-1]["note"] == (
        "closure variable 'scale' of test_a_tensor_hooks_closure_kept_by_"
        "the_graph.<locals>.step.<locals>.<lambda> (read it as "
        "__closure__[0].cell_contents)"
    )


def test_hooks_along_a_chained_graph_get_the_hooks_fix():
    w = torch.randn(64, 64, requires_grad=True)
    state = {"h": torch.zeros(8, 64)}

    def step():
        weight = torch.ones(64, 256)  # ALLOC
        h = state["h"] @ w  # chained to the previous iteration's graph: never detached
        h.register_hook(lambda grad: grad * weight.mean())
        state["h"] = h

    leak = the_leak(step)
    assert_form(
        leak,
        path="state['h'].grad_fn",
        holder=None,
        site_of=step,
        fix="a hook on the autograd graph (Tensor.register_hook",
    )
    assert "<tensor hooks>" in leak.path_text


def pack_to_copy(t):
    return t.clone()  # ALLOC: the packed copy the graph keeps


def test_what_a_saved_tensors_hook_packed_is_kept_by_the_graph():
    w = torch.randn(256, 256, requires_grad=True)
    x = torch.randn(64, 256)
    losses = []

    def step():
        with torch.autograd.graph.saved_tensors_hooks(pack_to_copy, lambda packed: packed):
            out = torch.tanh(x @ w)
        losses.append(out.sum())

    leak = the_leak(step)
    assert_form(leak, path="losses[", holder="losses", site_of=pack_to_copy, fix="loss.detach() or loss.item()")
    assert leak.path[-1]["note"].startswith("what a torch.autograd.graph.saved_tensors_hooks pack")
    assert leak.retention == "reachable"


class PRCurve:
    """Laid out as a torchmetrics Metric with list states: they grow until reset()."""

    def __init__(self):
        self.reset()

    def update(self, preds):
        self.preds.append(preds)

    def reset(self):
        self.preds = []


def test_a_holder_whose_owner_defines_reset_gets_that_remedy():
    metric = PRCurve()

    def step():
        metric.update(torch.ones(64, 256))  # ALLOC

    leak = the_leak(step)
    assert_form(
        leak,
        path="metric.preds[",
        holder="metric.preds",
        site_of=step,
        fix="call metric.reset() once its values are used",
    )
    assert leak.path[0]["note"].endswith("its class defines reset()")


def test_a_local_of_another_threads_frame():
    import queue
    import threading

    inbox = queue.Queue()

    def collector():
        received = []  # only this thread's frame refers to it
        while True:
            item = inbox.get()
            if item is None:
                inbox.task_done()
                return
            received.append(item)
            inbox.task_done()

    worker = threading.Thread(target=collector, name="collector", daemon=True)
    worker.start()

    def step():
        inbox.put(torch.ones(64, 256))  # ALLOC
        inbox.join()  # the collector has taken it

    try:
        leak = the_leak(step)
    finally:
        inbox.put(None)
        worker.join(timeout=10)
    assert_form(leak, path="received[", holder="received", site_of=step, fix=".clear() it")
    assert leak.path[0]["kind"] == "frame"
    assert "in thread 'collector'" in leak.path[0]["note"]


def test_a_loss_kept_after_backward_still_keeps_its_graphs_nodes():
    model = torch.nn.Linear(256, 256)
    x = torch.randn(64, 256)
    losses = []

    def step():
        out = model(x)
        loss = out.square().mean()  # ALLOC: the scalar loss, kept with its grad_fn
        loss.backward()  # frees the saved activations, not the graph's nodes
        losses.append(loss)

    report = torchleak.check(step, iterations=ITERATIONS)
    (leak,) = [f for f in report.leaks if f.path_text.startswith("losses[")]
    assert leak.holder["path_text"] == "losses"
    assert leak.site["line"] == alloc_line(step)
    assert leak.path[-1]["note"].startswith("keeps its autograd graph through .grad_fn (")
    assert "store loss.item() (or loss.detach()) in losses, not the tensor" in leak.suggestion


# -- owners in torch's C++ ---------------------------------------------------------------------


@pytest.mark.filterwarnings("ignore:`torch.jit.trace")
def test_a_function_traced_in_a_loop_is_kept_by_torchscripts_compilation_unit():
    kept = []  # the user keeps the traced functions too, but clearing this would not free them

    def step():
        scale = torch.ones(64, 256)  # ALLOC: captured by the trace as a constant

        def scaled(x):
            return x * scale

        kept.append(torch.jit.trace(scaled, torch.ones(64, 256)))

    leak = the_leak(step)
    assert_form(
        leak,
        path="torch.jit._state._python_cu<TorchScript constant of test_retention_forms.scaled>",
        holder=None,
        site_of=step,
        fix="trace once, outside the loop",
    )
    assert "global compilation unit" in leak.path[0]["note"]
    assert "constant of test_retention_forms.scaled's compiled graph" in leak.path[1]["note"]


@pytest.mark.filterwarnings("ignore:`torch.jit.trace")
def test_a_traced_module_is_one_torchscript_leak_with_what_its_check_kept():
    class Scaler(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.table = torch.ones(64, 256)  # ALLOC: a plain tensor attribute, traced as a constant

        def forward(self, x):
            return x * self.table.sum()

    def step():
        torch.jit.trace(Scaler(), torch.ones(3))  # the result is dropped at once

    report = torchleak.check(step, iterations=ITERATIONS)
    (cause,) = report.causes
    assert cause["keeper"] == "torch.jit._state._python_cu"
    findings = [report.findings[i] for i in cause["findings"]]
    biggest = findings[0]
    assert_form(
        biggest,
        path="torch.jit._state._python_cu<TorchScript constant of test_retention_forms.Scaler.forward>",
        holder=None,
        site_of=Scaler.__init__,
        fix="trace once, outside the loop",
    )
    # What the trace check computed is kept by the compiled function's executor, which no Python
    # object reaches: named by where it was allocated, not left as a bare "C++ only".
    for small in findings[1:]:
        assert small.retention == "cpp_only"
        assert "executor keeps it in C++" in small.suggestion


# -- islands that a hook on an autograd node keeps (cycles through C++) ------------------------


class GradCache:
    def __init__(self):
        self.cache = []


def on_backward(owner, grad_inputs, grad_outputs):
    owner.cache.clear()


def the_leak_at(step, line=None):
    """The leak allocated at `step`'s `# ALLOC` line (or `line`)."""
    report = torchleak.check(step, iterations=ITERATIONS)
    (leak,) = [f for f in report.leaks if f.site["line"] == (line or alloc_line(step))]
    return leak


def test_a_partial_hook_whose_argument_keeps_the_graph_is_explained_from_the_hook():
    def step():
        x = torch.randn(8, 256, requires_grad=True)
        y = x * 2
        z = y.repeat(8, 1)  # ALLOC: kept in owner.cache; its graph contains y's node
        owner = GradCache()
        owner.cache.append(z)
        y.grad_fn.register_hook(functools.partial(on_backward, owner))  # the cycle's C++ edge

    anchor = "<hook on MulBackward0: partial(on_backward, owner)>"
    leak = the_leak_at(step)
    assert_form(
        leak,
        path=anchor + ".args[0].cache[0]",
        holder=None,
        site_of=step,
        fix="Break it at " + anchor + ".args[0]",
        retention="cpp_only",
    )
    assert leak.path[2]["note"] == "argument 'owner' of partial(on_backward, owner)"
    assert "registered with grad_fn.register_hook on MulBackward0" in leak.path[0]["note"]
    assert "handle.remove()" in leak.suggestion
    # The leaf the graph keeps through AccumulateGrad is the same island, from the same anchor.
    report = torchleak.check(step, iterations=ITERATIONS)
    assert {f.path[0]["label"] for f in report.leaks} == {anchor}
    assert all("held only from C++" not in f.path_text for f in report.leaks)


def test_a_prehook_closure_is_explained_from_the_hook_by_its_cell_name():
    def step():
        x = torch.randn(64, 256, requires_grad=True)
        y = x.exp()
        store = {"z": y + 1}  # ALLOC

        def refill(grad_outputs):
            return (store["z"],)

        y.grad_fn.register_prehook(refill)

    leak = the_leak_at(step)
    anchor = (
        "<prehook on ExpBackward0: test_a_prehook_closure_is_explained_from_the_hook_by_"
        "its_cell_name.<locals>.step.<locals>.refill>"
    )
    assert_form(
        leak,
        path=anchor + ".<cell store>['z']",
        holder=None,
        site_of=step,
        fix="Break it at " + anchor + ".<cell store>",
        retention="cpp_only",
    )
    assert leak.path[1]["note"].startswith("closure variable 'store' of ")
    assert leak.path[1]["note"].endswith("(read it as __closure__[0].cell_contents)")


def test_a_tensor_hook_capturing_its_own_output_is_explained_from_the_hook():
    def step():
        x = torch.randn(64, 256, requires_grad=True)
        h = x * 3
        out = h.tanh()  # ALLOC
        seen = [out]
        h.register_hook(lambda grad: grad * seen[0].mean())

    leak = the_leak_at(step)
    assert leak.path[0]["label"].startswith("<tensor hook on MulBackward0: ")
    assert_form(
        leak,
        path=leak.path[0]["label"] + ".<cell seen>[0]",
        holder=None,
        site_of=step,
        fix="capture a weakref.ref",
        retention="cpp_only",
    )
    assert "Tensor.register_hook" in leak.path[0]["note"]


# -- torch's own caches, named from evidence ---------------------------------------------------


def test_models_built_inside_one_autocast_region_are_kept_by_its_cast_cache():
    x = torch.randn(64, 512)

    def sweep():
        model = torch.nn.Linear(512, 512)
        model(x)  # ALLOC: the bfloat16 cast of the weight, cached by autocast

    with torch.autocast("cpu", dtype=torch.bfloat16):
        report = torchleak.check(sweep, iterations=ITERATIONS)
    (cast,) = [f for f in report.leaks if f.site["line"] == alloc_line(sweep)]
    assert_form(
        cast,
        path="<torch.autocast weight-cast cache>",
        holder=None,
        site_of=sweep,
        fix="cache_enabled=False",
        retention="cpp_only",
    )
    assert "region is open on cpu" in cast.path[0]["note"]
    # The parameters themselves are kept through the casts' graphs: the same cause.
    assert {f.path[0]["label"] for f in report.leaks} == {"<torch.autocast weight-cast cache>"}
    assert len(report.causes) == 1


def test_memory_kept_only_from_cpp_without_evidence_names_no_torch_cache():
    x = torch.randn(64, 512)

    def sweep():
        model = torch.nn.Linear(512, 512)
        model(x)

    with torch.autocast("cpu", dtype=torch.bfloat16):
        report = torchleak.check(sweep, iterations=ITERATIONS)
    outside = torchleak.check(sweep, iterations=ITERATIONS)  # the region is closed: no cache
    assert report.leaks and not outside.leaks
    assert all("torch.compile" not in f.suggestion for f in report.leaks)


def test_checkpointed_regions_kept_with_their_graph_show_the_checkpoint_frame():
    from torch.utils.checkpoint import checkpoint

    layer = torch.nn.Linear(256, 256)
    outs = []

    def region(t):
        return torch.tanh(layer(t)).exp()

    def step():
        inp = torch.randn(64, 256, requires_grad=True)
        out = checkpoint(region, inp, use_reentrant=False)  # ALLOC: the RNG state its frame keeps
        outs.append(out.sum())

    leak = the_leak_at(step)
    assert_form(leak, path="outs[", holder="outs", site_of=step, fix="store out.sum().detach() or .item()")
    assert "<unpack hook of " in leak.path_text and ".<cell frame>.recompute_fn" in leak.path_text
    assert any(s["type"] == "_CheckpointFrame" for s in leak.path)


# -- fixes that fit the holder -----------------------------------------------------------------


def test_a_module_that_gains_a_submodule_per_iteration_gets_the_registry_fix():
    class Net(torch.nn.Module):
        pass

    net = Net()
    names = iter(range(1000))

    def step():
        net.add_module(f"layer_{next(names)}", torch.nn.Linear(128, 128))  # ALLOC

    leak = the_leak(step)
    assert_form(leak, path="net.layer_", holder="net", site_of=step, fix="net (Net) gains 1 submodule per iteration")
    assert "delattr(net, name)" in leak.suggestion
    assert "set it to None" not in leak.suggestion


def test_a_module_dict_that_gains_entries_gets_its_own_removal_call():
    heads = torch.nn.ModuleDict()
    names = iter(range(1000))

    def step():
        heads[f"task{next(names)}"] = torch.nn.Linear(128, 128)  # ALLOC

    assert_form(
        the_leak(step), path="heads.task", holder="heads", site_of=step, fix="del heads[key] (or heads.pop(key))"
    )


def test_a_static_model_is_a_route_not_a_holder():
    model = torch.nn.Sequential(*[torch.nn.Linear(64, 64) for _ in range(8)])
    x = torch.randn(16, 64)
    kept = []

    def step():
        out = model(x)  # ALLOC: each iteration's graph, kept through kept[i]
        kept.append(out)

    leak = the_leak(step)
    assert leak.holder["path_text"] == "kept"
    assert "gains" not in leak.suggestion


def test_logits_kept_with_their_graph_are_worded_as_tensors_not_a_loss():
    model = torch.nn.Linear(256, 10)
    x = torch.randn(64, 256)
    all_logits = []

    def step():
        logits = model(x)  # ALLOC
        all_logits.append(logits)

    leak = the_leak(step)
    assert_form(
        leak,
        path="all_logits[",
        holder="all_logits",
        site_of=step,
        fix="store .detach()ed copies of the 64\u00d710 tensors in all_logits",
    )
    assert "loss" not in leak.suggestion


def test_grad_fns_kept_after_retain_graph_are_worded_as_nodes():
    kept = []

    def step():
        a = torch.randn(64, 256, requires_grad=True)
        loss = (a.exp() * 2).sum()  # ALLOC: exp's saved result stays with the node
        loss.backward(retain_graph=True)
        kept.append(loss.grad_fn)

    leak = the_leak_at(step)
    assert_form(
        leak, path="kept[", holder="kept", site_of=step, fix="kept keeps autograd nodes (SumBackward0, a grad_fn)"
    )


# -- names instead of placeholders -------------------------------------------------------------


def test_a_dict_keyed_by_a_parameter_names_the_entry_by_the_parameters_path():
    model = torch.nn.Sequential(torch.nn.Linear(64, 64))
    model.fc = torch.nn.Linear(64, 64)
    history = {}

    def step():
        history.setdefault(model.fc.weight, []).append(torch.ones(64, 256))  # ALLOC

    assert_form(
        the_leak(step),
        path="history[model.fc.weight][",
        holder="history[model.fc.weight]",
        site_of=step,
        fix=".clear() it",
    )


def test_set_elements_are_numbered_and_the_set_is_the_holder():
    seen = set()

    def step():
        seen.add(torch.ones(64, 256))  # ALLOC

    leak = the_leak(step)
    assert_form(leak, path="seen<element ", holder="seen", site_of=step, fix=".clear() it")
    assert leak.path[1]["note"] == "an element of the set (numbered in its iteration order)"


class Explainer:
    """An object made per batch that registers a forward hook and drops its handle (#47 item 2:
    the report named one explainer's list and offered `.clear()` on it, which frees nothing the
    other explainers' lists keep)."""

    def __init__(self, model):
        self.acts = []
        model[0].register_forward_hook(self._save)

    def _save(self, module, inputs, output):
        self.acts.append(output.detach())


def test_hooks_registered_every_iteration_are_the_cause_with_the_function_registered():
    model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU())
    x = torch.ones(64, 256)

    def step():
        Explainer(model)
        model(x)  # ALLOC: the first layer's output, recorded by every explainer's hook

    leak = the_leak(step)
    assert_form(
        leak,
        path="model[0]._forward_hooks[",
        holder="model[0]._forward_hooks",
        site_of=step,
        fix="hooks accumulate: model[0]._forward_hooks gains 1 hook per iteration (the newest: Explainer._save)",
    )
    assert leak.holder["hooks"]["added"] == ITERATIONS
    assert leak.holder["hooks"]["newest"] == "Explainer._save"
    assert "create the Explainer once" in leak.suggestion
    assert "register_forward_hook returns and call handle.remove()" in leak.suggestion
    assert "fix_code" not in leak.to_dict()  # clearing the dict behind torch's back is no fix to paste


def test_hooks_that_were_there_before_tracking_are_a_route_not_the_cause():
    model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU())
    explainers = [Explainer(model) for _ in range(3)]  # registered before the run
    x = torch.ones(64, 256)

    def step():
        model(x)  # ALLOC: recorded by each of the three hooks

    leak = the_leak(step)
    assert leak.holder["path_text"].endswith(".acts"), leak.holder
    assert "hooks" not in leak.holder
    assert "hooks accumulate" not in leak.suggestion
    del explainers


class WrappedLayer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.base = torch.nn.Linear(8, 8)
        self.adapters = {}


def test_one_line_adding_a_new_key_to_every_layer_is_one_cause_held_by_each_layers_dict():
    # #47 item 5: four findings, one per layer's dict, each with its own `.clear()`, before
    # that the fixed list of layers was taken for the holder and `layers.clear()` offered.
    layers = [WrappedLayer() for _ in range(4)]
    names = iter(range(1000))

    def step():
        name = f"task{next(names)}"
        for layer in layers:
            layer.adapters[name] = torch.zeros(64, 256)  # ALLOC

    report = torchleak.check(step, iterations=ITERATIONS)
    assert len(report.causes) == 1, str(report)
    cause = report.causes[0]
    assert len(cause["findings"]) == 4
    assert sorted(cause["holders"]) == [f"layers[{k}].adapters" for k in range(4)]
    assert cause["new_key"].startswith("['task")
    assert "one line adds an entry under a new key to 4 containers every iteration" in cause["text"]
    for leak in report.leaks:
        assert leak.holder["path_text"] in cause["holders"]  # never `layers`, which does not grow
        assert leak.site["line"] == alloc_line(step)
        assert "clearing one frees only its share" in leak.suggestion
        assert "fix_code" not in leak.to_dict()
    assert "containers (biggest first):" in str(report)
    assert "1 leak (1 allocation site)" in str(report)


class ParamStore:
    """A library-style store that indexes each tensor in two dicts (#47 item 1: the report said
    to clear the one on the path, which frees nothing)."""

    def __init__(self):
        self._params = {}
        self._by_name = {}

    def add(self, name, value):
        self._params[len(self._params)] = value
        self._by_name[name] = value

    def clear(self):
        self._params.clear()
        self._by_name.clear()


def test_a_fix_that_frees_nothing_is_never_offered_and_the_owner_that_frees_all_is_named():
    store = ParamStore()
    names = iter(range(1000))

    def step():
        store.add(f"p{next(names)}", torch.zeros(256, 256))  # ALLOC

    leak = the_leak(step)
    holder = leak.holder["path_text"]
    assert holder in ("store._params", "store._by_name"), holder
    other = ({"store._params", "store._by_name"} - {holder}).pop()
    fix = leak.to_dict()["fix"]
    assert fix["frees_bytes"] == 0 and fix["also_held_by"] == other
    assert fix["owner"] == "store" and fix["owner_frees_bytes"] == leak.total_bytes
    assert fix["owner_methods"] == ["clear"]
    assert leak.suggestion.startswith(f"clearing {holder} alone frees nothing: {other} also holds them")
    assert "its class's own clear() says it releases" in leak.suggestion
    assert ".clear() it" not in leak.suggestion
    assert "fix_code" not in leak.to_dict()


class RotaryCache(torch.nn.Module):
    """diffusers' Qwen-Image RoPE cache in small: the module's own dict, filled by a method the
    class caches with an unbounded lru_cache, so both hold every table."""

    def __init__(self):
        super().__init__()
        self.tables = {}

    @functools.lru_cache(maxsize=None)  # noqa: B019, UP033 - the leak under test, as diffusers writes it
    def table(self, n):
        t = torch.ones(n, 64)  # ALLOC
        self.tables[n] = t
        return t


rotary = RotaryCache()


def test_two_holders_of_the_same_tensors_are_both_named_and_offered_together():
    # Issue #63 item 5: clearing either alone frees nothing; the report names both, proves
    # what each frees alone and together, and offers the pair, which frees the leak.
    sizes = iter(range(100, 10_000))

    def step():
        rotary.table(next(sizes))

    try:
        leak = the_leak(step)
        fix = leak.to_dict()["fix"]
        holder = leak.holder["path_text"]  # rooted where the walk named it: this module's globals
        assert holder.endswith("rotary.tables"), holder
        function = holder[: -len("rotary.tables")] + "RotaryCache.table"
        assert fix["frees_bytes"] == 0 and fix["also_held_by"] == f"{function}<lru_cache entries>"
        assert fix["together_frees_bytes"] == leak.total_bytes
        assert leak.fix_rule == "holders-free-together"
        assert leak.fix_code == f"{holder}.clear(); {function}.cache_clear()"
        assert leak.suggestion.startswith(
            f"clearing {holder} alone frees nothing: {function}<lru_cache entries> also holds them. "
            "Clearing both frees "
        )
        here = {**globals(), __name__.rpartition(".")[2]: sys.modules[__name__]}

        def fixed():
            step()
            exec(leak.fix_code, here)

        assert not torchleak.check(fixed, iterations=ITERATIONS).leaks
    finally:
        RotaryCache.table.cache_clear()
        rotary.tables.clear()


def test_a_fix_that_frees_the_leak_is_proven_so():
    kept = []

    def step():
        kept.append(torch.zeros(256, 256))  # ALLOC

    leak = the_leak(step)
    fix = leak.to_dict()["fix"]
    assert fix["frees_bytes"] == leak.total_bytes and fix["also_held_by"] == ""
    assert leak.fix_code == "kept.clear()"


class LoopState:
    def __init__(self):
        self.Y = [torch.zeros(1, 256)]


def test_a_container_the_loop_reads_is_never_cleared_by_the_fix():
    # #47 item 1: the suggested `state.Y.clear()` crashed the loop, which reads state.Y[-1].
    state = LoopState()

    def step():
        prev = state.Y[-1]  # the next iteration reads what the last one appended
        state.Y.append(prev + torch.zeros(64, 256))  # ALLOC

    leak = the_leak(step)
    assert leak.holder["path_text"] == "state.Y"
    read_line = step.__code__.co_firstlineno + 1
    assert leak.to_dict()["holder_read"] == {
        "line": read_line,
        "source": "prev = state.Y[-1]  # the next iteration reads what the last one appended",
    }
    assert leak.suggestion.startswith(
        f"state.Y grows every iteration, but the code around it reads it (line {read_line}: "
    ), leak.suggestion
    assert "clearing it would break the next iteration" in leak.suggestion
    assert "fix_code" not in leak.to_dict()
    assert leak.fix_rule == "bound-what-the-loop-reads"  # the rule's fix, written again


class Smoother:
    def __init__(self):
        self.history = [torch.zeros(64, 256)]

    def update(self, x):
        previous = self.history[-1]
        out = x + previous * 0.5  # ALLOC
        self.history.append(out)
        return out


def test_a_container_the_method_reads_as_self_attribute_is_never_cleared():
    # The walk names the holder from its root (`smoother.history`); the method that fills it
    # reads it as `self.history`, which is what its next call needs.
    smoother = Smoother()

    def step():
        smoother.update(torch.ones(64, 256))

    leak = the_leak(step)
    assert leak.holder["path_text"] == "smoother.history"
    assert leak.site["line"] == alloc_line(Smoother.update)
    read = leak.to_dict()["holder_read"]
    assert read == {"line": alloc_line(Smoother.update) - 1, "source": "previous = self.history[-1]"}
    assert "fix_code" not in leak.to_dict()


def test_a_container_read_from_another_module_is_never_cleared_by_the_fix(tmp_path, monkeypatch):
    # Before: the check read only the site's function, and `.clear()` was offered for a dict a
    # helper in another module reads, a list a method in another module reads, and a dict
    # another method of the same class reads: applied, each broke the next iteration.
    (tmp_path / "loop_helpers.py").write_text(
        "def prev_key(cache, i):\n    return cache[i - 1]\n"
        "class Keeper:\n    def __init__(self): self.history = []\n"
        "    def add(self, t): self.history.append(t)\n    def last(self): return self.history[-1]\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    import loop_helpers

    cache = {0: torch.zeros(64, 256)}
    keeper = loop_helpers.Keeper()
    keeper.add(torch.zeros(64, 256))

    counter = itertools.count(1)

    def through_helper():
        i = next(counter)
        cache[i] = loop_helpers.prev_key(cache, i) + 1  # ALLOC

    def through_method():
        keeper.add(keeper.last() * 1.0 + 1)  # ALLOC

    class Model:
        def __init__(self):
            self.cache = {}

        def step(self, i):
            self.cache[i] = torch.ones(64, 256)  # ALLOC
            return self.prev(i)

        def prev(self, i):
            return self.cache[i - 1] if i else None

    model = Model()

    def through_sibling():
        model.step(len(model.cache))

    for step, read in (
        (through_helper, "cache[i] = loop_helpers.prev_key(cache, i) + 1  # ALLOC"),
        (through_method, "def last(self): return self.history[-1]"),
        (through_sibling, "return self.cache[i - 1] if i else None"),
    ):
        leak = the_leak(step)
        assert leak.to_dict()["holder_read"]["source"] == read, (step, leak.to_dict().get("holder_read"))
        assert "fix_code" not in leak.to_dict(), step
    assert "loop_helpers.py, line 6: " in the_leak(through_method).suggestion


def test_a_container_only_filled_around_its_site_keeps_its_clear():
    state = LoopState()

    def step():
        y = torch.zeros(64, 256)  # ALLOC
        state.Y.append(y)

    leak = the_leak(step)
    assert "holder_read" not in leak.to_dict()
    assert leak.fix_code == "state.Y.clear()"
    assert leak.fix_rule == "growing-holder"


class ScaleKeepingModule(torch.autograd.Function):
    """A library-style op that saves its output (no cycle by itself) and, for its backward, the
    module that called it."""

    @staticmethod
    def forward(ctx, x, module):
        out = x * 2  # ALLOC
        ctx.module = module
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, grad):
        return grad * 2, None


class BlockKeepingItsOutput(torch.nn.Module):
    def forward(self, x):
        out = ScaleKeepingModule.apply(x, self)
        self.last_out = out  # the user's attribute closes the cycle through the autograd node
        return out


def test_a_cycle_through_an_autograd_node_blames_the_users_attribute_not_the_op():
    # #47 item 4: the op that saved its output was blamed ("save tensors with
    # ctx.save_for_backward() instead of ctx attributes"); the edge that makes the cycle is the
    # user's own attribute holding the output.
    w = torch.ones(64, 256, requires_grad=True)
    leak = run_without_gc(lambda: BlockKeepingItsOutput()(w))
    assert leak.retention == "cycle"
    assert leak.path_text.startswith("<cycle: BlockKeepingItsOutput>.last_out.grad_fn.module"), leak.path_text
    assert "its own attribute .last_out keeps a tensor with its autograd graph" in leak.suggestion
    assert "ScaleKeepingModuleBackward keeps it back" in leak.suggestion
    assert "(self.last_out = out.detach())" in leak.suggestion
    assert "ctx attributes" not in leak.suggestion
    assert "ctx saved a view" not in leak.path_text


def test_a_clear_that_was_not_proven_is_not_offered_as_code():
    # #47 item 1: fix_code only where it is proven. The proofs cover the eight biggest leaks;
    # the two smallest keep their words but no `.clear()` to paste.
    l0, l1, l2, l3, l4, l5, l6, l7, l8, l9 = ([] for _ in range(10))

    def step():
        l0.append(torch.zeros(160, 64))
        l1.append(torch.zeros(150, 64))
        l2.append(torch.zeros(140, 64))
        l3.append(torch.zeros(130, 64))
        l4.append(torch.zeros(120, 64))
        l5.append(torch.zeros(110, 64))
        l6.append(torch.zeros(100, 64))
        l7.append(torch.zeros(90, 64))
        l8.append(torch.zeros(80, 64))
        l9.append(torch.zeros(70, 64))

    report = torchleak.check(step, iterations=ITERATIONS)
    assert len(report.leaks) == 10, str(report)
    proven = [leak for leak in report.leaks if "fix" in leak.to_dict()]
    assert len(proven) == 8
    for leak in report.leaks:
        holder = leak.holder["path_text"]
        if leak in proven:
            assert leak.fix_code == f"{holder}.clear()"
        else:
            assert holder in ("l8", "l9") and "fix_code" not in leak.to_dict(), holder
            assert ".clear() it" in leak.suggestion  # the words stay
