"""Many command lines of `python -m torchleak` run in one Python process, for the tests of usage
errors: each goes through the command's own main(), with its output captured and its return
value as the exit code, as `python -m torchleak` gives it (`sys.exit(main())`). A process per
command line spent its time importing torch: 16 of test_cli's cases were 43 s of the tier, in
each of the four environments `make test` runs it in. The tests that exercise the process
itself (signals, exits, forks, the script's traceback) still start one each."""

import json
import subprocess
import sys

BATCH = r"""
import contextlib, io, json, sys
from torchleak.__main__ import main

results = []
for argv in json.load(sys.stdin):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:  # as the interpreter maps it to an exit status
            code = 0 if exc.code is None else exc.code if isinstance(exc.code, int) else 1
    results.append([code, out.getvalue(), err.getvalue()])
json.dump(results, sys.__stdout__)
"""


def run_each(argvs, cwd=None):
    """One subprocess.CompletedProcess per command line (the arguments after `-m torchleak`)."""
    proc = subprocess.run(
        [sys.executable, "-c", BATCH],
        input=json.dumps(argvs),
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return [
        subprocess.CompletedProcess([sys.executable, "-m", "torchleak", *argv], code, out, err)
        for argv, (code, out, err) in zip(argvs, json.loads(proc.stdout), strict=True)
    ]
