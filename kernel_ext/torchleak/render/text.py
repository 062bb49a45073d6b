"""The text report: ``print(report)`` and the CLI. One block per leak, then the rest."""

import os

from .format import (
    UNSEEN,
    allocated_inside_text,
    cause_groups,
    device_text,
    empty_text,
    finding_tensor,
    format_bytes,
    growth_text,
    holder_growth,
    iteration_unit,
    job_lines,
    keeper_text,
    leaks_and_others,
    member_text,
    oom_parts,
    rate_phrase,
    short_path,
    site_text,
    step_what,
)

_STACK_LINES = 6
_GROUP_LINES = 10  # a group's causes listed one per line before "... and N more"

# Control and bidirectional characters a received report may carry in any string (format.py's
# UNSEEN), and a newline inside one line: shown escaped, never sent.
_CONTROLS = {**UNSEEN, 0x0A: "\\x0a"}

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def _source_line(frame):
    """The line as the report carries it (added when the report was made). Never read from
    disk here: a received report's file names are not files of this machine."""
    return (frame or {}).get("source") or ""


def _is_tool_frame(frame):
    """torchleak's own frames and the runpy trampoline: kept in JSON, hidden in text."""
    name = frame.get("file") or ""
    return name.startswith(_PACKAGE_DIR) or name == "<frozen runpy>"


def _path_lines(path, limit=14):
    """The chain from the root to the tensor, one step a line, long middles cut."""
    steps = list(path)
    if len(steps) > limit:
        steps = (
            steps[: limit // 2]
            + [{"kind": "elided", "label": "...", "note": f"{len(path) - limit + 1} more steps"}]
            + steps[-(limit // 2 - 1) :]
        )
    lines = []
    for step in steps:
        note = f"  ({step['note']})" if step.get("note") else ""
        lines.append(f"      {step['label']:<34s} {step_what(step)}{note}")
    return lines


def _stack_lines(stack):
    """The innermost frames, and always the user's own frame, however deep it is."""
    if not stack:
        return []
    shown = list(range(min(len(stack), _STACK_LINES)))
    user = next((i for i, fr in enumerate(stack) if fr.get("user", True)), None)
    if user is not None and user >= _STACK_LINES:
        shown[-1:] = [None, user]  # None: the frames left out
    lines = ["  stack (innermost first):"]
    for i in shown:
        if i is None:
            lines.append(f"     ... {user - _STACK_LINES + 1} more library frame(s)")
            continue
        fr = stack[i]
        mark = " " if fr.get("user", True) else "~"
        lines.append(f"   {mark} {site_text(fr)} in {fr.get('function')}")
    return lines


def _leak_block(f, unit, span=None):
    """A leak finding with no cause entry (a report from before causes existed)."""
    return [
        f"LEAK  {rate_phrase(f, unit)} at {site_text(f['site'])} in {f['site'].get('function')}  [{f.get('severity')}]",
        *_site_details(f, unit, span),
    ]


def _cause_block(cause, findings, unit, span=None, group_fix_code=None):
    """One leak: the cause's line, its sites (biggest first), the biggest site in detail."""
    members = [findings[i] for i in cause["findings"]]
    out = [f"LEAK  {cause['text']}  [{cause.get('severity')}]"]
    if len(members) > 1 and cause.get("holders"):
        # One line's new key in several containers: the containers are what differ.
        out.append("  containers (biggest first):")
        for f in members:
            out.append(f"    {rate_phrase(f, unit, width=10)} in {member_text(cause, f)}")
        out.append(f"  the biggest, {member_text(cause, members[0])}:")
    elif len(members) > 1:
        out.append("  allocation sites (biggest first):")
        for f in members:
            out.append(f"    {rate_phrase(f, unit, width=10)} at {site_text(f['site'])} in {f['site'].get('function')}")
        out.append(f"  the biggest, {site_text(members[0]['site'])}:")
    return out + _site_details(members[0], unit, span, group_fix_code)


def _group_block(group, members, findings, unit, span=None):
    """Causes that are one pattern (fifty lists in one object): the group's line, a line per
    cause (the first ten), the biggest in detail."""
    out = [f"LEAK  {group['text']}  [{group.get('severity')}]", f"  {len(members)} leaks:"]
    for cause in members[:_GROUP_LINES]:
        rate = cause["bytes_per_iteration"]
        size = f"{format_bytes(rate)} per {unit}" if rate > 0 else f"{format_bytes(cause['total_bytes'])} held"
        out.append(f"    {size:>22s}  {keeper_text(cause)}")
    if len(members) > _GROUP_LINES:
        out.append(f"    ... and {len(members) - _GROUP_LINES} more (every one in the JSON report)")
    out.append(f"  the biggest, {keeper_text(members[0])}:")
    # The biggest member's own code frees one of the group; the group's frees them all, and
    # without it no code is shown.
    return out + _cause_block(members[0], findings, unit, span, group.get("fix_code") or "")[1:]


def _site_details(f, unit, span=None, group_fix_code=None):
    """`span`: the iterations a thinned series covers (else one point per iteration).
    `group_fix_code`: the code that frees the finding's whole group, shown instead of its own."""
    out = []
    src = _source_line(f["site"])
    if src:
        out.append(f"    {src}")
    if f.get("ranks_text"):
        out.append(f"  {f['ranks_text']}")
    out.append(
        f"  {f['count']} block(s) alive, {format_bytes(f['total_bytes'])} "
        f"({finding_tensor(f) or 'tensor storage'} on {f['device']})"
    )
    if f.get("autograd_node"):
        out.append(f"  allocated in backward by {f['autograd_node']}")
    if allocated_inside_text(f):
        out.append(f"  {allocated_inside_text(f)}")
    series = f.get("series") or []
    if series:
        trend = f.get("trend", {})
        out.append(
            f"  growth: {format_bytes(series[0])} -> {format_bytes(series[-1])} over "
            f"{span or len(series)} {unit}s (r2 {trend.get('r2', 0):.2f}, "
            f"p {trend.get('p_value', 1):.2g}, confidence {f.get('confidence', 0):.2f})"
        )
    if growth_text(f):
        out.append(f"  {growth_text(f)}")
    if f.get("path"):
        out.append(f"  why alive ({f.get('retention', 'unknown')}): {short_path(f)}")
        out.extend(_path_lines(f["path"]))
    if f.get("holder"):
        h = f["holder"]
        out.append(f"  holder: {short_path(h)} ({h['type']}, {holder_growth(h, unit)})")
    out.extend(_stack_lines([fr for fr in f.get("stack", []) if not _is_tool_frame(fr)]))
    if f.get("suggestion"):
        out.append(f"  fix: {f['suggestion']}")
    code = f.get("fix_code") if group_fix_code is None else group_fix_code
    for line in (code or "").splitlines():
        out.append(f"       {line}")
    return out


def _oom_lines(oom):
    """First thing shown when an out-of-memory error ended the run."""
    holders, sites = oom_parts(oom)
    lines = [f"  OUT OF MEMORY: {oom.get('text', '')}"]
    if oom.get("roles_text"):
        lines.append(f"    {oom['roles_text']}")
    if holders:
        lines.append(
            "    live on "
            + str(oom.get("device"))
            + " by holder: "
            + ", ".join(f"{name} {size}" for name, size in holders)
        )
    if sites:
        lines.append("    by site: " + ", ".join(f"{site} {size}" for site, size in sites))
    return lines


def render(data):
    leaks, others = leaks_and_others(data)
    summary = data.get("summary", {})
    unit = iteration_unit(data)
    span = data.get("iterations") if data.get("series_iterations") else None
    out = [
        f"torchleak report: {data.get('iterations', 0)} {unit}s "
        f"({data.get('boundary')} boundaries, warm-up {data.get('warmup', 0)}), "
        f"torch {data.get('torch_version')}"
    ]
    if data.get("oom"):
        out.extend(_oom_lines(data["oom"]))
    for d in data.get("devices", []):
        out.append("  " + device_text(d))
        if d.get("roles_text"):
            out.append(f"    made of: {d['roles_text']}")
        out.extend(f"    spike: {s.get('text', '')}" for s in d.get("spikes") or [])
    if data.get("ranks"):
        out.append(f"  job of {data['ranks'].get('world_size')} ranks:")
        out.extend(f"    {line}" for line in job_lines(data))
    if data.get("sampling"):
        out.append(f"  sampled: {data['sampling'].get('text', '')}")
    out.append(f"  {summary.get('headline', '')}; score {summary.get('score', 100)}/100 ({summary.get('grade', 'A')})")
    if empty_text(data):
        out.append("")
        out.append(empty_text(data))
    causes = data.get("causes")
    if causes:
        for group, members in cause_groups(data):
            out.append("")
            if len(members) == 1:
                out.extend(_cause_block(members[0], data["findings"], unit, span))
            else:
                out.extend(_group_block(group, members, data["findings"], unit, span))
    else:
        for f in leaks:
            out.append("")
            out.extend(_leak_block(f, unit, span))
    if others:
        out.append("")
        out.append("Not leaks:")
        for f in others:
            held = f"  held by {short_path(f)}" if f.get("path_text") else ""
            where = f"  ({f['ranks_text']})" if f.get("ranks_text") else ""
            grew = f"  ({growth_text(f)})" if growth_text(f) else ""
            out.append(
                f"  {f['verdict']:<10s} {format_bytes(f['total_bytes']):>10s} at "
                f"{site_text(f['site'])} in {f['site'].get('function')}{held}{where}{grew}"
            )
    # Below the findings: a warning qualifies the answer, it is not the answer.
    if data.get("warnings"):
        out.append("")
        out.extend(f"  warning: {w}" for w in data["warnings"])
    return "\n".join(line.translate(_CONTROLS) for line in out)
