"""The static HTML of a notebook output: needs no JavaScript and survives JupyterLab's
sanitizer (inline ``style=`` attributes only, the growth curve as an SVG data-URI ``<img>``,
retaining paths as nested ``<details>``), so saved and exported notebooks keep it."""

from .chart import curve_svg, leak_roles, roles_svg, svg_img
from .format import (
    LEAKS_SHOWN,
    allocated_inside_text,
    cause_groups,
    device_text,
    empty_text,
    escape as _e,
    fix_html,
    format_bytes,
    group_fix_html,
    growth_text,
    holder_growth,
    iteration_unit,
    job_lines,
    oom_parts,
    path_code,
    progress_text,
    rate_text,
    shown_warnings,
    site_text,
    step_what,
)

# Secondary text, in the theme's colour where JupyterLab gives one.
_MUTED = 'style="color:var(--jp-ui-font-color2,#888)"'

_VERDICT_COLOURS = {
    "leak": "#c0392b",
    "warmup": "#7f8c8d",
    "plateau": "#8e44ad",
    "undecided": "#b9770e",
    "growth": "#b7950b",
    "transient": "#27ae60",
    "allowed": "#2980b9",
    "fragmentation": "#d35400",
}


def _path_details(finding):
    path = finding.get("path") or []
    if not path:
        return ""
    rows = []
    for step in path:
        note = f" <span {_MUTED}>{_e(step['note'])}</span>" if step.get("note") else ""
        rows.append(
            f'<div style="margin-left:12px;font-family:monospace;text-align:left">'
            f"<b>{_e(step.get('label'))}</b> <span {_MUTED}>{_e(step.get('kind'))}</span> "
            f"{_e(step_what(step))}{note}</div>"
        )
    holder = finding.get("holder")
    holder_text = f" &middot; holder {path_code(holder)} ({_e(holder_growth(holder))})" if holder else ""
    return (
        f'<details data-testid="path-tree"><summary>held by {path_code(finding)}'
        f"{holder_text}</summary>{''.join(rows)}</details>"
    )


def _device(d, data, unit="iteration"):
    at = data.get("series_iterations")
    series = {"allocated": (d.get("allocated") or [], "#2c7fb8")}
    if d.get("reserved") and d.get("reserved") != d.get("allocated"):
        series["reserved"] = (d["reserved"], "#999999")
    parts = [
        f"<div>{_e(device_text(d))}</div>",
        svg_img(curve_svg(series, at=at, unit=unit), f"memory of {d['device']} per {unit}"),
    ]
    roles = roles_svg(d, at=at, unit=unit, leak_roles=leak_roles(d))
    if roles:
        parts.append(f'<div data-testid="roles-text" {_MUTED}>{_e(d.get("roles_text", ""))}</div>')
        parts.append(svg_img(roles, f"memory of {d['device']} by role at each {unit}'s peak"))
    parts.extend(
        f'<div data-testid="spike" {_MUTED}>spike: {_e(s.get("text", ""))}</div>' for s in d.get("spikes") or []
    )
    return parts


def _finding_row(f):
    colour = _VERDICT_COLOURS.get(f["verdict"], "#333")
    source = f["site"].get("source")
    source_html = f'<br><code style="color:var(--jp-ui-font-color2,#555)">{_e(source)}</code>' if source else ""
    if allocated_inside_text(f):
        source_html += f'<br><span style="color:var(--jp-ui-font-color2,#888)">{_e(allocated_inside_text(f))}</span>'
    fix = fix_html(f)
    if f.get("ranks_text"):
        source_html += f"<br><b>{_e(f['ranks_text'])}</b>"
    if growth_text(f):
        source_html += f'<br><span data-testid="growth">{_e(growth_text(f))}</span>'
    rate = rate_text(f)
    return (
        f'<tr data-testid="finding-row">'
        f'<td style="color:{colour};font-weight:bold;padding:2px 6px">{_e(f["verdict"])}</td>'
        f'<td style="padding:2px 6px;text-align:left"><code>{_e(site_text(f["site"]))}</code> '
        f"{_e(f['site'].get('function'))}"
        f"{source_html}</td>"
        f'<td style="padding:2px 6px;text-align:right">{_e(rate)}{"" if rate == "held" else "/it"}</td>'
        f'<td style="padding:2px 6px;text-align:right">{_e(format_bytes(f["total_bytes"]))}</td>'
        f'<td style="padding:2px 6px;text-align:left">{_path_details(f)}{fix}</td></tr>'
    )


def _cause(cause, testid="cause"):
    return (
        f'<div data-testid="{testid}" style="margin:4px 0"><b style="color:#c0392b">LEAK</b> '
        f"{_e(cause.get('text'))} <span {_MUTED}>[{_e(cause.get('severity'))}]</span>"
        f"<br>fix: {_e(cause.get('suggestion'))}</div>"
    )


def _cause_group(group, members):
    """A cause alone, or the core's line for causes that are one pattern with the causes
    behind it one click away, in a box of capped height."""
    if len(members) == 1:
        return _cause(members[0])
    inner = "".join(_cause(cause, "group-cause") for cause in members)
    return (
        f'<div data-testid="cause-group" style="margin:4px 0"><b style="color:#c0392b">LEAK</b> '
        f"{_e(group.get('text'))} <span {_MUTED}>[{_e(group.get('severity'))}]</span>"
        f"{group_fix_html(group, members)}"
        f"<details><summary>the {len(members)} leaks</summary>"
        f'<div style="max-height:20em;overflow:auto;margin-left:12px">{inner}</div></details></div>'
    )


def render(data, *, progress=None):
    findings = data.get("findings", [])
    summary = data.get("summary", {})
    unit = iteration_unit(data)
    head = (
        f'<div data-testid="torchleak-static" style="font-family:sans-serif;font-size:13px">'
        f"<div><b>torchleak</b>: {_e(summary.get('headline', ''))} in "
        f"{data.get('iterations', 0)} {_e(unit)}(s) ({_e(data.get('boundary'))} boundaries)"
    )
    if progress:
        head += " &middot; " + progress_text(progress, unit)
    parts = [head + "</div>"]
    oom = data.get("oom")
    if oom:
        holders, sites = oom_parts(oom)
        lists = "".join(
            f"<br>{_e(title)}: " + ", ".join(f"<code>{_e(name)}</code> {_e(size)}" for name, size in rows)
            for title, rows in (("live by holder", holders), ("by site", sites))
            if rows
        )
        parts.append(
            '<div data-testid="oom" style="background:#fdecea;border-left:4px solid #c0392b;'
            f'padding:4px 8px"><b style="color:#c0392b">OUT OF MEMORY</b> {_e(oom.get("text"))}'
            f"{'<br>' + _e(oom['roles_text']) if oom.get('roles_text') else ''}{lists}</div>"
        )
    if data.get("sampling"):
        parts.append(
            f'<div style="color:var(--jp-ui-font-color2,#888)">sampled: {_e(data["sampling"].get("text"))}</div>'
        )
    if job_lines(data):
        parts.append(
            '<div data-testid="ranks">' + "".join(f"<div>{_e(line)}</div>" for line in job_lines(data)) + "</div>"
        )
    if not data.get("causes") and data.get("iterations"):
        parts.append(
            '<div data-testid="no-leak" style="background:#e8f5e9;color:#1b5e20;padding:2px 6px;'
            f'font-weight:bold">No leak. {_e(summary.get("headline", ""))}</div>'
        )
    groups = [_cause_group(group, members) for group, members in cause_groups(data)]
    parts.extend(groups[:LEAKS_SHOWN])
    if len(groups) > LEAKS_SHOWN:
        parts.append(
            f'<details data-testid="more-causes"><summary>show {len(groups) - LEAKS_SHOWN} '
            f"more leak(s)</summary>{''.join(groups[LEAKS_SHOWN:])}</details>"
        )
    # Below the verdict, in colours of their own: a theme's text colour on this light box was
    # near-white on light orange in the dark theme.
    for w in shown_warnings(data, progress):
        parts.append(
            '<div data-testid="warning" style="background:#fff4e5;color:#3e2723;'
            f'border-left:3px solid #e69500;padding:4px">{_e(w)}</div>'
        )
    for d in data.get("devices", []):
        parts.extend(_device(d, data, unit))
    if findings:
        # Many findings scroll inside a box of capped height, not down the notebook.
        parts.append(
            '<div data-testid="findings-box" style="max-height:32em;overflow:auto">'
            '<table style="border-collapse:collapse"><tr><th style="text-align:left">verdict</th>'
            '<th style="text-align:left">site</th><th>growth</th><th>live</th>'
            '<th style="text-align:left">why alive</th></tr>'
            + "".join(_finding_row(f) for f in findings)
            + "</table></div>"
        )
    if empty_text(data):
        parts.append(f"<div>{_e(empty_text(data))}</div>")
    parts.append("</div>")
    return "".join(parts)
