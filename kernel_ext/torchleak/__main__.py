"""python -m torchleak run [--json PATH] [--html PATH] [--fail-on-leak] ... script.py [ARGS...]
python -m torchleak run [OPTIONS] -m package.module [ARGS...]

Runs a script under torchleak.track() and prints the report; with -m, a module as `python -m`
runs it (a package's __main__, the working directory first on sys.path). torchleak's options
come before the script, as with `python -m cProfile` and `memray run`: everything after the
script is the script's own, an option of the same name and a `--` included. Iterations end at
every optimizer.step() and torchleak.step() in the script (outside tracking, torchleak.step()
does nothing: the script runs under plain python too).

Exit status: 0 no leak (or no --fail-on-leak), 1 leak found with --fail-on-leak, 2 usage error,
3 the run failed: the script raised or exited non-zero, by sys.exit or os._exit (its traceback
is printed and the report is still written), or torchleak could not track (e.g. torch.profiler
already active).

--watch keeps watching a long run instead (torchleak.watch): an iteration every --every N
optimizer steps, every block recorded (--sample-bytes N: blocks under N bytes sampled), and when a
leak is confirmed mid-run one line is logged and the report written to --json/--html at once.

Under torchrun every rank is tracked; rank 0 waits at most --gather-timeout seconds (default 60)
for the others' reports and writes one merged report to --json/--html. With {rank} in a path,
each rank also writes its own there, and the merged one goes where {rank} reads "merged". A rank
whose report rank 0 did not confirm writes its own next to the path (name.rank1.json).

--redact writes the --json/--html reports without tensor shapes and dtypes, source lines,
absolute paths (made relative to the working directory, or hashed) and string dictionary keys:
a report to attach to an issue or a CI run. What is printed is the whole report.

python -m torchleak diff before.json after.json [--json PATH] [--tolerance PCT]

Compares two saved reports: which leaks were fixed, which are new, which grew (a rate more than
PCT percent above the old one, default 10). Exit status: 0 no regression, 1 a new or worse
leak, 2 usage error (a file that is not a torchleak report included).

python -m torchleak doctor

Says on one screen whether torchleak works in this environment: what it was built with against
what runs it, its native module's linkage, the frame reader's self-check, and a planted leak
tracked in a child process on every device (a child that crashes is named: step, signal, first
frames). Exit status: 0 every check passed, 1 one failed.
"""

import argparse
import builtins
import contextlib
import os
import sys
import traceback
import types

RUN_USAGE = (
    "usage: python -m torchleak run [--json PATH] [--html PATH] [--fail-on-leak] "
    "[--warmup K] [--min-bytes N] [--quiet] [--redact]\n"
    "           [--watch] [--every N] [--sample-bytes N] [--gather-timeout S] "
    "(script.py | -m module) [ARGS...]\n"
    "       (torchleak's options before the script; everything after it is the script's)"
)
USAGE = (
    RUN_USAGE + "\n"
    "       python -m torchleak diff before.json after.json [--json PATH] [--tolerance PCT]\n"
    "       python -m torchleak install-kernel [--user]\n"
    "       python -m torchleak version\n"
    "       python -m torchleak doctor"
)

EXIT_OK, EXIT_LEAK, EXIT_USAGE, EXIT_SCRIPT_FAILED = 0, 1, 2, 3


class UsageError(Exception):
    pass


def _shown(value):
    """An option's value as an error shows it: whole when short, else its length (a 5,000-digit
    value was echoed whole)."""
    from torchleak._config import brief

    return brief(value)


def _int_option(name, value, maximum=10**9, minimum=0):
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise UsageError(f"{name} needs an integer, got {_shown(value)}") from None
    if not minimum <= number <= maximum:
        raise UsageError(f"{name} must be between {minimum} and {maximum:,}, got {_shown(number)}")
    return number


class _Parser(argparse.ArgumentParser):
    """argparse whose complaints are UsageErrors: main() prints them with the usage line and
    exits 2, as for every other bad option."""

    def error(self, message):
        raise UsageError(message)


def _run_parser():
    """`run`'s options, all before the script (as `python -m cProfile` and `memray run` take
    theirs): everything after the script is the script's own, `--json` included."""
    parser = _Parser(prog="python -m torchleak run", add_help=False, allow_abbrev=False)
    for flag in (*_FLAGS, "-h", "--help"):
        parser.add_argument(flag, action="store_true")
    for option, (key, read) in _VALUED.items():
        parser.add_argument(
            option, dest=key, metavar="VALUE", type=lambda value, option=option, read=read: read(option, value)
        )
    return parser


def _split_run_argv(argv):
    """(torchleak's options, the script or None, the module or None, the rest): the first
    argument that is neither one of torchleak's options nor an option's value is the script,
    or `-m MODULE` the module to run as `python -m` would; everything after it, a `--`
    included, is the script's own."""
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "-m":
            if i + 1 == len(argv):
                raise UsageError("-m needs a module name (python -m torchleak run -m package.module [ARGS...])")
            return argv[:i], None, argv[i + 1], argv[i + 2 :]
        if arg == "--":
            if i + 1 == len(argv):
                raise UsageError("no script given after --")
            return argv[:i], argv[i + 1], None, argv[i + 2 :]
        if arg in _VALUED:
            i += 2
        elif arg.startswith("-"):
            i += 1  # a flag, an --option=value, or an unknown option: argparse says which
        else:
            return argv[:i], arg, None, argv[i + 1 :]
    return argv, None, None, []


def parse_run_args(argv):
    """(script, its arguments, torchleak's options) of `run`: torchleak's options stand before
    the script (or `-m module`) and everything after it is the script's, untouched. With -m,
    script is None and opts["module"] names the module."""
    own, script, module, script_args = _split_run_argv(list(argv))
    args = _run_parser().parse_args(own)
    if args.h or args.help:
        raise RunHelp()
    opts = {
        "json": args.json,
        "html": args.html,
        "fail_on_leak": args.fail_on_leak,
        "warmup": 0 if args.warmup is None else args.warmup,
        "min_bytes": args.min_bytes or 0,
        "quiet": args.quiet,
        "watch": args.watch,
        "every": 1 if args.every is None else args.every,
        "sample_bytes": args.sample_bytes,
        "gather_timeout": args.gather_timeout,
        "redact": args.redact,
        "module": module,
    }
    if script is None and module is None:
        raise UsageError("no script given")
    if script is not None and not os.path.isfile(script) and not _is_runnable_folder(script):
        if os.path.isdir(script):
            raise UsageError(f"{script} is a folder without a __main__.py: nothing to run")
        raise UsageError(f"no such script: {script}")
    if not opts["watch"] and (opts["every"] != 1 or opts["sample_bytes"] is not None):
        raise UsageError("--every and --sample-bytes belong to --watch")
    from torchleak._report import OUTPUT_EXTENSIONS

    for key, extensions in OUTPUT_EXTENSIONS.items():
        if opts[key] is not None:
            # Checked with the rank torchrun gives this process; the merged report's name too.
            for rank in (os.environ.get("RANK", "0"), "merged"):
                _output_path(f"--{key}", opts[key].replace("{rank}", rank), extensions)
            opts[key] = os.path.abspath(opts[key])
    return script, script_args, opts


class RunHelp(Exception):
    """`run -h`: run's usage and description, printed by main()."""


def _own_options_given_to(script_args):
    """The script's arguments that are torchleak options too: given after the script, they
    went to the script (the convention), which may not know them."""
    ours = {*_VALUED, *_FLAGS}
    return [a for a in script_args if a.split("=", 1)[0] in ours]


def _report_paths_given_to(script_args):
    """The paths of --json/--html options among the script's arguments."""
    paths = []
    for i, arg in enumerate(script_args):
        name, equals, value = arg.partition("=")
        if name in ("--json", "--html"):
            if equals:
                paths.append(value)
            elif i + 1 < len(script_args):
                paths.append(script_args[i + 1])
    return paths


def _seconds_option(name, value):
    try:
        seconds = float(value)
    except ValueError:
        raise UsageError(f"{name} needs a number of seconds, got {_shown(value)}") from None
    if not 0 <= seconds <= 86400:
        raise UsageError(f"{name} must be between 0 and 86400 seconds, got {_shown(value)}")
    return seconds


# Options of `run` that take a value: the key in opts and how the value is read.
# run's options that take no value, and (below) those that take one.
_FLAGS = ("--fail-on-leak", "--quiet", "--watch", "--redact")
_VALUED = {
    "--json": ("json", lambda name, value: value),
    "--html": ("html", lambda name, value: value),
    "--warmup": ("warmup", _int_option),
    "--min-bytes": ("min_bytes", lambda name, value: _int_option(name, value, maximum=2**63 - 1)),
    "--every": ("every", lambda name, value: _int_option(name, value, minimum=1)),
    "--sample-bytes": ("sample_bytes", lambda name, value: _int_option(name, value, 2**40)),
    "--gather-timeout": ("gather_timeout", _seconds_option),
}


def _output_path(option, path, extensions):
    """Checked before the script runs, and made absolute against the directory the command ran
    in, whatever the script's chdir does."""
    from torchleak._report import writable_path

    try:
        return writable_path(path, extensions)
    except ValueError as exc:
        raise UsageError(f"{option} {exc}") from None


def _is_runnable_folder(path):
    """A folder with a __main__.py, which `python folder` runs (as a zipapp's)."""
    return os.path.isdir(path) and os.path.isfile(os.path.join(path, "__main__.py"))


def _script_module(script):
    """A fresh `__main__` for the script, as `python script.py` would make it."""
    module = types.ModuleType("__main__")
    module.__file__ = os.path.abspath(script)
    module.__builtins__ = builtins
    module.__loader__ = None
    module.__spec__ = None
    return module


def _module_main(name):
    """(a fresh `__main__`, its code) for `-m name`, found as `python -m name` finds it (a
    package runs its __main__ submodule), with the working directory on sys.path."""
    import runpy

    sys.path.insert(0, os.getcwd())
    try:
        _, spec, code = runpy._get_module_details(name, UsageError)
    except UsageError as exc:
        raise UsageError(f"-m {name}: {exc}") from None
    except ImportError as exc:  # a package's __init__ that fails, say
        raise UsageError(f"-m {name}: {type(exc).__name__}: {exc}") from None
    finally:
        sys.path.pop(0)
    module = types.ModuleType("__main__")
    module.__file__ = spec.origin
    module.__builtins__ = builtins
    module.__loader__ = spec.loader
    module.__spec__ = spec
    module.__package__ = spec.parent
    module.__cached__ = spec.cached if spec.has_location else None
    return module, code


def run(argv):
    script, script_args, opts = parse_run_args(argv)
    import torchleak
    from torchleak import _job
    from torchleak._signals import SavesFinishFirst, TerminationSignal, interrupts_ignored
    from torchleak._tracebacks import from_code

    # Defaults that live with the API, known once torchleak is imported (parsing does not
    # import torch: a usage error comes back at once).
    if opts["gather_timeout"] is None:
        opts["gather_timeout"] = _job.DEFAULT_GATHER_TIMEOUT
    if opts["sample_bytes"] is None:
        opts["sample_bytes"] = torchleak.DEFAULT_SAMPLE_BYTES

    if opts["module"] is not None:
        module, code = _module_main(opts["module"])
        script = module.__file__  # sys.argv[0], as `python -m` sets it
        search_dir = os.getcwd()  # `python -m` puts the working directory first on sys.path
    else:
        # `python folder` runs folder/__main__.py with the folder itself first on sys.path.
        folder = _is_runnable_folder(script)
        source_file = os.path.join(script, "__main__.py") if folder else script
        with open(source_file, "rb") as fh:
            source = fh.read()
        try:
            code = compile(source, source_file, "exec")
        except SyntaxError as exc:
            raise UsageError(f"cannot compile {source_file}: {exc}") from None
        module = _script_module(source_file)
        search_dir = os.path.abspath(script) if folder else os.path.dirname(os.path.abspath(script))

    status, failure, interrupted = EXIT_OK, None, False
    script_exit = 0  # what the script asked to exit with: a forked child ends with it
    saved_argv, saved_main = sys.argv, sys.modules.get("__main__")
    sys.argv = [script] + script_args
    sys.path.insert(0, search_dir)
    sys.modules["__main__"] = module
    if opts["watch"]:
        recording = torchleak.watch(
            every=opts["every"],
            warmup=opts["warmup"],
            min_bytes=opts["min_bytes"],
            json=opts["json"],
            html=opts["html"],
            gather_timeout=None,
            sample_bytes=opts["sample_bytes"],
            redact=opts["redact"],
        )
        recording.save_at_end = False
        tracker = recording.tracker
    else:
        recording = tracker = torchleak.track(warmup=opts["warmup"], min_bytes=opts["min_bytes"], gather_timeout=None)
    real_exit = os._exit
    # A child the script forks runs this same code when it exits: it is not the run, and its
    # report would print twice and overwrite the parent's --json.
    run_pid = os.getpid()

    def exit_now(code):
        if os.getpid() != run_pid:
            real_exit(code)
        # os._exit skips atexit and finally blocks: the report of the iterations seen is
        # written here, then the process ends with the status sys.exit(code) would give.
        status = EXIT_SCRIPT_FAILED if code else EXIT_OK
        try:
            tracker.stop()
            report = _finish(
                tracker, opts, f"the script called os._exit({code})" if code else None, opts["gather_timeout"]
            )
            if status == EXIT_OK and opts["fail_on_leak"] and report.leaks:
                status = EXIT_LEAK
        finally:
            real_exit(status)

    os._exit = exit_now
    with TerminationSignal() as terminated, _options_parsed() as parsed_options:
        try:
            with recording:
                try:
                    terminated.stops_script = True
                    exec(code, module.__dict__)
                except SystemExit as exc:
                    script_exit = exc.code
                    if exc.code not in (None, 0):
                        status = EXIT_SCRIPT_FAILED
                        failure = terminated.note or f"SystemExit: {exc.code}"
                        if not isinstance(exc.code, int):
                            print(exc.code, file=sys.stderr)  # as Python prints sys.exit("msg")
                except BaseException as exc:  # noqa: BLE001 - the script's failure, reported below
                    # From the script's own frame on, as `python script.py` would print it.
                    traceback.print_exception(type(exc), exc, from_code(exc.__traceback__, code))
                    script_exit = 1
                    tracker.note_failure(exc)  # an out-of-memory error: the report says why
                    failure = _job.describe_failure(exc)
                    status = EXIT_SCRIPT_FAILED
                finally:
                    terminated.stops_script = False
                if os.getpid() != run_pid:
                    _exit_forked_child(real_exit, script_exit)
            # Built while the script's globals are still __main__, so paths start at its names.
            try:
                tracker.report()
            except KeyboardInterrupt:
                # The walk of a large heap can take a while: Ctrl-C then loses the paths, not
                # the report. What the recorder counted needs no walk.
                interrupted = True
                status = EXIT_SCRIPT_FAILED
                failure = failure or "interrupted while the report was built"
                message = "interrupted (Ctrl-C) while retaining paths were walked: the report is saved without them"
                print(f"torchleak: {message}", file=sys.stderr, flush=True)
                with interrupts_ignored():
                    tracker._warn(message)
                    tracker.report(paths=False)
        finally:
            os._exit = real_exit
            sys.argv = saved_argv
            sys.modules["__main__"] = saved_main
            if sys.path and sys.path[0] == search_dir:
                sys.path.pop(0)
        # From here on the report is printed and saved: one Ctrl-C lets the saves finish.
        saving = interrupts_ignored() if interrupted else SavesFinishFirst()
        with saving:
            status, report = _report_the_run(
                tracker, opts, script, script_args, parsed_options, terminated, status, failure
            )
    if getattr(saving, "interrupted", False):
        print("torchleak: interrupted (Ctrl-C) while the report was saved: the saves finished", file=sys.stderr)
        status = EXIT_SCRIPT_FAILED
    if status == EXIT_OK and opts["fail_on_leak"] and report.leaks:
        status = EXIT_LEAK
    return status


def _report_the_run(tracker, opts, script, script_args, parsed_options, terminated, status, failure):
    """The hints about misplaced options, then the report printed, gathered and saved."""
    given = _own_options_given_to(script_args)
    if status == EXIT_SCRIPT_FAILED and given and not terminated.note:
        # The usual cause: torchleak's option written after the script, as before the
        # convention; the script's own parser then refused it.
        print(
            f"torchleak: the script failed after it was given {', '.join(given)}, "
            f"torchleak's option{'s' if len(given) > 1 else ''} too: torchleak's options "
            f"go before the script (python -m torchleak run [options] {script} "
            f"[its arguments])",
            file=sys.stderr,
        )
    elif status == EXIT_OK and given:
        # The script ran, ignoring them: a --json or --html path meant for torchleak that
        # nothing wrote is the sign.
        unwritten = [p for p in _report_paths_given_to(script_args) if not os.path.exists(p)]
        own = {o.split("=", 1)[0] for o in given} & parsed_options
        if unwritten and not own:
            print(
                f"torchleak: no report was written to {', '.join(unwritten)}: "
                f"{', '.join(given)} came after the script, so the script got "
                f"{'them' if len(given) > 1 else 'it'}; torchleak's options go before the script "
                f"(python -m torchleak run [options] {script} [its arguments])",
                file=sys.stderr,
            )
    # After SIGTERM (torchrun stopping the job because a rank died) the agent kills what is
    # still running 30 s later: the ranks' waits end a fixed time after the signal, whether it
    # came before the wait or during it.
    return status, _finish(tracker, opts, failure, opts["gather_timeout"], hurry=lambda: terminated.at)


@contextlib.contextmanager
def _options_parsed():
    """The option strings of the argparse parsers the script ran: a script whose own parser has
    --json took torchleak's --json given after it as its own, and needs no hint."""
    seen = set()
    original = argparse.ArgumentParser.parse_known_args

    def parse_known_args(self, *args, **kwargs):
        seen.update(self._option_string_actions)
        return original(self, *args, **kwargs)

    argparse.ArgumentParser.parse_known_args = parse_known_args
    try:
        yield seen
    finally:
        argparse.ArgumentParser.parse_known_args = original


def _save_each(report, paths, redact):
    """Write every requested output, even when one fails, and say on stderr which failed."""
    from torchleak._report import save_each

    for path, exc in save_each(report, paths, redact=redact)[1]:
        print(f"torchleak: could not write {path}: {exc.strerror or exc}", file=sys.stderr, flush=True)


def _exit_forked_child(real_exit, code):
    """End a process the script forked the way Python would (its message, if any, is printed
    already), without a report: only the process that started tracking reports."""
    sys.stdout.flush()
    sys.stderr.flush()
    real_exit(code if isinstance(code, int) else (0 if code is None else 1))


def _finish(tracker, opts, failure, timeout, hurry=None):
    """Prints and writes the report; in a torch.distributed job, gathers the ranks' reports
    first. Returns the report the exit status is judged on: the merged one on rank 0, the
    rank's own elsewhere."""
    from torchleak import _job

    own = tracker.report()
    job = tracker.job
    if job is None:
        # Under torchrun with no process group seen while tracking, the ranks must still not
        # write over each other.
        rank = os.environ.get("RANK", "0") if os.environ.get("WORLD_SIZE", "1") != "1" else "0"
        if not opts["quiet"]:
            print(own, flush=True)
        _save_each(own, [_job.rank_path(opts[key], rank) for key in ("json", "html") if opts[key]], opts["redact"])
        return own
    exchange = tracker.gather(failure=failure, timeout=timeout, hurry=hurry)
    merged = exchange.merged
    for key in ("json", "html"):
        path = opts[key]
        if not path:
            continue
        # A rank's own report when asked for by {rank}, or when the merge did not take all of
        # it (rank 0 could not read it, or got only a summary of a very large one).
        if "{rank}" in path or not exchange.complete:
            _save_each(own, [_job.rank_path(path, job.rank)], opts["redact"])
        if merged is not None:
            _save_each(merged, [path.replace("{rank}", "merged")], opts["redact"])
    if merged is not None:
        if not opts["quiet"]:
            print(merged, flush=True)
        return merged
    if exchange.complete:
        where = "merged at rank 0"
    elif exchange.confirmed:
        where = f"merged at rank 0 in part ({exchange.note}); the whole report is kept on its own"
    else:
        where = f"not merged ({exchange.note}); this rank's report is kept on its own"
    print(f"torchleak: rank {job.rank}: {own.summary.get('headline', '')}; {where}", flush=True)
    return own


def parse_diff_args(argv):
    files, opts = [], {"json": None, "tolerance": 10.0}
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg in ("--json", "--tolerance"):
            if i + 1 >= len(argv):
                raise UsageError(f"{arg} needs a value")
            value = argv[i + 1]
            if arg == "--json":
                opts["json"] = _output_path(arg, value, (".json",))
            else:
                try:
                    opts["tolerance"] = float(value)
                except ValueError:
                    raise UsageError(f"--tolerance needs a percentage, got {_shown(value)}") from None
                if not 0 <= opts["tolerance"] <= 1000:
                    raise UsageError(f"--tolerance must be between 0 and 1000, got {_shown(value)}")
            i += 2
            continue
        if arg.startswith("-"):
            raise UsageError(f"unknown option {_shown(arg)}")
        files.append(arg)
        i += 1
    if len(files) != 2:
        raise UsageError(f"diff needs two report files, got {len(files)}")
    return files, opts


def diff(argv):
    (before_path, after_path), opts = parse_diff_args(argv)
    from torchleak._report import _write_atomically, read_report_file

    texts = []
    for path in (before_path, after_path):
        try:
            texts.append(read_report_file(path))
        except (OSError, ValueError) as exc:
            raise UsageError(f"cannot read {path}: {exc}") from None
    import json

    from torchleak import _core

    try:
        result = _core.diff_reports(texts[0], texts[1], opts["tolerance"] / 100)
    except _core.ReportSchemaError as exc:
        raise UsageError(f"not a torchleak report ({before_path} or {after_path}): {exc}") from None
    data = json.loads(result)
    data["before"], data["after"] = os.path.abspath(before_path), os.path.abspath(after_path)
    print(data["text"])
    if opts["json"]:
        try:
            _write_atomically(opts["json"], json.dumps(data, indent=2, ensure_ascii=False).encode("utf-8"))
        except OSError as exc:  # as for run: said, and the status still tells the verdict
            print(f"torchleak: could not write {opts['json']}: {exc.strerror or exc}", file=sys.stderr)
    return EXIT_LEAK if data["regressed"] else EXIT_OK


def install_kernel(argv):
    """Install the "Python 3 (torchleak)" kernelspec (ipykernel with the extension loaded and
    cell watch on). `pip install` already puts it under sys.prefix; this is for other prefixes."""
    if argv not in ([], ["--user"]):
        raise UsageError(f"unexpected arguments: {' '.join(argv)}")
    import json
    import tempfile
    from jupyter_client.kernelspec import KernelSpecManager

    # The kernelspec pip put under sys.prefix (share/jupyter/kernels/torchleak), shipped in
    # the package too; its "python" becomes this interpreter, as another prefix needs.
    shipped = os.path.join(os.path.dirname(os.path.abspath(__file__)), "kernelspec", "kernel.json")
    with open(shipped, encoding="utf-8") as fh:
        spec = json.load(fh)
    spec["argv"][0] = sys.executable
    with tempfile.TemporaryDirectory() as tmp:
        # mkdtemp makes it 0700 and the spec directory is copied with its mode: other users
        # of a shared install could not read it. 0755, like Jupyter's own kernelspecs.
        os.chmod(tmp, 0o755)
        with open(os.path.join(tmp, "kernel.json"), "w", encoding="utf-8") as fh:
            json.dump(spec, fh, indent=2)
        user = argv == ["--user"]
        path = KernelSpecManager().install_kernel_spec(tmp, "torchleak", user=user, prefix=None if user else sys.prefix)
    print(f"installed kernelspec 'torchleak' in {path}")
    return EXIT_OK


def version(argv):
    """What this install is and was built with: the torch its extension was compiled against
    and the header-only libraries it used (the system's, or those the sdist bundled). Under a
    torch of another minor release the package refuses to load; this still says what it was
    built with, and the refusal."""
    if argv:
        raise UsageError(f"unexpected arguments: {' '.join(argv)}")
    import torch

    import torchleak
    from torchleak import _build

    print(f"torchleak {torchleak.__version__} ({os.path.dirname(torchleak.__file__)})")
    print(f"torch {torch.__version__} (installed)")
    info = _build.build_info()
    if info is None:
        print("built with: unknown (no build_info.json: an install from before it was recorded)")
    elif "unreadable" in info:
        print(f"built with: unknown ({info['unreadable']})")
    else:
        print(
            f"built against torch {_build.recorded(info, 'torch')}, Python {_build.recorded(info, 'python')}, "
            f"{_build.recorded(info, 'compiler')}"
        )
        for name, version, source in _build.recorded_headers(info):
            print(f"  {name} {version} ({source})")
    if _build.refusal:
        print(f"refused: {_build.refusal}")
    return EXIT_OK


def doctor(argv):
    """Whether torchleak works here, on one screen (torchleak/_doctor.py): run it first after an
    install, and send its screen with a bug report."""
    if argv:
        raise UsageError(f"unexpected arguments: {' '.join(argv)}")
    from torchleak import _doctor

    return _doctor.main()


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        print(__doc__.split("\n\n", 1)[1].strip())
        return EXIT_OK if argv else EXIT_USAGE
    commands = {"run": run, "diff": diff, "install-kernel": install_kernel, "version": version, "doctor": doctor}
    if argv[0] not in commands:
        print(f"torchleak: unknown command {_shown(argv[0])}\n{USAGE}", file=sys.stderr)
        return EXIT_USAGE
    try:
        return commands[argv[0]](argv[1:])
    except RunHelp:
        print(RUN_USAGE)
        print(__doc__.split("\n\n", 1)[1].split("\npython -m torchleak diff")[0].strip())
        return EXIT_OK
    except UsageError as exc:
        print(f"torchleak: {exc}\n{USAGE}", file=sys.stderr)
        return EXIT_USAGE
    except Exception as exc:  # noqa: BLE001 - torchleak itself failed; never exit 1 (= leak)
        traceback.print_exc()
        print(f"torchleak: could not complete the run: {exc}", file=sys.stderr)
        return EXIT_SCRIPT_FAILED


if __name__ == "__main__":
    sys.exit(main())
