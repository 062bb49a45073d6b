"""Report: the Python face of a `torchleak.report/1` document built by the C++ core.

The analysis and the JSON come from C++; this module only presents them (text, HTML) and gives
attribute access to findings.
"""

import html
import json
import linecache
import os

SCHEMA_VERSION = "torchleak.report/1"


def format_bytes(n):
    n = float(n or 0)
    sign = "-" if n < 0 else ""
    n = abs(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{sign}{n:.0f} {unit}" if unit == "B" else f"{sign}{n:.1f} {unit}"
        n /= 1024
    return f"{sign}{n:.1f} TiB"


def site_text(site):
    """`In [7], line 3` for a notebook cell, `file:line` otherwise."""
    if not site:
        return "<unknown>"
    if site.get("cell") is not None:
        return f"In [{site['cell']}], line {site.get('line')}"
    if site.get("file") == "<backward>":
        return f"backward ({site.get('function')})"
    return f"{site.get('file')}:{site.get('line')}"


class Finding:
    """One allocation site with its verdict; fields as in the report JSON (``f.site``,
    ``f.bytes_per_iteration``, ``f.path_text`` ...)."""

    __slots__ = ("_data",)

    def __init__(self, data):
        self._data = data

    def __getattr__(self, name):
        try:
            return self._data[name]
        except KeyError:
            raise AttributeError(f"finding has no field {name!r}") from None

    def __getitem__(self, key):
        return self._data[key]

    def get(self, key, default=None):
        return self._data.get(key, default)

    def to_dict(self):
        return self._data

    @property
    def site_text(self):
        return site_text(self._data.get("site"))

    def __repr__(self):
        return (f"<Finding {self.verdict} at {self.site_text}: "
                f"{format_bytes(self.bytes_per_iteration)}/iteration, {self.count} blocks>")


class Report:
    """A torchleak report. ``report.leaks``, ``report.findings``, ``report.to_json()``,
    ``report.save(path)`` (``.json`` or ``.html``); ``str(report)`` is the text report."""

    def __init__(self, text):
        data = json.loads(text) if isinstance(text, (str, bytes)) else text
        if not isinstance(data, dict) or data.get("schema_version") != SCHEMA_VERSION:
            raise ValueError(f"not a {SCHEMA_VERSION} document")
        self._data = data
        self.findings = [Finding(f) for f in data.get("findings", [])]

    @classmethod
    def from_json(cls, text):
        """Parse and validate a saved report (the C++ schema checks every field)."""
        from . import _core
        return cls(_core.normalize_report(text))

    @classmethod
    def load(cls, path):
        with open(path, encoding="utf-8") as fh:
            return cls.from_json(fh.read())

    # -- fields -------------------------------------------------------------------------------
    @property
    def leaks(self):
        """Findings whose verdict is "leak", biggest first."""
        leaks = [f for f in self.findings if f.verdict == "leak"]
        return sorted(leaks, key=lambda f: (f.total_bytes, f.bytes_per_iteration), reverse=True)

    @property
    def iterations(self):
        return self._data.get("iterations", 0)

    @property
    def devices(self):
        return self._data.get("devices", [])

    @property
    def summary(self):
        return self._data.get("summary", {})

    @property
    def warnings(self):
        return self._data.setdefault("warnings", [])

    def to_dict(self):
        return self._data

    def to_json(self, indent=None):
        return json.dumps(self._data, indent=indent, ensure_ascii=False)

    def save(self, path):
        """Write the report as JSON (``.json``) or as a self-contained HTML page (``.html``)."""
        path = os.fspath(path)
        ext = os.path.splitext(path)[1].lower()
        if ext == ".json":
            text = self.to_json(indent=2)
        elif ext in (".html", ".htm"):
            text = self.to_html()
        else:
            raise ValueError(f"cannot tell the format of {path!r}: use a .json or .html file name")
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(text)
        return path

    # -- text ---------------------------------------------------------------------------------
    def __str__(self):
        return render_text(self._data)

    def __repr__(self):
        return (f"<torchleak.Report: {len(self.leaks)} leak(s), {len(self.findings)} finding(s), "
                f"{self.iterations} iterations>")

    def to_html(self):
        return render_html(self._data)


# ----------------------------------------------------------------------------------------------
# text

def _source_line(frame):
    if not frame:
        return ""
    if frame.get("source"):
        return frame["source"]
    try:
        return linecache.getline(frame.get("file") or "", int(frame.get("line") or 0)).strip()
    except (OSError, ValueError, TypeError):
        return ""


_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def _is_tool_frame(frame):
    """torchleak's own frames and the runpy trampoline: kept in JSON, hidden in text."""
    name = frame.get("file") or ""
    return name.startswith(_PACKAGE_DIR) or name == "<frozen runpy>"


def _device_line(d, iterations):
    alloc = d.get("allocated") or [0]
    line = f"{d['device']}: {format_bytes(alloc[-1])} tracked live at the end"
    rate = d.get("leak_bytes_per_iteration", 0)
    if rate > 0:
        line += f", leaking {format_bytes(rate)} per iteration"
        oom = d.get("projected_oom_iteration")
        if oom is not None:
            remaining = max(oom - iterations, 0)
            line += (f"; at {format_bytes(rate)} per iteration, {d['device']} is full in "
                     f"~{remaining:,} iterations")
    return line


def _tensor_text(t):
    text = f"{t.get('dtype')} {list(t.get('shape') or [])} {format_bytes(t.get('nbytes'))}"
    if t.get("site"):
        text += f", allocated at {site_text(t['site'])}"
    return text


def _path_lines(path, limit=14):
    """The chain from the root to the tensor, one step a line, long middles cut."""
    steps = list(path)
    if len(steps) > limit:
        steps = steps[:limit // 2] + [{"kind": "elided", "label": "...",
                                       "note": f"{len(path) - limit + 1} more steps"}] + steps[-(limit // 2 - 1):]
    lines = []
    for step in steps:
        what = _tensor_text(step["tensor"]) if step.get("tensor") else step.get("type", "")
        note = f"  ({step['note']})" if step.get("note") else ""
        lines.append(f"      {step['label']:<34s} {what}{note}")
    return lines


def render_text(data):
    findings = data.get("findings", [])
    leaks = [f for f in findings if f["verdict"] == "leak"]
    others = [f for f in findings if f["verdict"] != "leak"]
    out = [f"torchleak report: {data.get('iterations', 0)} iterations "
           f"({data.get('boundary')} boundaries, warm-up {data.get('warmup', 0)}), "
           f"torch {data.get('torch_version')}"]
    for d in data.get("devices", []):
        out.append("  " + _device_line(d, data.get("iterations", 0)))
    summary = data.get("summary", {})
    out.append(f"  {len(leaks)} leak(s), {len(others)} other finding(s); "
               f"score {summary.get('score', 100)}/100 ({summary.get('grade', 'A')})")
    for w in data.get("warnings", []):
        out.append(f"  warning: {w}")
    if not findings:
        out.append("")
        out.append("No tensor allocated during the run survived an iteration boundary.")
    for f in leaks:
        out.append("")
        out.append(f"LEAK  {format_bytes(f['bytes_per_iteration'])} per iteration at "
                   f"{site_text(f['site'])} in {f['site'].get('function')}  "
                   f"[{f.get('severity')}]")
        src = _source_line(f["site"])
        if src:
            out.append(f"    {src}")
        shape = f.get("shape")
        what = (f"{f.get('dtype')} {list(shape)}" if shape is not None else "tensor storage")
        out.append(f"  {f['count']} block(s) alive, {format_bytes(f['total_bytes'])} "
                   f"({what} on {f['device']})")
        if f.get("autograd_node"):
            out.append(f"  allocated in backward by {f['autograd_node']}")
        series = f.get("series") or []
        if series:
            trend = f.get("trend", {})
            out.append(f"  growth: {format_bytes(series[0])} -> {format_bytes(series[-1])} over "
                       f"{len(series)} iterations (r2 {trend.get('r2', 0):.2f}, "
                       f"p {trend.get('p_value', 1):.2g}, confidence {f.get('confidence', 0):.2f})")
        if f.get("path"):
            out.append(f"  why alive ({f.get('retention', 'unknown')}): {f.get('path_text')}")
            out.extend(_path_lines(f["path"]))
        if f.get("holder"):
            h = f["holder"]
            out.append(f"  holder: {h['path_text']} ({h['type']}, "
                       f"+{h['growth_per_iteration']:.2g} per iteration)")
        stack = [fr for fr in f.get("stack", []) if not _is_tool_frame(fr)][:6]
        if stack:
            out.append("  stack (innermost first):")
            for fr in stack:
                mark = " " if fr.get("user", True) else "~"
                out.append(f"   {mark} {site_text(fr)} in {fr.get('function')}")
        if f.get("suggestion"):
            out.append(f"  fix: {f['suggestion']}")
    if others:
        out.append("")
        out.append("Not leaks:")
        for f in others:
            held = f"  held by {f['path_text']}" if f.get("path_text") else ""
            out.append(f"  {f['verdict']:<10s} {format_bytes(f['total_bytes']):>10s} at "
                       f"{site_text(f['site'])} in {f['site'].get('function')}{held}")
    return "\n".join(out)


# ----------------------------------------------------------------------------------------------
# HTML: one self-contained page, no scripts, no network; every string escaped.

def _e(value):
    return html.escape(str(value), quote=True)


def _sparkline(values, width=220, height=40, color="#c0392b"):
    if not values:
        return ""
    hi = max(max(values), 1)
    n = len(values)
    step = width / max(n - 1, 1)
    points = " ".join(f"{i * step:.1f},{height - 2 - (v / hi) * (height - 4):.1f}"
                      for i, v in enumerate(values))
    return (f'<svg class="spark" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
            f'role="img" aria-label="live bytes per iteration">'
            f'<polyline fill="none" stroke="{color}" stroke-width="2" points="{points}"/></svg>')


_CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,sans-serif;margin:24px;color:#222}
h1{font-size:20px;margin:0 0 4px} .muted{color:#666}
table{border-collapse:collapse;margin:12px 0;width:100%}
th,td{border-bottom:1px solid #ddd;padding:6px 8px;text-align:left;vertical-align:top}
th{background:#f4f4f4} .leak{color:#c0392b;font-weight:600} .num{text-align:right;white-space:nowrap}
code{font:12px ui-monospace,Menlo,monospace;background:#f6f6f6;padding:1px 3px}
details{margin:4px 0} .warn{background:#fff4e5;border-left:4px solid #f0a020;padding:6px 10px}
"""


def render_html(data):
    findings = data.get("findings", [])
    iterations = data.get("iterations", 0)
    summary = data.get("summary", {})
    parts = ["<!DOCTYPE html><html><head><meta charset=\"utf-8\">",
             "<title>torchleak report</title>", f"<style>{_CSS}</style></head><body>",
             "<h1>torchleak report</h1>",
             f"<p class=\"muted\">{_e(iterations)} iterations ({_e(data.get('boundary'))} "
             f"boundaries, warm-up {_e(data.get('warmup', 0))}), torch "
             f"{_e(data.get('torch_version'))}, Python {_e(data.get('python_version'))}. "
             f"Score {_e(summary.get('score', 100))}/100 ({_e(summary.get('grade', 'A'))}).</p>"]
    for w in data.get("warnings", []):
        parts.append(f"<p class=\"warn\">{_e(w)}</p>")
    if data.get("devices"):
        parts.append("<h2>Devices</h2><table><tr><th>device</th><th>tracked live bytes</th>"
                     "<th>curve</th><th>leak / iteration</th><th>projected full at</th></tr>")
        for d in data["devices"]:
            alloc = d.get("allocated") or [0]
            oom = d.get("projected_oom_iteration")
            parts.append(
                f"<tr><td>{_e(d['device'])}</td><td class=\"num\">{_e(format_bytes(alloc[-1]))}</td>"
                f"<td>{_sparkline(alloc, color='#2c7fb8')}</td>"
                f"<td class=\"num\">{_e(format_bytes(d.get('leak_bytes_per_iteration', 0)))}</td>"
                f"<td class=\"num\">{_e('iteration ' + format(oom, ',') if oom is not None else '-')}</td></tr>")
        parts.append("</table>")
    parts.append("<h2>Findings</h2>")
    if not findings:
        parts.append("<p>No tensor allocated during the run survived an iteration boundary.</p>")
    else:
        parts.append("<table><tr><th>verdict</th><th>site</th><th class=\"num\">per iteration</th>"
                     "<th class=\"num\">live</th><th>curve</th><th>details</th></tr>")
        for f in findings:
            verdict_cls = "leak" if f["verdict"] == "leak" else ""
            shape = f.get("shape")
            tensor = (f"{f.get('dtype')} {list(shape)}" if shape is not None else "storage")
            stack_items = "".join(
                f"<li><code>{_e(site_text(fr))}</code> in {_e(fr.get('function'))}"
                f"{'' if fr.get('user', True) else ' <span class=muted>(library)</span>'}</li>"
                for fr in f.get("stack", []))
            details = [f"<div>{_e(f['count'])} block(s), {_e(tensor)} on {_e(f['device'])}</div>"]
            if f.get("autograd_node"):
                details.append(f"<div>allocated in backward by <code>{_e(f['autograd_node'])}</code></div>")
            if f.get("path"):
                steps = "".join(
                    f"<li><code>{_e(step.get('label'))}</code> <span class=muted>{_e(step.get('kind'))}</span> "
                    f"{_e(_tensor_text(step['tensor']) if step.get('tensor') else step.get('type', ''))}"
                    f"{' &mdash; ' + _e(step['note']) if step.get('note') else ''}</li>"
                    for step in f["path"])
                details.append(f"<div>held by <code>{_e(f['path_text'])}</code> "
                               f"({_e(f.get('retention', 'unknown'))})</div>"
                               f"<details><summary>retaining path</summary><ol>{steps}</ol></details>")
            if f.get("holder"):
                details.append(f"<div>holder <code>{_e(f['holder']['path_text'])}</code></div>")
            if f.get("suggestion"):
                details.append(f"<div>fix: {_e(f['suggestion'])}</div>")
            if stack_items:
                details.append(f"<details><summary>stack</summary><ol>{stack_items}</ol></details>")
            parts.append(
                f"<tr><td class=\"{verdict_cls}\">{_e(f['verdict'])}</td>"
                f"<td><code>{_e(site_text(f['site']))}</code><br>{_e(f['site'].get('function'))}</td>"
                f"<td class=\"num\">{_e(format_bytes(f['bytes_per_iteration']))}</td>"
                f"<td class=\"num\">{_e(format_bytes(f['total_bytes']))}</td>"
                f"<td>{_sparkline(f.get('series') or [])}</td><td>{''.join(details)}</td></tr>")
        parts.append("</table>")
    recs = summary.get("recommendations", [])
    if recs:
        parts.append("<h2>Recommendations</h2><ul>")
        for r in recs:
            parts.append(f"<li><b>{_e(r.get('priority'))}</b>: {_e(r.get('text'))}</li>")
        parts.append("</ul>")
    parts.append("</body></html>")
    return "".join(parts)
