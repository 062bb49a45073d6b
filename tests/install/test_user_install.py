"""Installed as a user installs it (`make test-install`, part of `make test`): the sdist and the
wheel in `dist/` (made by `make sdist` and `make wheel`), each into a fresh virtualenv, as a user
who is not root, with the system's copies of the header-only libraries hidden (a private mount
namespace: tests/cuda/without_system_headers.sh), the user's own pip and nothing else. Then a
leak found with check(), and `python -m torchleak run` on a script, and each module's linkage:
its entry point exported alone, its C++ runtime bound to libstdc++ or itself. The wheel refuses
a torch of another minor release with its one sentence."""

import glob
import json
import os
import pathlib
import pwd
import shutil
import subprocess
import sys
import tarfile
import tempfile
import textwrap

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
USER = "torchleak-user"
# The interpreter the user has: the system's, of this Python's minor version (root's own is
# under /root, which a user cannot read); the torch the user installs is the one of .venv.
BASE_PYTHON = f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}"
TORCH = f"torch=={__import__('torch').__version__.split('+')[0]}"

CHECK = """
import torch, torchleak
kept = []
report = torchleak.check(lambda: kept.append(torch.ones(1 << 16)), iterations=6, warmup=1)
assert report.leaks and report.leaks[0].holder["path_text"] == "kept", str(report)
print("LEAK FOUND", report.leaks[0].site_text)
"""
SCRIPT = """
import torch
model = torch.nn.Linear(32, 32)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
losses = []
for step in range(8):
    loss = model(torch.randn(64, 32)).square().mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
    losses.append(loss)  # kept with its graph
"""


def _missing():
    if os.geteuid() != 0:
        return "needs root: it creates a user and a private mount namespace (CI and make test run as root)"
    for tool in ("unshare", "runuser", "useradd"):
        if shutil.which(tool) is None:
            return f"no {tool} on this machine"
    if not os.access(BASE_PYTHON, os.X_OK):
        return f"no {BASE_PYTHON} for the user's virtualenv"
    return None


pytestmark = pytest.mark.skipif(_missing() is not None, reason=_missing() or "")


@pytest.fixture(scope="module")
def user():
    try:
        pwd.getpwnam(USER)
    except KeyError:
        subprocess.run(["useradd", "--create-home", "--shell", "/bin/bash", USER], check=True, timeout=60)
    return pwd.getpwnam(USER)


@pytest.fixture
def workdir(user):
    path = tempfile.mkdtemp(prefix="torchleak-user-install-", dir="/tmp")
    os.chmod(path, 0o755)
    os.chown(path, user.pw_uid, user.pw_gid)
    for name, text in (("check_leak.py", CHECK), ("train.py", SCRIPT)):
        file = pathlib.Path(path, name)
        file.write_text(textwrap.dedent(text))
        os.chown(file, user.pw_uid, user.pw_gid)
    yield pathlib.Path(path)
    shutil.rmtree(path, ignore_errors=True)


def as_user(user, command, timeout=900):
    """Runs a shell command as the user, with the system's header copies hidden."""
    env = dict(os.environ, HOME=user.pw_dir, USER=USER, LOGNAME=USER)
    env.pop("PYTHONPATH", None)
    env.pop("VIRTUAL_ENV", None)
    # The Makefile's ccache (its cache is root's) is the project's, not a user's.
    env.pop("CMAKE_CXX_COMPILER_LAUNCHER", None)
    for name in [name for name in env if name.startswith("CCACHE_")]:
        env.pop(name)
    proc = subprocess.run(
        ["bash", str(ROOT / "tests" / "cuda" / "without_system_headers.sh"), "runuser", "-u", USER, "--"]
        + ["bash", "-c", f"set -euo pipefail; {command}"],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    return proc


def artifact(pattern):
    found = sorted(glob.glob(str(ROOT / "dist" / pattern)))
    assert found, f"no dist/{pattern}: run make sdist and make wheel first (make test-install does)"
    return found[-1]


def run_leak_checks(user, workdir):
    venv = workdir / "venv" / "bin"
    proc = as_user(
        user,
        f"cd {workdir} && {venv}/python check_leak.py && "
        f"{venv}/python -m torchleak run --json {workdir}/r.json train.py",
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "LEAK FOUND" in proc.stdout
    report = json.loads((workdir / "r.json").read_text())
    leaks = [f for f in report["findings"] if f["verdict"] == "leak"]
    assert leaks and any("losses" in (f.get("holder") or {}).get("path_text", "") for f in leaks), proc.stdout
    check_linkage(user, workdir)


def check_linkage(user, workdir):
    """The installed modules export their PyInit_* alone, and _core's C++ runtime references
    bind in libstdc++ or in itself (kernel_ext/torchleak/_linkage.py, run by its path)."""
    venv = workdir / "venv" / "bin"
    package = f"$({venv}/python -c 'import sysconfig; print(sysconfig.get_paths()[\"platlib\"])')/torchleak"
    proc = as_user(
        user,
        f"p={package}; for m in $p/_core*.so $p/_testing*.so; do {venv}/python $p/_linkage.py $m; done",
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert proc.stdout.count("exports 1 symbol(s)\n") == 2, proc.stdout


def user_ccache(user, workdir):
    """The user's own ccache, in their home, as a user who has one: a compiler launcher and
    nothing else, so that a miss compiles exactly what pip alone compiles, and a hit (the same
    sources, headers and flags; a header that is hidden now is a miss) saves the tier's longest
    step on a second run (211 s cold). pip unpacks and builds under the workdir, the base
    folder, so that the paths ccache hashes do not carry the workdir's random name."""
    if shutil.which("ccache") is None:
        return ""
    return (
        f"export TMPDIR={workdir}/tmp CMAKE_CXX_COMPILER_LAUNCHER=ccache CCACHE_DIR={user.pw_dir}/.cache/ccache "
        f"CCACHE_BASEDIR={workdir} CCACHE_NOHASHDIR=1 && mkdir -p $TMPDIR && "
    )


def test_the_sdist_builds_with_pip_alone_as_a_user_without_the_system_headers(user, workdir):
    sdist = artifact("torchleak-*.tar.gz")
    venv = workdir / "venv"
    proc = as_user(
        user,
        f"test ! -e /usr/include/nlohmann/json.hpp && test ! -e /usr/include/xtensor/xtensor.hpp && "
        f"{BASE_PYTHON} -m venv {venv} && "
        f"{venv}/bin/pip install -q {TORCH} scikit-build-core pybind11 cmake ninja && "
        + user_ccache(user, workdir)
        + f"{venv}/bin/pip install -q --no-build-isolation {sdist} && {venv}/bin/python -m torchleak version",
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    with tarfile.open(sdist) as archive:
        member = next(m for m in archive.getmembers() if m.name.endswith("/third_party/BUNDLED.json"))
        bundled = json.load(archive.extractfile(member))
    assert set(bundled) == {"nlohmann_json", "xtensor", "xtl"}
    for name, entry in bundled.items():  # what the build used, as build_info.json records it
        assert f"  {name} {entry['version']} (bundled)" in proc.stdout, proc.stdout
    run_leak_checks(user, workdir)
    assert os.stat(venv / "pyvenv.cfg").st_uid == user.pw_uid  # the user's own, not root's


def test_the_wheel_installs_without_a_compiler_and_refuses_another_torch(user, workdir):
    wheel = artifact("torchleak-*+torch*.whl")
    assert "+torch" in os.path.basename(wheel)
    venv = workdir / "venv"
    proc = as_user(
        user,
        f"{BASE_PYTHON} -m venv {venv} && {venv}/bin/pip install -q {TORCH} {wheel} && {venv}/bin/pip show torchleak",
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    built_for = pathlib.Path(wheel).name.split("-")[1]
    assert f"Version: {built_for}" in proc.stdout
    run_leak_checks(user, workdir)
    # The same wheel under another torch minor release: what the package was built against is
    # what its build_info.json says (torch itself cannot be swapped here without gigabytes of
    # downloads), so the record is made to name another release.
    info_path = next((venv / "lib").glob("python*/site-packages/torchleak/build_info.json"))
    info = json.loads(info_path.read_text())
    info["torch"] = "2.12.0+cu130"
    info_path.write_text(json.dumps(info))
    proc = as_user(user, f"{venv}/bin/python -c 'import torchleak'", timeout=120)
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("torchleak._build.TorchMismatchError: torchleak 0.1.0 was built against torch 2.12.0+cu130")
    assert "cannot run with the installed torch 2.13.0" in last
    assert "pip install --no-build-isolation --no-deps --force-reinstall torchleak-0.1.0.tar.gz" in last
