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
