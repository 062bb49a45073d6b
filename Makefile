# The two README commands are `make demo` and `make test`. Both set everything up themselves,
# idempotently, on a fresh Debian machine as root: Debian packages, the virtualenv at .venv
# with torch==2.13.0, and the build installed into it.

SHELL := /bin/bash
# .ci/run times every tier: with TORCHLEAK_TIMINGS set, each recipe line runs through
# .ci/timed-shell, which appends the target's name and the line's milliseconds there.
ifdef TORCHLEAK_TIMINGS
SHELL := $(CURDIR)/.ci/timed-shell
export TORCHLEAK_TARGET = $@
endif
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
TORCH_SPEC ?= torch==2.13.0
DEBIAN_PACKAGES := nlohmann-json3-dev libxtensor-dev catch2 cmake g++ chromium clang-format nodejs ccache
PY_PACKAGES := "scikit-build-core>=0.10" "pybind11>=2.12" "pytest>=7" pytest-xdist "ipython>=8" numpy \
	"jupyterlab==4.5.11" "notebook==7.5.8" "anywidget>=0.9" "ipywidgets>=8" ipykernel nbclient nbformat nbconvert \
	xeus-python playwright "axe-playwright-python==0.1.8" uv ruff build "mypy==1.13.0"
# Every compilation goes through ccache, its cache outside the clone, so that a second run on
# this machine recompiles only what changed (a clean clone's `make test` compiles torchleak seven
# times: the install, the core's tests, the fake device, three matrix cells, the GPU proof's dry
# run). base_dir is the clone: paths inside it are hashed relative to each build folder, so a
# clone elsewhere hits the entries of the last; no hash of that folder either (RelWithDebInfo's
# -g would tie each entry to it). The launcher asks at each compile whether ccache is installed
# yet (debian-packages installs it), and compiles without it otherwise.
export CMAKE_CXX_COMPILER_LAUNCHER := $(CURDIR)/.ci/ccache-if-installed
export CCACHE_DIR ?= $(HOME)/.cache/torchleak-ccache
export CCACHE_BASEDIR := $(CURDIR)
export CCACHE_NOHASHDIR := 1
export CCACHE_MAXSIZE ?= 5G
# mypy's cache likewise (the typed surface in test-format: 36 s cold, 5 s warm; torch's
# annotations are most of it). tests/python's user-side type check keeps its own, per
# environment, beside it (test_typing.py).
export MYPY_CACHE_DIR ?= $(HOME)/.cache/torchleak-mypy/surface
CORE_BUILD := build/core-tests
DEVICE_BUILD := build/fake-device
STAMPS := build/stamps

.PHONY: sdist wheel test-install test-cuda gpu-proof-dry proof-wheels test-sanitize test-matrix test-matrix-full demo test test-core test-device test-python test-widgets widgets test-format bench lab deps debian-packages venv extras install leak-cases print-leak-cases format clean \
	test-api test-integrations test-distributed test-notebooks test-browser lab-newest

demo: install
	@echo "== a training loop that keeps every step's loss with its graph =="
	$(PY) -m torchleak run notebooks/leaky_training.py

test: install test-format test-widgets test-core test-device test-python test-matrix gpu-proof-dry test-install

# Catch2's cases two at a time (ctest starts the binary once per case): 58 s → 34 s.
test-core: debian-packages
	cmake -S . -B $(CORE_BUILD) -DTORCHLEAK_BUILD_PYTHON=OFF -DTORCHLEAK_BUILD_TESTS=ON \
	      -DTORCHLEAK_WARNINGS_AS_ERRORS=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo
	cmake --build $(CORE_BUILD) -j2
	cd $(CORE_BUILD) && ctest -j2 --output-on-failure

# The device tier: a fake accelerator on PrivateUse1 (tests/device; test-only, never installed)
# so the device paths run on real tensors without a GPU. Its caching pool's Catch2 tests run
# in test-core; the pytest tier runs in a process of its own (a registered device allocator
# changes how the hook listens to CPU events, which the other tiers must not see).
test-device: install
	cmake -S . -B $(DEVICE_BUILD) -DTORCHLEAK_BUILD_PYTHON=OFF -DTORCHLEAK_BUILD_FAKE_DEVICE=ON \
	      -DTORCHLEAK_WARNINGS_AS_ERRORS=ON -DPython_EXECUTABLE=$(abspath $(PY)) \
	      -DCMAKE_BUILD_TYPE=RelWithDebInfo
	cmake --build $(DEVICE_BUILD) -j2 --target _torchleak_fake_device
	$(PY) -m pytest -q tests/device

# The CUDA tier (tests/cuda): every test skipped, with its reason, without a CUDA device.
test-cuda: install
	$(PY) -m pytest -q -rs tests/cuda

# The sdist users and the GPU machine build from: the header-only libraries bundled in from
# this machine's copies (kernel_ext/packaging/bundle_headers.py), so that pip alone builds it.
sdist: debian-packages venv
	rm -rf third_party dist/torchleak-*.tar.gz
	$(PY) kernel_ext/packaging/bundle_headers.py --dest third_party
	$(PY) -m build --sdist --no-isolation --outdir dist .
	@ls -l dist/torchleak-*.tar.gz

# tests/install: the sdist and the wheel installed as a user installs them: a user who is not
# root (created when absent), fresh virtualenvs, the system's header copies hidden; a leak found
# with check() and with `python -m torchleak run`; the wheel refusing another torch. One test
# at a time: its two user tests side by side took as long (171 s against 163 s), their pip
# installs share the disk.
test-install: sdist wheel
	$(PY) -m pytest -q tests/install

# A wheel for the installed torch: its version carries that torch (0.1.0+torch2.13.0.cpu), and
# under another torch minor release it refuses to load with one sentence that says how to rebuild.
wheel: debian-packages venv
	rm -rf dist/torchleak-*.whl
	$(PY) -m build --wheel --no-isolation --outdir dist \
	  --config-setting=cmake.define.TORCHLEAK_WARNINGS_AS_ERRORS=ON .
	$(PY) kernel_ext/packaging/label_wheel.py dist/torchleak-*.whl

# AddressSanitizer and UndefinedBehaviorSanitizer over the core's Catch2 tests and over _core
# (built into build/sanitize, never installed), then the smoke test and tests/python's API tier
# with the sanitizers' runtimes preloaded into Python (it is not built with them). Undefined
# behaviour one compiler forgives is how another one crashes. Python and torch leak by design
# at exit, so leak detection is off; any other report fails the run. SIGSEGV stays Python's and
# the tests': the doctor's and the proof's tests plant one and expect that signal, not ASan's abort.
# Not in `make test` yet: with ccache cold its two builds took 45 minutes here (Catch2's 33.5,
# the module's 11.8; 2026-11-29, beside other builds) and its tests 14 more (Catch2 5.4 on two
# workers, the python tier 8.7: 233 and 573 passed, no report); with ccache warm, 11.5 minutes
# in all (builds 96 s, Catch2 119 s, the python tier 472 s). The first CI run after a change to
# a core header has the cold cache, and 90 minutes would not hold it (issue #65).
SANITIZE := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
# UBSan's vptr check reads the RTTI of every polymorphic class the code touches, and torch
# exports none for its internal ones (PyFunctionPostHook): _core would not load.
SANITIZE_MODULE := $(SANITIZE) -fno-sanitize=vptr
SANITIZE_BUILD := build/sanitize
SANITIZE_ENV := LD_PRELOAD="$$(g++ -print-file-name=libasan.so) $$(g++ -print-file-name=libubsan.so)" \
	ASAN_OPTIONS=detect_leaks=0:abort_on_error=1:handle_segv=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	PYTHONPATH=$(abspath $(SANITIZE_BUILD))/target
test-sanitize: install
	cmake -S . -B $(SANITIZE_BUILD)/core -DTORCHLEAK_BUILD_PYTHON=OFF -DTORCHLEAK_BUILD_TESTS=ON \
	      -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS="$(SANITIZE)" -DCMAKE_EXE_LINKER_FLAGS="$(SANITIZE)"
	cmake --build $(SANITIZE_BUILD)/core -j2
	cd $(SANITIZE_BUILD)/core && UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ctest -j2 --output-on-failure
	$(PIP) install -q --disable-pip-version-check --no-build-isolation --no-deps --upgrade \
	  --target $(SANITIZE_BUILD)/target -C build-dir=$(SANITIZE_BUILD)/module -C cmake.build-type=RelWithDebInfo \
	  -C cmake.define.CMAKE_CXX_FLAGS="$(SANITIZE_MODULE)" -C cmake.define.CMAKE_MODULE_LINKER_FLAGS="$(SANITIZE_MODULE)" .
	$(SANITIZE_ENV) $(PY) tests/cuda/smoke.py
	$(SANITIZE_ENV) $(PY) -m pytest -q -p no:cacheprovider $(PYTEST_PARALLEL) tests/python

# The GPU proof's script (tests/cuda/gpu_proof.sh) run here, without a GPU: the sdist built
# into a folder of its own with the system's header-only libraries hidden (as on the GPU
# machine: the sdist's bundled copies are used), every CUDA test skipped with its reason, the
# leak cases' CPU half, and a summary that must be complete. On a GPU machine the same script is
# the one command.
GPU_PROOF_DRY := build/gpu-proof-dry
# pip unpacks the sdist under TMPDIR (and builds it in the unpacked tree: pyproject's build-dir):
# inside the clone, so that ccache finds the last run's objects (a folder outside it never hits).
gpu-proof-dry: sdist
	rm -rf $(GPU_PROOF_DRY) $(GPU_PROOF_DRY)-target $(GPU_PROOF_DRY)-tmp
	mkdir -p $(GPU_PROOF_DRY)-tmp
	TMPDIR=$(abspath $(GPU_PROOF_DRY))-tmp \
	OUT=$(GPU_PROOF_DRY) PROOF_LIMIT_SCALE=4 PYTHON=$(abspath $(PY)) PROOF_TARGET=$(abspath $(GPU_PROOF_DRY))-target \
	  LEAK_CASES=$(abspath $(LEAK_CASES)) bash tests/cuda/without_system_headers.sh bash tests/cuda/gpu_proof.sh
	$(PY) tests/cuda/proof_summary.py $(GPU_PROOF_DRY) --check --expect-no-gpu

# The GPU proof's wheels (tests/cuda/proof-wheels.txt) for the GPU machine's Python 3.12, which
# cannot reach the package index: they travel in .whl/ (CONTRIBUTING.md, the GPU proof).
proof-wheels: venv
	rm -rf .whl && mkdir -p .whl
	grep -v '^#' tests/cuda/proof-wheels.txt | xargs $(PIP) download -q --disable-pip-version-check --no-deps \
	  --only-binary=:all: --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64 \
	  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform any -d .whl
	@ls .whl | wc -l

# tests/python: API, paths, verdicts, magics (no kernel); tests/integrations: pytest, HF Trainer,
# Lightning (the pinned extras); tests/distributed: torchrun jobs of 2 and 3 ranks (gloo on
# 127.0.0.1, bounded timeouts); tests/notebooks: nbclient on
# ipykernel and xeus-python; tests/browser: JupyterLab 4 and Notebook 7 in headless Chromium.
# tests/python runs on two workers (pytest-xdist), each test file on one of them: every test
# file tracks in a process of its own then, as the hook is per process. The other tiers start
# servers, kernels and torchrun jobs on free ports of their own, so they share the two workers
# the same way, a file to a worker (280 s one at a time, 224 s side by side).
PYTEST_PARALLEL := -n 2 --dist loadfile
test-python: install lab-newest
	$(PY) tests/fixtures/regenerate.py --check
	$(PY) -m pytest -q $(PYTEST_PARALLEL) tests/python
	$(PY) -m pytest -q $(PYTEST_PARALLEL) tests/integrations tests/distributed tests/notebooks tests/browser

# One target per test folder, for working on one tier (test-python runs them all at once).
test-api: install
	$(PY) tests/fixtures/regenerate.py --check
	$(PY) -m pytest -q $(PYTEST_PARALLEL) tests/python
test-integrations test-distributed test-notebooks test-browser: test-%: install
	$(PY) -m pytest -q tests/$*
test-browser: lab-newest

# The newest JupyterLab 4 and Notebook 7 releases, beside the pinned ones in .venv: the browser
# tier draws saved reports there with the committed lab extension. Upgraded on every run (uv
# resolves against the index each time, and keeps what is current).
LAB_NEWEST := build/lab-newest
lab-newest: venv
	test -x $(LAB_NEWEST)/bin/python || $(PY) -m uv venv -q --python $(PY) $(LAB_NEWEST)
	$(PY) -m uv pip install -q --python $(LAB_NEWEST)/bin/python --upgrade "jupyterlab>=4,<5" "notebook>=7,<8"

# The platform matrix (tests/matrix/run.py): torchleak built against other CPython and torch
# versions, each cell in a uv environment of its own under ~/.cache/torchleak-matrix (kept between
# clean clones while torch and Python are unchanged; the builds stay in build/matrix) with torch from the
# package index, running tests/python and the visible leak-case suite. `make test` runs the two
# corners, newest and oldest, and the GPU machine's stack (Python 3.12, torch 2.11.0, pybind11
# 3.1.0); `make test-matrix-full` every cell of docs/platforms.md's table.
MATRIX_CORNERS := 3.13:2.15.0 3.10:2.11.0 3.12:2.11.0:pybind11==3.1.0
MATRIX_CELLS := $(MATRIX_CORNERS) 3.12:2.12.1 3.12:2.14.1 3.11:2.15.0 3.13:2.13.0
MATRIX ?= $(MATRIX_CORNERS)
test-matrix: debian-packages venv
	$(PY) tests/matrix/run.py $(MATRIX) --results build/matrix/results.json --leak-cases $(abspath $(LEAK_CASES))

test-matrix-full:
	$(MAKE) test-matrix MATRIX="$(MATRIX_CELLS)"

# The committed widget bundle and lab extension must match their sources: --check builds them
# again (JupyterLab's builder, against the pinned JupyterLab, with Node) and compares.
test-widgets: debian-packages venv
	$(PY) widgets/build.py --check
	node --test tests/widgets/widget.test.mjs

# After editing widgets/src or widgets/labextension: writes widgets/dist, to be committed.
widgets: debian-packages venv
	$(PY) widgets/build.py

lab: install
	$(PY) -m jupyter lab --ServerApp.ip=127.0.0.1 --allow-root notebooks/tour.ipynb

bench: install
	$(PY) bench/bench_overhead.py
	$(PY) bench/bench_scale.py
	LEAK_CASES=$(abspath $(LEAK_CASES)) $(PY) bench/bench_verdicts.py
	$(PY) bench/bench_shapes.py

# The suite of real-world leak cases and its scorer live outside this repository, in the team's
# shared folder beside it; LEAK_CASES=path points elsewhere. The one place that knows where:
# the matrix, the GPU proof and the verdict bench are given it.
LEAK_CASES ?= ../shared/leak-cases
print-leak-cases:
	@echo $(abspath $(LEAK_CASES))
leak-cases: install
	@test -f $(LEAK_CASES)/run.py || { echo "make leak-cases: no suite at $(LEAK_CASES)/run.py" \
	  "(the shared leak-cases folder beside this repository); set LEAK_CASES=path"; exit 2; }
	$(PY) $(LEAK_CASES)/run.py

deps: debian-packages venv

# Again when the Makefile changed (a package joined the list).
debian-packages: $(STAMPS)/debian
$(STAMPS)/debian: Makefile
	@missing=""; for p in $(DEBIAN_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	fi
	@mkdir -p $(STAMPS) && touch $@

# Again when the Makefile changed (a package joined the list): pip keeps what is installed.
venv: $(STAMPS)/venv
$(STAMPS)/venv: Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --disable-pip-version-check "$(TORCH_SPEC)" $(PY_PACKAGES)
	@mkdir -p $(STAMPS) && touch $@

# The integrations' frameworks at pyproject's pinned extras (transformers, lightning), with
# torch held at TORCH_SPEC so that no resolution swaps it for a CUDA build.
EXTRAS := transformers lightning
extras: $(STAMPS)/extras
$(STAMPS)/extras: $(STAMPS)/venv pyproject.toml
	$(PIP) install -q --disable-pip-version-check "$(TORCH_SPEC)" $$($(PY) -c "import tomllib; \
	  extras = tomllib.load(open('pyproject.toml', 'rb'))['project']['optional-dependencies']; \
	  print(' '.join(p for name in '$(EXTRAS)'.split() for p in extras[name]))")
	@mkdir -p $(STAMPS) && touch $@

# Rebuilt whenever a C++, build, package or shipped data file (the widget bundle, the lab
# extension, the kernelspec) changed; pip's build directory keeps it
# incremental. --no-build-isolation: compile against the torch in the virtualenv.
SOURCES := $(shell find core kernel_ext -type f \( -name '*.h' -o -name '*.cpp' -o -name '*.py' \)) \
	CMakeLists.txt pyproject.toml $(shell find widgets/dist -type f) share/jupyter/kernels/torchleak/kernel.json
install: $(STAMPS)/install
$(STAMPS)/install: $(STAMPS)/debian $(STAMPS)/venv $(STAMPS)/extras $(SOURCES)
	$(PIP) install -q --disable-pip-version-check --no-build-isolation --no-deps \
	  --config-settings=cmake.define.TORCHLEAK_WARNINGS_AS_ERRORS=ON .
	$(PY) -c "import torchleak; print('torchleak', torchleak.__version__, 'built against torch', __import__('torch').__version__)"
	@touch $@

CXX_SOURCES = $$(find core kernel_ext/src tests/core tests/device -name '*.h' -o -name '*.cpp')

format:
	clang-format -i $(CXX_SOURCES)
	$(PY) -m ruff format .

# The one .clang-format holds for every C++ file; ruff (pyproject's [tool.ruff]) for every
# Python file.
test-format: debian-packages venv
	clang-format --dry-run --Werror $(CXX_SOURCES)
	$(PY) -m ruff format --check .
	$(PY) -m ruff check .
	$(PY) -m mypy
	$(PY) widgets/build.py --lint

clean:
	rm -rf build
