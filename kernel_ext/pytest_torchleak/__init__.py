"""torchleak's pytest plugin, registered through the ``pytest11`` entry point.

    @pytest.mark.no_tensor_leak(iterations=5, warmup=1)
    def test_train_step(model, batch):
        train_step(model, batch)          # run 5 times under tracking; fails if tensors leak

    def test_eval(assert_no_tensor_leak, model, batch):
        assert_no_tensor_leak(evaluate, model, batch, iterations=5, warmup=1)

A leaking test fails with the report's text: where the leaked memory was allocated, the path
that keeps it alive and the fix. ``--torchleak-report DIR`` also saves a JSON and an HTML report
per leaking test.

A package of its own, not ``torchleak.pytest_plugin``: pytest loads every ``pytest11`` plugin
of the environment at start-up, and importing anything under ``torchleak`` imports torch. This
module imports torchleak only when a test asks for it.
"""

import hashlib
import inspect
import os
import re

import pytest

MARKER = "no_tensor_leak"
DEFAULTS = {"iterations": 5, "warmup": 1, "min_bytes": 0}
_USAGE = (
    "usage: @pytest.mark.no_tensor_leak(iterations=5, warmup=1, min_bytes=0) "
    "with 1 <= iterations, 0 <= warmup < iterations"
)
_REPORT_DIR = pytest.StashKey[str]()


def pytest_addoption(parser):
    group = parser.getgroup("torchleak", "tensor-leak checks (torchleak)")
    group.addoption(
        "--torchleak-report",
        metavar="DIR",
        default=None,
        dest="torchleak_report",
        help="save a JSON and an HTML torchleak report into DIR for every test that leaks tensors",
    )


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        f"{MARKER}(iterations=5, warmup=1, min_bytes=0): run the test body `iterations` times "
        "under torchleak tracking (the first `warmup` runs are not judged) and fail the test "
        "when tensors leak",
    )
    directory = config.getoption("torchleak_report", None)
    if directory is not None:
        directory = os.path.abspath(directory)
        try:
            os.makedirs(directory, exist_ok=True)
        except OSError as exc:
            raise pytest.UsageError(f"--torchleak-report {directory!r}: {exc.strerror}") from None
        if not os.access(directory, os.W_OK):
            raise pytest.UsageError(f"--torchleak-report {directory!r}: not writable")
        config.stash[_REPORT_DIR] = directory


def _marker_options(marker):
    """The marker's keyword arguments, checked; a bad one is the test's error, with the usage."""
    if marker.args:
        raise _MarkerError(f"takes keyword arguments only, got {len(marker.args)} positional")
    unknown = sorted(set(marker.kwargs) - set(DEFAULTS))
    if unknown:
        raise _MarkerError(f"unknown argument(s) {', '.join(unknown)}")
    # torchleak's own check and limits (counts are C ints, sizes int64): a value past them is
    # the marker's usage error, not an internal traceback from check(). Imported here, when a
    # marked test runs: loading the plugin imports no torch.
    from torchleak._config import MAX_BYTES, MAX_COUNT, checked_int

    options = {**DEFAULTS, **marker.kwargs}
    for name, value in options.items():
        try:
            checked_int(name, value, maximum=MAX_BYTES if name == "min_bytes" else MAX_COUNT)
        except ValueError as exc:
            raise _MarkerError(str(exc)) from None
    if options["iterations"] < 1 or options["warmup"] >= options["iterations"]:
        raise _MarkerError(
            f"needs 1 <= iterations and warmup < iterations, got "
            f"iterations={options['iterations']}, warmup={options['warmup']}"
        )
    return options


class _MarkerError(Exception):
    pass


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem):
    """A marked test's body runs here, `iterations` times under one tracker; pytest's own call
    is skipped (returning True says the call was made)."""
    marker = pyfuncitem.get_closest_marker(MARKER)
    if marker is None:
        return None
    try:
        options = _marker_options(marker)
    except _MarkerError as exc:
        pytest.fail(f"@pytest.mark.{MARKER}: {exc}\n{_USAGE}", pytrace=False)
    function = pyfuncitem.obj
    if inspect.iscoroutinefunction(function) or inspect.isasyncgenfunction(function):
        pytest.fail(f"@pytest.mark.{MARKER} runs plain test functions; {pyfuncitem.name} is async", pytrace=False)
    names = pyfuncitem._fixtureinfo.argnames  # what pytest's own pytest_pyfunc_call passes
    funcargs = {name: pyfuncitem.funcargs[name] for name in names}
    import torchleak

    # A lambda, not check(function, **funcargs): a fixture may be called `iterations`.
    report = torchleak.check(
        lambda: function(**funcargs),
        iterations=options["iterations"],
        warmup=options["warmup"],
        min_bytes=options["min_bytes"],
        roots=_fixture_roots(funcargs),
    )
    _fail_if_leaking(pyfuncitem, report)
    return True


def _fixture_roots(funcargs):
    """The test's fixtures by name: what a fixture holds is named `model.cache[3]`, not
    "outside the named roots" (pytest keeps fixture values in its own objects)."""
    return {name: value for name, value in funcargs.items() if name not in ("request", "assert_no_tensor_leak")}


def _fail_if_leaking(item, report):
    if not report.leaks:
        return
    saved, unsaved = _save(item, report)
    text = str(report)
    if saved:
        text += "\n\nsaved: " + ", ".join(saved)
    for path, error in unsaved:  # the leak is the failure; a report that could not be saved a note
        text += f"\n\ncould not save {path}: {error}"
    pytest.fail(f"tensors leaked across iterations\n\n{text}", pytrace=False)


def _save(item, report):
    from torchleak._report import save_each

    directory = item.config.stash.get(_REPORT_DIR, None)
    if directory is None:
        return [], []
    # The node id as a file name, readable and one per test: `tests/test_x.py::test_y[a/b]` ->
    # `tests_test_x.py_test_y_a_b-<8 hex of the node id>`; the hash keeps [a/b], [a_b] and
    # [a b] (one readable stem) apart.
    readable = re.sub(r"[^A-Za-z0-9._-]+", "_", item.nodeid).strip("_")[:160] or "test"
    stem = f"{readable}-{hashlib.sha1(item.nodeid.encode('utf-8')).hexdigest()[:8]}"
    saved, failed = save_each(report, [os.path.join(directory, f"{stem}.torchleak.{ext}") for ext in ("json", "html")])
    return saved, [(path, exc.strerror or str(exc)) for path, exc in failed]


@pytest.fixture
def assert_no_tensor_leak(request):
    """``assert_no_tensor_leak(fn, *args, iterations=5, warmup=1, min_bytes=0, **kwargs)`` runs
    ``fn`` repeatedly under tracking (torchleak.check), fails the test with the report's text
    when tensors leak, and returns the report otherwise."""
    import torchleak

    def check(
        fn,
        *args,
        iterations=DEFAULTS["iterations"],
        warmup=DEFAULTS["warmup"],
        min_bytes=DEFAULTS["min_bytes"],
        **kwargs,
    ):
        __tracebackhide__ = True  # the failure points at the test's line
        report = torchleak.check(
            lambda: fn(*args, **kwargs),
            iterations=iterations,
            warmup=warmup,
            min_bytes=min_bytes,
            roots=_fixture_roots(request.node.funcargs),
        )
        _fail_if_leaking(request.node, report)
        return report

    return check
