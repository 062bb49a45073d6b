"""Installed packages of a test's own: files written into a site-packages directory under the
test's tmp_path that the frame rule counts as installed third-party code."""

import sys
import textwrap

from torchleak import _user_code


def install(tmp_path, monkeypatch, files):
    """Writes `files` ({relative path: source}) into tmp_path/site-packages, puts it on sys.path
    and among the package prefixes; returns the directory."""
    site = tmp_path / "site-packages"
    for name, text in files.items():
        path = site / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    prefixes = _user_code.package_prefixes()
    monkeypatch.setattr(_user_code, "package_prefixes", lambda: prefixes + (str(site) + "/",))
    monkeypatch.syspath_prepend(str(site))
    return site


def forget(package):
    """Drops the package's modules, so the next test imports its own copy."""
    for name in [m for m in sys.modules if m == package or m.startswith(package + ".")]:
        del sys.modules[name]
