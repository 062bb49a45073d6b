"""The fake accelerator as torch sees it: the PrivateUse1 backend renamed ``fakegpu``.

``install()`` loads the test-only module that `make test` builds into build/fake-device
(``TORCHLEAK_FAKE_DEVICE_DIR`` overrides where), renames the backend and registers
``torch.fakegpu`` with the functions torch and torchleak look for on an accelerator module
(``is_available``, ``device_count``, ``get_device_properties(i).total_memory``, memory totals).
A process can do it once: torch allows one rename of PrivateUse1.
"""

import importlib
import os
import pathlib
import sys
import types

import torch

NAME = "fakegpu"
_BUILD = pathlib.Path(__file__).resolve().parents[2] / "build" / "fake-device"


class DeviceProperties:
    def __init__(self, index, total_memory):
        self.name = f"torchleak fake accelerator {index}"
        self.total_memory = int(total_memory)


def _module(native):
    mod = types.ModuleType(f"torch.{NAME}")

    def index_of(device):
        if device is None:
            return native.current_device()
        if isinstance(device, int):
            return device
        device = torch.device(device)
        return native.current_device() if device.index is None else device.index

    mod.is_available = lambda: True
    mod.is_initialized = lambda: True
    mod._is_in_bad_fork = lambda: False
    mod.device_count = native.device_count
    mod.current_device = native.current_device
    mod.set_device = lambda device: native.set_device(index_of(device))
    mod.get_device_properties = lambda device=None: DeviceProperties(
        index_of(device), native.capacity(index_of(device))
    )
    mod.memory_allocated = lambda device=None: native.memory_allocated(index_of(device))
    mod.memory_reserved = lambda device=None: native.memory_reserved(index_of(device))
    mod.empty_cache = lambda: [native.empty_cache(i) for i in range(native.device_count())] and None
    mod.set_capacity = lambda nbytes, device=None: native.set_capacity(index_of(device), int(nbytes))
    mod.native = native
    return mod


def install():
    """torch.fakegpu, registered once per process."""
    existing = getattr(torch, NAME, None)
    if existing is not None:
        return existing
    where = pathlib.Path(os.environ.get("TORCHLEAK_FAKE_DEVICE_DIR", _BUILD))
    if str(where) not in sys.path:
        sys.path.insert(0, str(where))
    try:
        native = importlib.import_module("_torchleak_fake_device")
    except ImportError as exc:
        raise RuntimeError(
            f"the fake accelerator is not built in {where}: run `make test-device` "
            f"(or `make test`), which builds it ({exc})"
        ) from exc
    torch.utils.rename_privateuse1_backend(NAME)
    mod = _module(native)
    torch._register_device_module(NAME, mod)
    torch.utils.generate_methods_for_privateuse1_backend(for_tensor=True, for_module=True, for_storage=True)
    return mod
