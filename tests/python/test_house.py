"""The bar of the house, held by a test instead of by review: no C++ file of core/ or kernel_ext/src
over 700 lines, the floors one way (no module includes, directly or through others, a module
that includes it back), and core/ free of Python and pybind11 (a Catch2 test links it alone).

A module is a file's name without its extension: `causes.h` and `causes.cpp` are one module, and
an edge runs from it to every project header either of them includes."""

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]
FLOORS = ("core", "kernel_ext/src")
LONGEST_FILE = 700
INCLUDE = re.compile(r'^\s*#\s*include\s+[<"]([^>"]+)[>"]', re.MULTILINE)


def cpp_files():
    return sorted(p for floor in FLOORS for p in (ROOT / floor).rglob("*") if p.suffix in (".h", ".cpp"))


def module_graph(files):
    """{module: {modules it includes}} for the files given as {path: text}; includes outside
    the project (the standard library, nlohmann, torch) are not modules."""
    modules = {pathlib.PurePath(p).stem for p in files}
    graph = {m: set() for m in modules}
    for path, text in files.items():
        here = pathlib.PurePath(path).stem
        for included in INCLUDE.findall(text):
            there = pathlib.PurePath(included).stem
            if there in modules and there != here:
                graph[here].add(there)
    return graph


def back_edges(graph):
    """The edges that close a cycle, found by a depth-first walk in name order."""
    state, found = {}, []

    def walk(module):
        state[module] = "open"
        for there in sorted(graph[module]):
            if state.get(there) == "open":
                found.append((module, there))
            elif there not in state:
                walk(there)
        state[module] = "done"

    for module in sorted(graph):
        if module not in state:
            walk(module)
    return found


def test_the_cycle_finder_finds_a_cycle_through_three_modules_and_none_in_a_chain():
    cycle = {
        "a.h": '#include "b.h"',
        "b.cpp": '#include "torchleak/c.h"\n#include <vector>',
        "c.h": '#include "a.h"',
    }
    assert back_edges(module_graph(cycle)) == [("c", "a")]
    chain = {"a.h": '#include "b.h"', "b.cpp": '#include "c.h"', "c.h": "#include <map>"}
    assert back_edges(module_graph(chain)) == []


def test_no_module_of_core_or_kernel_ext_includes_one_that_includes_it_back():
    files = {str(p.relative_to(ROOT)): p.read_text() for p in cpp_files()}
    assert len(files) > 50, "the C++ sources were not found from " + str(ROOT)
    assert back_edges(module_graph(files)) == []


def test_no_module_name_is_used_twice():
    stems = [p.stem + p.suffix for p in cpp_files()]
    assert sorted({s for s in stems if stems.count(s) > 1}) == []


def test_no_cpp_file_is_longer_than_the_house_allows():
    lines = {p.name: p.read_text().count("\n") for p in cpp_files()}
    assert {name: n for name, n in lines.items() if n > LONGEST_FILE} == {}, "split these along a phase or a section"


def test_core_includes_neither_python_nor_pybind11():
    for path in (ROOT / "core").rglob("*"):
        if path.suffix in (".h", ".cpp"):
            for included in INCLUDE.findall(path.read_text()):
                assert not included.startswith(("Python.h", "pybind11", "torch/")), (path, included)


def test_one_version_the_packages_and_the_lab_extensions():
    # pyproject.toml is the source; torchleak.__version__ reads it as installed, and the lab
    # extension's package.json (JupyterLab's builder needs one of its own) must agree.
    import json

    import torchleak

    # (tomllib is 3.11's; the matrix runs this on 3.10 too)
    version = re.search(r'^version = "([^"]+)"$', (ROOT / "pyproject.toml").read_text(), re.MULTILINE).group(1)
    assert torchleak.__version__ == version
    for package in ("widgets/labextension/package.json", "widgets/dist/labextension/package.json"):
        assert json.loads((ROOT / package).read_text())["version"] == version, package
