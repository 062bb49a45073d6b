#pragma once
// What an object is, in torch's terms, told without running user code: exact type and
// deallocator tests instead of isinstance(), raw fields instead of attributes.

#include "inspect/saved_variables.h"

#include <ATen/core/Tensor.h>
#include <Python.h>
#include <string>

namespace torchleak::python {

bool isTensor(PyObject* obj);
// A custom autograd.Function's ctx (THPFunction).
bool isCustomFunctionCtx(PyObject* obj);
// The Python wrapper of a C++ autograd node (what `tensor.grad_fn` returns for built-in ops).
bool isCppFunctionWrapper(PyObject* obj);
torch::autograd::Node* nodeOfCtx(PyObject* ctx);
torch::autograd::Node* nodeOfWrapper(PyObject* wrapper);
// A custom Function's node; its saved state is in its Python ctx.
bool isPyNode(const torch::autograd::Node* node);
// A Tensor handle on an impl a walk reached (takes a reference for the handle's lifetime).
at::Tensor tensorFromImpl(const c10::TensorImpl* impl);
// "Attention", "Trainer.Inner": the qualified name of an object's type, read from the type.
std::string typeQualname(PyObject* obj);

// The dict of Python hooks a node's hook object keeps (Tensor.register_hook, Node.register_hook
// and register_prehook), or nullptr for a C++ hook.
PyObject* pythonHookDict(const torch::autograd::FunctionPreHook& hook);
PyObject* pythonHookDict(const torch::autograd::FunctionPostHook& hook);

// The three places a node keeps Python hooks, with the words each is told by.
struct NodeHookKind {
    const char* hooks; // the walk's edge: "tensor hooks"
    const char* hook;  // one of them: "tensor hook"
    const char* how;   // how a user registers one
};
inline constexpr NodeHookKind kTensorPreHooks{"tensor hooks", "tensor hook",
                                              "Tensor.register_hook on its output"};
inline constexpr NodeHookKind kPreHooks{"prehooks", "prehook", "grad_fn.register_prehook"};
inline constexpr NodeHookKind kPostHooks{"hooks", "hook", "grad_fn.register_hook"};

// fn(dict, kind) for every dict of Python hooks `node` keeps; C++ hooks have none.
template <typename Fn> void forEachPythonHookDict(torch::autograd::Node& node, Fn&& fn) {
    for (const auto& hook : node.tensor_pre_hooks()) {
        if (PyObject* dict = pythonHookDict(*hook)) {
            fn(dict, kTensorPreHooks);
        }
    }
    for (const auto& hook : node.pre_hooks()) {
        if (PyObject* dict = pythonHookDict(*hook)) {
            fn(dict, kPreHooks);
        }
    }
    for (const auto& hook : node.post_hooks()) {
        if (PyObject* dict = pythonHookDict(*hook)) {
            fn(dict, kPostHooks);
        }
    }
}

// The generated visitor of a node type's saved variables, or nullptr.
SavedVisitFn savedVisitorFor(const torch::autograd::Node* node);

} // namespace torchleak::python
