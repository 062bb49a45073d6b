"""The IPython extension: `%load_ext torchleak`.

    %%leakcheck [-n N] [--warmup K] [--min-bytes SIZE] [--json PATH] [--html PATH] [--redact]
    %leakwatch [on|off|reset]
    %leakreport [--json PATH] [--html PATH] [--redact]
    %leakconfig [KEY=VALUE ...]

Every option error is a UsageError with the usage line; nothing escapes into the kernel loop
as anything else. Unloading removes every event handler and stops watching.
"""

import argparse
import builtins
import keyword
import re
import shlex
import sys
import time

from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, line_magic, magics_class
from IPython.display import display

from . import _core, _out_of_memory, _tracking, _user_code
from ._config import brief, config
from ._ledger import CellLedger
from ._report import save_each
from ._tracebacks import from_code, show_from_code
from ._widget import make_widget
from .render.bundle import report_bundle, report_metadata
from .render.format import escape, format_bytes, iteration_unit, progress_text

_UPDATES_PER_SECOND = 4
# A live update names holders and groups findings by cause, as the finished report does (a
# view without retaining paths had said "8 leak(s)" of tensors that "stay alive" at a model's
# lines while the report said one leak, held by val_losses). Paths cost a walk of the heap: 80
# ms an update against 36 without, on a small GPT's cell; the updates come at most this share
# of the run's time apart, so a slower walk shows less often, never slows the run more.
_LIVE_SHARE = 0.1
_CELL_MAGICS = ("leakcheck",)


class _Parser(argparse.ArgumentParser):
    """argparse that raises UsageError (with the usage line) instead of exiting."""

    def __init__(self, magic):
        prefix = "%%" if magic in _CELL_MAGICS else "%"
        # A fixed width: the help is the same in every terminal and notebook.
        super().__init__(
            prog=prefix + magic, add_help=False, formatter_class=lambda prog: argparse.HelpFormatter(prog, width=92)
        )
        self.magic = magic

    def error(self, message):
        raise UsageError(f"{message}\nusage: {USAGE[self.magic]}")

    def exit(self, status=0, message=None):
        raise UsageError(f"{message or 'bad arguments'}\nusage: {USAGE[self.magic]}")


def _split(magic, line):
    try:
        return shlex.split(line)
    except ValueError as exc:
        raise UsageError(f"{exc}\nusage: {USAGE[magic]}") from None


def _a_name_for_the_report(name):
    """-o NAME: an identifier that is no keyword, no __dunder__ (`-o __builtins__` replaced
    the namespace's builtins and every later cell failed) and no builtin's name (`-o print`
    put the report over print() for every later cell)."""
    dunder = name.startswith("__") and name.endswith("__")
    return name.isidentifier() and not keyword.iskeyword(name) and not dunder and not hasattr(builtins, name)


def _int_at_least(minimum, maximum=10**9):
    def parse(text):
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {brief(text)}") from None
        if not minimum <= value <= maximum:
            raise argparse.ArgumentTypeError(f"expected a number between {minimum} and {maximum:,}, got {brief(value)}")
        return value

    return parse


def _size(text):
    try:
        return _core.parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _output_arguments(parser):
    parser.add_argument("--json", default=None, metavar="PATH", help="write the report as JSON")
    parser.add_argument("--html", default=None, metavar="PATH", help="write the report as a self-contained page")
    parser.add_argument(
        "--redact", action="store_true", help="write Report.redacted(): the output shown here stays whole"
    )


def _leakcheck_arguments(parser):
    parser.add_argument("-n", type=_int_at_least(1), default=20, metavar="N", help="runs of the cell (default 20)")
    parser.add_argument(
        "--warmup",
        type=_int_at_least(0),
        default=None,
        metavar="K",
        help="first runs recorded but not judged (default torchleak.config.warmup, below N)",
    )
    parser.add_argument(
        "--min-bytes", type=_size, default=0, metavar="SIZE", help="leave out sites that never hold this much (1MiB)"
    )
    parser.add_argument("-o", dest="output", default=None, metavar="NAME", help="keep the Report in this variable")
    _output_arguments(parser)


def _leakwatch_arguments(parser):
    parser.add_argument(
        "action",
        nargs="?",
        choices=("on", "off", "reset"),
        metavar="on|off|reset",
        help="on: from the next cell; off: stop; reset: forget what was recorded. "
        "No argument: what cell watch has seen",
    )


def _leakconfig_arguments(parser):
    parser.add_argument(
        "settings", nargs="*", metavar="KEY=VALUE", help="set all or none of them. No argument: show the settings"
    )


# Each magic's arguments, declared once: its parser, the usage line every error ends with, and
# the options `%magic?` lists come from here.
_ARGUMENTS = {
    "leakcheck": _leakcheck_arguments,
    "leakwatch": _leakwatch_arguments,
    "leakreport": _output_arguments,
    "leakconfig": _leakconfig_arguments,
}


def _build_parser(magic):
    parser = _Parser(magic)
    _ARGUMENTS[magic](parser)
    return parser


# Built once: a parser keeps no state between parse_args calls.
_PARSERS = {magic: _build_parser(magic) for magic in _ARGUMENTS}


# One line each, whatever width argparse wrapped it to.
USAGE = {magic: " ".join(parser.format_usage().removeprefix("usage: ").split()) for magic, parser in _PARSERS.items()}


def _check_outputs(args, magic):
    """--json and --html checked before the cell runs, not after it."""
    from ._report import OUTPUT_EXTENSIONS, writable_path

    for option, extensions in OUTPUT_EXTENSIONS.items():
        path = getattr(args, option)
        if path is not None:
            try:
                setattr(args, option, writable_path(path, extensions))
            except ValueError as exc:
                raise UsageError(f"--{option} {exc}\nusage: {USAGE[magic]}") from None


def _save(report, json_path, html_path, redact=False):
    """The files asked for, each on its own as the CLI and watch() write them: one that cannot
    be written (a full disk) is said on stderr and the others are still written; the usage was
    right, so no usage line. With --redact, Report.redacted() (the output shown stays whole)."""
    paths = [p for p in (json_path, html_path) if p is not None]
    for path, exc in save_each(report, paths, redact=redact)[1] if paths else ():
        print(f"torchleak: could not write {path}: {exc}", file=sys.stderr)


# A live update carries at most this many findings (the view draws 25 rows before "show
# more"); the finished report carries every one.
LIVE_FINDINGS = 100


def _with_text(progress, data):
    """The progress with its line (`text`) as format.progress_text words it: the widget and the
    saved report's renderer show that line, not one of their own."""
    if not progress:
        return progress
    return {**progress, "text": progress_text(progress, iteration_unit(data))}


def _stop_said(tracker, failure):
    """What the run line of a check the user stopped says in place of a warning: where the run
    stopped (`where`: "in iteration 44 of 200") and the report's warnings that line says
    (`said`). Stop is the user's own act: tqdm marks its bar; an orange box saying "by
    KeyboardInterrupt" under the line "stopped after 44 of 200 iterations" said it twice, as
    if it were an error. A run that failed on its own keeps its warning."""
    if not isinstance(failure, KeyboardInterrupt) or not tracker._stopped_at or not tracker._stop_warning:
        return {}
    return {"where": tracker._stopped_at, "said": [tracker._stop_warning]}


class _LiveDisplay:
    """One display per report: a widget (if available) updated in place while the cell runs,
    throttled, then the final bundle without it. A saved notebook keeps no widget state by
    default, so the finished report must not need one: it is carried as torchleak's own MIME
    type (rendered by the lab extension) with text/html beside it.

    An update only changes the widget's traits: the view redraws in place (rows the user
    opened stay open, the Stop button stays under the pointer) and the report crosses the wire
    once. Replacing the display at each update made JupyterLab build a new view each time (17
    for one 30-iteration run, each drawn from traits it had not yet been sent). The display
    itself is replaced once, by finish(); a front end that draws no widget shows the first
    state until then. (Whether a view exists cannot be asked mid-run: the front end's answer
    waits behind the running cell.)"""

    def __init__(self):
        self.widget = None
        self.handle = None
        self.last = 0.0
        self.cost = 0.0  # seconds the last live report took to build

    def show(self, live, progress=None):
        """`live`: the report's live view (Tracker._build_report's live_findings)."""
        progress = _with_text(progress, live)
        self.widget = make_widget(live, progress)
        self.handle = display(
            report_bundle(live, widget=self.widget, progress=progress),
            metadata=report_metadata(progress),
            raw=True,
            display_id=True,
        )

    def due(self):
        """Whether a live update is due: a few per second, and no more than _LIVE_SHARE of the
        run's time spent building them."""
        return time.monotonic() - self.last >= max(1.0 / _UPDATES_PER_SECOND, self.cost / _LIVE_SHARE)

    def view_of(self, tracker):
        """The live view of the run so far (the report cut to LIVE_FINDINGS, with paths), timed."""
        begun = time.monotonic()
        view = tracker._build_report(live_findings=LIVE_FINDINGS).to_dict()
        self.cost = time.monotonic() - begun
        return view

    def update(self, live, progress=None):
        self.last = time.monotonic()
        if self.widget is not None:
            self.widget.report = live
            self.widget.progress = _with_text(progress, live) or {}

    def finish(self, data, progress=None):
        """The final report, in place of the live one; the widget's model is closed.
        `progress` (done) gives the run's line: "20 iterations in 12.1 s"."""
        progress = _with_text(progress, data)
        bundle, metadata = report_bundle(data, progress=progress), report_metadata(progress)
        if self.handle is not None:
            self.handle.update(bundle, metadata=metadata, raw=True)
        else:
            display(bundle, metadata=metadata, raw=True)
        if self.widget is not None:
            self.widget.close()
            self.widget = None


@magics_class
class LeakMagics(Magics):
    def __init__(self, shell):
        super().__init__(shell)
        self.watch = None  # the Tracker of %leakwatch, while on
        self.watch_report = None  # its last report, kept after %leakwatch off
        self._ledger = CellLedger()  # what %leakwatch shows after a cell
        self._callbacks = []

    # -- %%leakcheck --------------------------------------------------------------------------
    @cell_magic
    def leakcheck(self, line, cell):
        """Run the cell N times, each run an iteration, and show where leaked memory was
        allocated, why it is still alive, and its growth curve."""
        args = _PARSERS["leakcheck"].parse_args(_split("leakcheck", line))
        if args.output is not None and not _a_name_for_the_report(args.output):
            raise UsageError(
                f"-o needs a Python name of your own (not a keyword, a builtin's name or a __dunder__ "
                f"name, which Python and IPython keep for themselves), not {brief(args.output)}\n"
                f"usage: {USAGE['leakcheck']}"
            )
        _check_outputs(args, "leakcheck")
        warmup = config.warmup if args.warmup is None else args.warmup
        if warmup >= args.n:
            raise UsageError(f"--warmup must be smaller than -n\nusage: {USAGE['leakcheck']}")
        __tracebackhide__ = True  # IPython leaves this frame out of tracebacks
        code = self._compile_cell(cell)

        resume_watch = self._pause_watch()
        tracker = _tracking.Tracker(warmup=warmup, min_bytes=args.min_bytes, boundary="repeat")
        live = _LiveDisplay()
        started = time.monotonic()

        def run_cell():
            __tracebackhide__ = True
            exec(code, self.shell.user_global_ns, self.shell.user_ns)

        def after_each(k):
            if live.due():
                elapsed = time.monotonic() - started
                live.update(
                    live.view_of(tracker),
                    {"k": k, "n": args.n, "elapsed": elapsed, "remaining": elapsed / k * (args.n - k)},
                )

        try:
            with tracker:
                live.show(
                    live.view_of(tracker),
                    {"k": 0, "n": args.n, "elapsed": 0.0, "remaining": 0.0},
                )
                failure = tracker._run_iterations(run_cell, args.n, after_each=after_each, describe=self._in_cell_names)
            report = tracker.report()
            live.finish(
                report.to_dict(),
                {
                    "k": tracker.iterations,
                    "n": args.n,
                    "done": True,
                    "elapsed": time.monotonic() - started,
                    "stopped": failure is not None,
                    **_stop_said(tracker, failure),
                },
            )
            if args.output is not None:
                # Like %timeit -o: the Report (data only, no tensors) under the user's name.
                self.shell.user_ns[args.output] = report
            _save(report, args.json, args.html, args.redact)
        finally:
            if resume_watch:
                self._start_watch()
        if failure is not None:
            # The user's frames only: from the cell's own code on, as if the cell had failed
            # by itself (the magic's frames hide themselves too).
            _out_of_memory.attach(failure, report)
            if hasattr(failure, "add_note"):
                failure.add_note(
                    f"torchleak: %%leakcheck stopped {tracker._stopped_at} "
                    f"of In [{self._current_cell()}]; "
                    f"the report above covers the iterations that ran before the stop"
                )
            show_from_code(self.shell, failure, code)
            raise failure.with_traceback(from_code(failure.__traceback__, code))
        return None

    def _in_cell_names(self, exc):
        """An exception's message with the names IPython compiled cells under (temporary
        files in ipykernel, `<ipython-input-N-...>`) written as the user sees them: `In [N]`."""
        text = str(exc)
        for name, number in _user_code.cell_files(self.shell).items():
            if name in text:
                text = text.replace(name, f"In [{number}]")
        return text

    def _compile_cell(self, cell):
        """Compile the cell body under the cell's own file name, so frames read
        `In [n], line m` with m counted from the cell's first line (the magic line)."""
        number = self._current_cell()
        source = "\n" + self.shell.transform_cell(cell)
        name = self.shell.compile.cache(source, number, raw_code="\n" + cell)
        try:
            return self.shell.compile(source, name, "exec")
        except SyntaxError as exc:
            where = f"In [{number}], line {exc.lineno}" if exc.lineno else f"In [{number}]"
            code_line = f"\n    {exc.text.strip()}" if (exc.text or "").strip() else ""
            raise UsageError(
                f"the cell does not compile: {exc.msg} ({where}){code_line}\nusage: {USAGE['leakcheck']}"
            ) from None

    def _current_cell(self):
        """The In [n] of the running cell: the newest number IPython compiled a cell under
        (IPython 9 has already advanced execution_count while a cell runs, IPython 8 has not)."""
        numbers = _user_code.cell_files(self.shell).values()
        return max(numbers) if numbers else self.shell.execution_count

    # -- %leakwatch ---------------------------------------------------------------------------
    @line_magic
    def leakwatch(self, line):
        """Cell watch: every cell run is an iteration; after a cell that left tensors alive or
        freed them, a ledger of what and who holds it. No argument: what cell watch has seen."""
        action = _PARSERS["leakwatch"].parse_args(_split("leakwatch", line)).action
        if action is None:
            print(self._watch_state())
        elif action == "on":
            already = self.watch is not None or bool(self._callbacks)
            if self.watch is None:
                self._register_events()
                self._start_watch()
            # Said at once: nothing else shows it is on until a cell leaves something alive.
            print(
                "torchleak: cell watch is on"
                + (" already" if already else ": every cell run is an iteration")
                + "; a ledger follows each cell that leaves tensors alive or frees them"
            )
        elif action == "off":
            was_on = self.watch is not None or bool(self._callbacks)
            self._stop_watch()
            self._unregister_events()
            print("torchleak: cell watch is off" + ("" if was_on else " already"))
        else:  # reset: forget what was recorded, keep watching if it was on
            was_on = self.watch is not None or bool(self._callbacks)
            self._stop_watch()
            self.watch_report = None
            self._ledger.forget()
            if was_on:
                self._start_watch()
            print("torchleak: cell watch reset" + (", watching from the next cell" if was_on else ""))

    def _watch_state(self):
        if self.watch is None and not self._callbacks:
            state = "torchleak: cell watch is off"
            return state + (" (%leakreport shows the last watch)" if self.watch_report else "")
        if self.watch is None:
            return "torchleak: cell watch is on, paused while another tracking session runs"
        tracker = self.watch
        report = tracker.report(paths=False)
        data = report.to_dict()
        live = tracker._last_iteration["live"]
        leaks = len(data.get("causes") or [])
        return (
            f"torchleak: cell watch is on: {tracker.iterations} cell run(s) recorded, "
            f"{format_bytes(live)} tracked live, {leaks} leak(s) so far"
            + (" (%leakreport for details)" if leaks else "")
        )

    def _register_events(self):
        if self._callbacks:
            return
        events = self.shell.events
        for name, fn in (("post_run_cell", self._post_run_cell),):
            events.register(name, fn)
            self._callbacks.append((name, fn))

    def _unregister_events(self):
        for name, fn in self._callbacks:
            try:
                self.shell.events.unregister(name, fn)
            except ValueError:
                pass
        self._callbacks = []

    def _start_watch(self):
        if _tracking.active_tracker() is not None:
            return  # another tracking session runs: watch resumes after it
        # Preempted by an explicit track()/check(), it stops; _post_run_cell resumes it.
        self.watch = _tracking.Tracker(boundary="cell", on_preempt=self._stop_watch).start()

    def _stop_watch(self):
        tracker, self.watch = self.watch, None
        if tracker is not None:
            tracker.stop()
            self.watch_report = tracker.report()

    def _pause_watch(self):
        if self.watch is None:
            return False
        self._stop_watch()
        return True

    def _cell_file(self, count):
        """The file name IPython compiled cell `count` under (re-runs of one source share
        the group the core derives from it)."""
        files = _user_code.cell_files(self.shell)
        return next((name for name, n in reversed(list(files.items())) if n == count), "")

    def _post_run_cell(self, result):
        # An event handler must never raise into the kernel loop.
        try:
            if self.watch is None:
                self._start_watch()
                return
            cell = getattr(result, "execution_count", None)
            cell = cell if isinstance(cell, int) else self._current_cell()
            self.watch._end_cell(self._cell_file(cell), cell)
            error = getattr(result, "error_in_exec", None)
            if _out_of_memory.is_out_of_memory(error):
                # The cell died of an OOM: the whole forensics, not the one-line ledger.
                report = self.watch._build_report(failure=error)
                _out_of_memory.attach(error, report)
                _LiveDisplay().finish(report.to_dict())
                return
            # The recorder's counts say whether the cell changed anything: a cell that left
            # nothing alive and freed nothing costs no report (the common case).
            totals = self.watch._last_iteration
            threshold = max(config.min_bytes, 1)
            if totals["born"] < threshold and totals["freed"] < threshold:
                return
            # The ledger names holders and sums bytes: no dtype or shape, whose heap scan of
            # every Python object was four fifths of a watched cell's cost (23 of 28 ms).
            report = (
                self.watch._build_report(grown_paths_only=True, shapes=False) if totals["born"] >= threshold else None
            )
            self._show_ledger(report, cell, totals["freed"], threshold)
        except Exception as exc:  # noqa: BLE001
            print(f"torchleak: cell watch stopped after an internal error: {exc}")
            try:
                self._stop_watch()
            except Exception:  # noqa: BLE001
                self.watch = None

    def _user_object(self, name):
        """The object a holder's name is in the user's namespace: `h`, or `Out[13]` (the output
        cache); None for any other name (a path, a frame's local)."""
        namespace = self.shell.user_ns
        match = re.fullmatch(r"Out\[(\d+)\]", name)
        if match:
            outputs = namespace.get("Out")
            return outputs.get(int(match[1])) if type(outputs) is dict else None
        return namespace.get(name) if name.isidentifier() else None

    def _show_ledger(self, report, cell, freed, threshold):
        text = self._ledger.line(report, cell, freed, threshold, lookup=self._user_object)
        if text is None:
            return
        html = (
            '<div data-testid="torchleak-ledger" style="font-family:sans-serif;font-size:12px;'
            'color:var(--jp-ui-font-color2,#555)">' + escape(text) + "</div>"
        )
        display({"text/plain": text, "text/html": html}, raw=True)

    # -- %leakreport --------------------------------------------------------------------------
    @line_magic
    def leakreport(self, line):
        """The notebook so far (every cell run an iteration): cells whose re-runs keep growing
        are leaks."""
        args = _PARSERS["leakreport"].parse_args(_split("leakreport", line))
        _check_outputs(args, "leakreport")
        if self.watch is not None:
            report = self.watch.report()
        elif self.watch_report is not None:
            report = self.watch_report
        else:
            raise UsageError(f"nothing recorded yet: run %leakwatch on first\nusage: {USAGE['leakreport']}")
        _save(report, args.json, args.html, args.redact)
        _LiveDisplay().finish(report.to_dict())

    # -- %leakconfig --------------------------------------------------------------------------
    @line_magic
    def leakconfig(self, line):
        """Set thresholds and the allow-list: %leakconfig min_leak_bytes_per_iteration=1MiB allow=kv_cache*"""
        words = _PARSERS["leakconfig"].parse_args(_split("leakconfig", line)).settings
        if not words:
            print(repr(config))
            return
        pending = []
        for word in words:
            key, sep, value = word.partition("=")
            if not sep or not key:
                raise UsageError(f"expected KEY=VALUE, got {brief(word)}\nusage: {USAGE['leakconfig']}")
            pending.append((key, value))
        try:
            config.set_text(pending)  # all or nothing
        except ValueError as exc:
            raise UsageError(f"{exc}\nusage: {USAGE['leakconfig']}") from None

    def close(self):
        self._unregister_events()
        self._stop_watch()


_loaded = {}


def _document_options():
    """`%leakcheck?` lists the options as the parser declares them, never a copy of them."""
    for magic in _ARGUMENTS:
        method = getattr(LeakMagics, magic)
        method.__doc__ = f"{method.__doc__}\n\n{_PARSERS[magic].format_help()}"


_document_options()


def load_ipython_extension(shell):
    if id(shell) in _loaded:
        return
    magics = LeakMagics(shell)
    shell.register_magics(magics)
    _loaded[id(shell)] = magics


def unload_ipython_extension(shell):
    magics = _loaded.pop(id(shell), None)
    if magics is not None:
        magics.close()
