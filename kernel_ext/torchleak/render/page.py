"""The saved report page (``report.save("r.html")``): self-contained HTML, no scripts, no network,
every string escaped."""

from .chart import leak_roles, roles_svg, sparkline
from .format import (
    allocated_inside_text,
    cause_groups,
    device_text,
    empty_text,
    escape as _e,
    finding_tensor,
    fix_html,
    format_bytes,
    group_fix_html,
    growth_text,
    iteration_unit,
    member_text,
    oom_parts,
    path_code,
    rate_phrase,
    rate_text,
    site_text,
    step_what,
)


_CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,sans-serif;margin:24px;color:#222}
h1{font-size:20px;margin:0 0 4px} .muted{color:#666}
table{border-collapse:collapse;margin:12px 0;width:100%}
th,td{border-bottom:1px solid #ddd;padding:6px 8px;text-align:left;vertical-align:top}
th{background:#f4f4f4} .leak{color:#c0392b;font-weight:600} .num{text-align:right;white-space:nowrap}
code{font:12px ui-monospace,Menlo,monospace;background:#f6f6f6;padding:1px 3px}
details{margin:4px 0} .oom{background:#fdecea;border-left:4px solid #c0392b;padding:6px 10px;margin:8px 0}
.warn{background:#fff4e5;color:#3e2723;border-left:4px solid #f0a020;padding:6px 10px}
"""


def _devices(data, at, unit):
    parts = ["<h2>Devices</h2><table><tr><th>curve</th><th>device</th></tr>"]
    for d in data["devices"]:
        parts.append(
            f"<tr><td>{sparkline(d.get('allocated') or [], colour='#2c7fb8', at=at, unit=unit)}"
            f"</td><td>{_e(device_text(d))}</td></tr>"
        )
        roles = roles_svg(d, at=at, unit=unit, leak_roles=leak_roles(d))
        if roles:
            spikes = "".join(f"<br>spike: {_e(s.get('text', ''))}" for s in d.get("spikes") or [])
            parts.append(f'<tr data-testid="roles"><td>{roles}</td><td>{_e(d.get("roles_text", ""))}{spikes}</td></tr>')
    parts.append("</table>")
    return parts


def _finding_row(f, at, unit):
    verdict_cls = "leak" if f["verdict"] == "leak" else ""
    stack_items = "".join(
        f"<li><code>{_e(site_text(fr))}</code> in {_e(fr.get('function'))}"
        f"{'' if fr.get('user', True) else ' <span class=muted>(library)</span>'}</li>"
        for fr in f.get("stack", [])
    )
    details = [f"<div>{_e(f['count'])} block(s), {_e(finding_tensor(f) or 'storage')} on {_e(f['device'])}</div>"]
    if f.get("ranks_text"):
        details.append(f'<div class="ranks">{_e(f["ranks_text"])}</div>')
    if growth_text(f):
        details.append(f'<div data-testid="growth">{_e(growth_text(f))}</div>')
    if f.get("autograd_node"):
        details.append(f"<div>allocated in backward by <code>{_e(f['autograd_node'])}</code></div>")
    if allocated_inside_text(f):
        details.append(f"<div>{_e(allocated_inside_text(f))}</div>")
    if f.get("path"):
        steps = "".join(
            f"<li><code>{_e(step.get('label'))}</code> <span class=muted>{_e(step.get('kind'))}</span> "
            f"{_e(step_what(step))}"
            f"{' &mdash; ' + _e(step['note']) if step.get('note') else ''}</li>"
            for step in f["path"]
        )
        details.append(
            f"<div>held by {path_code(f)} "
            f"({_e(f.get('retention', 'unknown'))})</div>"
            f"<details><summary>retaining path</summary><ol>{steps}</ol></details>"
        )
    if f.get("holder"):
        details.append(f"<div>holder {path_code(f['holder'])}</div>")
    if f.get("suggestion"):
        details.append(fix_html(f))
    if stack_items:
        details.append(f"<details><summary>stack</summary><ol>{stack_items}</ol></details>")
    return (
        f'<tr><td class="{verdict_cls}">{_e(f["verdict"])}</td>'
        f"<td><code>{_e(site_text(f['site']))}</code><br>{_e(f['site'].get('function'))}</td>"
        f'<td class="num">{_e(rate_text(f))}</td>'
        f'<td class="num">{_e(format_bytes(f["total_bytes"]))}</td>'
        f"<td>{sparkline(f.get('series') or [], at=at, unit=unit)}</td><td>{''.join(details)}</td></tr>"
    )


def _job(job):
    """A torch.distributed job: one row per rank with its own curves, then the skew lines."""
    parts = [
        f'<h2>Ranks ({_e(job.get("world_size"))})</h2><table data-testid="ranks">'
        "<tr><th>rank</th><th>status</th><th>curve</th><th>summary</th></tr>"
    ]
    for rank in job.get("ranks", []):
        curves = "".join(sparkline(d.get("allocated") or [], colour="#2c7fb8") for d in rank.get("devices", []))
        parts.append(
            f"<tr><td>{_e(rank.get('rank'))}</td><td>{_e(rank.get('status'))}</td>"
            f"<td>{curves}</td><td>{_e(rank.get('text'))}</td></tr>"
        )
    parts.append("</table>")
    parts.extend(f'<p class="warn">{_e(line)}</p>' for line in job.get("skew_text", []))
    return parts


def _oom(oom):
    holders, sites = oom_parts(oom, limit=10)
    parts = ['<div class="oom" data-testid="oom"><h2>Out of memory</h2>', f"<p>{_e(oom.get('text'))}</p>"]
    if oom.get("roles_text"):
        parts.append(f"<p>{_e(oom['roles_text'])}</p>")
    for title, rows in (("live by holder", holders), ("live by site", sites)):
        if rows:
            parts.append(
                f"<h3>{_e(title)}</h3><table>"
                + "".join(
                    f'<tr><td><code>{_e(name)}</code></td><td class="num">{_e(size)}</td></tr>' for name, size in rows
                )
                + "</table>"
            )
    parts.append("</div>")
    return parts


def _cause_item(cause, findings, unit):
    sites = "".join(
        f"<li><code>{_e(member_text(cause, findings[i]))}</code> {_e(rate_phrase(findings[i], unit))}</li>"
        for i in cause["findings"]
    )
    return (
        f'<li class="leak">{_e(cause["text"])} [{_e(cause.get("severity"))}]'
        f"<div>fix: {_e(cause.get('suggestion'))}</div><ul>{sites}</ul></li>"
    )


def render(data):
    findings = data.get("findings", [])
    summary = data.get("summary", {})
    unit, at = iteration_unit(data), data.get("series_iterations")
    parts = [
        '<!DOCTYPE html><html><head><meta charset="utf-8">',
        "<title>torchleak report</title>",
        f"<style>{_CSS}</style></head><body>",
        "<h1>torchleak report</h1>",
        f'<p class="muted">{_e(data.get("iterations", 0))} {_e(unit)}s ({_e(data.get("boundary"))} '
        f"boundaries, warm-up {_e(data.get('warmup', 0))}), torch "
        f"{_e(data.get('torch_version'))}, Python {_e(data.get('python_version'))}. "
        f"Score {_e(summary.get('score', 100))}/100 ({_e(summary.get('grade', 'A'))}).</p>",
    ]
    if data.get("oom"):
        parts.extend(_oom(data["oom"]))
    if data.get("sampling"):
        parts.append(f'<p class="muted">sampled: {_e(data["sampling"].get("text"))}</p>')
    if data.get("devices"):
        parts.extend(_devices(data, at, unit))
    if data.get("ranks"):
        parts.extend(_job(data["ranks"]))
    if data.get("causes"):
        parts.append("<h2>Leaks</h2><ol>")
        for group, members in cause_groups(data):
            if len(members) == 1:
                parts.append(_cause_item(members[0], findings, unit))
                continue
            inner = "".join(_cause_item(cause, findings, unit) for cause in members)
            parts.append(
                f'<li class="leak">{_e(group.get("text"))} [{_e(group.get("severity"))}]'
                f"{group_fix_html(group, members)}<details><summary>the {len(members)} leaks</summary><ol>{inner}</ol>"
                f"</details></li>"
            )
        parts.append("</ol>")
    # Below the verdict: a warning qualifies the answer, it is not the answer.
    parts.extend(f'<p class="warn">{_e(w)}</p>' for w in data.get("warnings", []))
    parts.append("<h2>Findings</h2>")
    if empty_text(data):
        parts.append(f"<p>{_e(empty_text(data))}</p>")
    if findings:
        parts.append(
            f'<table><tr><th>verdict</th><th>site</th><th class="num">per {_e(unit)}</th>'
            '<th class="num">live</th><th>curve</th><th>details</th></tr>'
        )
        parts.extend(_finding_row(f, at, unit) for f in findings)
        parts.append("</table>")
    recs = summary.get("recommendations", [])
    if recs:
        parts.append("<h2>Recommendations</h2><ul>")
        for r in recs:
            parts.append(f"<li><b>{_e(r.get('priority'))}</b>: {_e(r.get('text'))}</li>")
        parts.append("</ul>")
    parts.append("</body></html>")
    return "".join(parts)
