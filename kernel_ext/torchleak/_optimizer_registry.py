"""The optimizers seen stepping while a Tracker runs, and what they name at each boundary.

Before a boundary, the optimizers name the blocks of their parameters, the parameters'
gradients and their state, and the recorder counts those bytes by what they are (the rest by the
phase they were born in: birth_phase.h). O(parameters) per boundary. Never raises: a registry
that fails leaves the blocks counted by phase, and says so once.
"""

import weakref

import torch

from . import _devices


def block_of(tensor):
    """The allocation a tensor's memory lies in, as the allocator reported it (its storage's
    start), or 0 for a tensor with no ordinary storage (meta, sparse, a wrapper subclass)."""
    try:
        return tensor.untyped_storage().data_ptr()
    except Exception:  # noqa: BLE001
        return 0


class OptimizerRegistry:
    def __init__(self):
        self._optimizers = weakref.WeakSet()  # held weakly: the tool never keeps one alive
        self._failed = False
        # Blocks made before tracking that were named: their size and device by address (such a
        # block is the same one at every boundary: an address reused after tracking began holds
        # a tracked block), summed by device for the recorder.
        self._untracked = {}

    def add(self, optimizer):
        self._optimizers.add(optimizer)

    def name_held_blocks(self, session, warn):
        """Tells `session` which blocks are parameters, gradients and optimizer state;
        `warn(message)` once if the optimizers cannot be read."""
        if not self._optimizers:
            return
        try:
            # Each block once, however many tensors view it, with one of those tensors: a block
            # made before tracking is no tracked block, and memory by role sizes it from that.
            params, grads, state = {}, {}, {}
            for optimizer in list(self._optimizers):
                for group in optimizer.param_groups:
                    for p in group["params"]:
                        params.setdefault(block_of(p), p)
                        if p.grad is not None:
                            grads.setdefault(block_of(p.grad), p.grad)
                for values in optimizer.state.values():
                    for value in values.values() if isinstance(values, dict) else ():
                        if isinstance(value, torch.Tensor):
                            state.setdefault(block_of(value), value)
            for held, found in (("parameter", params), ("gradient", grads), ("optimizer_state", state)):
                found.pop(0, None)
                blocks = list(found)
                missing = session.mark_held_as(blocks, held)
                if missing:
                    self._note_untracked(session, held, blocks, found, missing)
        except Exception as error:  # noqa: BLE001
            if not self._failed:
                self._failed = True
                warn(f"the optimizers' parameters could not be read ({error!r}): their memory is counted by phase")

    def _note_untracked(self, session, held, blocks, tensors, missing):
        by_device = {}
        for i in missing:
            block = blocks[i]
            known = self._untracked.get(block)
            if known is None:
                tensor = tensors[block]
                known = self._untracked[block] = (tensor.untyped_storage().nbytes(), str(tensor.device))
            by_device[known[1]] = by_device.get(known[1], 0) + known[0]
        backend = _devices.privateuse1_name()
        for device, size in by_device.items():
            session.note_untracked_held(device, held, size, backend)
