"""Report: the Python face of a `torchleak.report/1` document built by the C++ core.

The analysis and the JSON come from C++; this module gives attribute access to findings, and
its text and HTML come from torchleak.render.
"""

from __future__ import annotations

import gc
import json
import os
import pickle
import stat
import tempfile
from typing import Any, Generic, TypeVar, overload

from ._core import SCHEMA_VERSION
from .render import memory_snapshot as _memory_snapshot, page as _page, text as _text
from .render.format import format_bytes, site_text


_T = TypeVar("_T")


class _Field(Generic[_T]):
    """A documented field of a finding, typed for checkers and editors; read from the JSON as
    any other field is (a field the report lacks is an AttributeError)."""

    def __set_name__(self, owner: type, name: str) -> None:
        self._name = name

    @overload
    def __get__(self, finding: None, owner: type | None = None) -> _Field[_T]: ...
    @overload
    def __get__(self, finding: Finding, owner: type | None = None) -> _T: ...
    def __get__(self, finding: Finding | None, owner: type | None = None) -> _T | _Field[_T]:
        if finding is None:
            return self
        try:
            return finding._data[self._name]
        except KeyError:
            raise AttributeError(f"finding has no field {self._name!r}") from None


class Finding:
    """One allocation site with its verdict; fields as in the report JSON (``f.site``,
    ``f.bytes_per_iteration``, ``f.path_text`` ...). The fields below are the documented ones;
    any other field of the JSON reads the same way."""

    __slots__ = ("_data",)

    # leak, warmup, plateau, transient, fragmentation, allowed, growth, undecided
    verdict: _Field[str] = _Field()
    severity: _Field[str] = _Field()
    device: _Field[str] = _Field()  # "cpu", "cuda:0"
    site: _Field[dict[str, Any]] = _Field()  # file, line, function, text; cell in a notebook
    stack: _Field[list[dict[str, Any]]] = _Field()
    bytes_per_iteration: _Field[int] = _Field()
    rate_text: _Field[str] = _Field()  # "1.0 MiB", or "held": a leak that keeps memory without growing
    total_bytes: _Field[int] = _Field()
    count: _Field[int] = _Field()
    confidence: _Field[float] = _Field()
    series: _Field[list[int]] = _Field()
    trend: _Field[dict[str, Any]] = _Field()
    dtype: _Field[str | None] = _Field()
    shape: _Field[list[int] | None] = _Field()
    tensor_text: _Field[str | None] = _Field()
    retention: _Field[str] = _Field()
    path: _Field[list[dict[str, Any]]] = _Field()
    path_text: _Field[str | None] = _Field()
    holder: _Field[dict[str, Any] | None] = _Field()
    suggestion: _Field[str] = _Field()
    fix_code: _Field[str] = _Field()
    fix_rule: _Field[str] = _Field()
    role: _Field[str] = _Field()

    def __init__(self, data: dict[str, Any]) -> None:
        self._data = data

    def __getattr__(self, name: str) -> Any:
        try:
            return self._data[name]
        except KeyError:
            raise AttributeError(f"finding has no field {name!r}") from None

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self._data.get(key, default)

    def to_dict(self) -> dict[str, Any]:
        return self._data

    @property
    def site_text(self) -> str:
        return site_text(self._data.get("site"))

    def __repr__(self) -> str:
        return (
            f"<Finding {self.verdict} at {self.site_text}: "
            f"{format_bytes(self.bytes_per_iteration)}/iteration, {self.count} blocks>"
        )


def parse_document(text: str | bytes) -> Any:
    """json.loads of a report or a look with the cyclic collector paused: a report of 2,000
    sites makes 10^5 containers, none in a cycle, and the collections their allocations
    triggered (a full one among them) took half the parse and found nothing to free."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        return json.loads(text)
    finally:
        if collecting:
            gc.enable()


def biggest_leaks(findings: list[Finding]) -> list[Finding]:
    """The findings whose verdict is "leak", biggest first (a report's, or a watch look's)."""
    leaks = [f for f in findings if f.verdict == "leak"]
    return sorted(leaks, key=lambda f: (f.total_bytes, f.bytes_per_iteration), reverse=True)


class Report:
    """A torchleak report. ``report.leaks``, ``report.findings``, ``report.to_json()``,
    ``report.save(path)`` (``.json``, ``.html`` or ``.pickle``); ``str(report)`` is the text report."""

    def __init__(self, text: str | bytes | dict[str, Any]) -> None:
        data = parse_document(text) if isinstance(text, (str, bytes)) else text
        if not isinstance(data, dict) or data.get("schema_version") != SCHEMA_VERSION:
            raise ValueError(f"not a {SCHEMA_VERSION} document")
        self._data: dict[str, Any] = data
        self.findings: list[Finding] = [Finding(f) for f in data.get("findings", [])]

    @classmethod
    def from_json(cls, text: str | bytes | bytearray | memoryview) -> Report:
        """Parse and validate a saved report (str or UTF-8 bytes; the C++ schema checks every
        field)."""
        from . import _core

        if not isinstance(text, (str, bytes, bytearray, memoryview)):
            # pybind11's own TypeError repeats repr() of the argument: a whole report (and
            # objects' own __repr__ run) for the usual mistake, json.load's dict.
            hint = ": for a parsed report, Report(data)" if isinstance(text, dict) else ""
            raise TypeError(f"Report.from_json takes the JSON text (str or bytes), not a {type(text).__name__}{hint}")
        normalized = _core.normalize_report(text)
        del text  # a large report's text is let go before its Python objects are made
        return cls(normalized)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Report:
        """Read a saved report; a path that is no regular file (a FIFO, /dev/zero) is a
        ValueError, not a wait or a read without end."""
        return cls.from_json(read_report_file(path))

    # -- fields -------------------------------------------------------------------------------
    @property
    def leaks(self) -> list[Finding]:
        """Findings whose verdict is "leak", biggest first."""
        return biggest_leaks(self.findings)

    @property
    def causes(self) -> list[dict[str, Any]]:
        """One entry per root cause of the leaks (a holder, a graph, a line), biggest first:
        ``cause["text"]``, ``cause["findings"]`` (indices into ``findings``), its fix."""
        return self._data.get("causes", [])

    @property
    def iterations(self) -> int:
        return self._data.get("iterations", 0)

    @property
    def series_iterations(self) -> list[int]:
        """The iteration each point of the findings' and devices' series was taken at. A long
        run keeps a thinned grid of boundaries (at most 528 points however long it ran); when
        every boundary was kept, point i is iteration i and this is ``range(iterations)``."""
        return self._data.get("series_iterations") or list(range(self.iterations))

    @property
    def devices(self) -> list[dict[str, Any]]:
        return self._data.get("devices", [])

    @property
    def oom(self) -> dict[str, Any] | None:
        """The forensics of the out-of-memory error that ended the run, or None: ``device``,
        its ``allocated_bytes`` / ``reserved_bytes`` / ``capacity_bytes`` at the failure,
        ``findings`` that grew before it (likely culprit first), live bytes ``by_site`` and
        ``by_holder``, and ``text``, the account every view shows."""
        return self._data.get("oom")

    @property
    def summary(self) -> dict[str, Any]:
        return self._data.get("summary", {})

    @property
    def warnings(self) -> list[str]:
        return self._data.setdefault("warnings", [])

    def to_dict(self) -> dict[str, Any]:
        return self._data

    def to_json(self, indent: int | None = None) -> str:
        return json.dumps(self._data, indent=indent, ensure_ascii=False)

    def redacted(self, project: str | os.PathLike[str] | None = None) -> Report:
        """A copy to share (a CI artefact, an issue): without tensor shapes and dtypes, source
        lines and notebook cell text, absolute paths (relative to ``project``, default the
        working directory, or to site-packages; any other hashed) and string dictionary keys
        (hashed); with the verdicts, rates, sizes, roles and the paths' structure."""
        from ._redact import redact

        return Report(redact(self._data, project))

    def save(self, path: str | os.PathLike[str], redact: bool = False) -> str:
        """Write the report as JSON (``.json``), as a self-contained HTML page (``.html``) or
        as a memory snapshot for PyTorch's memory viewer (``.pickle``: the structure of
        ``torch.cuda.memory._snapshot()``, see :meth:`to_memory_snapshot`). With ``redact``,
        what :meth:`redacted` writes."""
        if redact:
            return self.redacted().save(path)
        path = os.fspath(path)
        ext = os.path.splitext(path)[1].lower()
        content: str | bytes
        if ext == ".json":
            content = self.to_json(indent=2)
        elif ext in (".html", ".htm"):
            content = self.to_html()
        elif ext in (".pickle", ".pkl"):
            content = pickle.dumps(self.to_memory_snapshot(), protocol=_memory_snapshot.PICKLE_PROTOCOL)
        else:
            raise ValueError(f"cannot tell the format of {path!r}: use a .json, .html or .pickle file name")
        _write_atomically(path, content.encode("utf-8") if isinstance(content, str) else content)
        return path

    def to_memory_snapshot(self) -> dict[str, Any]:
        """The live blocks with their allocation stacks, as ``torch.cuda.memory._snapshot()``
        structures them (``segments``, ``device_traces``): what https://pytorch.org/memory_viz
        and ``torch.cuda._memory_viz`` read."""
        return _memory_snapshot.render(self._data)

    # -- text ---------------------------------------------------------------------------------
    def __str__(self) -> str:
        return _text.render(self._data)

    def __repr__(self) -> str:
        return (
            f"<torchleak.Report: {len(self.leaks)} leak(s), {len(self.findings)} finding(s), "
            f"{self.iterations} iterations>"
        )

    def to_html(self) -> str:
        return _page.render(self._data)


def read_report_file(path):
    """The bytes of a saved report. Opened without blocking and checked to be a regular file
    before reading: a FIFO would wait for a writer forever, a device never end."""
    fd = os.open(os.fspath(path), os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ValueError(f"{os.fspath(path)!r} is not a regular file")
        return fh.read()


# What Report.save can write, by the file name's end; and what each of the --json/--html
# options (CLI, magics, watch()) takes.
SAVE_EXTENSIONS = (".json", ".html", ".htm", ".pickle", ".pkl")
OUTPUT_EXTENSIONS = {"json": (".json",), "html": (".html", ".htm")}


def writable_path(path, extensions=SAVE_EXTENSIONS):
    """The absolute path a report will be saved to, checked before the run it reports on: a
    run of hours must not end in "cannot write". The directory is tried the way the save
    will use it, by creating and removing a file there (os.access answers yes to root in
    /proc, a read-only mount or a full disk's quota). ValueError says what is wrong."""
    from ._config import brief

    if not isinstance(path, (str, os.PathLike)):
        raise ValueError(f"a report path is a str, got {brief(path)}")
    path = os.path.abspath(os.fspath(path))
    if not path.lower().endswith(extensions):
        raise ValueError(f"{path!r}: the file name must end in {' or '.join(extensions)}")
    directory = os.path.dirname(path)
    if not os.path.isdir(directory):
        raise ValueError(f"{path!r}: no such directory {directory!r}")
    if os.path.isdir(path):
        raise ValueError(f"{path!r} is a directory")
    try:
        fd, trial = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".trial", dir=directory)
        os.close(fd)
        os.unlink(trial)
    except OSError as exc:
        raise ValueError(f"{path!r}: cannot write in {directory!r} ({exc.strerror or exc})") from None
    return path


def save_each(report, paths, redact=False):
    """Save `report` to every path, each on its own: one that fails (a full disk, a removed
    directory, a view that cannot render this report) does not keep the others from being
    written. Returns (saved paths, [(path, exception)]) for the caller to say what failed its
    own way. A Ctrl-C is not caught: the caller decides what an interrupt means."""
    if redact:
        report = report.redacted()
    saved, failed = [], []
    for path in paths:
        try:
            saved.append(report.save(path))
        except Exception as exc:  # noqa: BLE001 - the other outputs must still be written
            failed.append((path, exc))
    return saved, failed


def _write_atomically(path, data):
    """Write beside `path` and rename over it: a full disk or an interrupted write leaves the
    report an earlier run wrote whole, never a truncated one (the rename is atomic on POSIX and
    Windows when both names are on one file system, which beside guarantees)."""
    directory, name = os.path.split(os.path.abspath(path))
    temporary = os.path.join(directory, f".{name}.{os.getpid()}.{id(data):x}.tmp")
    # 0o666 less the umask, as open() would give the report itself.
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(temporary, path)
    except BaseException:
        try:
            os.unlink(temporary)
        except OSError:
            pass
        raise
