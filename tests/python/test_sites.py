"""The site is the user's line: installed third-party packages are library code like torch; the
package's own line is kept as "allocated inside", and its module globals name what it caches."""

import sys

import pytest
import torch

import site_packages
import torchleak
from torchleak import _user_code

KiB = 1 << 10


@pytest.fixture
def somepkg(tmp_path, monkeypatch):
    """An installed package `somepkg` in a site-packages directory of the test's own."""
    files = {
        "somepkg/__init__.py": "",
        "somepkg/ops.py": """
            import torch

            def reshape_heads(x, heads=4):
                return x.reshape(x.shape[0], heads, -1).transpose(0, 1).contiguous()  # ALLOC ops

            def deep(x, depth):
                return deep(x, depth - 1) if depth else x.clone()  # ALLOC deep
            """,
        "somepkg/models/__init__.py": "",
        "somepkg/models/detector.py": """
            import functools
            import torch

            class Detector:
                @functools.lru_cache(maxsize=None)
                def make_grid(self, n):
                    return torch.ones(n, 256)  # ALLOC grid

            DEFAULT = Detector()

            def grid(n):
                return DEFAULT.make_grid(n)
            """,
    }
    site = site_packages.install(tmp_path, monkeypatch, files)
    yield site
    site_packages.forget("somepkg")


def line_of(path, marker):
    for number, text in enumerate(path.read_text().splitlines(), start=1):
        if marker in text:
            return number
    raise AssertionError(marker)


def test_a_package_call_is_sited_at_the_users_line_and_keeps_the_package_line(somepkg):
    from somepkg.ops import reshape_heads

    kept = []

    def step():
        kept.append(reshape_heads(torch.ones(64, 1024)))  # the user's line

    report = torchleak.check(step, iterations=5)
    (leak,) = report.leaks
    assert leak.site["file"] == __file__
    assert leak.site["line"] == step.__code__.co_firstlineno + 1
    inside = leak.allocated_inside
    assert inside["file"].endswith("somepkg/ops.py") and inside["function"] == "reshape_heads"
    assert inside["line"] == line_of(somepkg / "somepkg/ops.py", "# ALLOC ops")
    assert inside["package"] is True and inside["user"] is False
    assert leak.holder["path_text"] == "kept"
    text = str(report)
    assert f"allocated inside {inside['text']} (reshape_heads)" in text


def test_the_text_report_shows_the_users_frame_however_deep_the_package_calls_go(somepkg):
    from somepkg.ops import deep

    kept = []

    def step():
        kept.append(deep(torch.ones(64, 256), 12))

    report = torchleak.check(step, iterations=4)
    (leak,) = report.leaks
    assert leak.site["line"] == step.__code__.co_firstlineno + 1
    user_line = f"{leak.site['text']} in "
    stack_text = str(report).split("stack (innermost first):")[1]
    assert user_line in stack_text
    assert "more library frame(s)" in stack_text
    assert leak.allocated_inside["function"] == "deep"


def test_a_cache_inside_a_package_is_named_by_the_packages_globals(somepkg):
    import importlib

    sizes = iter(range(64, 64 + 64 * 10, 64))

    def step():
        # No name of the user's reaches the cache: only the package's own globals do. A new
        # shape each iteration, so the unbounded cache never hits.
        importlib.import_module("somepkg.models.detector").grid(next(sizes))

    report = torchleak.check(step, iterations=6)
    (leak,) = report.leaks
    assert leak.site["line"] == step.__code__.co_firstlineno + 3
    assert leak.allocated_inside["function"] == "Detector.make_grid"
    assert leak.path_text.startswith("somepkg.models.detector.Detector.make_grid"), leak.path_text
    assert leak.retention == "reachable"


def test_the_frame_rule_classifies_installed_packages_as_library_code(somepkg):
    from torchleak import _core

    library, packages = _user_code.library_prefixes(), _user_code.package_prefixes()
    rule = _core.FrameFilter(library, packages, {})
    assert rule.classify(str(somepkg / "somepkg" / "ops.py")) == (False, None)
    assert rule.classify(torch.__file__) == (False, None)
    assert rule.classify(__file__) == (True, None)


@pytest.mark.parametrize(
    "name",
    [
        "<ipython-input-" + "7" * 200_000 + "-ab>",  # overflowed the regex's recursion
        "<ipython-input-99999999999999999999-ab>",  # raised from stoi
        "<ipython-input-12-" + "a" * 200_000 + ">",
        "<ipython-input-->",
    ],
)
def test_hostile_cell_file_names_neither_crash_nor_raise(name):
    code = compile("kept.append(torch.ones(64, 1024))", name, "exec")
    kept = []
    report = torchleak.check(lambda: exec(code, {"torch": torch, "kept": kept}), iterations=3)
    [leak] = report.leaks
    # A name that parses is a cell; one that does not is `<...>` library code, so the site is
    # the caller's line here. Either way a site, not a crash.
    assert leak.site["line"] == 1 if leak.site.get("cell") is not None else leak.site["file"] == __file__


def _installed_outside_site_packages(root, name, editable=False):
    """`name` installed by pip into `root`, a directory on sys.path that is no site directory
    (PYTHONPATH, pip --target, a layered environment's .pth): its code, its dist-info."""
    (root / name).mkdir(parents=True)
    (root / name / "__init__.py").write_text(
        "import torch\n\ndef make(n):\n    return torch.ones(n, 256)  # ALLOC make\n"
    )
    info = root / f"{name}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (info / "INSTALLER").write_text("pip\n")
    (info / "RECORD").write_text(f"{name}/__init__.py,,\n{info.name}/METADATA,,\n")
    if editable:
        (info / "direct_url.json").write_text('{"url": "file:///src", "dir_info": {"editable": true}}')


@pytest.mark.parametrize("editable", [False, True])
def test_a_distribution_outside_site_packages_is_library_code_unless_editable(tmp_path, monkeypatch, editable):
    # #47 item 6: library code was only what sat under site.getsitepackages(); a package on
    # PYTHONPATH put the site inside it.
    name = "outsidepkg_editable" if editable else "outsidepkg"
    _installed_outside_site_packages(tmp_path / "libs", name, editable)
    monkeypatch.syspath_prepend(str(tmp_path / "libs"))
    _user_code.package_prefixes.cache_clear()
    try:
        module = __import__(name)
        kept = []

        def step():
            kept.append(module.make(16))  # the user's line

        (leak,) = torchleak.check(step, iterations=5).leaks
    finally:
        _user_code.package_prefixes.cache_clear()
        sys.modules.pop(name, None)
    if editable:  # the user's own code, installed to be edited: the site is in it
        assert leak.site["file"] == str(tmp_path / "libs" / name / "__init__.py")
    else:
        assert leak.site["file"] == __file__ and leak.site["line"] == step.__code__.co_firstlineno + 1
        assert leak.allocated_inside["file"] == str(tmp_path / "libs" / name / "__init__.py")


@pytest.fixture
def compiled(tmp_path, monkeypatch):
    """(model, torch.compile(model), inductor's cache directory) with the compiled model run once;
    skipped where torch.compile cannot run (no compiler, an interpreter dynamo does not support)."""
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    _user_code.library_prefixes.cache_clear()
    torch._dynamo.reset()
    try:
        model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
        cmodel = torch.compile(model)
        try:
            cmodel(torch.randn(32, 64))
        except Exception as exc:  # noqa: BLE001 - no compiler, an interpreter dynamo does not support
            pytest.skip(f"torch.compile does not run here: {type(exc).__name__}: {str(exc)[:200]}")
        yield model, cmodel, tmp_path / "inductor"
    finally:
        torch._dynamo.reset()
        _user_code.library_prefixes.cache_clear()


def test_a_compiled_models_leak_is_sited_at_the_users_line_not_in_inductors_generated_code(compiled):
    # #47 item 7: with torch.compile the biggest leaking site was a line of the generated file
    # under /tmp/torchinductor_<user>/ (`buf0 = empty_strided_cpu(...)`).
    _model, cmodel, inductor = compiled
    assert list(inductor.rglob("*.py")), "inductor wrote its code elsewhere"
    kept = []

    def step():
        kept.append(cmodel(torch.randn(32, 64)))  # the user's line

    report = torchleak.check(step, iterations=6)
    assert report.leaks
    for leak in report.leaks:
        assert (leak.site["file"], leak.site["line"]) == (__file__, step.__code__.co_firstlineno + 1)
    assert not any(str(inductor) in f.site["file"] for f in report.findings)


def test_a_compiled_models_modules_are_named_as_the_user_wrote_them(compiled):
    # #47 item 7: the module that made a node was named `cmodel._orig_mod[0]`, and only the
    # first of the modules whose parameters a compiled graph takes.
    model, cmodel, _inductor = compiled
    kept = []

    def step():
        kept.append(cmodel(torch.randn(32, 64)).sum())

    report = torchleak.check(step, iterations=6, roots={"model": model, "cmodel": cmodel})
    assert report.leaks
    notes = [s.get("note") or "" for s in report.leaks[0].path]
    assert any("made by model[0] (Linear) and model[2] (Linear)" in n for n in notes), notes
    assert "_orig_mod" not in str(report)


def test_a_buffer_of_a_compiled_model_names_the_op_from_inductors_source_node_comment(compiled):
    # #47 item 7: the site is the user's line; which op of the compiled graph made the buffer
    # was lost with the generated frame.
    _model, cmodel, inductor = compiled
    kept = []

    def step():
        kept.append(cmodel(torch.randn(32, 64)).detach())  # the output: inductor's buffer

    report = torchleak.check(step, iterations=6)
    (leak,) = report.leaks
    assert leak.site["line"] == step.__code__.co_firstlineno + 1
    assert str(inductor) in leak.stack[0]["file"]  # inductor's generated code allocated it
    op = leak.to_dict()["compiled_op"]
    assert "aten.addmm" in op["aten_ops"], op
    assert op["source_nodes"], op
    assert op["text"].startswith("made in torch.compile's generated code by "), op
    assert op["text"] in str(report)
    assert torchleak.Report.from_json(report.to_json()).leaks[0].to_dict()["compiled_op"] == op
