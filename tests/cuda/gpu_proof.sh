#!/usr/bin/env bash
# The GPU proof: one command on a GPU machine (see CONTRIBUTING.md, "The GPU proof").
#
#   bash tests/cuda/gpu_proof.sh            from the repository root; logs and summary.json in $OUT
#
# It builds torchleak from the sdist that travelled with the tree (dist/torchleak-*.tar.gz, made
# by `make sdist`) into a folder of its own, against the machine's own python3 and torch, with
# nothing from the network; then runs the CUDA tier (tests/cuda), the leak-case suite (every case:
# the CUDA ones run where there is a GPU) and its ground truth for the CUDA cases, and
# bench/bench_cuda.py; and writes $OUT/summary.json (tests/cuda/proof_summary.py), which holds
# every step's results, beside proof.log, install.log, cuda-tier.xml and native.txt (what the
# built module shares with the process: exports, where its C++ runtime binds, the libraries
# loaded, the environment). Each step has a time limit so that the whole stays within eight
# minutes on an H100 (on an H200 on 2026-11-28: 296 s, the leak cases beside the CUDA tier); a
# step that fails or runs out of time is recorded and the next one still runs. What was skipped,
# and why, is printed. The CUDA tier's notebook tests need nbclient and ipykernel, which the GPU
# machine lacks: carried as wheels (CONTRIBUTING.md, the GPU proof), else they are skipped.
#
# Environment: OUT (default build/gpu-proof), PYTHON (default python3), LEAK_CASES (default
# .proof/leak-cases, the copy that travels with the tree; make gpu-proof-dry gives the Makefile's), BENCH_ARGS (bench_cuda.py's arguments),
# PROOF_TARGET (where the build is installed; default a fresh temporary folder), PROOF_LIMIT_SCALE
# (multiplies every step's time limit; the dry run on two CPU cores uses 4), PROOF_PYTHON_HEADERS
# (Python headers for a python3 without its own; default .proof/python<X.Y>-include), PROOF_STEPS (the steps
# to run, default all: "install doctor smoke cuda_tier leak_cases truth bench"; without install,
# PROOF_TARGET must hold a build already).
#
# The smoke step (tests/cuda/smoke.py) comes first after the build: if torchleak crashes there,
# a native backtrace goes to $OUT/backtrace.txt (gdb or cuda-gdb), the sdist is built once more
# with its bundled headers instead of the system's to tell the two apart (install_bundled,
# smoke_bundled; the proof goes on with that build if it works), and otherwise every later step
# is skipped, saying why: they would all crash the same way, and the GPU's minutes are few.
# `make gpu-proof-dry` runs this same script on a machine without a GPU.
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
OUT=${OUT:-$ROOT/build/gpu-proof}
PYTHON=${PYTHON:-python3}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
: >"$OUT/steps.txt"
exec > >(tee -a "$OUT/proof.log") 2>&1

if [ -z "${LEAK_CASES:-}" ]; then
    LEAK_CASES=.proof/leak-cases
fi
BENCH_ARGS=${BENCH_ARGS:---rounds 10 --steps 4 --batch 8 --seq 1024 --detect-steps 60}
TARGET=${PROOF_TARGET:-$(mktemp -d /tmp/torchleak-proof.XXXXXX)}
export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}
export PYTHONUNBUFFERED=1

PROOF_STEPS=" ${PROOF_STEPS:-install doctor smoke cuda_tier leak_cases truth bench} "
SKIP_REST=""  # set when the smoke test failed: why every later step is skipped

# step NAME LIMIT_SECONDS COMMAND...: runs it with a time limit, records "NAME status seconds".
step() {
    local name=$1 limit=$(($2 * ${PROOF_LIMIT_SCALE:-1}))
    shift 2
    if [ -n "$SKIP_REST" ]; then
        skip "$name" "$SKIP_REST"
        return 0
    fi
    if [[ "$name" != *_bundled && "$PROOF_STEPS" != *" $name "* ]]; then
        skip "$name" "not among PROOF_STEPS"
        return 0
    fi
    echo "== $name (at most ${limit} s): $*"
    local begun=$SECONDS
    timeout --kill-after=10 "$limit" "$@"
    local rc=$?
    local took=$((SECONDS - begun))
    if [ $rc -eq 0 ]; then
        echo "$name passed $took" >>"$OUT/steps.txt"
    elif [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
        echo "$name failed $took ran past its ${limit} s limit" >>"$OUT/steps.txt"
    else
        echo "$name failed $took exit status $rc" >>"$OUT/steps.txt"
    fi
    echo "== $name: exit $rc after ${took} s"
    return 0
}
skip() {
    echo "$1 skipped 0 $2" >>"$OUT/steps.txt"
    echo "== $1: skipped: $2"
}

"$PYTHON" - >"$OUT/machine.json" <<'PY'
import json, platform, sys
import torch
gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
print(json.dumps({"python": platform.python_version(), "torch": torch.__version__, "cuda": torch.version.cuda,
                  "gpu": gpu, "executable": sys.executable, "host": platform.node()}))
PY
cat "$OUT/machine.json"

# A python3 without its development headers cannot build an extension; where the tree carries a
# copy of the same minor version's headers (.proof/python<X.Y>-include), CMake is pointed there.
PY_INCLUDE=$("$PYTHON" -c "import sysconfig; print(sysconfig.get_paths()['include'])")
PY_MINOR=$("$PYTHON" -c "import sys; print(f'{sys.version_info[0]}.{sys.version_info[1]}')")
# Only the same patch release's: frame_layout.h reads CPython's internal frame structs, which a
# patch release may change, so headers of 3.12.1 never build a module for 3.12.3.
PY_VERSION=$("$PYTHON" -c "import platform; print(platform.python_version())")
if [ ! -f "$PY_INCLUDE/Python.h" ]; then
    CARRIED=${PROOF_PYTHON_HEADERS:-.proof/python$PY_MINOR-include}
    CARRIED_VERSION=$(sed -n 's/^#define PY_VERSION[[:space:]]*"\(.*\)"/\1/p' "$CARRIED/patchlevel.h" 2>/dev/null)
    if [ -f "$CARRIED/Python.h" ] && [ "$CARRIED_VERSION" != "$PY_VERSION" ]; then
        echo "no Python.h in $PY_INCLUDE; the carried $CARRIED is Python $CARRIED_VERSION's, not" \
            "$PY_VERSION's: refused (another patch release's internal frame layout); the build will fail"
    elif [ -f "$CARRIED/Python.h" ]; then
        echo "no Python.h in $PY_INCLUDE: using the carried $CARRIED (Python $CARRIED_VERSION)"
        export SKBUILD_CMAKE_ARGS="-DPython_INCLUDE_DIR=$(cd "$CARRIED" && pwd)"
    else
        echo "no Python.h in $PY_INCLUDE, and no .proof/python$PY_MINOR-include: the build will fail"
    fi
fi

SDISTS=(dist/torchleak-*.tar.gz)
if [ ! -f "${SDISTS[-1]}" ]; then
    skip install "no sdist in dist/: run make sdist here and carry dist with the tree"
else
    SDIST=${SDISTS[-1]}
    echo "sdist: $SDIST; install target: $TARGET"
    step install 150 "$PYTHON" -m pip install --no-build-isolation --no-deps --no-index --no-cache-dir \
        --disable-pip-version-check -v --target "$TARGET" "$SDIST" >"$OUT/install.log" 2>&1
    grep -E "torchleak: (torch|nlohmann_json|xtensor|xtl) " "$OUT/install.log" || true
    tail -n 5 "$OUT/install.log"
fi
BASE_PYTHONPATH=${PYTHONPATH:-}
export PYTHONPATH="$TARGET${BASE_PYTHONPATH:+:$BASE_PYTHONPATH}"
"$PYTHON" -m torchleak version || echo "torchleak is not importable from $TARGET"

# A native backtrace of a command that died of a signal, where a debugger is installed (the GPU
# machines have cuda-gdb, which debugs host code too): written to $OUT/backtrace.txt.
backtrace() {
    local debugger
    debugger=$(command -v gdb || command -v cuda-gdb) || { echo "no gdb or cuda-gdb for a backtrace"; return 0; }
    echo "== backtrace with $debugger: $*"
    timeout --kill-after=10 120 "$debugger" -q -batch -ex "set pagination off" -ex run -ex bt -ex 'x/4i $pc' \
        -ex "info sharedlibrary" --args "$@" >"$OUT/backtrace.txt" 2>&1
    grep -E "^#|SIGSEGV|SIGABRT|signal" "$OUT/backtrace.txt" | head -40
}
smoke_failed() { grep -q "^$1 failed" "$OUT/steps.txt"; }

# What the built module shares with this process, written to $OUT/native.txt after every smoke
# test (seconds): the environment that decides what loads, the interpreter and the headers the
# build used, the module's dynamic section and version needs, its exports, where its std::
# references bind during one AnalysisConfig.get (LD_DEBUG=bindings, kernel_ext/torchleak/_linkage.py
# run by its path), and the libraries loaded beside it. A crash is settled from this and the
# backtrace without another run.
native_diagnostics() {
    local module
    module=$(ls "$TARGET"/torchleak/_core*.so 2>/dev/null | head -n 1)
    {
        echo "== $1"
        echo "== environment"
        env | grep -E '^(LD_|PYTHON|CUDA|TORCH)' | sort
        echo "== interpreter"
        "$PYTHON" -c 'import sys, sysconfig; print(sys.version); print("include:", sysconfig.get_paths()["include"])'
        echo "== build"
        grep -E "torchleak: |CXX compiler identification|-DPython_INCLUDE_DIR|Python_INCLUDE" "$OUT/install.log" 2>/dev/null | head -n 20
        cat "$TARGET/torchleak/build_info.json" 2>/dev/null
        if [ -z "$module" ]; then
            echo "no _core module under $TARGET/torchleak"
            return 0
        fi
        echo "== readelf -d $module"
        readelf -d "$module" | grep -E "NEEDED|RUNPATH|RPATH|FLAGS"
        echo "== readelf -V (version needs)"
        readelf -V "$module" | sed -n '/.gnu.version_r/,$p' | head -n 40
        echo "== exports and C++ runtime bindings"
        timeout --kill-after=10 120 "$PYTHON" kernel_ext/torchleak/_linkage.py "$module" --python "$PYTHON"
        echo "(exit $?)"
        echo "== libraries loaded beside it"
        timeout --kill-after=10 60 "$PYTHON" -c 'import torch, torchleak
for path in sorted({line.split()[-1] for line in open("/proc/self/maps") if ".so" in line}): print(path)'
    } >>"$OUT/native.txt" 2>&1
}

# `python -m torchleak doctor` first, as a user would: its children crash, not it, and it names
# the step, the signal and the first frames of one that does.
step doctor 150 "$PYTHON" -m torchleak doctor
step smoke 90 "$PYTHON" -X faulthandler tests/cuda/smoke.py
native_diagnostics "after the smoke test ($(tail -n 1 "$OUT/steps.txt"))"
grep -E "exports|binding|foreign" "$OUT/native.txt" | head -n 12
if smoke_failed smoke; then
    backtrace "$PYTHON" tests/cuda/smoke.py
    # Built against the system's header-only libraries, it may build against the bundled ones:
    # one more build tells which of the two is at fault, and the proof goes on with it if it works.
    if grep -q "(system)" "$OUT/install.log" 2>/dev/null && [ -n "${SDIST:-}" ]; then
        TARGET=$TARGET-bundled
        step install_bundled 150 env SKBUILD_CMAKE_ARGS="-DCMAKE_DISABLE_FIND_PACKAGE_nlohmann_json=ON;-DCMAKE_DISABLE_FIND_PACKAGE_xtensor=ON" \
            "$PYTHON" -m pip install --no-build-isolation --no-deps --no-index --no-cache-dir \
            --disable-pip-version-check --target "$TARGET" "$SDIST" >>"$OUT/install.log" 2>&1
        export PYTHONPATH="$TARGET${BASE_PYTHONPATH:+:$BASE_PYTHONPATH}"
        step smoke_bundled 90 "$PYTHON" -X faulthandler tests/cuda/smoke.py
        native_diagnostics "after smoke_bundled ($(tail -n 1 "$OUT/steps.txt"))"
    fi
fi
if smoke_failed smoke && { ! grep -q "^smoke_bundled passed" "$OUT/steps.txt"; }; then
    SKIP_REST="the smoke test failed (torchleak's extension crashes or fails on this machine; see backtrace.txt and proof.log)"
    echo "== the smoke test failed: the steps after it are skipped"
fi

leak_cases() {
    if [ -f "$LEAK_CASES/run.py" ]; then
        step leak_cases 180 "$PYTHON" "$LEAK_CASES/run.py" --timeout 120 --json "$OUT/leak-cases.json"
        step truth 60 "$PYTHON" "$LEAK_CASES/run.py" --truth --timeout 60 --case C01 --case C02 --case C03 --case C04 \
            --json "$OUT/truth.json"
    else
        # A failed smoke test is the first reason; a missing suite the second.
        skip leak_cases "${SKIP_REST:-no suite at $LEAK_CASES/run.py (copy the suite to .proof/leak-cases: CONTRIBUTING.md, the GPU proof)}"
        skip truth "${SKIP_REST:-no suite at $LEAK_CASES/run.py}"
    fi
}

# On a machine of eight cores or more (the GPU machines have 16) the leak cases run beside the
# CUDA tier: each is a process of its own, the device's memory is ample for both, and nothing
# of either is timed. The bench, which is, runs after both, alone.
PROOF_PARALLEL=${PROOF_PARALLEL:-$([ "$(nproc)" -ge 8 ] && echo 1 || echo 0)}
if [ "$PROOF_PARALLEL" = 1 ]; then
    leak_cases &
    LEAK_CASES_PID=$!
fi
step cuda_tier 240 "$PYTHON" -m pytest -p no:cacheprovider -q -rs tests/cuda --junitxml="$OUT/cuda-tier.xml"
if [ "$PROOF_PARALLEL" = 1 ]; then
    wait "$LEAK_CASES_PID"
else
    leak_cases
fi

# shellcheck disable=SC2086
step bench 120 "$PYTHON" bench/bench_cuda.py $BENCH_ARGS --json "$OUT/bench.json"

"$PYTHON" tests/cuda/proof_summary.py "$OUT" --fold
echo "gpu_proof: ${SECONDS} s in all; summary in $OUT/summary.json"
