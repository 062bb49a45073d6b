"""One display per report, as one MIME bundle.

- ``application/vnd.jupyter.widget-view+json``: the live anywidget view, only while the cell
  runs (when anywidget is installed and a kernel runs the display);
- ``application/vnd.torchleak.report+json``: the report itself (``torchleak.report/1``), what
  a saved notebook keeps; torchleak's lab extension renders it interactively in JupyterLab and
  Notebook 7 without a kernel;
- ``text/html``: the static snapshot (notebook.py), for nbconvert, GitHub and any front end
  without the extension;
- ``text/plain``: a few lines for consoles, CI logs and tests (plain.py).

Never plain ``application/json``: JupyterLab ranks it above ``text/html`` and would show a JSON
tree where the report should be.
"""

from . import notebook, plain

WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
REPORT_MIME = "application/vnd.torchleak.report+json"


def report_metadata(progress):
    """The output's metadata: the run's final line travels here, beside the report, so the
    lab extension shows it after a reopen without it being part of the report."""
    return {REPORT_MIME: {"progress": progress}} if progress else {}


def report_bundle(data, *, widget=None, progress=None):
    bundle = {
        "text/plain": plain.render(data, progress=progress),
        "text/html": notebook.render(data, progress=progress),
        REPORT_MIME: data,
    }
    if widget is not None:
        bundle[WIDGET_MIME] = {"version_major": 2, "version_minor": 0, "model_id": widget.model_id}
    return bundle
