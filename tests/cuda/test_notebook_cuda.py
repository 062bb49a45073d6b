"""The notebook on CUDA, through nbclient on ipykernel: %%leakcheck and %leakwatch with CUDA
tensors, the device's memory with the allocator's reserve, and an OOM in a cell. Skipped
without a GPU or without nbclient/ipykernel (the GPU machine gets them as carried wheels: see
CONTRIBUTING.md, the GPU proof). With TORCHLEAK_NOTEBOOK_OUT set, the executed notebook's
reports are written there as JSON for the proof's record."""

import json
import os

import pytest
import torch

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")

REPORT = "application/vnd.torchleak.report+json"

CELLS = [
    # 1: setup; CUDA is first used here, after the extension is loaded
    "import torch\n%load_ext torchleak\n"
    "model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 1024)).cuda()\n"
    "x = torch.randn(256, 1024, device='cuda')\nlosses = []",
    # 2: the loss kept with its graph, each run keeps the activations on the GPU
    "%%leakcheck -n 8\nloss = model(x).square().mean()\nlosses.append(loss)",
    # 3: the same, fixed
    "%%leakcheck -n 8\nloss = model(x).square().mean()\nlosses.append(loss.item())",
    "%leakwatch on",
    "out = model(x)\nlosses.append(out)",
    "out = model(x)\nlosses.append(out)",
    "out = model(x)\nlosses.append(out)",
    "out = model(x)\nlosses.append(out)",
    "%leakreport",
    "%leakwatch off",
    # 11: an OOM inside a checked cell, under a per-process cap
    "losses.clear(); torch.cuda.empty_cache()\ntorch.cuda.set_per_process_memory_fraction(0.05)\nhoard = []",
    "%%leakcheck -n 200\nhoard.append(torch.empty(1 << 30, dtype=torch.uint8, device='cuda'))",
]


def reports(cell):
    return [o["data"][REPORT] for o in cell.outputs if REPORT in o.get("data", {})]


def texts(cell):
    out = []
    for o in cell.outputs:
        out.append(o.get("text", ""))
        out.append(o.get("data", {}).get("text/plain", ""))
        out.extend(o.get("traceback", []))
    return "\n".join(out)


def cuda_leaks(report):
    return [f for f in report["findings"] if f["verdict"] == "leak" and f["device"].startswith("cuda")]


@pytest.fixture(scope="module")
def notebook(tmp_path_factory):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(source) for source in CELLS]
    client = nbclient.NotebookClient(nb, kernel_name="python3", timeout=300, startup_timeout=120, allow_errors=True)
    client.execute(cwd=str(tmp_path_factory.mktemp("nb")))
    where = os.environ.get("TORCHLEAK_NOTEBOOK_OUT")
    if where:
        record = [
            {
                "source": c.source[:80],
                "reports": [
                    {
                        "findings": [
                            {k: f.get(k) for k in ("verdict", "device", "site", "path_text", "bytes_per_iteration")}
                            for f in r["findings"][:4]
                        ],
                        "devices": r.get("devices"),
                        "oom": r.get("oom"),
                        "warnings": r.get("warnings"),
                    }
                    for r in reports(c)
                ],
                "text": texts(c)[-1500:],
            }
            for c in nb.cells
        ]
        with open(where, "w") as out:
            json.dump(record, out, indent=1, default=str)
    return nb


def test_leakcheck_finds_a_cuda_leak_at_its_cell_line_with_its_holder(notebook):
    (report,) = reports(notebook.cells[1])[-1:]
    leaks = cuda_leaks(report)
    assert leaks, texts(notebook.cells[1])
    assert leaks[0]["site"]["cell"] is not None, leaks[0]["site"]
    assert "losses" in leaks[0]["path_text"], leaks[0]["path_text"]
    fixed = reports(notebook.cells[2])[-1]
    assert not cuda_leaks(fixed), [f["path_text"] for f in cuda_leaks(fixed)]


def test_the_device_is_shown_with_the_allocators_reserve(notebook):
    report = reports(notebook.cells[1])[-1]
    (device,) = [d for d in report["devices"] if d["device"] == "cuda:0"]
    assert device["capacity_bytes"] > 0
    assert max(device["reserved"]) >= max(device["allocated"]) > 0, device


def test_leakwatch_names_the_cuda_leak_across_cells(notebook):
    report = reports(notebook.cells[8])[-1]
    leaks = cuda_leaks(report)
    assert leaks, texts(notebook.cells[8])
    assert any("losses" in f["path_text"] for f in leaks)


def test_an_oom_in_a_checked_cell_is_reported_and_names_the_holder(notebook):
    cell = notebook.cells[11]
    shown = texts(cell)
    assert "Out of memory on cuda:0" in shown or any(r.get("oom") for r in reports(cell)), shown[-3000:]
    oom = next(r["oom"] for r in reports(cell) if r.get("oom"))
    assert oom["device"] == "cuda:0"
    assert oom["by_holder"] and oom["by_holder"][0]["holder"] == "hoard", oom
