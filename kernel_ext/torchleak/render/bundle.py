"""One display per report, as one MIME bundle.

- ``application/vnd.jupyter.widget-view+json``: the live anywidget view (when anywidget is
  installed and a kernel runs the display);
- ``text/html``: the static snapshot (notebook.py);
- ``text/plain``: a few lines for consoles, CI logs and tests (plain.py);
- ``application/json``: the report itself (``torchleak.report/1``).
"""

from . import notebook, plain

WIDGET_MIME = "application/vnd.jupyter.widget-view+json"


def report_bundle(data, *, widget=None, progress=None):
    bundle = {
        "text/plain": plain.render(data, progress=progress),
        "text/html": notebook.render(data, progress=progress),
        "application/json": data,
    }
    if widget is not None:
        bundle[WIDGET_MIME] = {"version_major": 2, "version_minor": 0, "model_id": widget.model_id}
    return bundle
