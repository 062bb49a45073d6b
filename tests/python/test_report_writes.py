"""A report once written is never destroyed by a later failed write, and every requested output
is written even when one fails."""

import errno
import json
import os
import subprocess
import sys

import pytest
import torch

import torchleak
from torchleak import _report


def a_report():
    kept = []
    return torchleak.check(lambda: kept.append(torch.ones(64, 256)), iterations=4)


def test_a_failed_write_leaves_the_earlier_report_whole(tmp_path, monkeypatch):
    report = a_report()
    path = tmp_path / "r.json"
    report.save(path)
    good = path.read_text()

    real_fdopen = os.fdopen

    class FullDisk:
        def __init__(self, fh):
            self._fh = fh

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self._fh.close()

        def write(self, data):
            self._fh.write(data[: len(data) // 2])  # half of it reached the disk
            raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(_report.os, "fdopen", lambda fd, mode: FullDisk(real_fdopen(fd, mode)))
    with pytest.raises(OSError, match="No space left"):
        report.save(path)
    assert path.read_text() == good  # not truncated
    assert json.loads(good)["schema_version"] == "torchleak.report/1"
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]  # no temporary left behind


def test_a_save_keeps_the_umask_permissions(tmp_path):
    path = a_report().save(tmp_path / "r.html")
    mask = os.umask(0)
    os.umask(mask)
    assert os.stat(path).st_mode & 0o777 == 0o666 & ~mask


LEAKY = """\
import torch, torchleak
history = []
for i in range(5):
    history.append(torch.ones(256, 1024))
    torchleak.step()
"""


def test_the_cli_writes_every_output_it_can_and_says_which_failed(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(LEAKY)
    html = tmp_path / "out.html"
    json_path = tmp_path / "out.json"
    json_path.write_text("the earlier run's report")
    # The JSON path becomes unwritable after the CLI checked it: its directory entry is a
    # directory now, so the rename onto it fails.
    code = (
        f"import os, runpy, sys; sys.argv = ['torchleak', 'run', "
        f"'--json', {str(json_path)!r}, '--html', {str(html)!r}, {str(script)!r}]; "
        "import torchleak.__main__ as m; orig = m._finish\n"
        "def finish(*a, **k):\n"
        f"    os.remove({str(json_path)!r}); os.mkdir({str(json_path)!r}); return orig(*a, **k)\n"
        "m._finish = finish; sys.exit(m.main())"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert f"torchleak: could not write {json_path}" in proc.stderr
    assert html.read_text().startswith("<!DOCTYPE html>")  # written all the same


def test_a_view_that_cannot_render_loses_only_its_own_output_and_never_the_training_run(tmp_path, monkeypatch):
    # A bug in one view (the chart of #46 raised IndexError for 401-514 points) ended the user's
    # script at the end of its loop and took the JSON with it.
    def broken(self):
        raise IndexError("list index out of range")

    monkeypatch.setattr(_report.Report, "to_html", broken)
    kept = []
    with pytest.warns(RuntimeWarning, match="could not write .*w.html: list index out of range"):
        with torchleak.watch(json=str(tmp_path / "w.json"), html=str(tmp_path / "w.html")):
            for _ in range(12):
                kept.append(torch.ones(64, 256))
                torchleak.step()
    assert json.loads((tmp_path / "w.json").read_text())["schema_version"] == "torchleak.report/1"
    assert not (tmp_path / "w.html").exists()


def _run_with_interrupts(tmp_path, interrupts):
    """The CLI on LEAKY, with `interrupts` Ctrl-Cs sent to itself as the report's saves begin."""
    script = tmp_path / "train.py"
    script.write_text(LEAKY)
    code = (
        "import os, signal, sys\n"
        "import torchleak._report as r\n"
        "import torchleak.__main__ as m\n"
        "orig, sent = r.Report.save, []\n"
        "def save(self, path, redact=False):\n"
        f"    while len(sent) < {interrupts}:\n"
        "        sent.append(1); os.kill(os.getpid(), signal.SIGINT)\n"
        "    return orig(self, path, redact)\n"
        "r.Report.save = save\n"
        f"sys.exit(m.main(['run', '--quiet', '--json', 'r.json', '--html', 'r.html', {str(script)!r}]))\n"
    )
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=tmp_path)


def test_one_ctrl_c_while_the_cli_saves_lets_every_save_finish_and_says_so(tmp_path):
    # #46: a SIGINT after the walk, while the report was printed or saved, exited -2 with the
    # HTML lost.
    proc = _run_with_interrupts(tmp_path, 1)
    assert proc.returncode == 3, proc.stderr
    assert "interrupted (Ctrl-C) while the report is saved: finishing the saves" in proc.stderr
    assert "the saves finished" in proc.stderr
    assert json.loads((tmp_path / "r.json").read_text())["schema_version"] == "torchleak.report/1"
    assert (tmp_path / "r.html").read_text().startswith("<!DOCTYPE html>")


def test_a_second_ctrl_c_stops_the_saves_and_leaves_each_file_whole_or_untouched(tmp_path):
    (tmp_path / "r.json").write_text("the earlier run's report")
    (tmp_path / "r.html").write_text("the earlier run's page")
    proc = _run_with_interrupts(tmp_path, 2)
    assert proc.returncode != 0
    assert "KeyboardInterrupt" in proc.stderr
    for name in ("r.json", "r.html"):
        text = (tmp_path / name).read_text()
        assert text.startswith("the earlier run's") or text.startswith(("{", "<!DOCTYPE html>")), name
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.html", "r.json", "train.py"]  # no temporary left
