"""Every view of a report, from fixture reports (tests/fixtures, made by regenerate.py there):
no tracking, no torch tensors. The views show the display strings the core wrote into the JSON
(site.text, projection_text, summary.headline, summary.empty_text) and escape everything."""

import copy
import json
import os
import pathlib
import re
import shutil
import subprocess

import pytest
import torch

import torchleak
from torchleak import _core
from torchleak.render import RENDERERS, bundle, chart, format

from live_reports import fifty_lists_report, training_with_a_kept_graph_report, with_a_long_role_series

FIXTURES = pathlib.Path(__file__).resolve().parent.parent / "fixtures"
ALL = sorted(p.name for p in FIXTURES.glob("*.json"))


def fixture(name):
    return json.loads((FIXTURES / name).read_text(encoding="utf-8"))


def test_the_fixtures_are_there():
    assert {"leaky_loop.json", "hostile.json", "empty.json"} <= set(ALL)


@pytest.mark.parametrize("name", ALL)
def test_a_fixture_is_a_valid_report_and_the_schema_round_trip_is_stable(name):
    text = (FIXTURES / name).read_text(encoding="utf-8")
    once = _core.normalize_report(text)
    assert json.loads(once) == json.loads(_core.normalize_report(once))
    assert json.loads(once)["schema_version"] == _core.SCHEMA_VERSION == "torchleak.report/1"


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("view", sorted(RENDERERS))
def test_every_view_renders_every_fixture(name, view):
    out = RENDERERS[view](fixture(name))
    assert isinstance(out, str) and out


@pytest.mark.parametrize("view", sorted(RENDERERS))
def test_views_show_the_cores_strings_instead_of_deriving_their_own(view):
    data = fixture("leaky_loop.json")
    leak, warmup = data["findings"]
    leak["site"]["text"] = "LEAK-SITE-FROM-CORE"
    warmup["site"]["text"] = "WARMUP-SITE-FROM-CORE"
    data["causes"][0]["text"] = "CAUSE-FROM-CORE"
    [alone] = data["cause_groups"]
    assert alone["causes"] == [0]
    alone["text"] = "CAUSE-FROM-CORE"  # a cause alone is its group's line (display_text.h)
    data["summary"]["headline"] = "HEADLINE-FROM-CORE"
    data["devices"][0]["text"] = "DEVICE-LINE-FROM-CORE"
    for f in data["findings"]:
        for step in f.get("path") or []:
            if step.get("tensor"):
                step["tensor"]["text"] = "PATH-TENSOR-FROM-CORE"
    out = RENDERERS[view](data)
    assert "CAUSE-FROM-CORE" in out
    if view != "plain":  # plain text lists the first findings only
        assert "WARMUP-SITE-FROM-CORE" in out
    if view != "text":  # the text shows a one-site leak by its cause's line
        assert "LEAK-SITE-FROM-CORE" in out
    if view != "page":  # the page has its own counts table, not the headline
        assert "HEADLINE-FROM-CORE" in out
    if view != "plain":  # the few plain lines name no device and draw no path
        assert "DEVICE-LINE-FROM-CORE" in out
        assert "PATH-TENSOR-FROM-CORE" in out


@pytest.mark.parametrize("view", sorted(RENDERERS))
def test_an_empty_run_says_so_in_the_cores_words(view):
    data = fixture("empty.json")
    assert data["findings"] == []
    sentence = data["summary"]["empty_text"]
    assert sentence == "No tensor allocated during the run survived an iteration boundary."
    if view != "plain":
        assert sentence in RENDERERS[view](data)
    data["summary"]["empty_text"] = "EMPTY-FROM-CORE"
    if view != "plain":
        assert "EMPTY-FROM-CORE" in RENDERERS[view](data)


def test_the_text_report_of_a_leaky_loop():
    text = RENDERERS["text"](fixture("leaky_loop.json"))
    data = fixture("leaky_loop.json")
    leak = data["findings"][0]
    (cause,) = data["causes"]
    assert cause["text"] == (
        f"{format.format_bytes(leak['bytes_per_iteration'])} per iteration: "
        f"val_history keeps every iteration's autograd graph, at "
        f"{leak['site']['text']}"
    )
    assert f"LEAK  {cause['text']}  [{cause['severity']}]" in text
    assert f"why alive (reachable): {leak['path_text']}" in text
    assert "; " + data["devices"][0]["projection_text"] in text
    assert "Not leaks:" in text and "warmup" in text
    # Near the top, after the device's lines (with memory by role, "made of: ...").
    assert any(line.startswith("  1 leak(s), 1 other finding(s); score ") for line in text.splitlines()[:6])


@pytest.mark.parametrize("view", ["page", "notebook"])
def test_html_views_escape_every_string(view):
    out = RENDERERS[view](fixture("hostile.json"))
    assert "<script" not in out
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;&quot;&amp;amp;" in out
    assert "In [7], line 3" in out and "backward (MmBackward0)" in out


def test_the_notebook_bundle_carries_every_view_and_the_data():
    data = fixture("hostile.json")
    mime = bundle.report_bundle(data, progress={"k": 2, "n": 8, "elapsed": 1.0, "remaining": 3.0})
    assert set(mime) == {"text/plain", "text/html", bundle.REPORT_MIME}
    assert bundle.REPORT_MIME == "application/vnd.torchleak.report+json"  # a contract: saved notebooks carry it
    assert mime[bundle.REPORT_MIME] is data
    assert "2/8 iterations [1.0 s<3.0 s, 2.0 it/s]" in mime["text/plain"]
    assert "2/8 iterations [1.0 s<3.0 s, 2.0 it/s]" in mime["text/html"]
    done = bundle.report_bundle(data, progress={"k": 8, "n": 8, "elapsed": 4.0, "done": True})
    assert "8 iterations in 4.0 s (2.0 it/s)" in done["text/plain"]
    stopped = {"k": 3, "n": 8, "elapsed": 10.0, "done": True, "stopped": True}
    assert "stopped after 3 of 8 iterations, 10.0 s" in bundle.report_bundle(data, progress=stopped)["text/html"]
    assert bundle.report_metadata(stopped) == {bundle.REPORT_MIME: {"progress": stopped}}
    assert "fragmentation (90% reserved but unused)" in mime["text/html"]
    assert "<script" not in mime["text/html"] and "<style" not in mime["text/html"]


def test_report_objects_render_through_the_same_modules(tmp_path):
    report = torchleak.Report.load(FIXTURES / "leaky_loop.json")
    assert str(report) == RENDERERS["text"](report.to_dict())
    assert report.to_html() == RENDERERS["page"](report.to_dict())
    assert report.findings[0].site_text == report.to_dict()["findings"][0]["site"]["text"]
    saved = tmp_path / "r.json"
    report.save(saved)
    assert torchleak.Report.load(saved).to_dict() == report.to_dict()


BYTE_VALUES = [0, 1, 1023, 1024, 1536, 1048575, 1048576, 2.5 * 2**20, 123456789, 2**40, 5e15, -1, -4096, 66564]


def test_one_byte_format_in_cpp_python_and_the_widget():
    expected = [_core.format_bytes(v) for v in BYTE_VALUES]
    assert [format.format_bytes(v) for v in BYTE_VALUES] == expected
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed: the widget's formatter is not compared")
    bundle_js = pathlib.Path(torchleak.__file__).resolve().parent / "static" / "torchleak-widget.js"
    script = (
        f"import {{ formatBytes }} from {json.dumps(bundle_js.as_uri())};"
        f"console.log(JSON.stringify({json.dumps(BYTE_VALUES)}.map(formatBytes)));"
    )
    out = subprocess.run(
        [node, "--input-type=module", "-e", script], capture_output=True, text=True, timeout=60, check=True
    )
    assert json.loads(out.stdout) == expected


def test_a_live_report_carries_the_display_strings():
    kept = []
    report = torchleak.check(lambda: kept.append(torch_ones()), iterations=4)
    data = report.to_dict()
    for f in data["findings"]:
        assert f["site"]["text"] == f"{f['site']['file']}:{f['site']['line']}"
        assert all(fr["text"] for fr in f["stack"])
    assert data["summary"]["headline"] == "1 leak(s), 0 other finding(s)"
    assert data["summary"]["empty_text"] is None
    (cpu,) = data["devices"]
    assert cpu["projection_text"].startswith("at 64.0 KiB per iteration, cpu is full in ~")


def torch_ones():
    import torch

    return torch.ones(64, 256)


def test_a_received_report_prints_only_what_it_contains(tmp_path):
    # A report from elsewhere names files of its machine: printing it must not read this
    # machine's files (a line of /etc/passwd), block on a FIFO, or send terminal escapes.
    data = fixture("leaky_loop.json")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for finding, path in zip(data["findings"], ["/etc/passwd", str(fifo), "/dev/zero"]):
        finding["site"].pop("source", None)
        finding["site"].update(file=path, line=1, function="evil\x1b]0;owned\x07\x1b[2J\rfake line\nLEAK")
        finding["stack"] = [dict(finding["site"])]
    path = tmp_path / "received.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    text = str(torchleak.Report.load(path))
    assert "root:" not in text
    assert "\x1b" not in text and "\x07" not in text and "\r" not in text
    assert "evil\\x1b]0;owned\\x07\\x1b[2J\\x0dfake line\\x0aLEAK" in text


def merged_job(note="RuntimeError: <script>alert('x')</script>"):
    """The core's merge of a job whose rank 1 leaks and whose rank 2 failed."""
    leaky = fixture("leaky_loop.json")
    clean = copy.deepcopy(leaky)
    clean["findings"] = [f for f in clean["findings"] if f["verdict"] != "leak"]
    clean["causes"] = []
    return json.loads(
        _core.merge_rank_reports(
            [
                (0, json.dumps(clean), "ok", ""),
                (1, json.dumps(leaky), "ok", ""),
                (2, json.dumps(clean), "failed", note),
            ],
            3,
        )
    )


@pytest.mark.parametrize("view", sorted(RENDERERS))
def test_a_merged_job_report_names_the_ranks_in_every_view(view):
    data = merged_job()
    leak = next(f for f in data["findings"] if f["verdict"] == "leak")
    assert leak["ranks_text"] == "leaks on rank 1 only"
    out = RENDERERS[view](data)
    if view == "plain":  # the causes and the findings' lines only
        assert "(leaks on rank 1 only)" in out
        return
    lines = [r["text"] for r in data["ranks"]["ranks"]] + data["ranks"]["skew_text"]
    assert lines[1].startswith("rank 1: ") and "1 leak at " in lines[1]
    assert lines[3].startswith("leak skew: rank 1 grows ")
    html = view != "text"
    for line in lines:
        assert (format.escape(line) if html else line) in out
    assert "leaks on rank 1 only" in out
    if html:
        assert "<script>" not in out  # the failed rank's note stayed text


def test_the_text_report_of_a_merged_job_lists_every_rank():
    text = RENDERERS["text"](merged_job(note="RuntimeError: boom"))
    job = text[text.index("  job of 3 ranks:") :].splitlines()
    assert job[1].startswith("    rank 0: ") and ", no leak, peak " in job[1]
    assert job[3].endswith("; the run failed: RuntimeError: boom")
    assert job[4].startswith("    leak skew: rank 1 grows ")
    assert "  leaks on rank 1 only" in text.splitlines()


def test_a_long_path_is_shown_short_with_the_whole_one_a_hover_away():
    # Issue #31: a 26-level chain made the holder 8,000 px wide and the sentences 2,581
    # characters; every view shows the core's short form, the whole path in the tooltip.
    report = fixture("leaky_loop.json")
    whole = "root" + "".join(f".child_level_{i}" for i in range(26)) + ".items"
    leak = next(f for f in report["findings"] if f.get("holder"))
    leak["holder"]["path_text"] = leak["path_text"] = whole
    data = json.loads(_core.normalize_report(json.dumps(report)))
    leak = next(f for f in data["findings"] if f.get("holder"))
    short = leak["holder"]["path_short"]
    assert short == leak["path_short"] and len(short) <= 80 and short.startswith("root.child_level_0\u2026")
    for view in ("page", "notebook"):
        out = RENDERERS[view](data)
        assert f'title="{whole}">{short}</code>' in out, view
        assert f">{whole}<" not in out, view
    text = RENDERERS["text"](data)
    assert f"holder: {short} (" in text and f"why alive (reachable): {short}" in text


def test_fifty_related_leaks_are_one_line_in_every_view():
    data = fifty_lists_report()
    [group] = data["cause_groups"]
    text = RENDERERS["text"](data)
    assert text.count(group["text"]) == 1
    assert text.count("LEAK  ") == 1 and "... and 40 more" in text
    plain = RENDERERS["plain"](data)
    assert plain.count("LEAK ") == 1 and group["text"] in plain
    html = RENDERERS["notebook"](data)
    assert html.count('data-testid="cause-group"') == 1
    assert html.count('data-testid="group-cause"') == 50
    assert 'data-testid="cause"' not in html
    page = RENDERERS["page"](data)
    assert page.count("the 50 leaks") == 1


def test_past_three_leaks_the_rest_are_behind_show_more_in_the_static_view():
    data = fifty_lists_report()
    del data["cause_groups"]  # a report from before groups: each cause alone
    html = RENDERERS["notebook"](data)
    shown, _, rest = html.partition('data-testid="more-causes"')
    assert shown.count('data-testid="cause"') == 3 and rest.count('data-testid="cause"') == 47
    assert "show 47 more leak(s)" in html
    plain = RENDERERS["plain"](data)
    assert plain.count("LEAK ") == 3 and "... 47 more leak(s)" in plain


def test_role_colours_are_the_same_in_the_static_views_and_the_widget():
    from torchleak.render.chart import ROLE_COLOURS

    css = (pathlib.Path(__file__).resolve().parents[2] / "widgets" / "src" / "torchleak-widget.css").read_text()
    in_css = dict(re.findall(r"\.tl-roles \.role-(\w+) \{ fill: (#[0-9a-f]{6}); \}", css))
    assert in_css == ROLE_COLOURS
    assert tuple(ROLE_COLOURS) == _core.MEMORY_ROLES


def test_memory_by_role_is_drawn_in_every_view_with_the_leaks_role_outlined():
    data, _, _ = training_with_a_kept_graph_report(4)
    text = RENDERERS["text"](data)
    assert f"    made of: {data['devices'][0]['roles_text']}" in text
    for view in ("notebook", "page"):
        html = RENDERERS[view](data)
        assert format.escape(data["devices"][0]["roles_text"]) in html
    page = RENDERERS["page"](data)
    chart = page[page.index('<tr data-testid="roles">') :]
    assert "user-held (leak)" in chart and 'stroke="#000"' in chart
    assert chart.count("<polygon") == sum(1 for r in data["devices"][0]["roles"] if any(r.get("at_peak") or [0]))
    # A report from before roles draws no chart and says nothing of them.
    del data["devices"][0]["roles"], data["devices"][0]["roles_text"]
    assert "by role" not in RENDERERS["notebook"](data) and "made of" not in RENDERERS["text"](data)


@pytest.mark.parametrize("view", sorted(RENDERERS))
def test_an_out_of_memory_report_says_what_filled_the_device_by_role(view):
    data = fixture("leaky_loop.json")
    data["oom"] = {
        "device": "cuda:0",
        "iteration": 8,
        "allocated_bytes": 3 << 20,
        "reserved_bytes": 5 << 20,
        "findings": [],
        "roles": [
            {"role": "optimizer_state", "bytes": 2 << 20},
            {"role": "gradients", "bytes": 1 << 20},
            {"role": "reserve", "bytes": 2 << 20},
        ],
    }
    data = json.loads(_core.normalize_report(json.dumps(data)))
    line = data["oom"]["roles_text"]
    assert line == (
        "What filled cuda:0 at the failure, 3.0 MiB: optimizer state 2.0 MiB (67%), gradients 1.0 MiB (33%); "
        "2.0 MiB reserved but unused."
    )
    if view != "plain":
        assert format.escape(line) in RENDERERS[view](data)


def test_a_long_role_series_is_drawn_through_a_few_hundred_points():
    data = with_a_long_role_series(training_with_a_kept_graph_report(3)[0])
    svg = chart.roles_svg(data["devices"][0])
    first = svg[svg.index("<polygon") : svg.index("</polygon>")]
    assert 100 < first.count(",") <= 2 * 2 * 200 + 4  # each stretch's lowest and highest, there and back


@pytest.mark.parametrize("n", [401, 450, 514, 1000])
def test_a_series_of_a_few_hundred_points_peaking_at_its_end_is_drawn(n):
    # A leaking run of 401-514 iterations has such a series: the core keeps up to 528 points and
    # the chart thins above 400, so the highest peak (the last point) was looked up in the thinned
    # positions by its index in the whole series.
    data = with_a_long_role_series(training_with_a_kept_graph_report(3)[0], n)
    for r in data["devices"][0]["roles"]:
        if "at_peak" in r:
            r["at_peak"][-1] += 1 << 20
    svg = chart.roles_svg(data["devices"][0])
    marker = re.search(r'<line x1="([0-9.]+)" y1="[0-9.]+" x2="\1" y2="[0-9.]+" stroke="#555"', svg)
    assert marker and float(marker.group(1)) == pytest.approx(420 - 6, abs=0.1)  # at the right edge
    assert "<svg" in RENDERERS["page"](data)
    assert "data:image/svg+xml" in RENDERERS["notebook"](data)


def test_a_tracked_run_of_450_iterations_renders_every_view():
    import torch

    keep = []
    with torchleak.track() as t:
        for _ in range(450):
            keep.append(torch.ones(256))
            torchleak.step()
    report = t.report()
    assert 400 < len(report.devices[0]["allocated"]) <= 528
    assert "<svg" in report.to_html()
    for view in RENDERERS:
        assert RENDERERS[view](report.to_dict())


# What the widget leaves out of its order of verdicts (sorted after the ranked ones).
NOT_RANKED_IN_THE_WIDGET = {"allowed"}


def test_every_views_list_of_verdicts_is_the_cores():
    # A new verdict fell back silently in two view lists (#48 item 3): each is checked here.
    from torchleak.render.notebook import _VERDICT_COLOURS

    assert set(_VERDICT_COLOURS) == set(_core.VERDICTS)
    js = (pathlib.Path(__file__).resolve().parents[2] / "widgets" / "src" / "torchleak-widget.js").read_text()
    ranked = re.search(r"const VERDICT_RANK = \{([^}]*)\}", js).group(1)
    in_widget = set(re.findall(r"(\w+):", ranked))
    assert in_widget | NOT_RANKED_IN_THE_WIDGET == set(_core.VERDICTS)
    assert not in_widget & NOT_RANKED_IN_THE_WIDGET


def widget_fields():
    """The widget's reading list and its list of what it does not draw, as the module exports
    them (node evaluates the module: the lists are nested objects a regex would misread)."""
    source = pathlib.Path(__file__).resolve().parents[2] / "widgets" / "src" / "torchleak-widget.js"
    script = (
        f"import({json.dumps(source.as_uri())}).then((m) => console.log(JSON.stringify("
        "{read: {report: Object.keys(m.FIELDS_READ.report), finding: Object.keys(m.FIELDS_READ.finding)},"
        " not_shown: m.NOT_SHOWN})))"
    )
    done = subprocess.run(["node", "-e", script], capture_output=True, text=True, timeout=60, check=True)
    return json.loads(done.stdout)


@pytest.mark.skipif(shutil.which("node") is None, reason="the widget's lists are read by node")
def test_every_field_of_a_live_report_is_read_by_the_widget_or_named_as_not_shown():
    # The widget drops any field its shapes do not name (#48 item 3: allocated_inside and the
    # tensor text never showed there): a field the core adds must be drawn or declared unshown.
    from live_reports import every_section_reports

    fields = widget_fields()
    for part in ("report", "finding"):
        assert not set(fields["read"][part]) & set(fields["not_shown"][part]), part
    seen = {"report": set(), "finding": set()}
    for data in every_section_reports():
        seen["report"] |= set(data)
        for finding in data["findings"]:
            seen["finding"] |= set(finding)
    assert {"allocated_inside", "tensor_text", "live_blocks"} <= seen["finding"]
    for part in ("report", "finding"):
        known = set(fields["read"][part]) | set(fields["not_shown"][part])
        assert sorted(seen[part] - known) == [], part


@pytest.mark.parametrize("name", ["leaky_loop", "hostile", "empty"])
def test_the_text_report_and_the_page_are_the_golden_ones(name):
    # Exact snapshots (#48 item 7): any change to either view is a reviewed diff of
    # tests/fixtures/golden (regenerate.py writes them beside the fixture reports).
    import difflib

    fixtures = pathlib.Path(__file__).resolve().parents[1] / "fixtures"
    report = torchleak.Report.from_json((fixtures / f"{name}.json").read_text(encoding="utf-8"))
    for suffix, now in ((".txt", str(report)), (".html", report.to_html())):
        golden = (fixtures / "golden" / f"{name}{suffix}").read_text(encoding="utf-8")
        diff = "".join(difflib.unified_diff(golden.splitlines(True), (now + "\n").splitlines(True), n=1))
        assert not diff, (
            f"{name}{suffix} differs from its golden output (run tests/fixtures/regenerate.py):\n{diff[:3000]}"
        )


def test_a_cause_of_one_new_key_in_several_dicts_lists_its_containers_not_its_one_site():
    from torchleak.render import format as render_format, page as render_page

    site = {"text": "train.py:13", "function": "add_adapter"}
    findings = [
        {"bytes_per_iteration": 1024 * (4 - k), "site": site, "holder": {"path_text": f"layers[{k}].adapters"}}
        for k in range(3)
    ]
    cause = {"text": "3.0 KiB per iteration: ...", "severity": "warning", "findings": [0, 1, 2]}
    assert render_format.member_text(cause, findings[0]) == "train.py:13"
    cause["holders"] = [f["holder"]["path_text"] for f in findings]
    assert render_format.member_text(cause, findings[1]) == "layers[1].adapters"
    item = render_page._cause_item(cause, findings, "iteration")
    assert re.findall(r"<li><code>([^<]*)</code>", item) == [f"layers[{k}].adapters" for k in range(3)]
    # (The text report's listing is held by test_retention_forms on a real run.)


def test_the_op_of_compiled_code_is_said_beside_or_without_a_package_line():
    from torchleak.render.format import allocated_inside_text

    op = {"text": "made in torch.compile's generated code by aten.addmm (graph node input_3)"}
    assert allocated_inside_text({"compiled_op": op}) == op["text"]
    inside = {
        "file": "/venv/site-packages/somepkg/ops.py",
        "line": 41,
        "function": "reshape_heads",
        "text": "somepkg/ops.py:41",
    }
    both = allocated_inside_text({"allocated_inside": inside, "compiled_op": op})
    assert both.startswith("allocated inside ") and both.endswith("; " + op["text"])
    assert allocated_inside_text({}) is None


def test_controls_and_bidirectional_characters_are_never_shown_raw():
    # #64 item 7 (reproducer U10): a NUL or ESC in a dict key went raw into the saved page, and
    # U+202E (shows a name reversed) into the text, the page and the redacted text.
    from torchleak.render import plain

    store = {}
    keys = ["nul\x00byte", "esc\x1b[31mred", "\u202egnp.exe", "zero\u200bwidth"]
    with torchleak.track() as tracker:
        for _ in range(8):
            for key in keys:
                store.setdefault(key, []).append(torch.ones(20000))
            torchleak.step()
    report = tracker.report()
    views = {
        "text": str(report),
        "html": report.to_html(),
        "redacted": str(report.redacted()),
        "plain": plain.render(report.to_dict()),
    }
    for name, shown in views.items():
        for raw in ("\x00", "\x1b", "\u202e", "\u200b"):
            assert raw not in shown, (name, repr(raw))
    assert "\\u202egnp.exe" in views["text"] and "\\x1b[31mred" in views["html"]


def test_warnings_stand_below_the_verdict_in_every_view():
    # #62 item 5: a warning above the verdict read as the answer.
    report = torchleak.Report.from_json((FIXTURES / "hostile.json").read_text(encoding="utf-8"))
    text, page = str(report), report.to_html()
    assert text.index("LEAK ") < text.index("warning: stopped in iteration 3 of 8")
    assert page.index('class="leak"') < page.index('<p class="warn">stopped in iteration 3 of 8')
    from torchleak.render import notebook

    inline = notebook.render(report.to_dict())
    assert inline.index("LEAK</b>") < inline.index('data-testid="warning"')
    assert "color:#3e2723" in inline  # dark text on the light box, in any theme
