"""A library's objects on a retaining path (#47 items 3 and 4): a cycle between the user's
module and a training framework's wrapper is shown from the user's module with the edge that
closes it, and a library object's private state is named with the object, its type and package
and its releasing methods, never patched or given a template."""

import gc
import pytest
import torch

import site_packages
import torchleak

ITERATIONS = 5
KiB = 1 << 10

PACKAGE = {
    "trainpkg/__init__.py": "",
    "trainpkg/wrappers.py": """
        import torch

        class OptimizerWrapper:
            '''A framework's wrapper that keeps the module it steps and is kept by it.'''

            def __init__(self, module):
                self.module = module
                self._step_state = torch.zeros(64, 256)  # ALLOC wrapper
                module.wrapper = self
        """,
    "trainpkg/ema.py": """
        import torch

        class EMA:
            '''Keeps a copy of the weights per update unless keep_history=False (its documented
            option), each with the graph that made it.'''

            def __init__(self, model, decay=0.9, keep_history=True):
                self.model = model
                self.decay = decay
                self.keep_history = keep_history
                self._history = []

            def update(self):
                weights = [p * self.decay for p in self.model.parameters()]  # ALLOC ema
                if self.keep_history:
                    self._history.append(weights)

            def reset(self):
                self._history.clear()

            def remove_entry(self, index):  # takes an argument: never offered
                del self._history[index]
        """,
}


@pytest.fixture
def trainpkg(tmp_path, monkeypatch):
    """An installed package `trainpkg` in a site-packages directory of the test's own."""
    yield site_packages.install(tmp_path, monkeypatch, PACKAGE)
    site_packages.forget("trainpkg")


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(8, 8)


def test_a_cycle_with_a_frameworks_wrapper_starts_at_the_users_module_and_marks_the_closing_edge(trainpkg):
    # #47 item 4: the cycle was rooted at the framework's wrapper (it reaches the tensor in one
    # step), and neither the user's module nor the edge that closes the cycle appeared.
    from trainpkg.wrappers import OptimizerWrapper

    def step():
        OptimizerWrapper(Net())  # the user's line: dropped at once, the cycle keeps both

    gc.collect()
    gc.disable()
    try:
        report = torchleak.check(step, iterations=ITERATIONS)
    finally:
        gc.enable()
        gc.collect()
    (cause,) = report.causes  # the wrapper's buffer and the Net's own parameters: one cycle
    leak = max(report.leaks, key=lambda f: f.total_bytes)
    assert leak.retention == "cycle"
    assert leak.path_text == "<cycle: Net>.wrapper.module.wrapper._step_state", leak.path_text
    closing = [s for s in leak.path if "back to the Net the cycle started from" in s.get("note", "")]
    assert [s["label"] for s in closing] == [".module"]
    assert "a reference cycle of Net objects that only gc.collect() frees" in cause["text"]
    assert "break it at .wrapper.module" in leak.suggestion
    assert leak.site["file"] == __file__ and leak.site["line"] == step.__code__.co_firstlineno + 1


def test_a_cycle_of_the_users_own_classes_still_starts_at_them():
    # Without a library in the cycle the rule is as before: the user's class is the entry.
    class Owner:
        def __init__(self):
            self.buffer = torch.zeros(64, 256)
            self.me = self

    gc.collect()
    gc.disable()
    try:
        report = torchleak.check(lambda: Owner(), iterations=ITERATIONS)
    finally:
        gc.enable()
        gc.collect()
    (leak,) = report.leaks
    assert leak.path_text.startswith(
        "<cycle: test_a_cycle_of_the_users_own_classes_still_starts_at_them.<locals>.Owner>.me"
    ), leak.path_text


def test_a_library_objects_private_state_is_named_with_its_type_package_and_releasing_method(trainpkg):
    # #47 item 3: the report, seeing a grad_fn on the path, said "store loss.item()" (there is
    # no loss) and offered `ema._history.clear()`.
    from trainpkg.ema import EMA

    model = torch.nn.Linear(128, 128)
    ema = EMA(model)

    def step():
        ema.update()

    report = torchleak.check(step, iterations=ITERATIONS)
    leak = max(report.leaks, key=lambda f: f.total_bytes)
    holder = leak.holder
    assert holder["path_text"] == "ema._history", holder
    assert holder["library"] == {"object": "ema", "type": "EMA", "package": "trainpkg", "methods": ["reset"]}
    text = leak.suggestion
    assert text.startswith("ema._history is private state of ema (EMA, from trainpkg) and gains 1 per iteration"), text
    assert "a setting or method of EMA (trainpkg) controls this" in text
    assert "its class's public reset(), which takes no argument, says it releases" in text
    assert "remove_entry" not in text  # it takes an argument
    assert "loss.item()" not in text and ".detach()" not in text
    assert "fix_code" not in leak.to_dict()
    fix = leak.to_dict()["fix"]
    assert fix["owner"] == "ema" and fix["owner_methods"] == ["reset"]
    assert fix["owner_frees_bytes"] == leak.total_bytes
    assert "checked on the heap: releasing everything ema keeps frees" in text
    # Read back from the JSON as written.
    again = torchleak.Report.from_json(report.to_json())
    assert again.leaks[0].holder["library"]["package"] == "trainpkg"


def test_a_public_attribute_of_a_library_object_keeps_the_ordinary_fix(trainpkg):
    # The library's interface (a public list it documents) is the user's to clear.
    from trainpkg.ema import EMA

    ema = EMA(torch.nn.Linear(8, 8))
    ema.kept = []

    def step():
        ema.kept.append(torch.zeros(64, 256))

    leak = max(torchleak.check(step, iterations=ITERATIONS).leaks, key=lambda f: f.total_bytes)
    assert leak.holder["path_text"] == "ema.kept"
    assert "library" not in leak.holder
    assert leak.fix_code == "ema.kept.clear()"


def test_a_users_own_class_is_never_a_library_object():
    class Store:
        def __init__(self):
            self._items = []

        def clear(self):
            self._items.clear()

    store = Store()

    def step():
        store._items.append(torch.zeros(64, 256))

    leak = max(torchleak.check(step, iterations=ITERATIONS).leaks, key=lambda f: f.total_bytes)
    assert leak.holder["path_text"] == "store._items"
    assert "library" not in leak.holder
    assert leak.fix_code == "store._items.clear()"
