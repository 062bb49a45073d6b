"""The growth curve of the static views, one implementation: the notebook's static HTML (as an
SVG data-URI ``<img>``, which JupyterLab's sanitizer keeps) and the saved page (inline). The
live widget draws its own in the browser (widgets/src), from the same series."""

import base64

from .format import escape as _e, format_bytes


def curve_svg(series_by_name, *, width=420, height=140, at=None, unit="iteration", axes=True):
    """A line chart: {name: (values, colour)}. `at` is the iteration of each point when a long
    run's history was thinned (else point i is iteration i); `unit` is the core's word for one
    ("iteration", "cell run"). Without `axes`, a sparkline: the lines alone, for a table cell."""
    values = [v for vals, _ in series_by_name.values() for v in vals]
    top = max(values + [1])
    points_n = max((len(vals) for vals, _ in series_by_name.values()), default=0)
    at = list(at) if at and len(at) == points_n else list(range(points_n))
    n = at[-1] + 1 if at else 0
    pad, inner_w, inner_h, top_margin = (28, width - 34, height - 22, 6) if axes else (2, width - 4, height - 4, 2)

    def xy(i, v):
        return pad + (inner_w * at[i] / max(n - 1, 1)), top_margin + inner_h * (1 - v / top)

    parts = [
        f'<svg width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="10" '
        f'role="img" aria-label="live bytes per {_e(unit)}">'
    ]
    if axes:
        bottom = top_margin + inner_h
        parts += [
            f'<line x1="{pad}" y1="{bottom}" x2="{width - 6}" y2="{bottom}" stroke="#999"/>',
            f'<line x1="{pad}" y1="{top_margin}" x2="{pad}" y2="{bottom}" stroke="#999"/>',
            f'<text x="2" y="12" fill="#555">{_e(format_bytes(top))}</text>',
            f'<text x="{pad}" y="{height - 2}" fill="#555">{_e(unit)} 1</text>',
            f'<text x="{width - 60}" y="{height - 2}" fill="#555">{n}</text>',
        ]
    for name, (vals, colour) in series_by_name.items():
        if not vals:
            continue
        points = " ".join("{:.1f},{:.1f}".format(*xy(i, v)) for i, v in enumerate(vals))
        parts.append(
            f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="{points}">'
            f"<title>{_e(name)}</title></polyline>"
        )
    parts.append("</svg>")
    return "".join(parts)


# The colour of each role (the core's `devices[].roles[].role`); the widget's CSS has the same
# (widgets/src/torchleak-widget.css, `.role-<name>`; tests/python/test_render.py compares them).
ROLE_COLOURS = {
    "parameters": "#4e79a7",
    "gradients": "#f28e2b",
    "optimizer_state": "#59a14f",
    "activations": "#76b7b2",
    "temporaries": "#bab0ac",
    "inputs_outputs": "#edc948",
    "user_held": "#e15759",
    "untracked": "#9c755f",
    "reserve": "#d3d3d3",
}


def roles_svg(device, *, at=None, unit="iteration", leak_roles=(), width=420):
    """What each iteration's peak was made of: the core's roles stacked in its order, the
    highest peak marked, the leaks' roles outlined and named "(leak)" in the legend. "" for a
    device without roles (a report from before them)."""
    roles = [r for r in device.get("roles") or [] if r.get("at_peak") and any(r["at_peak"])]
    if not roles:
        return ""
    count = len(roles[0]["at_peak"])
    roles = [r for r in roles if len(r["at_peak"]) == count]
    totals = [sum(r["at_peak"][i] for r in roles) for i in range(count)]
    top = max(totals + [1])
    at = list(at) if at and len(at) == count else list(range(count))
    n = at[-1] + 1 if at else 1
    legend_rows = (len(roles) + 2) // 3
    pad, top_margin = 28, 8 + 12 * legend_rows
    height = 120 + top_margin
    inner_w, inner_h = width - pad - 6, height - top_margin - 16
    # One point spans the width: a run of one iteration is a band.
    # A series of more than 400 points (a run of a few hundred iterations has one: the core keeps
    # up to 528) is drawn through each stretch's lowest and highest total, the same points for
    # every role; `xs` is indexed like `points`, not like the series.
    points = [0, 0] if count == 1 else _extremes(totals, 200)
    xs = [pad, pad + inner_w] if count == 1 else [pad + inner_w * at[i] / max(n - 1, 1) for i in points]

    def y(v):
        return top_margin + inner_h * (1 - v / top)

    parts = [
        f'<svg width="{width}" height="{height}" viewBox="0 0 {width} {height}" font-family="sans-serif" '
        f'font-size="10" role="img" aria-label="memory by role at each {_e(unit)}\'s peak">'
    ]
    below = [0] * count
    for r in roles:
        upper = [below[i] + r["at_peak"][i] for i in points]
        lower = [below[i] for i in points]
        outline = ' stroke="#000" stroke-width="1.5"' if r["role"] in leak_roles else ""
        poly = " ".join(f"{x:.1f},{y(v):.1f}" for x, v in zip(xs, upper))
        poly += " " + " ".join(f"{x:.1f},{y(v):.1f}" for x, v in reversed(list(zip(xs, lower))))
        parts.append(
            f'<polygon fill="{ROLE_COLOURS.get(r["role"], "#888888")}"{outline} points="{poly}">'
            f"<title>{_e(r.get('label') or r['role'])}</title></polygon>"
        )
        below = [b + r["at_peak"][i] for i, b in enumerate(below)]
    highest = max(range(len(points)), key=lambda k: totals[points[k]])
    hx = (xs[0] + xs[1]) / 2 if count == 1 else xs[highest]
    bottom = top_margin + inner_h
    parts += [
        f'<line x1="{pad}" y1="{bottom}" x2="{width - 6}" y2="{bottom}" stroke="#999"/>',
        f'<line x1="{hx:.1f}" y1="{top_margin}" x2="{hx:.1f}" y2="{bottom}" stroke="#555" stroke-dasharray="3 2"/>',
        f'<text x="{min(hx + 3, width - 90):.1f}" y="{top_margin + 10}" fill="#333">'
        f"peak {_e(format_bytes(top))}</text>",
        f'<text x="{pad}" y="{height - 2}" fill="#555">{_e(unit)} 1</text>',
        f'<text x="{width - 60}" y="{height - 2}" fill="#555">{n}</text>',
    ]
    for k, r in enumerate(roles):
        lx, ly = pad + 130 * (k % 3), 10 + 12 * (k // 3)
        leak = " (leak)" if r["role"] in leak_roles else ""
        parts.append(
            f'<rect x="{lx}" y="{ly - 8}" width="10" height="8" fill="{ROLE_COLOURS.get(r["role"], "#888888")}"/>'
            f'<text x="{lx + 14}" y="{ly}" fill="#333">{_e((r.get("label") or r["role"]) + leak)}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


def _extremes(values, buckets):
    """Indices of `values` that keep each of `buckets` stretches' lowest and highest value, in
    order; every index when there are few."""
    if len(values) <= buckets * 2:
        return list(range(len(values)))
    size = len(values) / buckets
    out = []
    for b in range(buckets):
        stretch = range(int(b * size), int((b + 1) * size))
        lo = min(stretch, key=values.__getitem__)
        hi = max(stretch, key=values.__getitem__)
        out.extend(sorted({lo, hi}))
    return out


def leak_roles(device):
    """The roles of the leaks on `device`, as the core marked them (`leaks`): where its chart
    outlines them."""
    return {r["role"] for r in device.get("roles") or [] if r.get("leaks")}


def sparkline(values, *, colour="#c0392b", at=None, unit="iteration"):
    """A table cell's curve: one series, no axes."""
    if not values:
        return ""
    return curve_svg({"live bytes": (values, colour)}, width=220, height=40, at=at, unit=unit, axes=False)


def svg_img(svg, alt):
    """The chart as an image: an SVG file names its namespace (inline in HTML it needs none, and
    the saved page links nowhere)."""
    svg = svg.replace("<svg ", '<svg xmlns="http://www.w3.org/2000/svg" ', 1)
    data = base64.b64encode(svg.encode("utf-8")).decode("ascii")
    return f'<img alt="{_e(alt)}" src="data:image/svg+xml;base64,{data}">'
