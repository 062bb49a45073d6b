"""`python -m torchleak doctor`: whether torchleak works in this environment, on one screen.

What the extension was built with against what runs it (torch, CUDA, Python, compiler, C++
runtime), whether its native module keeps to itself (_linkage: exports, C++ runtime bindings),
the frame reader's self-check, and a planted leak tracked in a child process on every device
that is there: its site, its holder, its verdict and its report written. A child that dies is
named: the step it was at, the signal, and the first native frames where gdb or cuda-gdb can
take them (else faulthandler's Python frames). The last lines say what to send in a bug report;
home folders and the user's name are left out of everything it prints.

Exit status: 0 when every check passed, 1 when one failed, 2 for a usage error.
"""

import getpass
import json
import os
import pathlib
import platform
import shutil
import signal
import subprocess
import sys
import tempfile

CHILD_TIMEOUT = 240
# The child's steps, in order: a crash is named by the last one it announced.
CHILD = r"""
import json, os, sys
device, report_path = sys.argv[1], sys.argv[2]
def step(name):
    print("STEP " + name, flush=True)
step("import torch and torchleak")
import torch, torchleak
step("a planted leak on " + device)
kept = []
def leak():
    kept.append(torch.ones(1 << 18, device=device))  # the planted leak
report = torchleak.check(leak, iterations=6, warmup=1)
step("the report")
leaks = [f for f in report.leaks if f.device == device]
report.save(report_path)
first = leaks[0] if leaks else None
print("RESULT " + json.dumps({
    "verdict": first.verdict if first else None,
    "site": first.site_text if first else None,
    "holder": (first.holder or {}).get("path_text") if first else None,
    "written": os.path.getsize(report_path),
}), flush=True)
"""
EXPECTED_HOLDER = "kept"


def private(text):
    """The text with the home folder shown as ~ and the user's name left out."""
    home = os.path.expanduser("~")
    if home and home != "/":
        text = text.replace(home, "~")
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = ""
    if len(user) > 2:
        text = text.replace(user, "<user>")
    return text


def devices():
    """The devices a planted leak runs on: the CPU, and each CUDA device torch sees."""
    import torch

    found = ["cpu"]
    if torch.cuda.is_available():
        found += [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    return found


def environment_lines():
    """(lines, problems): what the build was made with against what runs it."""
    import torch

    import torchleak
    from torchleak._build import _minor, build_info, recorded, recorded_headers

    lines, problems = [], []
    info = build_info() or {}
    if "unreadable" in info:
        problems.append(f"{info['unreadable']}: reinstall torchleak")
    running_python = platform.python_version()
    cuda = torch.version.cuda or "none (a CPU build of torch)"
    lines.append(f"torchleak     {torchleak.__version__} in {os.path.dirname(torchleak.__file__)}")
    abi = info.get("cxx11_abi")
    lines.append(
        f"built with    torch {recorded(info, 'torch')}, Python {recorded(info, 'python')}, "
        f"{recorded(info, 'compiler')}, C++ runtime {recorded(info, 'cxx_runtime')}"
        + (f", _GLIBCXX_USE_CXX11_ABI={abi}" if abi is not None else "")
    )
    lines.append(
        f"running on    torch {torch.__version__} (CUDA {cuda}), Python {running_python}, {platform.machine()}"
    )
    if abi is not None and int(torch._C._GLIBCXX_USE_CXX11_ABI) != int(abi):
        problems.append(f"built with _GLIBCXX_USE_CXX11_ABI={abi}, torch uses the other: rebuild")
    built_torch, built_python = recorded(info, "torch"), recorded(info, "python")
    if _minor(built_torch) and _minor(built_torch) != _minor(torch.__version__):
        problems.append(f"built against torch {built_torch}, running on {torch.__version__}: rebuild")
    if _minor(built_python) and _minor(built_python) != _minor(running_python):
        problems.append(f"built for Python {built_python}, running on {running_python}: rebuild")
    headers = ", ".join(f"{name} {version} ({source})" for name, version, source in recorded_headers(info))
    if headers:
        lines.append(f"headers       {headers}")
    if torch.cuda.is_available():
        names = ", ".join(f"cuda:{i} {torch.cuda.get_device_name(i)}" for i in range(torch.cuda.device_count()))
        lines.append(f"devices       {names}")
    return lines, problems


def linkage_lines():
    from torchleak import _linkage

    package = os.path.dirname(os.path.abspath(_linkage.__file__))
    modules = sorted(f for f in os.listdir(package) if f.startswith("_core") and f.endswith(".so"))
    if not modules or not sys.platform.startswith("linux") or shutil.which("nm") is None:
        return ["linkage       not checked (needs Linux and nm)"], []
    module = pathlib.Path(package, modules[0])
    exported = _linkage.exported_symbols(module)
    bindings, _ = _linkage.std_bindings(module, sys.executable, "import torch, torchleak", timeout=120)
    foreign = _linkage.foreign_bindings(bindings, module)
    problems = []
    if exported != [_linkage.entry_point(module)]:
        problems.append(f"_core exports {len(exported)} symbols, not its entry point alone")
    for entry in foreign[:3]:
        problems.append(f"_core takes {entry['name']} from {os.path.basename(entry['to'])}, not from libstdc++")
    state = "ok" if not problems else "PROBLEM"
    return [
        f"linkage       {state}: _core exports {len(exported)} symbol(s); {len(bindings)} C++ runtime "
        f"binding(s), {len(foreign)} outside libstdc++ and _core"
    ], problems


def frame_reader_lines():
    from torchleak import _core

    problem = _core.check_frame_capture()
    if problem:
        return [f"frame reader  PROBLEM: {problem}"], [f"the frame reader: {problem}"]
    return ["frame reader  ok (allocation sites come from the Python stack)"], []


def native_frames(command, env):
    """The first native frames of `command` run again under gdb or cuda-gdb, or []."""
    debugger = shutil.which("gdb") or shutil.which("cuda-gdb")
    if debugger is None:
        return []
    try:
        out = subprocess.run(
            [debugger, "-q", "-batch", "-ex", "set pagination off", "-ex", "run", "-ex", "bt 8", "--args", *command],
            capture_output=True,
            text=True,
            timeout=CHILD_TIMEOUT,
            env=env,
            check=False,
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [line for line in out.splitlines() if line.startswith("#")][:8]


def signal_name(returncode):
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return f"signal {-returncode}"


def run_child(device, folder):
    """(line, problem or None) of the planted leak tracked on `device` in a child process."""
    report_path = os.path.join(folder, f"doctor-{device.replace(':', '-')}.json")
    script = os.path.join(folder, "doctor_child.py")  # a file, so that the site has a name
    with open(script, "w", encoding="utf-8") as fh:
        fh.write(CHILD)
    command = [sys.executable, "-X", "faulthandler", script, device, report_path]
    env = dict(os.environ, TORCHLEAK_DOCTOR_CHILD="1")
    try:
        proc = subprocess.run(command, capture_output=True, text=True, timeout=CHILD_TIMEOUT, env=env, check=False)
    except subprocess.TimeoutExpired as expired:
        out = expired.stdout.decode(errors="replace") if isinstance(expired.stdout, bytes) else expired.stdout or ""
        at = [line[5:] for line in out.splitlines() if line.startswith("STEP ")]
        problem = f"{device}: no answer within {CHILD_TIMEOUT} s, at step '{at[-1] if at else 'start'}'"
        return f"{device:<13} HUNG: {problem}", problem
    steps = [line[5:] for line in proc.stdout.splitlines() if line.startswith("STEP ")]
    results = [line[7:] for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    at = steps[-1] if steps else "start"
    if proc.returncode < 0:
        detail = f"the child died of {signal_name(proc.returncode)} at step '{at}'"
        frames = (
            native_frames(command, env)
            or [line.strip() for line in proc.stderr.splitlines() if line.strip().startswith("File ")][:6]
        )
        shown = [f"{device:<13} CRASHED: {detail}"] + [f"{'':14}{frame[:110]}" for frame in frames]
        return "\n".join(shown), f"{device}: {detail}"
    if proc.returncode != 0 or not results:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        problem = f"{device}: failed at step '{at}': {last}"
        return f"{device:<13} FAILED: {problem}", problem
    result = json.loads(results[-1])
    if result["verdict"] != "leak" or result["holder"] != EXPECTED_HOLDER:
        problem = f"{device}: the planted leak was not found as a leak held by {EXPECTED_HOLDER}: {result}"
        return f"{device:<13} WRONG: {problem}", problem
    return (
        f"{device:<13} ok: a leak at {os.path.basename(result['site'] or '?')}, held by {result['holder']}, "
        f"report written ({result['written']} bytes)",
        None,
    )


def main():
    """Prints the screen; returns the exit status."""
    from torchleak import _build

    problems = []
    print("torchleak doctor")
    # Refused (built for another torch), the extension must not be loaded: the checks that load
    # it would only fail the same way.
    parts = (environment_lines,) if _build.refusal else (environment_lines, linkage_lines, frame_reader_lines)
    for part in parts:
        try:
            lines, found = part()
        except Exception as exc:  # noqa: BLE001 - a check that cannot run is itself the finding
            lines, found = [f"{part.__name__[:-6]:<13} could not be checked: {exc}"], [str(exc)]
        problems += found
        for line in lines:
            print(private(line))
    if _build.refusal:
        print("linkage, frame reader, planted leaks: not run (torchleak refuses to load here)")
    with tempfile.TemporaryDirectory(prefix="torchleak-doctor-") as folder:
        for device in [] if _build.refusal else devices():
            line, problem = run_child(device, folder)
            print(private(line), flush=True)
            if problem:
                problems.append(problem)
    if problems:
        print("result        torchleak does NOT work here:")
        for problem in problems:
            print(private(f"  - {problem}"))
    else:
        print("result        torchleak works here.")
    print("bug report    send this screen as it is, with the command that failed: home folders and")
    print("              your user name are already left out")
    return 1 if problems else 0
