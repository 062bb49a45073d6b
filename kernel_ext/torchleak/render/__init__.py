"""Presentation: every view of a ``torchleak.report/1`` document, in one place.

Each output is one module with ``render(data, **options) -> str`` over the report dict; none of
them imports torch or the C++ core, so each is tested on fixture reports alone
(tests/python/test_render.py). Strings the core already knows come from the JSON as they are
(``site.text``, a device's ``projection_text``, ``summary.headline``, ``summary.empty_text``);
``format.py`` has the few helpers the views share.

    text       the text report (``print(report)``, the CLI)
    page       the saved, self-contained HTML page (``report.save("r.html")``)
    notebook   the sanitizer-safe static HTML of a notebook output
    plain      the few ``text/plain`` lines of a notebook output
    bundle     the notebook output's MIME bundle (the four above, plus the live widget)
    memory_snapshot  the snapshot dict PyTorch's memory viewer reads (``report.save("x.pickle")``)
"""

from . import bundle, memory_snapshot, notebook, page, plain, text

RENDERERS = {"text": text.render, "page": page.render, "notebook": notebook.render, "plain": plain.render}

__all__ = ["RENDERERS", "bundle", "memory_snapshot", "notebook", "page", "plain", "text"]
