#!/usr/bin/env python3
"""The platform matrix: torchleak built and tested against other CPython and torch versions.

    python tests/matrix/run.py CELL [CELL ...] [--results PATH] [--leak-cases DIR]
    python tests/matrix/run.py --table RESULTS.json [RESULTS.json ...]

A CELL is PYTHON:TORCH, e.g. 3.13:2.15.0, or PYTHON:TORCH:pybind11==VERSION to build with that
pybind11 (3.12:2.11.0:pybind11==3.1.0 is the GPU machine's stack). Each cell gets a virtual environment of its own under
~/.cache/torchleak-matrix/ ($TORCHLEAK_MATRIX_ENVS; kept between runs and clones while what it
holds is unchanged; made by uv from the interpreter found for PYTHON, torch from the package index:
the CUDA build with its nvidia-* packages, which runs on the CPU; uv's one cache hard-links
them, so a second environment of the same torch costs seconds and little disk), a build of
torchleak against that torch in a build directory of its own, then the python tier
(tests/python) and the visible leak-case suite. A cell whose interpreter is missing fails
with a message that says how to get it; it is never skipped.

Prints one line per cell and a table (also written to --results as JSON) with what was run:
the exact interpreter and torch versions, the tier's pytest counts and the suite's score.
Exits non-zero when any cell failed.
"""

import argparse
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MATRIX_DIR = os.path.join(ROOT, "build", "matrix")
# The cells' virtualenvs live outside the clone ($TORCHLEAK_MATRIX_ENVS, else ~/.cache), kept
# by the stamp of what they hold: a clean clone's run reuses them while torch and Python are
# unchanged. The builds stay in the clone (build/matrix), where ccache finds their objects.
MATRIX_ENVS = os.environ.get("TORCHLEAK_MATRIX_ENVS") or os.path.join(
    os.path.expanduser("~"), ".cache", "torchleak-matrix"
)
# What the python tier imports besides torch and torchleak (pyproject's build requirements too:
# the extension is built without isolation, against the cell's torch).
TEST_PACKAGES = [
    "scikit-build-core>=0.10",
    "pybind11>=2.12",
    "pytest>=7",
    "pytest-xdist",
    "ipython>=8",
    "numpy",
    "jupyter_client",
    "ipykernel",
    "nbformat",
    "anywidget>=0.9",
    "ipywidgets>=8",
]
CELL = re.compile(r"^(3\.\d+):(\d+\.\d+\.\d+)(?::pybind11==(\d+\.\d+\.\d+))?$")
# How the python tier runs in a cell (pytest-xdist): as `make test-api` runs it.
PARALLEL = ["-n", "2", "--dist", "loadfile"]
# At most this many failed tests are run again (more is no flake).
MAX_RERUN = 3


class CellError(Exception):
    """A step of a cell failed; the message says which and why."""


def find_interpreter(version):
    """The CPython for `version` (e.g. "3.13"): $TORCHLEAK_PYTHON_3_13, pyenv's, then PATH."""
    override = os.environ.get("TORCHLEAK_PYTHON_" + version.replace(".", "_"))
    if override:
        return override
    pyenv_root = os.environ.get("PYENV_ROOT") or os.path.expanduser("~/.pyenv")
    found = sorted(
        glob.glob(os.path.join(pyenv_root, "versions", f"{version}.*", "bin", f"python{version}")),
        key=lambda p: [int(x) for x in re.findall(r"\d+", p.split("versions")[1])[:3]],
    )
    if found:
        return found[-1]
    on_path = shutil.which(f"python{version}")
    if on_path:
        return on_path
    raise CellError(
        f"no Python {version} on this machine: install it (`pyenv install "
        f"{version}`) or set TORCHLEAK_PYTHON_{version.replace('.', '_')} to its path"
    )


def uv():
    """The uv beside this interpreter (`make venv` installs it into .venv), else PATH's."""
    path = os.path.join(os.path.dirname(sys.executable), "uv")
    if os.path.exists(path):
        return path
    path = shutil.which("uv")
    if path is None:
        raise CellError("uv is not installed: `make venv` installs it into .venv")
    return path


def run(cmd, log, *, timeout, env=None, cwd=ROOT):
    """Runs cmd with its output appended to the open file `log`; returns (exit code, output)."""
    log.write(f"\n$ {' '.join(cmd)}\n")
    log.flush()
    try:
        proc = subprocess.run(
            cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
        )
    except subprocess.TimeoutExpired as exc:
        out = (exc.stdout or b"").decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        log.write(out + f"\n(timed out after {timeout} s)\n")
        return 124, out
    log.write(proc.stdout + proc.stderr)
    log.flush()
    return proc.returncode, proc.stdout + proc.stderr


def test_packages(pybind11_version=None):
    """TEST_PACKAGES, with pybind11 pinned where the cell names a version."""
    if pybind11_version is None:
        return list(TEST_PACKAGES)
    return [p for p in TEST_PACKAGES if not p.startswith("pybind11")] + [f"pybind11=={pybind11_version}"]


def make_environment(python_version, torch_version, env_dir, log, pybind11_version=None):
    """The cell's virtualenv with torch and the test packages; kept between runs (a stamp
    records what it holds)."""
    stamp = os.path.join(env_dir, "torchleak-matrix.json")
    packages = test_packages(pybind11_version)
    wanted = {"torch": torch_version, "packages": packages}
    interpreter = find_interpreter(python_version)
    try:
        with open(stamp) as f:
            if json.load(f) == wanted and os.path.exists(os.path.join(env_dir, "bin", "python")):
                return os.path.join(env_dir, "bin", "python")
    except (OSError, ValueError):
        pass
    shutil.rmtree(env_dir, ignore_errors=True)
    code, out = run([uv(), "venv", "-q", "--python", interpreter, env_dir], log, timeout=300)
    if code != 0:
        raise CellError(f"uv could not create the environment with {interpreter}")
    python = os.path.join(env_dir, "bin", "python")
    code, out = run(
        [uv(), "pip", "install", "-q", "--python", python, f"torch=={torch_version}", *packages], log, timeout=1800
    )
    if code != 0:
        raise CellError(f"torch=={torch_version} for Python {python_version} could not be installed: {last_line(out)}")
    with open(stamp, "w") as f:
        json.dump(wanted, f)
    return python


def compile_bytecode(python, env_dir, log):
    """Writes the environment's .pyc files once. uv installs without them, and CI runs with
    PYTHONDONTWRITEBYTECODE=1, so every `import torch` compiled torch's 2,500 modules again: 3.4 s
    against 2.2 s, in a tier that starts Python a few hundred times."""
    marker = os.path.join(env_dir, "torchleak-matrix-bytecode")
    if os.path.exists(marker):
        return
    site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout.strip()
    if not site:  # compileall of "" would compile the working folder, the clone
        return
    # compileall exits 1 for the odd file that does not compile (test data in some packages);
    # what it compiled is kept either way.
    run([python, "-m", "compileall", "-q", "-j", "0", site], log, timeout=900)
    with open(marker, "w") as f:
        f.write(site + "\n")


def build(python, cell_dir, log):
    code, out = run(
        [
            uv(),
            "pip",
            "install",
            "-q",
            "--python",
            python,
            "--no-build-isolation",
            "--no-deps",
            "--reinstall-package",
            "torchleak",
            "-C",
            f"build-dir={os.path.join(cell_dir, 'build')}",
            "-C",
            "cmake.define.TORCHLEAK_WARNINGS_AS_ERRORS=ON",
            ".",
        ],
        log,
        timeout=1800,
    )
    if code != 0:
        raise CellError(f"the build failed: {last_line(out)}")


def last_line(text):
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1].strip() if lines else "(no output)"


def pytest_counts(output):
    """{"passed": n, "failed": n, ...} from pytest's closing line."""
    tail = last_line(output)
    return {word: int(n) for n, word in re.findall(r"(\d+) (passed|failed|skipped|errors?)", tail)}


def failed_tests(output):
    """The ids pytest's short summary names as failed or in error (`-rfE` is pytest's default)."""
    return re.findall(r"^(?:FAILED|ERROR) (\S+)", output, re.MULTILINE)


def run_cell(spec, leak_cases, log_dir):
    python_version, torch_version, pybind11_version = CELL.match(spec).groups()
    name = f"py{python_version}-torch{torch_version}" + (f"-pybind11-{pybind11_version}" if pybind11_version else "")
    cell_dir = os.path.join(MATRIX_DIR, name)
    os.makedirs(cell_dir, exist_ok=True)
    result = {
        "cell": spec,
        "python": None,
        "torch": None,
        "pybind11": None,
        "tier": None,
        "failed_tests": [],
        "flaky_tests": [],
        "leak_cases": None,
        "ok": False,
        "error": None,
        "log": os.path.join(log_dir, name + ".log"),
    }
    started = time.monotonic()
    # Each step's seconds (environment, build, tests/python, leak cases): where a cell's time goes.
    steps = {}
    result["steps"] = steps
    with open(result["log"], "w") as log:
        try:
            env_dir = os.path.join(MATRIX_ENVS, name)
            python = make_environment(python_version, torch_version, env_dir, log, pybind11_version)
            compile_bytecode(python, env_dir, log)
            steps["environment"] = time.monotonic() - started
            build(python, cell_dir, log)
            steps["build"] = time.monotonic() - started - sum(steps.values())
            code, out = run(
                [
                    python,
                    "-c",
                    "import sys, torch, torchleak, pybind11; "
                    "print('.'.join(map(str, sys.version_info[:3])), torch.__version__, pybind11.__version__)",
                ],
                log,
                timeout=300,
            )
            if code != 0:
                raise CellError(f"torchleak does not import: {last_line(out)}")
            result["python"], result["torch"], result["pybind11"] = out.split()[-3:]
            env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
            # Two workers, each test file on one of them (the allocator hook is per process, and a
            # file's tests share its fixtures): 305 s against 640 s on the 2-core machine.
            code, out = run(
                [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", *PARALLEL, "tests/python"],
                log,
                timeout=1800,
                env=env,
            )
            result["tier"] = pytest_counts(out)
            result["failed_tests"] = failed_tests(out)
            tier_ok = code == 0
            if not tier_ok and 0 < len(result["failed_tests"]) <= MAX_RERUN:
                # A cell's tier runs for a quarter of an hour on a shared machine: a test that
                # failed is run once more, alone. Passing then, it is reported as flaky (in the
                # output and the results), not hidden; failing again, the cell fails.
                code, _ = run(
                    [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", *result["failed_tests"]],
                    log,
                    timeout=900,
                    env=env,
                )
                if code == 0:
                    result["flaky_tests"], result["failed_tests"] = result["failed_tests"], []
                    tier_ok = True
            steps["tests/python"] = time.monotonic() - started - sum(steps.values())
            suite_ok = True
            if leak_cases:
                code, out = run([python, os.path.join(leak_cases, "run.py")], log, timeout=1800, env=env)
                score = re.search(r"(\d+) passed, (\d+) failed", out)
                site = re.search(r"site accuracy: (\d+/\d+)", out)
                result["leak_cases"] = {
                    "passed": int(score[1]) if score else 0,
                    "failed": int(score[2]) if score else None,
                    "site_accuracy": site[1] if site else None,
                }
                suite_ok = code == 0 and score is not None and int(score[2]) == 0
                steps["leak cases"] = time.monotonic() - started - sum(steps.values())
            result["ok"] = tier_ok and suite_ok
            if not result["ok"]:
                result["error"] = "tests failed (see the log)"
        except CellError as exc:
            result["error"] = str(exc)
            log.write(f"\nCELL FAILED: {exc}\n")
    result["seconds"] = round(time.monotonic() - started)
    result["steps"] = {step: round(seconds) for step, seconds in steps.items()}
    return result


def describe(result):
    tier = result["tier"] or {}
    tier_text = ", ".join(f"{n} {w}" for w, n in tier.items()) or "not run"
    cases = result["leak_cases"]
    cases_text = (
        f"{cases['passed']} passed, {cases['failed']} failed, site accuracy {cases['site_accuracy']}"
        if cases
        else "not run"
    )
    status = "ok" if result["ok"] else "FAILED"
    line = (
        f"{result['cell']:>12}  {status:6}  Python {result['python'] or '?'}, torch "
        f"{result['torch'] or '?'}: tests/python {tier_text}; leak cases {cases_text} "
        f"({result['seconds']} s"
        + "".join(f"; {step} {seconds} s" for step, seconds in (result.get("steps") or {}).items())
        + ")"
    )
    if result["error"]:
        line += f"\n{'':14}{result['error']} — log: {os.path.relpath(result['log'], ROOT)}"
    # A failure on a CI machine is read from this output alone: the log stays on that machine.
    for test in result.get("failed_tests") or []:
        line += f"\n{'':14}failed: {test}"
    for test in result.get("flaky_tests") or []:
        line += f"\n{'':14}FLAKY (failed, then passed alone): {test}"
    return line


def markdown_table(results):
    """The table of what was run (README, docs/platforms.md): one row per cell, newest Python first."""
    rows = [
        "| Python | torch | tests/python | leak cases (site accuracy) | result |",
        "| --- | --- | --- | --- | --- |",
    ]
    ordered = sorted(
        results,
        key=lambda r: (
            [-int(x) for x in r["cell"].split(":")[0].split(".")],
            [-int(x) for x in r["cell"].split(":")[1].split(".")],
        ),
    )
    for r in ordered:
        tier = r["tier"] or {}
        tier_text = ", ".join(f"{n} {w}" for w, n in tier.items()) or "not run"
        cases = r["leak_cases"]
        cases_text = (
            f"{cases['passed']} passed, {cases['failed']} failed ({cases['site_accuracy']})" if cases else "not run"
        )
        rows.append(
            f"| {r['python'] or r['cell'].split(':')[0]} | {r['torch'] or r['cell'].split(':')[1]}"
            f"{' with pybind11 ' + r['pybind11'] if r['cell'].count(':') == 2 else ''} "
            f"| {tier_text} | {cases_text} | {'ok' if r['ok'] else 'FAILED'} |"
        )
    return "\n".join(rows)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("cells", nargs="*", metavar="PYTHON:TORCH")
    parser.add_argument(
        "--table", nargs="+", metavar="RESULTS", help="print the Markdown table of earlier runs' --results files"
    )
    parser.add_argument("--results", metavar="PATH", help="write the results as JSON")
    parser.add_argument(
        "--leak-cases",
        metavar="DIR",
        default="",
        help="the leak-case suite's folder (the Makefile's LEAK_CASES); without it, tests/python only",
    )
    args = parser.parse_args(argv)
    if args.table:
        results = []
        for path in args.table:
            with open(path) as f:
                results.extend(json.load(f))
        print(markdown_table(results))
        return 0
    if not args.cells:
        parser.error("name at least one cell (PYTHON:TORCH), or --table")
    bad = [c for c in args.cells if not CELL.match(c)]
    if bad:
        parser.error(f"cells are PYTHON:TORCH such as 3.13:2.15.0, got {', '.join(bad)}")
    leak_cases = (
        args.leak_cases if args.leak_cases and os.path.isfile(os.path.join(args.leak_cases, "run.py")) else None
    )
    if leak_cases is None:
        where = f"at {args.leak_cases}" if args.leak_cases else "given (--leak-cases)"
        print(f"matrix: no leak-case suite {where}: the cells run tests/python only", flush=True)
    log_dir = os.path.join(MATRIX_DIR, "logs")
    os.makedirs(log_dir, exist_ok=True)
    results = []
    for spec in args.cells:
        print(f"matrix: {spec} ...", flush=True)
        result = run_cell(spec, leak_cases, log_dir)
        results.append(result)
        print(describe(result), flush=True)
        if args.results:  # after every cell: a run stopped midway keeps what it finished
            with open(args.results, "w") as f:
                json.dump(results, f, indent=2)
    failed = [r for r in results if not r["ok"]]
    print(f"matrix: {len(results) - len(failed)} passed, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
