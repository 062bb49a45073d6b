"""The accelerators this process uses, as the report names them: their capacities and the name
of an out-of-tree backend on PrivateUse1 (``torch.utils.rename_privateuse1_backend``)."""

import torch


def privateuse1_name():
    try:
        return str(torch._C._get_privateuse1_backend_name())
    except (AttributeError, RuntimeError):
        return "privateuseone"


def _accelerator_modules():
    """(name, torch.<name>) for every accelerator whose module says it is available."""
    names = ["cuda", "xpu", "mps"]
    custom = privateuse1_name()
    if custom != "privateuseone":
        names.append(custom)
    for name in names:
        module = getattr(torch, name, None)
        try:
            if module is not None and module.is_available():
                yield name, module
        except Exception:  # noqa: BLE001 - a backend's own check that fails: not available
            continue


def capacities():
    """{"cuda:0": total bytes, ...}: what each device can hold, where its module tells."""
    caps = {}
    for name, module in _accelerator_modules():
        try:
            count = int(module.device_count())
        except Exception:  # noqa: BLE001
            continue
        for i in range(count):
            total = None
            try:
                total = int(module.get_device_properties(i).total_memory)
            except Exception:  # noqa: BLE001 - MPS and some backends have no properties
                try:
                    total = int(module.mem_get_info(i)[1])
                except Exception:  # noqa: BLE001
                    total = None
            if total and name == "cuda":
                total = _allowed(module, i, total)
            if total:
                caps[f"{name}:{i}"] = total
    return caps


def _allowed(cuda, index, total):
    """What the caching allocator lets the process hold on a CUDA device: total_memory times
    the fraction set by torch.cuda.set_per_process_memory_fraction, where one was set. The OOM
    comes there (on the H200 an OOM under a 5% cap read "6.1 GiB reserved of 139.8 GiB"). Asked
    only once CUDA is initialized: the getter initializes CUDA, and no fraction can be set before."""
    getter = getattr(cuda, "get_per_process_memory_fraction", None)
    try:
        if getter is None or not cuda.is_initialized():
            return total
        fraction = float(getter(index))
    except Exception:  # noqa: BLE001 - the device's total is still the right bound
        return total
    return int(total * fraction) if 0.0 < fraction < 1.0 else total


__all__ = ["capacities", "privateuse1_name"]
