#pragma once
// Side-effect-free access to what autograd nodes keep: the saved variables of generated nodes
// (a table generated from torch's own Functions.h), of custom Functions (THPFunction) and the
// variable of AccumulateGrad.

#include "torch_autograd_node.h"

#include <optional>
#include <torch/csrc/autograd/saved_variable.h>
#include <typeindex>
#include <unordered_map>
#include <vector>

namespace torchleak::python {

class SavedVariableVisitor {
  public:
    virtual ~SavedVariableVisitor() = default;
    virtual void one(const char* name, const torch::autograd::SavedVariable& v) = 0;
    virtual void list(const char* name, const std::vector<torch::autograd::SavedVariable>& v) = 0;
};

using SavedVisitFn = void (*)(const torch::autograd::Node&, SavedVariableVisitor&);
using SavedVariableVisitorTable = std::unordered_map<std::type_index, SavedVisitFn>;

const SavedVariableVisitorTable& generatedSavedVariableVisitors();

// The tensor a SavedVariable holds, without unpacking: no version check, no unpack hooks.
// Empty when hooks own the data (saved_tensors_hooks) or it was released after backward.
template <typename Saved> std::optional<at::Tensor> rawSavedTensor(const Saved& saved) {
    if constexpr (requires { saved.get_raw_data(); }) {
        auto data = saved.get_raw_data();
        if (data && data->defined()) {
            return data;
        }
        return std::nullopt;
    } else {
        // Older torch: unpack only when no hooks are registered, so no user code runs.
        if (saved.has_hooks()) {
            return std::nullopt;
        }
        try {
            at::Tensor t = saved.unpack();
            return t.defined() ? std::optional<at::Tensor>(t) : std::nullopt;
        } catch (...) {
            return std::nullopt;
        }
    }
}

} // namespace torchleak::python
