"""One display per report, as one MIME bundle.

- ``application/vnd.jupyter.widget-view+json``: the live anywidget view (when anywidget is
  installed and a kernel runs the display);
- ``text/html``: a static snapshot that needs no JavaScript and survives JupyterLab's
  sanitizer: inline ``style=`` attributes only, the growth curve as an SVG data-URI ``<img>``,
  retaining paths as nested ``<details>``;
- ``text/plain``: a few lines for consoles, CI logs and tests;
- ``application/json``: the report itself (``torchleak.report/1``).
"""

import base64
import html

from ._report import format_bytes, site_text

WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
_VERDICT_COLOURS = {"leak": "#c0392b", "warmup": "#7f8c8d", "plateau": "#8e44ad",
                    "transient": "#27ae60", "allowed": "#2980b9", "fragmentation": "#d35400"}


def _e(value):
    return html.escape(str(value), quote=True)


def curve_svg(series_by_name, *, width=420, height=140, projection=None):
    """A small line chart: {name: (values, colour)}; an optional dashed projection line."""
    values = [v for vals, _ in series_by_name.values() for v in vals]
    top = max(values + [1])
    n = max((len(vals) for vals, _ in series_by_name.values()), default=0)
    pad = 28
    inner_w, inner_h = width - pad - 6, height - 22

    def xy(i, v):
        x = pad + (inner_w * i / max(n - 1, 1))
        y = 6 + inner_h * (1 - v / top)
        return f"{x:.1f},{y:.1f}"

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="10">',
             f'<line x1="{pad}" y1="{6 + inner_h}" x2="{width - 6}" y2="{6 + inner_h}" stroke="#999"/>',
             f'<line x1="{pad}" y1="6" x2="{pad}" y2="{6 + inner_h}" stroke="#999"/>',
             f'<text x="2" y="12" fill="#555">{_e(format_bytes(top))}</text>',
             f'<text x="{pad}" y="{height - 2}" fill="#555">iteration 1</text>',
             f'<text x="{width - 60}" y="{height - 2}" fill="#555">{n}</text>']
    for name, (vals, colour) in series_by_name.items():
        if not vals:
            continue
        points = " ".join(xy(i, v) for i, v in enumerate(vals))
        parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="{points}">'
                     f'<title>{_e(name)}</title></polyline>')
    if projection is not None and n > 1:
        slope, intercept = projection
        parts.append(f'<line x1="{xy(0, max(intercept, 0)).split(",")[0]}" '
                     f'y1="{xy(0, max(intercept, 0)).split(",")[1]}" '
                     f'x2="{xy(n - 1, max(intercept + slope * (n - 1), 0)).split(",")[0]}" '
                     f'y2="{xy(n - 1, max(intercept + slope * (n - 1), 0)).split(",")[1]}" '
                     f'stroke="#c0392b" stroke-dasharray="4 3"/>')
    parts.append("</svg>")
    return "".join(parts)


def svg_img(svg, alt):
    data = base64.b64encode(svg.encode("utf-8")).decode("ascii")
    return f'<img alt="{_e(alt)}" src="data:image/svg+xml;base64,{data}">'


def _path_details(finding):
    path = finding.get("path") or []
    if not path:
        return ""
    rows = []
    for step in path:
        tensor = step.get("tensor")
        what = (f"{tensor.get('dtype')} {list(tensor.get('shape') or [])} "
                f"{format_bytes(tensor.get('nbytes'))}"
                + (f", allocated at {site_text(tensor['site'])}" if tensor.get("site") else "")
                if tensor else step.get("type", ""))
        note = f' <span style="color:#888">{_e(step["note"])}</span>' if step.get("note") else ""
        rows.append(f'<div style="margin-left:12px;font-family:monospace;text-align:left">'
                    f'<b>{_e(step.get("label"))}</b> <span style="color:#888">{_e(step.get("kind"))}</span> '
                    f'{_e(what)}{note}</div>')
    holder = finding.get("holder")
    holder_text = (f' &middot; holder <code>{_e(holder["path_text"])}</code> '
                   f'(+{holder["growth_per_iteration"]:.2g}/iteration)' if holder else "")
    return (f'<details data-testid="path-tree"><summary>held by <code>{_e(finding.get("path_text"))}</code>'
            f'{holder_text}</summary>{"".join(rows)}</details>')


def render_fragment(data, *, progress=None):
    """The sanitizer-safe static HTML of a report (inline styles only, no scripts)."""
    findings = data.get("findings", [])
    leaks = [f for f in findings if f["verdict"] == "leak"]
    head = (f'<div data-testid="torchleak-static" style="font-family:sans-serif;font-size:13px">'
            f'<div><b>torchleak</b>: {len(leaks)} leak(s) in {data.get("iterations", 0)} '
            f'iteration(s) ({_e(data.get("boundary"))} boundaries)')
    if progress:
        head += (f' &middot; iteration {progress["k"]} of {progress["n"]}, '
                 f'{progress["elapsed"]:.1f} s elapsed, ~{progress["remaining"]:.1f} s left')
    head += "</div>"
    parts = [head]
    for w in data.get("warnings", []):
        parts.append(f'<div style="background:#fff4e5;padding:4px">{_e(w)}</div>')
    for d in data.get("devices", []):
        series = {"allocated": (d.get("allocated") or [], "#2c7fb8")}
        if d.get("reserved") and d.get("reserved") != d.get("allocated"):
            series["reserved"] = (d["reserved"], "#999999")
        rate = d.get("leak_bytes_per_iteration", 0)
        line = f'<div><b>{_e(d["device"])}</b>: {_e(format_bytes((d.get("allocated") or [0])[-1]))} tracked live'
        if rate > 0 and d.get("projected_oom_iteration") is not None:
            left = max(d["projected_oom_iteration"] - data.get("iterations", 0), 0)
            line += (f'; at {_e(format_bytes(rate))} per iteration, {_e(d["device"])} is full in '
                     f'~{left:,} iterations')
        if d.get("verdict") == "fragmentation":
            line += f'; fragmentation ({d.get("fragmentation_ratio", 0) * 100:.0f}% reserved but unused)'
        parts.append(line + "</div>")
        parts.append(svg_img(curve_svg(series), f"memory of {d['device']} per iteration"))
    if findings:
        rows = []
        for f in findings:
            colour = _VERDICT_COLOURS.get(f["verdict"], "#333")
            source = f["site"].get("source")
            source_html = f'<br><code style="color:#555">{_e(source)}</code>' if source else ""
            rows.append(
                f'<tr data-testid="finding-row"><td style="color:{colour};font-weight:bold;padding:2px 6px">{_e(f["verdict"])}</td>'
                f'<td style="padding:2px 6px;text-align:left"><code>{_e(site_text(f["site"]))}</code> {_e(f["site"].get("function"))}'
                f'{source_html}</td>'
                f'<td style="padding:2px 6px;text-align:right">{_e(format_bytes(f["bytes_per_iteration"]))}/it</td>'
                f'<td style="padding:2px 6px;text-align:right">{_e(format_bytes(f["total_bytes"]))}</td>'
                f'<td style="padding:2px 6px;text-align:left">{_path_details(f)}'
                f'{("<div>fix: " + _e(f["suggestion"]) + "</div>") if f.get("suggestion") else ""}</td></tr>')
        parts.append('<table style="border-collapse:collapse"><tr><th style="text-align:left">verdict</th>'
                     '<th style="text-align:left">site</th><th>growth</th><th>live</th>'
                     '<th style="text-align:left">why alive</th></tr>' + "".join(rows) + "</table>")
    else:
        parts.append("<div>No tensor allocated during the run survived an iteration boundary.</div>")
    parts.append('<div style="color:#888;font-size:11px">the interactive view needs a running kernel</div></div>')
    return "".join(parts)


def render_plain(data, *, progress=None, limit=4):
    findings = data.get("findings", [])
    leaks = [f for f in findings if f["verdict"] == "leak"]
    lines = [f"torchleak: {len(leaks)} leak(s), {len(findings) - len(leaks)} other finding(s) in "
             f"{data.get('iterations', 0)} iteration(s)"]
    if progress:
        lines.append(f"iteration {progress['k']} of {progress['n']}, {progress['elapsed']:.1f} s elapsed, "
                     f"~{progress['remaining']:.1f} s remaining")
    for f in findings[:limit]:
        held = f" held by {f['path_text']}" if f.get("path_text") else ""
        holder = f" (holder {f['holder']['path_text']})" if f.get("holder") else ""
        lines.append(f"  {f['verdict']}: {format_bytes(f['bytes_per_iteration'])}/iteration at "
                     f"{site_text(f['site'])}{held}{holder}")
    if len(findings) > limit:
        lines.append(f"  ... {len(findings) - limit} more")
    return "\n".join(lines)


def report_bundle(data, *, widget=None, progress=None):
    bundle = {
        "text/plain": render_plain(data, progress=progress),
        "text/html": render_fragment(data, progress=progress),
        "application/json": data,
    }
    if widget is not None:
        bundle[WIDGET_MIME] = {"version_major": 2, "version_minor": 0, "model_id": widget.model_id}
    return bundle
