"""The optimizers seen stepping while a Tracker runs, and what they name at each boundary.

Before a boundary, the optimizers name the blocks of their parameters, the parameters'
gradients and their state, and the recorder counts those bytes by what they are (the rest by the
phase they were born in: birth_phase.h). O(parameters) per boundary. Never raises: a registry
that fails leaves the blocks counted by phase, and says so once.
"""

import weakref


class OptimizerRegistry:
    def __init__(self):
        self._optimizers = weakref.WeakSet()  # held weakly: the tool never keeps one alive
        self._failed = False

    def add(self, optimizer):
        self._optimizers.add(optimizer)

    def name_held_blocks(self, session, warn):
        """Tells `session` which blocks are parameters, gradients and optimizer state;
        `warn(message)` once if the optimizers cannot be read."""
        if not self._optimizers:
            return
        try:
            # Read in C++ (optimizer_tensors.h, tensor_blocks.h): the same loops here made a
            # storage object per tensor and cost about 160 µs a boundary for a 2-layer encoder
            # with AdamW, half a percent of its step.
            session.name_optimizer_blocks(list(self._optimizers))
        except Exception as error:  # noqa: BLE001
            if not self._failed:
                self._failed = True
                warn(f"the optimizers' parameters could not be read ({error!r}): their memory is counted by phase")
