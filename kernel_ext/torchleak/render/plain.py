"""The ``text/plain`` lines of a notebook output: consoles, CI logs, terminals."""

from .format import (
    LEAKS_SHOWN,
    cause_groups,
    growth_text,
    iteration_unit,
    progress_text,
    rate_phrase,
    shown_warnings,
    short_path,
    site_text,
    visible,
)


def render(data, *, progress=None, limit=4):
    findings = data.get("findings", [])
    summary = data.get("summary", {})
    unit = iteration_unit(data)
    lines = [f"torchleak: {summary.get('headline', '')} in {data.get('iterations', 0)} {unit}(s)"]
    if progress:
        lines.append(progress_text(progress, unit))
    if data.get("oom"):
        lines.append(f"  OUT OF MEMORY: {data['oom'].get('text', '')}")
    groups = cause_groups(data)
    for group, _ in groups[:LEAKS_SHOWN]:
        lines.append(f"  LEAK {group.get('text', '')}")
    if len(groups) > LEAKS_SHOWN:
        lines.append(f"  ... {len(groups) - LEAKS_SHOWN} more leak(s)")
    for f in findings[:limit]:
        held = f" held by {short_path(f)}" if f.get("path_text") else ""
        holder = f" (holder {short_path(f['holder'])})" if f.get("holder") else ""
        ranks = f" ({f['ranks_text']})" if f.get("ranks_text") else ""
        grew = f"; {growth_text(f)}" if growth_text(f) else ""
        lines.append(f"  {f['verdict']}: {rate_phrase(f, unit)} at {site_text(f['site'])}{held}{holder}{ranks}{grew}")
    if len(findings) > limit:
        lines.append(f"  ... {len(findings) - limit} more")
    # A console or CI log shows nothing else: what the report could not see is said here too.
    lines.extend(f"  warning: {w}" for w in shown_warnings(data, progress))
    return "\n".join(visible(line) for line in lines)
