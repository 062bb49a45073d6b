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
    dirs += _inductor_cache_dirs()
    return _with_realpaths(dirs)


def _inductor_cache_dirs():
    """Where torch.compile's inductor writes the code it generates (`buf0 =
    empty_strided_cpu(...)` is never the user's line): TORCHINDUCTOR_CACHE_DIR, which inductor
    sets once it runs, and its default, spelled as torch/_inductor/runtime/cache_dir_utils.py
    spells it (not imported: that imports torch._inductor, which a run without compile never
    pays for)."""
    import getpass
    import re
    import tempfile

    try:
        user = getpass.getuser()
    except (KeyError, ModuleNotFoundError, OSError):
        user = f"uid_{os.getuid()}" if hasattr(os, "getuid") else "unknown_user"
    dirs = [os.path.join(tempfile.gettempdir(), "torchinductor_" + re.sub(r'[\\/:*?"<>|]', "_", user))]
    if os.environ.get("TORCHINDUCTOR_CACHE_DIR"):
        dirs.append(os.path.abspath(os.environ["TORCHINDUCTOR_CACHE_DIR"]))
    return dirs


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
    known = _with_realpaths(dirs)
    packages, modules = _distribution_code(known)
    # A module file is its own prefix (no separator after it).
    return known + tuple(p for p in _with_realpaths(packages) + tuple(modules) if p not in known)


def _distribution_code(known):
    """(package directories, module files): the top-level code of installed, non-editable
    distributions outside `known` (reached through PYTHONPATH, a .pth file, pip --target, a
    layered environment), library code wherever it is. Installed: an installer (pip, uv, conda)
    wrote its INSTALLER file; a source tree's own .egg-info (setup.py develop) has none, and an
    editable install (direct_url.json says so) is the user's own code too. Only a distribution
    outside the site directories has its file list read: reading them all is half a second."""
    import importlib.metadata
    import json

    packages, modules = [], []
    try:
        distributions = list(importlib.metadata.distributions())
    except Exception:  # noqa: BLE001 - a broken metadata directory: the site directories only
        return packages, modules
    for dist in distributions:
        try:
            location = os.path.abspath(str(dist.locate_file("")))
            if (location.rstrip(os.sep) + os.sep).startswith(known):
                continue
            if not (dist.read_text("INSTALLER") or "").strip():
                continue
            direct_url = dist.read_text("direct_url.json")
            if direct_url and json.loads(direct_url).get("dir_info", {}).get("editable"):
                continue
            for file in dist.files or ():
                top = file.parts[0] if file.parts else ""
                if not top or top in ("..", "__pycache__") or top.endswith((".dist-info", ".egg-info")):
                    continue
                if len(file.parts) == 1 and not top.endswith(".py"):
                    continue  # a .pth, a script's shim: no code of its own here
                path = os.path.abspath(str(dist.locate_file(top)))
                found = packages if len(file.parts) > 1 else modules
                if path not in found:
                    found.append(path)
        except Exception:  # noqa: BLE001 - one unreadable distribution: the others still count
            continue
    return packages, modules


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
