"""What every view shares: the byte formatter, the core's display strings, escaping."""

import html


def format_bytes(n):
    """1536 -> "1.5 KiB". The same output as the core's formatBytes and the widget's
    formatBytes (tests/python/test_render.py holds the three together)."""
    n = float(n or 0)
    sign = "-" if n < 0 else ""
    n = abs(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{sign}{n:.0f} {unit}" if unit == "B" else f"{sign}{n:.1f} {unit}"
        n /= 1024
    return f"{sign}{n:.1f} TiB"


def rate_text(finding):
    """The core's word for a finding's per-iteration column ("1.0 MiB", or "held" for a leak
    that holds memory without growing); a report written before it gets its number."""
    return finding.get("rate_text") or format_bytes(finding.get("bytes_per_iteration"))


def rate_phrase(finding, unit, width=0):
    """The rate in a sentence: "1.0 MiB per iteration", or "40.1 MiB held" (the amount
    right-aligned in `width` characters, for a column of them)."""
    said = rate_text(finding)
    if said == "held":
        return f"{format_bytes(finding.get('total_bytes')):>{width}} held"
    return f"{said:>{width}} per {unit}"


def site_text(frame):
    """`In [7], line 3`, `train.py:42`, `backward (MmBackward0)`: the core's text of a frame."""
    if not frame:
        return "<unknown>"
    return frame.get("text") or "<unknown>"


def holder_growth(holder, unit="iteration"):
    """The core's words for how a holder grows ("+192 entries per iteration, sharing 1
    storage"); a report written before them gets its number."""
    return holder.get("growth_text") or f"+{holder.get('growth_per_iteration') or 0:.2g} per {unit}"


def member_text(cause, finding):
    """How a cause lists one of its findings: by its container when the cause is one line's new
    key in several containers (the core's `holders`), else by its allocation site."""
    if cause.get("holders") and finding.get("holder"):
        return short_path(finding["holder"])
    return site_text(finding.get("site"))


def short_path(owner):
    """A finding's or holder's path as sentences and cells show it: the core's `path_short`
    (middle steps elided), or the whole path in a report written before it had one."""
    if not owner:
        return ""
    return owner.get("path_short") or owner.get("path_text") or ""


def keeper_text(cause):
    """What keeps a cause's memory, as a line shows it: its holder's short path, else the
    core's keeper (a tensor keeping a graph, a site)."""
    holder = cause.get("holder")
    return (
        short_path(holder) if holder and holder.get("path_text") == cause.get("keeper") else cause.get("keeper") or ""
    )


def path_code(owner):
    """The short path as HTML code, the whole path in its tooltip when they differ; long names
    wrap instead of widening the output."""
    whole = (owner or {}).get("path_text") or ""
    short = short_path(owner)
    title = f' title="{escape(whole)}"' if whole and whole != short else ""
    return f'<code style="overflow-wrap:anywhere"{title}>{escape(short)}</code>'


def _fix_lines(sentence, code, code_style=""):
    """`fix: <sentence>`, and the code on a line of its own when there is some (the line to
    paste; the sentence is not code)."""
    out = f"<div>fix: {escape(sentence)}</div>"
    if code:
        out += (
            f'<div data-testid="fix-code"><code style="overflow-wrap:anywhere{code_style}">{escape(code)}</code></div>'
        )
    return out


def fix_html(finding):
    """The finding's fix sentence, and the core's code for it when there is one."""
    if not finding.get("suggestion"):
        return ""
    return _fix_lines(finding["suggestion"], finding.get("fix_code"))


def group_fix_html(group, members):
    """A group's code that frees every member, one line per cause, in a box of capped height,
    or "" (the biggest member's own code frees one of them)."""
    if not group.get("fix_code") or len(members) < 2:
        return ""
    return _fix_lines(
        f"free all {len(members)} together",
        group["fix_code"],
        ";white-space:pre-wrap;display:inline-block;max-height:6.5em;overflow:auto",
    )


def iteration_unit(data):
    """What every rate in the report is per: the core's word ("iteration", "cell run")."""
    return data.get("iteration_unit") or "iteration"


def allocated_inside_text(finding):
    """`allocated inside somepkg/ops.py:41 (reshape_heads)`: the installed package's line under
    the user's site, and the core's words for the op of torch.compile's generated code that
    allocated (`made in torch.compile's generated code by aten.addmm (graph node input_3)`);
    None when neither."""
    inside = finding.get("allocated_inside")
    parts = [f"allocated inside {site_text(inside)} ({inside.get('function')})"] if inside else []
    compiled = (finding.get("compiled_op") or {}).get("text")
    if compiled:
        parts.append(compiled)
    return "; ".join(parts) or None


def growth_text(finding):
    """The core's words for when a finding's growth began and whether it stopped ("leaking since
    iteration 122, 1.1 MiB per iteration", "grew 25.0 MiB until iteration 101, flat since"), or
    None (a report from before growth_since, or a site that never grew)."""
    return (finding.get("growth_since") or {}).get("text") or None


# Characters a name or a file name can carry that a reader must never be shown raw: C0 and C1
# controls (an ESC that recolours a terminal, a NUL, a carriage return that overwrites a line)
# and the bidirectional and invisible format characters (U+202E shows a name reversed: the
# "Trojan Source" spoof). Every view shows them as their escapes. Tab and newline are layout.
_UNSEEN_CODES = [
    *range(0x00, 0x09),
    *range(0x0B, 0x20),
    *range(0x7F, 0xA0),
    0x061C,
    *range(0x200B, 0x2010),
    *range(0x2028, 0x202F),
    *range(0x2060, 0x2065),
    *range(0x2066, 0x206A),
    0xFEFF,
]
UNSEEN = {c: f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}" for c in _UNSEEN_CODES}


def visible(value):
    """The text with every control and bidirectional character shown as its escape."""
    return str(value).translate(UNSEEN)


def escape(value):
    """Every string shown in HTML goes through here."""
    return html.escape(visible(value), quote=True)


def step_what(step):
    """What a path step reaches: the core's words for its tensor (`float32 [256, 1024] 1.0 MiB,
    allocated at train.py:16`), or the object's type."""
    tensor = step.get("tensor")
    return tensor.get("text") or "tensor" if tensor else step.get("type", "")


def finding_tensor(finding):
    """The core's `float32 [256, 1024]`, or None when no tensor describes the finding's
    blocks."""
    return finding.get("tensor_text")


def device_text(device):
    """The core's line for a device (live bytes, leak, projection, fragmentation)."""
    return device.get("text") or device.get("device", "")


def leaks_and_others(data):
    findings = data.get("findings", [])
    leaks = [f for f in findings if f["verdict"] == "leak"]
    return leaks, [f for f in findings if f["verdict"] != "leak"]


# Causes shown before "show N more": the report's biggest leaks, one line each.
LEAKS_SHOWN = 3


def cause_groups(data):
    """[(group, [cause, ...])]: the core's groups of related causes (fifty lists in one
    object, one line), biggest first; a report written before groups, each cause alone."""
    causes = data.get("causes") or []
    groups = data.get("cause_groups")
    if groups is None:
        groups = [{"causes": [i], "text": c.get("text"), "severity": c.get("severity")} for i, c in enumerate(causes)]
    return [(g, [causes[i] for i in g.get("causes", []) if 0 <= i < len(causes)]) for g in groups]


def empty_text(data):
    """The core's sentence for a run in which nothing survived a boundary, or None."""
    return (data.get("summary") or {}).get("empty_text")


def progress_text(progress, unit="iteration"):
    """tqdm's words for a check: `2/8 iterations [1.0 s<3.0 s, 2.0 it/s]` while it runs, `8
    iterations in 4.0 s (2.0 it/s)` when done, `stopped after 3 of 8 iterations, 1.5 s`."""
    k, n = int(progress.get("k", 0)), int(progress.get("n", 0))
    elapsed = float(progress.get("elapsed", 0.0))
    rate = k / elapsed if elapsed > 0 else 0.0
    rate_text = f"{rate:.1f} it/s" if rate >= 1 or rate == 0 else f"{1 / rate:.1f} s/it"
    if progress.get("done"):
        if progress.get("stopped") and progress.get("where"):
            return f"stopped {progress['where']}, {elapsed:.1f} s"  # "in iteration 44 of 200"
        if progress.get("stopped"):
            return f"stopped after {k} of {n} {unit}s, {elapsed:.1f} s"
        return f"{k} {unit}{'' if k == 1 else 's'} in {elapsed:.1f} s ({rate_text})"
    return f"{k}/{n} {unit}s [{elapsed:.1f} s<{float(progress.get('remaining', 0.0)):.1f} s, {rate_text}]"


def shown_warnings(data, progress=None):
    """The report's warnings a view shows as warnings: all, less those its run line already says
    (a check the user stopped: progress["said"])."""
    said = set((progress or {}).get("said") or [])
    return [w for w in data.get("warnings", []) if w not in said]


def oom_parts(oom, limit=5):
    """The out-of-memory section's lists as the views print them, in the core's words:
    [(holder, its size)] and [(site text, its size and block count)], biggest first."""
    holders = [(h.get("holder", ""), h.get("size_text", "")) for h in (oom.get("by_holder") or [])[:limit]]
    sites = [(s.get("site", ""), s.get("size_text", "")) for s in (oom.get("by_site") or [])[:limit]]
    return holders, sites


def job_lines(data):
    """A merged torch.distributed report's lines as the core wrote them: one per rank, then
    how the ranks differ. Empty for a single process's report."""
    job = data.get("ranks") or {}
    return [rank.get("text", "") for rank in job.get("ranks", [])] + list(job.get("skew_text", []))
