"""What this install of torchleak was built with (build_info.json, written by CMake), and the
refusal to run under another torch: a C++ extension compiled against torch's headers serves the
one torch minor release it was built for, and under another one it fails in ways far from the
cause (a missing symbol at best, a crash at worst)."""

import json
import os
import re

import torch

BUILD_INFO = os.path.join(os.path.dirname(__file__), "build_info.json")


class TorchMismatchError(ImportError):
    """torchleak's extension was built against another torch minor release than the one
    installed."""


def build_info():
    """The build's record: a dict; None where there is none (a build from before it was kept); a
    file that is there but is no JSON object gives {"unreadable": why}, so that nothing reads a
    broken record as an old install or fails on it."""
    try:
        with open(BUILD_INFO, encoding="utf-8") as fh:
            text = fh.read()
    except FileNotFoundError:
        return None
    except OSError as error:
        return {"unreadable": f"build_info.json could not be read ({error.strerror or error})"}
    try:
        info = json.loads(text)
    except ValueError as error:
        return {"unreadable": f"build_info.json is not valid JSON ({error})"}
    if not isinstance(info, dict):
        return {"unreadable": f"build_info.json holds a JSON {type(info).__name__}, not an object"}
    return info


def recorded(info, key):
    """A field of the record as text, or "not recorded" (absent, null, or not a string)."""
    value = (info or {}).get(key)
    return value if isinstance(value, str) and value else "not recorded"


def recorded_headers(info):
    """[(name, version, where from)] of the header-only libraries the record names, each field
    as recorded() reads it; [] where there are none or the entry is not a mapping."""
    headers = (info or {}).get("headers")
    entries = sorted(headers.items()) if isinstance(headers, dict) else []
    return [
        (name, recorded(entry, "version"), recorded(entry, "from"))
        for name, entry in ((n, e if isinstance(e, dict) else {}) for n, e in entries)
    ]


def describing_itself():
    """True while Python locates `python -m torchleak version` or `doctor` (sys.argv[0] is "-m"
    then): commands that must say what the build is even when it cannot load."""
    import sys

    return sys.argv[:1] == ["-m"] and sys.argv[1:2] in (["version"], ["doctor"])


def _minor(version):
    """(major, minor) of a torch version string ("2.13.0+cpu" -> (2, 13)), or None."""
    match = re.match(r"(\d+)\.(\d+)", str(version))
    return (int(match.group(1)), int(match.group(2))) if match else None


def mismatch_sentence(built, running, version):
    """The one sentence a mismatched import raises with, or None when the two torch versions
    are one minor release."""
    if _minor(built) is None or _minor(built) == _minor(running):
        return None
    return (
        f"torchleak {version} was built against torch {built} and cannot run with the installed "
        f"torch {running} (a C++ extension serves one torch minor release): rebuild it against this "
        f"torch with `pip install --no-build-isolation --no-deps --force-reinstall torchleak-{version}.tar.gz` "
        f"(the sdist; see the README's Install section)"
    )


# The refusal's sentence where the build and the installed torch differ, once check_torch ran.
refusal = None


def check_torch(version, refuse=True):
    """Raises TorchMismatchError where the build is for another torch minor release (with
    refuse=False: returns its sentence, for the commands that report it); else None."""
    global refusal
    built = (build_info() or {}).get("torch")
    sentence = mismatch_sentence(built, torch.__version__, version) if isinstance(built, str) else None
    refusal = sentence
    if sentence and refuse:
        raise TorchMismatchError(sentence)
    return sentence
