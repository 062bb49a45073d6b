"""The static HTML of a notebook output: needs no JavaScript and survives JupyterLab's
sanitizer (inline ``style=`` attributes only, the growth curve as an SVG data-URI ``<img>``,
retaining paths as nested ``<details>``), so saved and exported notebooks keep it."""

import base64

from .format import (LEAKS_SHOWN, allocated_inside_text, cause_groups, empty_text, escape as _e,
                     format_bytes, iteration_unit, fix_html, job_lines, oom_parts, path_code, progress_text, site_text,
                     step_what)

# Secondary text, in the theme's colour where JupyterLab gives one.
_MUTED = 'style="color:var(--jp-ui-font-color2,#888)"'

_VERDICT_COLOURS = {"leak": "#c0392b", "warmup": "#7f8c8d", "plateau": "#8e44ad",
                    "transient": "#27ae60", "allowed": "#2980b9", "fragmentation": "#d35400"}


def curve_svg(series_by_name, *, width=420, height=140, projection=None, at=None):
    """A small line chart: {name: (values, colour)}; an optional dashed projection line. `at` is
    the iteration of each point when a long run's history was thinned (else point i is
    iteration i)."""
    values = [v for vals, _ in series_by_name.values() for v in vals]
    top = max(values + [1])
    points_n = max((len(vals) for vals, _ in series_by_name.values()), default=0)
    at = list(at) if at and len(at) == points_n else list(range(points_n))
    n = at[-1] + 1 if at else 0
    pad = 28
    inner_w, inner_h = width - pad - 6, height - 22

    def xy(i, v):
        return pad + (inner_w * at[i] / max(n - 1, 1)), 6 + inner_h * (1 - v / top)

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
        points = " ".join("{:.1f},{:.1f}".format(*xy(i, v)) for i, v in enumerate(vals))
        parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="{points}">'
                     f'<title>{_e(name)}</title></polyline>')
    if projection is not None and points_n > 1:
        slope, intercept = projection
        last = points_n - 1
        (x1, y1), (x2, y2) = xy(0, max(intercept, 0)), xy(last, max(intercept + slope * at[last], 0))
        parts.append(f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" '
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
        note = f' <span {_MUTED}>{_e(step["note"])}</span>' if step.get("note") else ""
        rows.append(f'<div style="margin-left:12px;font-family:monospace;text-align:left">'
                    f'<b>{_e(step.get("label"))}</b> <span {_MUTED}>{_e(step.get("kind"))}</span> '
                    f'{_e(step_what(step))}{note}</div>')
    holder = finding.get("holder")
    holder_text = (f' &middot; holder {path_code(holder)} '
                   f'(+{holder["growth_per_iteration"]:.2g}/iteration)' if holder else "")
    return (f'<details data-testid="path-tree"><summary>held by {path_code(finding)}'
            f'{holder_text}</summary>{"".join(rows)}</details>')


def _device(d, at=None):
    series = {"allocated": (d.get("allocated") or [], "#2c7fb8")}
    if d.get("reserved") and d.get("reserved") != d.get("allocated"):
        series["reserved"] = (d["reserved"], "#999999")
    line = f'<div><b>{_e(d["device"])}</b>: {_e(format_bytes((d.get("allocated") or [0])[-1]))} tracked live'
    if d.get("projection_text"):
        line += "; " + _e(d["projection_text"])
    if d.get("verdict") == "fragmentation":
        line += f'; fragmentation ({d.get("fragmentation_ratio", 0) * 100:.0f}% reserved but unused)'
    return [line + "</div>", svg_img(curve_svg(series, at=at), f"memory of {d['device']} per iteration")]


def _finding_row(f):
    colour = _VERDICT_COLOURS.get(f["verdict"], "#333")
    source = f["site"].get("source")
    source_html = f'<br><code style="color:var(--jp-ui-font-color2,#555)">{_e(source)}</code>' if source else ""
    if allocated_inside_text(f):
        source_html += f'<br><span style="color:var(--jp-ui-font-color2,#888)">{_e(allocated_inside_text(f))}</span>'
    fix = fix_html(f)
    if f.get("ranks_text"):
        source_html += f'<br><b>{_e(f["ranks_text"])}</b>'
    return (f'<tr data-testid="finding-row">'
            f'<td style="color:{colour};font-weight:bold;padding:2px 6px">{_e(f["verdict"])}</td>'
            f'<td style="padding:2px 6px;text-align:left"><code>{_e(site_text(f["site"]))}</code> '
            f'{_e(f["site"].get("function"))}'
            f'{source_html}</td>'
            f'<td style="padding:2px 6px;text-align:right">{_e(format_bytes(f["bytes_per_iteration"]))}/it</td>'
            f'<td style="padding:2px 6px;text-align:right">{_e(format_bytes(f["total_bytes"]))}</td>'
            f'<td style="padding:2px 6px;text-align:left">{_path_details(f)}{fix}</td></tr>')


def _cause(cause, testid="cause"):
    return (f'<div data-testid="{testid}" style="margin:4px 0"><b style="color:#c0392b">LEAK</b> '
            f'{_e(cause.get("text"))} <span {_MUTED}>[{_e(cause.get("severity"))}]</span>'
            f'<br>fix: {_e(cause.get("suggestion"))}</div>')


def _cause_group(group, members):
    """A cause alone, or the core's line for causes that are one pattern with the causes
    behind it one click away, in a box of capped height."""
    if len(members) == 1:
        return _cause(members[0])
    inner = "".join(_cause(cause, "group-cause") for cause in members)
    return (f'<div data-testid="cause-group" style="margin:4px 0"><b style="color:#c0392b">LEAK</b> '
            f'{_e(group.get("text"))} <span {_MUTED}>[{_e(group.get("severity"))}]</span>'
            f'<details><summary>the {len(members)} leaks</summary>'
            f'<div style="max-height:20em;overflow:auto;margin-left:12px">{inner}</div></details></div>')


def render(data, *, progress=None):
    findings = data.get("findings", [])
    summary = data.get("summary", {})
    unit = iteration_unit(data)
    head = (f'<div data-testid="torchleak-static" style="font-family:sans-serif;font-size:13px">'
            f'<div><b>torchleak</b>: {_e(summary.get("headline", ""))} in '
            f'{data.get("iterations", 0)} {_e(unit)}(s) ({_e(data.get("boundary"))} boundaries)')
    if progress:
        head += " &middot; " + progress_text(progress, unit)
    parts = [head + "</div>"]
    oom = data.get("oom")
    if oom:
        holders, sites = oom_parts(oom)
        lists = "".join(
            f"<br>{_e(title)}: " + ", ".join(f"<code>{_e(name)}</code> {_e(size)}" for name, size in rows)
            for title, rows in (("live by holder", holders), ("by site", sites)) if rows)
        parts.append('<div data-testid="oom" style="background:#fdecea;border-left:4px solid #c0392b;'
                     f'padding:4px 8px"><b style="color:#c0392b">OUT OF MEMORY</b> {_e(oom.get("text"))}'
                     f'{lists}</div>')
    for w in data.get("warnings", []):
        parts.append(f'<div style="background:#fff4e5;padding:4px">{_e(w)}</div>')
    if data.get("sampling"):
        parts.append(f'<div style="color:var(--jp-ui-font-color2,#888)">sampled: '
                     f'{_e(data["sampling"].get("text"))}</div>')
    if job_lines(data):
        parts.append('<div data-testid="ranks">' + "".join(
            f"<div>{_e(line)}</div>" for line in job_lines(data)) + "</div>")
    if not data.get("causes") and data.get("iterations"):
        parts.append('<div data-testid="no-leak" style="color:var(--jp-success-color1,#2e7d32);'
                     f'font-weight:bold">No leak. {_e(summary.get("headline", ""))}</div>')
    groups = [_cause_group(group, members) for group, members in cause_groups(data)]
    parts.extend(groups[:LEAKS_SHOWN])
    if len(groups) > LEAKS_SHOWN:
        parts.append(f'<details data-testid="more-causes"><summary>show {len(groups) - LEAKS_SHOWN} '
                     f'more leak(s)</summary>{"".join(groups[LEAKS_SHOWN:])}</details>')
    for d in data.get("devices", []):
        parts.extend(_device(d, data.get("series_iterations")))
    if findings:
        # Many findings scroll inside a box of capped height, not down the notebook.
        parts.append('<div data-testid="findings-box" style="max-height:32em;overflow:auto">'
                     '<table style="border-collapse:collapse"><tr><th style="text-align:left">verdict</th>'
                     '<th style="text-align:left">site</th><th>growth</th><th>live</th>'
                     '<th style="text-align:left">why alive</th></tr>'
                     + "".join(_finding_row(f) for f in findings) + "</table></div>")
    if empty_text(data):
        parts.append(f"<div>{_e(empty_text(data))}</div>")
    parts.append("</div>")
    return "".join(parts)
