"""The GPU proof's first check after the build: torchleak's extension loads and answers, on the
CPU and, where there is one, on the GPU, before minutes go to the tiers. Prints one line per
check; a crash here (a signal, not an exception) makes gpu_proof.sh take a native backtrace."""

import faulthandler
import sys

import torch

import torchleak
from torchleak import _core


def main():
    # A hang says where it hangs: every thread's Python stack after 45 s (the step's limit is 90).
    faulthandler.dump_traceback_later(45, exit=False)
    print(f"smoke: torchleak {torchleak.__version__} from {torchleak.__file__}; torch {torch.__version__}", flush=True)
    config = _core.AnalysisConfig()
    print(f"smoke: AnalysisConfig().get('warmup') = {config.get('warmup')!r}", flush=True)
    print("smoke: check() of a CPU leak ...", flush=True)
    kept = []
    report = torchleak.check(lambda: kept.append(torch.ones(1 << 16)), iterations=6, warmup=1)
    assert report.leaks and report.leaks[0].holder["path_text"] == "kept", str(report)
    print(f"smoke: a CPU leak found, held by {report.leaks[0].holder['path_text']}", flush=True)
    if torch.cuda.is_available():
        print(f"smoke: check() of a CUDA leak on {torch.cuda.get_device_name(0)} ...", flush=True)
        gpu = []
        report = torchleak.check(lambda: gpu.append(torch.ones(1 << 20, device="cuda")), iterations=6, warmup=1)
        leaks = [f for f in report.leaks if f.device == "cuda:0"]
        assert leaks and leaks[0].holder["path_text"] == "gpu", str(report)
        print(f"smoke: a CUDA leak found at line {leaks[0].site['line']}, held by gpu", flush=True)
    faulthandler.cancel_dump_traceback_later()
    print("smoke: ok", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
