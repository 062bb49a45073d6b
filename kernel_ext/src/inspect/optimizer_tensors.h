#pragma once
// The tensors a torch.optim optimizer holds, read from its `param_groups` and `state` with the
// C API: memory by role names their blocks at every boundary (tensor_blocks.h). What that costs
// is mostly reading these objects cold, right after the step has evicted them: for the 120
// tensors of a 2-layer encoder with AdamW, 82 µs a boundary in the run, 8 µs timed warm.

#include <ATen/core/Tensor.h>
#include <Python.h>
#include <vector>

namespace torchleak::python {

struct OptimizerTensors {
    std::vector<at::Tensor> parameters;
    std::vector<at::Tensor> gradients; // the parameters' .grad, where set
    std::vector<at::Tensor> state;     // every tensor among the values of each state dict
};

// Appends what `optimizer` holds. Attributes are read as Python reads them (a property runs),
// containers walked as torch.optim builds them: param_groups a list of dicts with a "params"
// list, state a dict of dicts; entries that are not tensors are skipped. Throws
// InvalidArgument, naming what was not so, when the optimizer is shaped otherwise.
void addOptimizerTensors(PyObject* optimizer, OptimizerTensors& out);

} // namespace torchleak::python
