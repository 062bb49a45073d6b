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
    """The build's record, or None where there is none (a build from before it was kept)."""
    try:
        with open(BUILD_INFO, encoding="utf-8") as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return None


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


def check_torch(version):
    info = build_info()
    if info is None:
        return
    sentence = mismatch_sentence(info.get("torch"), torch.__version__, version)
    if sentence:
        raise TorchMismatchError(sentence)
