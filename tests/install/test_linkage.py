"""What the built modules share with the process (kernel_ext/torchleak/_linkage.py): their
PyInit_* alone, and every C++ runtime reference bound in libstdc++ or in the module, never in
torch's weak copies. Also the toolchain of the first GPU machine, whose g++ (its own GCC in
/opt/gcc) links libstdc++ statically: `_core` relinked here from the installed build's objects
against a static libstdc++ must keep it inside. Before the fix such a build exported 4,697 symbols
and its AnalysisConfig.get('warmup') answered '' here and crashed there (docs/platforms.md)."""

import glob
import pathlib
import shutil
import subprocess
import sys
import sysconfig

import pytest

import torchleak
from torchleak import _linkage

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGE = pathlib.Path(torchleak.__file__).parent
MODULES = sorted(PACKAGE.glob("_core*.so")) + sorted(PACKAGE.glob("_testing*.so"))
linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="ELF symbol tables: Linux only")


@linux_only
@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.name.split(".")[0])
def test_an_installed_module_exports_its_entry_point_alone(module):
    assert _linkage.exported_symbols(module) == [_linkage.entry_point(module)]


@linux_only
def test_every_cxx_runtime_reference_binds_in_libstdcxx_or_the_module():
    (module,) = PACKAGE.glob("_core*.so")
    bindings, told = _linkage.std_bindings(module, sys.executable, _linkage.DEFAULT_CODE)
    assert told.startswith("exit status 0"), told
    assert bindings, "no std:: binding seen at all: LD_DEBUG=bindings did not report"
    assert _linkage.foreign_bindings(bindings, module) == []


def relink_with_static_libstdcxx(build, output, folder):
    """Runs the installed build's own link command for _core again, writing `output`, with a
    libstdc++ that exists only as a static archive (as in /opt/gcc on the GPU machine)."""
    target = f"_core{sysconfig.get_config_var('EXT_SUFFIX')}"
    commands = subprocess.run(
        ["ninja", "-C", str(build), "-t", "commands", target], capture_output=True, text=True, check=True, timeout=60
    ).stdout.strip()
    link = commands.splitlines()[-1]
    assert f"-o {target}" in link, link
    archive = subprocess.run(["g++", "-print-file-name=libstdc++.a"], capture_output=True, text=True, check=True)
    static_only = folder / "static-libstdc++"
    static_only.mkdir()
    (static_only / "libstdc++.a").symlink_to(archive.stdout.strip())
    link = link.replace(f" {target}", f" {output}").replace(
        " -shared ", f" -shared -L{static_only} -static-libstdc++ ", 1
    )
    subprocess.run(["bash", "-c", link], cwd=build, check=True, timeout=600)


@linux_only
@pytest.mark.skipif(shutil.which("ninja") is None or shutil.which("g++") is None, reason="needs ninja and g++")
def test_a_toolchain_that_links_libstdcxx_statically_keeps_it_inside_the_module(tmp_path):
    builds = [
        pathlib.Path(p) for p in glob.glob(str(ROOT / "build" / "cp*")) if (pathlib.Path(p) / "build.ninja").exists()
    ]
    if not builds:
        pytest.skip("no build tree of make install under build/ (make install makes one)")
    package = tmp_path / "torchleak"
    shutil.copytree(PACKAGE, package, ignore=shutil.ignore_patterns("__pycache__"))
    (module,) = package.glob("_core*.so")
    relink_with_static_libstdcxx(max(builds, key=lambda b: b.stat().st_mtime), module, tmp_path)
    needed = subprocess.run(["readelf", "-d", str(module)], capture_output=True, text=True, check=True).stdout
    assert "libstdc++" not in needed  # the runtime is inside
    assert _linkage.exported_symbols(module) == ["PyInit__core"]
    bindings, told = _linkage.std_bindings(module, sys.executable, _linkage.DEFAULT_CODE)
    assert told.startswith("exit status 0"), told  # get() answered, the leak was found
    assert _linkage.foreign_bindings(bindings, module) == []


def test_the_binding_log_is_read_as_glibc_writes_it(tmp_path):
    module = tmp_path / "_core.so"
    line = (
        f"     12:\tbinding file {module} [0] to /opt/t/lib/libc10.so [0]: normal symbol "
        "`_ZNKSt7__cxx1115basic_stringbufIcSt11char_traitsIcESaIcEE3strEv' [GLIBCXX_3.4.21]"
    )
    match = _linkage.BINDING.search(line)
    assert match.group(1) == str(module) and match.group(2) == "/opt/t/lib/libc10.so"
    assert match.group(5) == "GLIBCXX_3.4.21"
    names = _linkage.demangle([match.group(4), "_ZTVSt9exception", "_ZN5torch3jit4NodeD1Ev"])
    assert _linkage.STD_NAME.match(names[match.group(4)])
    assert _linkage.STD_NAME.match(names["_ZTVSt9exception"]) or shutil.which("c++filt") is None
    assert not _linkage.STD_NAME.match(names["_ZN5torch3jit4NodeD1Ev"])
    entries = [{"to": "/x/libstdc++.so.6"}, {"to": str(module)}, {"to": "/opt/t/lib/libc10.so"}]
    assert _linkage.foreign_bindings(entries, module) == [{"to": "/opt/t/lib/libc10.so"}]
