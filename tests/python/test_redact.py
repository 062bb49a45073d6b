"""Sharing a report safely (issue #30, item 10): a redacted report withholds tensor shapes and
dtypes, source lines, notebook cell text, absolute paths and string keys from every output
(JSON, text, HTML, the memory snapshot), keeps verdicts, rates, roles and the paths' structure,
and validates and renders everywhere."""

import json
import os
import pickle
import subprocess
import sys

import pytest
import torch

import torchleak
from ipython_shell import run
from live_reports import every_section_reports

# A script in a project whose directory name, key, shape, dtype and source are all secrets.
SCRIPT = """\
import torch
import torchleak
customers = {}
w = torch.randn(53, 37, dtype=torch.float64, requires_grad=True)
with torchleak.track(warmup=1) as tracker:
    for i in range(6):
        customers[f"alice.{i}@acme-secret.example"] = (torch.randn(41, 53, dtype=torch.float64) @ w)  # SOURCE_MARKER
        tracker.step()
report = tracker.report(roots={"customers": customers})
"""


@pytest.fixture
def leaky_report(tmp_path, monkeypatch):
    project = tmp_path / "acme-secret-project"
    project.mkdir()
    script = project / "train_secret_model.py"
    script.write_text(SCRIPT)
    monkeypatch.chdir(project)
    namespace = {"__name__": "__main__", "__file__": str(script)}
    exec(compile(SCRIPT, str(script), "exec"), namespace)
    return namespace["report"], project, namespace


WITHHELD = [
    "acme-secret-project",
    "alice.",
    "@acme-secret.example",
    "41×37",
    "41, 37",
    "float64",
    "SOURCE_MARKER",
    "torch.randn(41, 53",
]


def outputs(report, tmp_path):
    """Every form a report leaves the process in."""
    texts = {"json": report.to_json(), "text": str(report), "html": report.to_html()}
    for ext in ("json", "html", "pickle"):
        path = report.save(tmp_path / f"out.{ext}")
        with open(path, "rb") as fh:
            data = fh.read()
        texts[f"saved {ext}"] = repr(pickle.loads(data)) if ext == "pickle" else data.decode("utf-8")
    return texts


def test_the_secrets_are_in_the_whole_report(leaky_report, tmp_path):
    report, project, _ = leaky_report
    everything = "\n".join(outputs(report, tmp_path).values())
    for secret in WITHHELD:  # else the redaction test below could not fail
        assert secret in everything, secret


def test_a_redacted_report_withholds_every_secret_from_every_output(leaky_report, tmp_path):
    report, project, _ = leaky_report
    redacted = report.redacted()
    for name, text in outputs(redacted, tmp_path).items():
        for secret in WITHHELD:
            assert secret not in text, (name, secret)
        assert str(project) not in text, name


def test_a_redacted_report_keeps_verdicts_rates_roles_and_path_structure(leaky_report):
    report, _, _ = leaky_report
    redacted = report.redacted()
    assert [f.verdict for f in redacted.findings] == [f.verdict for f in report.findings]
    assert [f.bytes_per_iteration for f in redacted.findings] == [f.bytes_per_iteration for f in report.findings]
    (leak,), (whole,) = redacted.leaks, report.leaks
    assert [s["kind"] for s in leak.path] == [s["kind"] for s in whole.path]
    assert leak.site["file"] == "train_secret_model.py"  # relative to the project
    assert leak.site["line"] == whole.site["line"] and "source" not in leak.site
    assert leak.path[0]["label"] == "customers"
    key = leak.path[1]["label"]
    assert key.startswith("[<key ") and key.endswith(">]")
    assert leak.path_text.startswith("customers[<key ")
    assert leak.holder["path_text"] == "customers"
    assert [c["verdict"] for c in redacted.causes] == [c["verdict"] for c in report.causes]
    # the same key always reads the same: two redactions of one report agree
    assert report.redacted().to_json() == redacted.to_json()


def test_a_redacted_report_validates_and_loads_back(leaky_report, tmp_path):
    report, _, _ = leaky_report
    path = report.save(tmp_path / "shared.json", redact=True)
    again = torchleak.Report.load(path)
    assert again.to_json() == report.redacted().to_json()


def test_a_file_outside_the_project_and_its_libraries_is_hashed(tmp_path):
    from torchleak._redact import redact

    data = json.loads(
        torchleak.Report.load(os.path.join(os.path.dirname(__file__), "..", "fixtures", "leaky_loop.json")).to_json()
    )
    data["findings"][0]["site"]["file"] = "/home/alice/elsewhere/secret.py"
    out = redact(data, project=str(tmp_path))
    assert out["findings"][0]["site"]["file"].startswith("<file ")
    assert "alice" not in json.dumps(out)


def test_the_cli_writes_redacted_reports_with_redact(tmp_path):
    project = tmp_path / "acme-secret-project"
    project.mkdir()
    script = project / "train_secret_model.py"
    script.write_text(
        SCRIPT.replace("with torchleak.track(warmup=1) as tracker:", "if True:")
        .replace("        tracker.step()", "        torchleak.step()")
        .replace('report = tracker.report(roots={"customers": customers})\n', "")
    )
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "torchleak",
            "run",
            "--quiet",
            "--redact",
            "--json",
            "r.json",
            "--html",
            "r.html",
            str(script),
        ],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    for name in ("r.json", "r.html"):
        text = (project / name).read_text(encoding="utf-8")
        for secret in WITHHELD:
            assert secret not in text, (name, secret)
    assert torchleak.Report.load(project / "r.json").leaks


def test_the_magics_write_redacted_reports_with_redact(shell, tmp_path):
    cell = (
        "%%leakcheck -n 4 --warmup 1 --redact --json {0}/c.json\n"
        "kept.append(torch.randn(41, 37, dtype=torch.float64) * 2)  # CELL_TEXT_MARKER\n"
    )
    run(shell, "kept = []")
    result = run(shell, cell.format(tmp_path))
    assert result.error_in_exec is None, result.output
    text = (tmp_path / "c.json").read_text(encoding="utf-8")
    for secret in ("CELL_TEXT_MARKER", "41×37", "41, 37", "float64"):
        assert secret not in text, secret
    report = torchleak.Report.load(tmp_path / "c.json")
    assert report.leaks and report.leaks[0].site_text.startswith("In [")


def test_a_key_too_long_for_a_short_path_leaks_no_part_of_itself():
    # A sentence shows the short form of a path; had it cut a long key, the redaction (which
    # replaces whole strings) would have left the key's first 50 characters in the fix.
    secret = "customer-" + "s3cr3t" * 20
    store = {secret: []}

    def step():
        store[secret].append(torch.ones(64, 1024))

    report = torchleak.check(step, iterations=6)
    assert report.leaks[0].suggestion.startswith("store[\u2026] grows by 1 per iteration")
    shared = report.redacted().to_json()
    assert not any(secret[i : i + 8] in shared for i in range(len(secret) - 8))


def test_a_spikes_site_is_redacted_with_its_sentence():
    from torchleak._redact import redact

    data = json.loads(
        torchleak.Report.load(os.path.join(os.path.dirname(__file__), "..", "fixtures", "leaky_loop.json")).to_json()
    )
    device = data["devices"][0]
    device["spikes"] = [
        {
            "iteration": 3,
            "peak_bytes": 50 << 20,
            "typical_peak_bytes": 2 << 20,
            "role": "activations",
            "role_rise_bytes": 48 << 20,
            "block_bytes": 40 << 20,
            "site": {"file": "/home/alice/acme-secret/train.py", "line": 9, "function": "step", "source": "x = 1"},
        }
    ]
    data = json.loads(torchleak._core.normalize_report(json.dumps(data)))
    assert "acme-secret" in data["devices"][0]["spikes"][0]["text"]
    out = redact(data, project="/nonexistent-project")
    spike = out["devices"][0]["spikes"][0]
    assert spike["site"]["file"].startswith("<file ") and "source" not in spike["site"]
    assert "alice" not in json.dumps(out) and "acme-secret" not in json.dumps(out)
    assert spike["text"].endswith(f"allocated at {spike['site']['file']}:9")


SECRET_FILE = "/home/dev/secret_project/data_hunter2.bin"


def test_every_string_field_of_a_report_has_a_redaction_rule():
    # A field without a rule would be redacted as text from outside, but the rule should be a
    # decision: this fails when the report gains a string field that FIELDS does not name.
    from torchleak._redact import FIELDS, string_fields

    seen = set()
    for data in every_section_reports(SECRET_FILE):
        seen |= {place for place, _, _ in string_fields(data)}
    assert {"oom.message", "ranks.ranks[].note", "oom.by_site[].site", "devices[].spikes[].site.file"} <= seen
    assert not seen - set(FIELDS), sorted(seen - set(FIELDS))


def test_text_from_outside_torchleak_loses_its_paths_and_quoted_strings():
    # #46: the OOM's message and a failed rank's note passed verbatim.
    for data in every_section_reports(SECRET_FILE):
        everything = json.dumps(torchleak.Report(json.dumps(data)).redacted().to_dict())
        assert "secret_project" not in everything and "hunter2" not in everything
        if "oom" in data:
            assert (
                torchleak.Report(json.dumps(data))
                .redacted()
                .to_dict()["oom"]["message"]
                .startswith("cannot allocate, reading '<text ")
            )


@pytest.mark.parametrize("where", ["/", "home", "home/dev"])
def test_a_run_from_the_root_or_a_home_directory_hashes_paths_instead_of_keeping_them(tmp_path, monkeypatch, where):
    # #46: relative to "/", /home/dev/secret_project/train.py was home/dev/secret_project/train.py.
    from torchleak._redact import redact

    monkeypatch.setenv("HOME", str(tmp_path / "home" / "dev"))
    project = "/" if where == "/" else str(tmp_path / where)
    data = json.loads(
        torchleak.Report.load(os.path.join(os.path.dirname(__file__), "..", "fixtures", "leaky_loop.json")).to_json()
    )
    data["findings"][0]["site"]["file"] = str(tmp_path / "home" / "dev" / "secret_project" / "train.py")
    out = redact(data, project=project)
    assert out["findings"][0]["site"]["file"].startswith("<file ")
    assert "secret_project" not in json.dumps(out)
    inside = redact(data, project=str(tmp_path / "home" / "dev" / "secret_project"))
    assert inside["findings"][0]["site"]["file"] == "train.py"


def test_a_one_dimensional_shape_in_a_sentence_is_withheld_too():
    from torchleak._redact import _SHAPE_IN_TEXT

    assert _SHAPE_IN_TEXT.sub("<shape>", "the 512-element tensors, the 64\u00d710 ones") == (
        "the <shape> tensors, the <shape> ones"
    )
