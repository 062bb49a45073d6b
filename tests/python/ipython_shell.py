"""An in-process IPython shell for tests of the notebook paths, without a kernel (memray's
way): in-memory history, a capturing display publisher, and no last exception left behind."""

import contextlib
import io
import sys


def open_shell(ipython_dir):
    from IPython.core.displaypub import CapturingDisplayPublisher
    from IPython.core.interactiveshell import InteractiveShell
    from traitlets.config import Config

    InteractiveShell.clear_instance()
    cfg = Config()
    cfg.HistoryManager.hist_file = ":memory:"
    return InteractiveShell.instance(config=cfg, display_pub_class=CapturingDisplayPublisher)


def close_shell(shell):
    from IPython.core.interactiveshell import InteractiveShell

    shell.reset()
    InteractiveShell.clear_instance()
    for name in ("last_value", "last_traceback", "last_type", "last_exc"):
        sys.__dict__.pop(name, None)


@contextlib.contextmanager
def shell_in(tmp_path, monkeypatch):
    """A shell of its own, with its IPython directory under the test's tmp_path: the body of
    every tier's `ipython` fixture."""
    monkeypatch.setenv("IPYTHONDIR", str(tmp_path / "ipython"))
    sh = open_shell(tmp_path / "ipython")
    try:
        yield sh
    finally:
        close_shell(sh)


def run(shell, source):
    """Run a cell as the user would; its printed output is kept on the result as `.output`."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        result = shell.run_cell(source, store_history=True)
    result.output = out.getvalue()
    return result


def ledger(shell):
    """The lines cell watch's ledger has shown so far."""
    return [
        o["data"]["text/plain"]
        for o in shell.display_pub.outputs
        if o["data"].get("text/plain", "").startswith("torchleak: In [")
    ]
