"""Which code is the user's: the prefixes of torch, the standard library and installed packages
(never a finding's site), the notebook's cells by the file names IPython compiled them under, each
site's source line, and whether this interpreter's allocation stacks can be read at all."""

import functools
import os
import site
import sys
import sysconfig

import torch

from . import _core


@functools.lru_cache(maxsize=1)
def library_prefixes():
    """Files whose frames are never a finding's site: torch, the standard library, torchleak.
    Read once: sysconfig and realpath() each time were a watched cell's every-time cost."""
    dirs = [os.path.dirname(torch.__file__), os.path.dirname(__file__)]
    paths = sysconfig.get_paths()
    dirs += [paths.get("stdlib"), paths.get("platstdlib")]
    return _with_realpaths(dirs)


@functools.lru_cache(maxsize=1)
def package_prefixes():
    """Where installed packages live (site-packages, dist-packages, the user site). The frame
    rule does not count them as the standard library even inside its directory; roots skip
    their modules."""
    dirs = []
    try:
        dirs += site.getsitepackages()
    except AttributeError:  # some embedded interpreters
        pass
    dirs.append(getattr(site, "USER_SITE", None))
    return _with_realpaths(dirs)


def _with_realpaths(dirs):
    """The directories and their real paths, as prefixes ending in a separator (a tuple: the
    cached answers are shared)."""
    out = []
    for d in dirs:
        if not d:
            continue
        for variant in (d, os.path.realpath(d)):
            prefix = variant.rstrip(os.sep) + os.sep
            if prefix not in out:
                out.append(prefix)
    return tuple(out)


def cell_files(shell=None):
    """IPython's map from the file name a cell was compiled under to its execution count, in
    compilation order (the running shell's, unless one is given)."""
    ipython = sys.modules.get("IPython")
    if ipython is None and shell is None:
        return {}
    try:
        if shell is None:
            shell = ipython.get_ipython()
        mapping = getattr(getattr(shell, "compile", None), "_filename_map", None) or {}
        return {str(k): int(v) for k, v in mapping.items() if isinstance(v, int)}
    except Exception:  # noqa: BLE001 - no shell: no cells
        return {}


def add_source_lines(data):
    """Each site gets its source line (`source`, an added field): notebook cells are in
    linecache under the name IPython compiled them with, files are read from disk. A leak whose
    fix the core can write as code from that line gets it (`fix_code`, an added field)."""
    import json
    import linecache

    for finding in data.get("findings", []):
        site = finding.get("site") or {}
        try:
            line = linecache.getline(site.get("file") or "", int(site.get("line") or 0))
        except (OSError, ValueError, TypeError):
            line = ""
        if line.strip():
            site["source"] = line.strip()
        if finding.get("verdict") == "leak":
            # Without its live-block list (up to 4,096 entries the rule never reads).
            code = _core.fix_code(json.dumps({k: v for k, v in finding.items() if k != "live_blocks"}))
            if code:
                finding["fix_code"] = code


def frame_capture_warning():
    """The report's warning when this interpreter's allocation stacks cannot be read (None when
    they can). Checked once per process: the frame layout does not change while it runs."""
    global _capture_problem
    if _capture_problem is None:
        problem = _core.check_frame_capture()
        _capture_problem = (problem,)
    problem = _capture_problem[0]
    if problem is None:
        return None
    version = ".".join(map(str, sys.version_info[:3]))
    return (
        f"allocation sites are unavailable on {sys.implementation.name} {version}: "
        f"{problem}; findings are grouped by device and autograd node only, and their "
        f'site reads "no Python stack" (retaining paths and verdicts are unaffected)'
    )


_capture_problem = None  # (problem or None,) once checked
