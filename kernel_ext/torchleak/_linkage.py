"""What torchleak's native modules share with the process they load into: the symbols they export
and where their C++ runtime references bind. A debugger that lives in other people's training
processes must depend on nothing of theirs: a module exports its PyInit_* alone, and every
std:: reference binds in libstdc++ or in the module itself, never in torch's (or anyone's) weak
copies of the same templates (../shared/research/gpu-crash.md: on the first GPU machine `_core`
took std::ostringstream from libc10.so).

Read by `python -m torchleak doctor`, by tests/install and by the GPU proof, which runs this
file by its path so that nothing of torchleak is imported when its extension is what crashes:

    python kernel_ext/torchleak/_linkage.py MODULE.so [--python PY] [--code CODE]

prints the exported symbols, and where the std:: references bind while PY (default: this
interpreter) runs CODE (default: one track() with a leak and a report); exits 1 when the
module exports more than its entry point or a std:: reference binds elsewhere.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile

# One line of LD_DEBUG=bindings (glibc's elf/dl-lookup.c, _dl_debug_bindings):
#   binding file /x/_core.so [0] to /y/libstdc++.so.6 [0]: normal symbol `_ZNSo9_M_insertIlEERSoT_' [GLIBCXX_3.4.9]
BINDING = re.compile(r"binding file (\S+) \[\d+\] to (\S+) \[\d+\]: (\w+) symbol `([^']+)'(?: \[([^\]]+)\])?")
# What the demangled name of a C++ runtime symbol begins with: std:: itself, or the vtable, VTT,
# typeinfo or thunk of something in std::.
STD_NAME = re.compile(
    r"^(?:(?:vtable|VTT|typeinfo|typeinfo name|construction vtable|guard variable|"
    r"(?:non-)?virtual thunk to)(?: for)? )*(?:std|__gnu_cxx|__cxxabiv1)::"
)
# One track() with a leak and a report: the paths that build strings and streams. The config's
# get() writes an int into an ostringstream; where two C++ runtimes mix it has answered '' (the
# CPU, a static libstdc++) or crashed (the H200), so its answer is checked too.
DEFAULT_CODE = """
import torch, torchleak
assert torchleak._core.AnalysisConfig().get('warmup').isdigit(), 'AnalysisConfig.get answered nothing'
kept = []
with torchleak.track() as tracker:
    for _ in range(4):
        kept.append(torch.ones(1 << 16))
        torchleak.step()
assert tracker.report().leaks, 'the planted leak was not found'
"""


def exported_symbols(module: pathlib.Path) -> list[str]:
    """The dynamic symbols a shared object defines (nm -D --defined-only), undecorated names."""
    out = subprocess.run(
        ["nm", "-D", "--defined-only", "--format=posix", str(module)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    return sorted({line.split()[0].split("@")[0] for line in out.splitlines() if line.strip()})


def entry_point(module: pathlib.Path) -> str:
    """PyInit_<name> of an extension module file (_core.cpython-312-x86_64-linux-gnu.so: _core)."""
    return "PyInit_" + module.name.split(".")[0]


def demangle(names: list[str]) -> dict[str, str]:
    if not names:
        return {}
    filt = shutil.which("c++filt")
    if filt is None:
        return {name: name for name in names}
    out = subprocess.run([filt], input="\n".join(names), capture_output=True, text=True, check=True, timeout=60)
    return dict(zip(names, out.stdout.splitlines(), strict=False))


def std_bindings(module: pathlib.Path, python: str, code: str, timeout: float = 300) -> tuple[list[dict], str]:
    """Every dynamic binding of the module's references to C++ runtime symbols while `python`
    runs `code`: [{"symbol", "name" (demangled), "to" (the library's path), "version"}], and
    what the child printed (its exit status first) for when it failed."""
    module = module.resolve()
    with tempfile.TemporaryDirectory(prefix="torchleak-ldd-") as folder:
        env = dict(os.environ, LD_DEBUG="bindings", LD_DEBUG_OUTPUT=os.path.join(folder, "ld"))
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(module.parent.parent), env.get("PYTHONPATH", "")]))
        child = subprocess.run(
            [python, "-c", code], env=env, capture_output=True, text=True, timeout=timeout, check=False
        )
        told = f"exit status {child.returncode}\n{child.stdout}{child.stderr}"
        found = []
        for log in sorted(pathlib.Path(folder).glob("ld*")):
            with open(log, errors="replace") as lines:
                for line in lines:
                    match = BINDING.search(line)
                    if match and os.path.realpath(match.group(1)) == str(module):
                        found.append({"symbol": match.group(4), "to": match.group(2), "version": match.group(5)})
    names = demangle(sorted({entry["symbol"] for entry in found}))
    runtime = []
    seen = set()
    for entry in found:
        entry["name"] = names.get(entry["symbol"], entry["symbol"])
        key = (entry["symbol"], entry["to"])
        if STD_NAME.match(entry["name"]) and key not in seen:
            seen.add(key)
            runtime.append(entry)
    return runtime, told


def is_own_runtime(library: str, module: pathlib.Path) -> bool:
    """libstdc++ (or libc++, or libgcc_s for the unwinder's part) or the module itself."""
    name = os.path.basename(library)
    return name.startswith(("libstdc++.so", "libc++.so", "libc++abi.so", "libgcc_s.so")) or os.path.realpath(
        library
    ) == str(module.resolve())


def foreign_bindings(bindings: list[dict], module: pathlib.Path) -> list[dict]:
    return [entry for entry in bindings if not is_own_runtime(entry["to"], module)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("module", type=pathlib.Path, help="a built extension module (.so)")
    parser.add_argument("--python", default=sys.executable, help="the interpreter that loads it")
    parser.add_argument("--code", default=DEFAULT_CODE, help="what that interpreter runs")
    args = parser.parse_args(argv)
    problems = 0
    exported = exported_symbols(args.module)
    extra = [name for name in exported if name != entry_point(args.module)]
    beyond = f", {len(extra)} beyond its entry point" if extra else ""
    print(f"{args.module.name}: exports {len(exported)} symbol(s){beyond}")
    for name in extra[:20]:
        print(f"  exported: {name}")
    problems += bool(extra)
    bindings, told = std_bindings(args.module, args.python, args.code)
    by_library: dict[str, int] = {}
    for entry in bindings:
        by_library[entry["to"]] = by_library.get(entry["to"], 0) + 1
    print(f"{args.module.name}: {len(bindings)} C++ runtime binding(s) while running the check")
    for library, count in sorted(by_library.items(), key=lambda item: -item[1]):
        print(f"  {count:4d} to {library}")
    foreign = foreign_bindings(bindings, args.module)
    for entry in foreign:
        print(f"  foreign: {entry['name']} -> {entry['to']} [{entry['version'] or 'unversioned'}]")
    problems += bool(foreign)
    if not told.startswith("exit status 0"):
        print(f"  the child failed: {told[-2000:]}")
        problems += 1
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
