"""What the browser tests share (the `browser` fixture is in conftest.py): Debian's Chromium and
its flags, where screenshots go, a Jupyter server of either front end on 127.0.0.1 with a
token, and the probes a test runs in the page."""

import contextlib
import os
import pathlib
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request

import nbformat
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "tests" / "browser" / "artifacts"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# Every code cell has a number and none shows [*]: the notebook's run is over.
ALL_NUMBERED = """() => {
    const prompts = [...document.querySelectorAll('.jp-CodeCell .jp-InputPrompt')];
    return prompts.length > 0 && prompts.every(p => /\\[\\d+\\]/.test(p.textContent));
}"""
KERNEL_READY = (
    "() => window.jupyterapp && window.jupyterapp.shell.currentWidget && "
    "window.jupyterapp.shell.currentWidget.sessionContext && "
    "window.jupyterapp.shell.currentWidget.sessionContext.session && "
    "window.jupyterapp.shell.currentWidget.sessionContext.session.kernel"
)
# Counts every report view the page builds from now on, in window.tlRoots.
COUNT_VIEWS = """() => {
    window.tlRoots = 0;
    new MutationObserver((records) => {
        for (const r of records) for (const n of r.addedNodes) {
            if (n.nodeType !== 1) continue;
            if (n.matches('[data-testid=torchleak-widget]')) window.tlRoots += 1;
            window.tlRoots += n.querySelectorAll('[data-testid=torchleak-widget]').length;
        }
    }).observe(document.body, {childList: true, subtree: true});
}"""

# The two front ends: JupyterLab 4 and Notebook 7 (built from JupyterLab's parts, with its own
# page per notebook). Each exposes its application object as window.jupyterapp for the tests.
FRONT_ENDS = {
    "lab": (
        [
            "lab",
            "--LabApp.expose_app_in_browser=True",
            "--LabApp.news_url=None",
            "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        ],
        "/lab/workspaces/{workspace}/tree/{name}",
    ),
    "notebook": (["notebook", "--JupyterNotebookApp.expose_app_in_browser=True"], "/notebooks/{name}"),
}


@contextlib.contextmanager
def serve(front_end, root, python=sys.executable, jupyter_path=None):
    """A Jupyter server on 127.0.0.1 (a free port, a token) serving `root` with `front_end`;
    yields (base URL, token). Its log is root/server.log. `python`: the environment whose
    Jupyter serves (by default this one, where torchleak is installed); `jupyter_path`: a data
    folder searched first (its labextensions/ are loaded)."""
    args, _ = FRONT_ENDS[front_end]
    port, token = free_port(), secrets.token_hex(16)
    env = dict(
        os.environ,
        JUPYTER_CONFIG_DIR=str(root / ".jupyter"),
        JUPYTER_RUNTIME_DIR=str(root / ".runtime"),
        IPYTHONDIR=str(root / ".ipython"),
    )
    if jupyter_path is not None:
        env["JUPYTER_PATH"] = str(jupyter_path)
    log = open(root / "server.log", "w")
    proc = subprocess.Popen(
        [
            str(python),
            "-m",
            "jupyter",
            *args,
            "--no-browser",
            "--ServerApp.ip=127.0.0.1",
            f"--ServerApp.port={port}",
            "--ServerApp.port_retries=0",
            f"--IdentityProvider.token={token}",
            f"--ServerApp.root_dir={root}",
            "--allow-root",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    try:
        while True:
            try:
                with urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"{front_end} did not start:\n" + (root / "server.log").read_text()[-3000:])
            time.sleep(0.5)
        yield base, token
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def page_url(front_end, base, token, name, workspace="default"):
    return base + FRONT_ENDS[front_end][1].format(workspace=workspace, name=name) + f"?token={token}"


def open_saved_report(page, view, points):
    """A saved report drawn in full: its curve has `points` points, and its first finding row
    opens its path tree on click. Returns the opened tree."""
    view.scroll_into_view_if_needed()
    assert int(view.locator("[data-testid=curve-allocated]").first.get_attribute("data-points")) == points
    tree = view.locator("[data-testid=path-tree]").first
    view.locator("[data-testid=finding-row]").first.click()
    page.wait_for_function("el => el.open", arg=tree.element_handle())
    return tree


def saved_report_output(report):
    """A notebook output as torchleak leaves it: the report under its MIME type, drawn by the
    lab extension, with a plain-text stand-in."""
    return nbformat.v4.new_output(
        "display_data", data={"application/vnd.torchleak.report+json": report, "text/plain": "torchleak report"}
    )


def save_and_shut_down(page):
    """Saves the page's notebook, waits until it is saved, and shuts its kernel down: what is
    drawn on reopening is what the file kept."""
    page.evaluate("() => window.jupyterapp.commands.execute('docmanager:save')")
    page.wait_for_function("() => !window.jupyterapp.shell.currentWidget.context.model.dirty", timeout=30_000)
    page.evaluate("() => window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.shutdown()")


def accessibility_violations(page, selector="[data-testid=torchleak-widget]"):
    """axe-core's serious and critical violations inside every element `selector` matches, each
    as "rule (impact): help, at target": axe-core through axe-playwright-python (pinned in the
    Makefile), the rules a screen reader user and a low-vision reader depend on, contrast
    included. Skipped where that package is missing."""
    axe = pytest.importorskip("axe_playwright_python.sync_playwright")
    results = axe.Axe().run(page, context={"include": [[selector]]}, options={"resultTypes": ["violations"]})
    return [
        f"{v['id']} ({v['impact']}): {v['help']}, at {node['target']}: {node.get('failureSummary', '')}"
        for v in results.response["violations"]
        if v["impact"] in ("serious", "critical")
        for node in v["nodes"]
    ]
