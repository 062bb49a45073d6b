"""The typed public surface (#48 item 8): the installed package says it is typed (py.typed), the
extension's stub declares exactly what the built module binds, a Finding's typed fields are
fields real reports have, and a user's type checker sees the annotations (a wrong call fails,
a right one passes). `make test-format` runs mypy on torchleak's own surface."""

import ast
import hashlib
import importlib.util
import os
import pathlib
import subprocess
import sys

import pytest

import torchleak
from torchleak import _core
from torchleak._report import Finding, _Field

PACKAGE = pathlib.Path(torchleak.__file__).parent


def stub_names():
    tree = ast.parse((PACKAGE / "_core.pyi").read_text(encoding="utf-8"))
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    # Private names are the stub's own helpers, but for the test-only bindings.
    return {n for n in names if not n.startswith("_") or n.endswith("_for_testing")}


def test_the_installed_package_is_marked_typed_and_carries_the_extensions_stub():
    assert (PACKAGE / "py.typed").is_file()
    assert (PACKAGE / "_core.pyi").is_file()


def test_the_stub_declares_what_the_extension_binds_and_nothing_else():
    bound = {n for n in dir(_core) if not n.startswith("__")}
    assert stub_names() == bound


def test_the_stubs_session_methods_are_the_bound_ones():
    tree = ast.parse((PACKAGE / "_core.pyi").read_text(encoding="utf-8"))
    session = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Session")
    declared = {n.name for n in session.body if isinstance(n, ast.FunctionDef) and not n.name.startswith("__")}
    assert declared == {n for n in dir(_core.Session) if not n.startswith("_")}


def test_every_typed_field_of_a_finding_is_a_field_of_real_findings():
    from live_reports import every_section_reports

    typed = {name for name, value in vars(Finding).items() if isinstance(value, _Field)}
    seen = set()
    for data in every_section_reports():
        for finding in data["findings"]:
            seen |= set(finding)
    assert typed and sorted(typed - seen) == []


def test_a_typed_field_reads_as_before_and_a_missing_one_is_an_attribute_error():
    finding = Finding({"verdict": "leak", "total_bytes": 3, "extra": 1})
    assert (finding.verdict, finding.total_bytes, finding.extra) == ("leak", 3, 1)
    with pytest.raises(AttributeError, match="finding has no field 'suggestion'"):
        finding.suggestion  # noqa: B018
    assert getattr(finding, "holder", None) is None


def mypy_cache_dir(options):
    """mypy's incremental cache for this interpreter and these options, outside the clone as
    ccache's is: analysing torch's annotations took 32-38 s per run, two runs per tier. mypy
    checks every cached module against its source's hash, so a changed torchleak or torch is
    analysed again; one folder per environment (each has its own torch) and per option set (a
    cache written under other options is analysed again whole, and rewritten)."""
    root = os.environ.get("TORCHLEAK_MYPY_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "torchleak-mypy")
    return os.path.join(root, hashlib.sha1(sys.prefix.encode()).hexdigest()[:16], options)


@pytest.mark.skipif(importlib.util.find_spec("mypy") is None, reason="mypy is installed by make venv")
def test_a_users_type_checker_sees_the_annotations(tmp_path):
    user = tmp_path / "train.py"
    user.write_text(
        "import torchleak\n"
        "report: torchleak.Report = torchleak.check(lambda: None, iterations=3)\n"
        "total: int = sum(f.total_bytes for f in report.leaks)\n"
        "with torchleak.track(boundary='explicit') as tracker:\n"
        "    torchleak.step()\n"
        "text: str = tracker.report(paths=False).to_json()\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--cache-dir", mypy_cache_dir("strict"), "--strict", str(user)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    user.write_text(
        "import torchleak\ntorchleak.track(boundary='every_step')\nn: str = torchleak.check(len).iterations\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--cache-dir", mypy_cache_dir("default"), str(user)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert done.returncode == 1
    assert 'Argument "boundary" to "track" has incompatible type' in done.stdout
    assert 'Incompatible types in assignment (expression has type "int", variable has type "str")' in done.stdout
