"""The live notebook view: an anywidget whose front end is widgets/dist/torchleak-widget.js
(shipped inside the package; nothing is fetched at run time)."""

import pathlib

_BUNDLE = pathlib.Path(__file__).resolve().parent / "static" / "torchleak-widget.js"


def make_widget(report_data, progress=None):
    """A ReportWidget, or None when anywidget is not installed (the static HTML still shows)."""
    try:
        import anywidget
        import traitlets
    except ImportError:
        return None
    global ReportWidget
    if "ReportWidget" not in globals():

        class ReportWidget(anywidget.AnyWidget):
            _esm = _BUNDLE.read_text(encoding="utf-8")
            report = traitlets.Dict({}).tag(sync=True)
            progress = traitlets.Dict({}).tag(sync=True)

        globals()["ReportWidget"] = ReportWidget
    return globals()["ReportWidget"](report=report_data, progress=progress or {})
