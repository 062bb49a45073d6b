"""Every notebook in notebooks/ runs top to bottom on ipykernel (python3) and xeus-python
(xpython), and shows what it should: verdicts, sites (In [n], line m) and holders."""

import pathlib

import nbformat
import pytest
from jupyter_client.kernelspec import KernelSpecManager
from nbclient import NotebookClient

ROOT = pathlib.Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
KERNELS = ["python3", "xpython"]
REPORT = "application/vnd.torchleak.report+json"
WIDGET = "application/vnd.jupyter.widget-view+json"
_executed = {}


def execute(path, kernel):
    key = (path, kernel)
    if key not in _executed:
        if kernel not in KernelSpecManager().find_kernel_specs():
            pytest.skip(f"kernelspec {kernel!r} is not installed")
        nb = nbformat.read(path, as_version=4)
        client = NotebookClient(
            nb, kernel_name=kernel, timeout=300, startup_timeout=120, resources={"metadata": {"path": str(path.parent)}}
        )
        client.execute()
        _executed[key] = nb
    return _executed[key]


def tagged(nb, tag):
    (cell,) = [c for c in nb.cells if tag in c.metadata.get("tags", [])]
    return cell


def report_of(cell):
    reports = [o["data"][REPORT] for o in cell.outputs if REPORT in o.get("data", {})]
    assert reports, f"no report displayed by {cell.source[:40]!r}"
    return reports[-1]


def leaks(report):
    return [f for f in report["findings"] if f["verdict"] == "leak"]


def cell_number(nb, needle):
    """The execution count of the code cell whose source contains `needle`."""
    (cell,) = [
        c
        for c in nb.cells
        if c.cell_type == "code" and needle in c.source and "leakcheck" not in c.source.splitlines()[0]
    ]
    return cell.execution_count


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs_top_to_bottom(path, kernel):
    nb = execute(path, kernel)
    errors = [
        o
        for c in nb.cells
        if c.cell_type == "code"
        for o in c.outputs
        if o.output_type == "error" and "raises-exception" not in c.metadata.get("tags", [])
    ]
    assert not errors, errors


@pytest.mark.parametrize("kernel", KERNELS)
def test_saved_reports_need_no_kernel_and_no_widget_state(kernel):
    """What the notebook file keeps once it ran: every report as torchleak's MIME type with
    text/html beside it, never a widget view (its model is gone once the kernel is) and never
    plain application/json (JupyterLab would show a JSON tree instead of the HTML)."""
    nb = execute(ROOT / "notebooks" / "tour.ipynb", kernel)
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if REPORT in o.get("data", {})]
    assert len(outputs) >= 10
    for o in outputs:
        assert WIDGET not in o["data"] and "application/json" not in o["data"]
        assert "text/html" in o["data"] and o["data"][REPORT]["schema_version"] == "torchleak.report/1"


@pytest.mark.parametrize("kernel", KERNELS)
def test_tour_findings(kernel):
    nb = execute(ROOT / "notebooks" / "tour.ipynb", kernel)

    # (a) the loss list keeps each step's graph: the leak is the activation, at its cell line
    cell = tagged(nb, "a-leak")
    (leak,) = leaks(report_of(cell))
    assert (leak["site"]["cell"], leak["site"]["line"]) == (cell.execution_count, 2)
    assert leak["path_text"].startswith("losses[") and ".grad_fn" in leak["path_text"]
    assert leak["holder"]["path_text"] == "losses"
    html = [o["data"]["text/html"] for o in cell.outputs if "text/html" in o.get("data", {})][-1]
    assert f"In [{cell.execution_count}], line 2" in html
    assert leaks(report_of(tagged(nb, "a-fixed"))) == []

    # (b) the ctx attribute, through grad_fn, with the list as holder
    report = report_of(tagged(nb, "b-leak"))
    ctx_leak = [f for f in leaks(report) if f["path_text"].endswith(".grad_fn.stage_out")]
    assert ctx_leak, report["findings"]
    assert ctx_leak[0]["site"]["cell"] == cell_number(nb, "ctx.stage_out = out")
    assert ctx_leak[0]["holder"]["path_text"] == "logged['stage']"
    assert "save_for_backward" in ctx_leak[0]["suggestion"]
    assert leaks(report_of(tagged(nb, "b-fixed"))) == []

    # (c) an unbounded cache is a leak; a bounded one a plateau
    (leak,) = leaks(report_of(tagged(nb, "c-leak")))
    assert leak["holder"]["path_text"] == "cache"
    fixed = report_of(tagged(nb, "c-fixed"))
    assert leaks(fixed) == [] and any(f["verdict"] == "plateau" for f in fixed["findings"])

    # (d) masks kept across requests
    (leak,) = leaks(report_of(tagged(nb, "d-leak")))
    assert leak["holder"]["path_text"] == "masks"
    assert leaks(report_of(tagged(nb, "d-fixed"))) == []

    # (e) optimizer warm-up is not a leak
    clean = report_of(tagged(nb, "e-clean"))
    assert leaks(clean) == [] and any(f["verdict"] == "warmup" for f in clean["findings"])

    # (f) the notebook's own traps, then fixed
    report = report_of(tagged(nb, "f-report"))
    roots = {f["path"][0]["label"] for f in leaks(report)}
    out_cell = tagged(nb, "f-out").execution_count
    assert f"Out[{out_cell}]" in roots
    assert "<last exception> frame train_step: local 'batch'" in roots
    ledger = [
        o["data"]["text/plain"]
        for o in tagged(nb, "f-out").outputs
        if o.get("data", {}).get("text/plain", "").startswith("torchleak: In [")
    ]
    assert ledger and f"Out[{out_cell}] 1.0 MiB" in ledger[0]
    # The fix cell is the report's own fixes, line for line (before: `%reset -f out` and
    # sys.last_* = None, which freed nothing), and the memory is freed: the ledger says so,
    # and the report checked again has no leak left.
    fix = tagged(nb, "f-fix")
    assert sorted(fix.source.splitlines()) == sorted(f["fix_code"] for f in leaks(report))
    freed = [
        o["data"]["text/plain"]
        for o in fix.outputs
        if o.get("data", {}).get("text/plain", "").startswith("torchleak: In [")
    ]
    assert freed == [f"torchleak: In [{fix.execution_count}] freed 3.0 MiB"], fix.outputs
    assert leaks(report_of(tagged(nb, "f-recheck"))) == []
    assert leaks(report_of(tagged(nb, "f-fixed"))) == []
