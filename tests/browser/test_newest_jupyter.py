"""The committed lab extension in the newest JupyterLab 4 and Notebook 7 releases, not only in
the pinned ones it was built against: JupyterLab's builder makes a federated module that must
keep loading as JupyterLab moves on. `make lab-newest` puts the newest releases in
build/lab-newest (no torchleak, no torch there: a saved report needs no kernel); the extension
is handed to that server from widgets/dist/labextension, the files torchleak installs."""

import json
import shutil
import subprocess

import nbformat
import pytest

from jupyter_pages import ARTIFACTS, ROOT, open_saved_report, page_url, saved_report_output, serve

NEWEST = ROOT / "build" / "lab-newest" / "bin" / "python"
PINNED = json.loads((ROOT / "widgets" / "labextension" / "package.json").read_text())["devDependencies"][
    "@jupyterlab/builder"
]


def version_in(python, package):
    return subprocess.run(
        [str(python), "-c", f"import importlib.metadata as m; print(m.version('{package}'))"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.strip()


def newest_report():
    return json.loads((ROOT / "tests" / "fixtures" / "leaky_loop.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="module", params=["lab", "notebook"])
def newest(request, tmp_path_factory):
    if not NEWEST.exists():
        pytest.skip("no newest JupyterLab: `make lab-newest` builds build/lab-newest")
    root = tmp_path_factory.mktemp(f"newest-{request.param}")
    data = root / "data"
    shutil.copytree(ROOT / "widgets" / "dist" / "labextension", data / "labextensions" / "torchleak")
    report = newest_report()
    nb = nbformat.v4.new_notebook(
        metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}}
    )
    for saved in (report, "not a report"):
        cell = nbformat.v4.new_code_cell("pass")
        cell.outputs = [saved_report_output(saved)]
        nb.cells.append(cell)
    nb.cells.append(nbformat.v4.new_markdown_cell("# the last cell is drawn"))
    nbformat.write(nb, root / "saved.ipynb")
    with serve(request.param, root, python=NEWEST, jupyter_path=data) as (base, token):
        yield request.param, page_url(request.param, base, token, "saved.ipynb", "newest"), root


def test_saved_reports_draw_in_the_newest_jupyterlab_and_notebook(newest, browser):
    front_end, url, root = newest
    lab_version = version_in(NEWEST, "jupyterlab")
    print(
        f"{front_end}: JupyterLab {lab_version}, Notebook {version_in(NEWEST, 'notebook')} "
        f"(the extension is built against {PINNED})"
    )
    page = browser.new_page(viewport={"width": 1280, "height": 2000}, device_scale_factor=1)
    errors = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto(url)
    try:
        page.locator("h1:has-text('the last cell is drawn')").wait_for(timeout=90_000)
        views = page.locator(".jp-OutputArea-output [data-testid=torchleak-widget]")
        views.nth(1).wait_for(timeout=30_000)
    except Exception:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / f"newest-{front_end}.png"))
        raise
    # The page is the newest release's own, not the pinned one's.
    served = page.evaluate("() => window.jupyterapp && window.jupyterapp.version")
    assert served, "the front end exposes no application version"
    if front_end == "lab":
        assert served == lab_version, (served, lab_version)
    tree = open_saved_report(page, views.first, points=8)
    holders = {f["holder"]["path_text"] for f in newest_report()["findings"] if f["holder"]}
    assert any(holder + "[" in tree.text_content() for holder in holders), holders
    assert (
        views.nth(1).locator("[data-testid=report-problem]").text_content()
        == "this report is not a JSON object: nothing to draw"
    )
    assert page.locator("[data-testid=render-error]").count() == 0
    assert page.locator(".jp-RenderedJSON").count() == 0  # drawn by torchleak, not as JSON
    assert not [e for e in errors if "torchleak" in e], errors
    page.close()
