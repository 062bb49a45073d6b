"""The front ends (the magics, run watch, the integrations, the command line) drive a Tracker
through its public API and the members of `_front_end.TrackerFrontEnd`, nothing else of its
private state; and the Tracker has every member of that protocol, with the same parameters."""

import ast
import inspect
import pathlib
import types

import torchleak
from torchleak import _front_end, _tracking

PACKAGE = pathlib.Path(torchleak.__file__).resolve().parent
# The Tracker itself and the parts it installs: they are not front ends.
TRACKER_PARTS = {"_tracking.py", "_torch_patches.py", "_optimizer_registry.py", "_front_end.py"}


def protocol_members():
    declared = vars(_front_end.TrackerFrontEnd)
    methods = {name for name, value in declared.items() if isinstance(value, (property, types.FunctionType))}
    return {name for name in methods if not name.startswith("__")} | set(declared["__annotations__"])


def tracker_private_names():
    tracker = _tracking.Tracker()
    names = set(dir(_tracking.Tracker)) | set(vars(tracker))
    return {n for n in names if n.startswith("_") and not n.startswith("__")}


def private_uses(source, private):
    """(line, name) of each `x._name` in `source` with `_name` one of `private`, `x` not `self`
    (another class's own attribute of the same name is its own)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr in private:
            if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                continue
            found.append((node.lineno, node.attr))
    return found


def test_the_front_ends_use_only_the_protocol():
    private = tracker_private_names()
    allowed = protocol_members()
    outside = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name in TRACKER_PARTS:
            continue
        for line, name in private_uses(path.read_text(encoding="utf-8"), private):
            if name not in allowed:
                outside.append(f"{path.relative_to(PACKAGE)}:{line} {name}")
    assert not outside, "add these to _front_end.TrackerFrontEnd or use the public API: " + ", ".join(outside)


def test_the_scan_finds_a_private_use_outside_the_protocol():
    source = "def f(tracker):\n    tracker._session.step()\n    self._session = 1\n"
    assert private_uses(source, tracker_private_names()) == [(2, "_session")]
    assert "_session" not in protocol_members()


def test_the_tracker_has_every_member_with_its_parameters():
    for name in protocol_members():
        assert hasattr(_tracking.Tracker, name) or name in vars(_tracking.Tracker()), name
        declared = getattr(_front_end.TrackerFrontEnd, name, None)
        if inspect.isfunction(declared):
            ours = inspect.signature(getattr(_tracking.Tracker, name))
            theirs = inspect.signature(declared)
            assert [(p.name, p.kind, p.default) for p in ours.parameters.values()] == [
                (p.name, p.kind, p.default) for p in theirs.parameters.values()
            ], name
