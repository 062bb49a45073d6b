#include "inspect/torch_objects.h"

#include "inspect/frame_capture.h"

#include <cstring>
#include <torch/csrc/autograd/python_cpp_function.h>
#include <torch/csrc/autograd/python_function.h>
#include <torch/csrc/autograd/python_hook.h>
#include <torch/csrc/autograd/python_variable.h>
#include <unordered_map>

namespace torchleak::python {

using torch::autograd::Node;

namespace {

PyTypeObject* tensorType() {
    return reinterpret_cast<PyTypeObject*>(THPVariableClass);
}

// All Python wrappers of C++ autograd nodes share one deallocator; learn it once from a
// wrapper torch makes for us, so no isinstance() (and no user code) is needed to spot them.
destructor cppFunctionDealloc() {
    static destructor dealloc = []() -> destructor {
        try {
            at::Tensor leaf = at::ones({1}).set_requires_grad(true);
            at::Tensor out = leaf.neg();
            PyObject* wrapper = torch::autograd::functionToPyObject(out.grad_fn());
            if (wrapper == nullptr) {
                PyErr_Clear();
                return nullptr;
            }
            destructor d = Py_TYPE(wrapper)->tp_dealloc;
            Py_DECREF(wrapper);
            return d;
        } catch (...) {
            return nullptr;
        }
    }();
    return dealloc;
}

// torch <= 2.11 holds a weak_ptr<PyNode> in THPFunction::cdata, newer torch an owning
// intrusive_ptr<Node>.
template <typename Function> Node* nodeOfFunction(Function* fn) {
    if constexpr (requires { fn->cdata.lock(); }) {
        return fn->cdata.lock().get(); // the node stays alive: the graph holds it
    } else {
        return fn->cdata.get();
    }
}

} // namespace

// std::type_index hashes the mangled name; a node's type_info address is enough, cached here
// for the few dozen node types a program uses.
SavedVisitFn savedVisitorFor(const Node* node) {
    static std::unordered_map<const std::type_info*, SavedVisitFn> cache;
    const std::type_info* type = &typeid(*node);
    auto it = cache.find(type);
    if (it != cache.end()) {
        return it->second;
    }
    const auto& table = generatedSavedVariableVisitors();
    auto found = table.find(std::type_index(*type));
    SavedVisitFn fn = found == table.end() ? nullptr : found->second;
    cache.emplace(type, fn);
    return fn;
}

bool isTensor(PyObject* obj) {
    PyTypeObject* t = tensorType();
    return t != nullptr && PyObject_TypeCheck(obj, t);
}

bool isCustomFunctionCtx(PyObject* obj) {
    return PyObject_TypeCheck(obj, &THPFunctionType);
}

bool isCppFunctionWrapper(PyObject* obj) {
    destructor d = cppFunctionDealloc();
    return d != nullptr && Py_TYPE(obj)->tp_dealloc == d && !isCustomFunctionCtx(obj);
}

Node* nodeOfCtx(PyObject* ctx) {
    return nodeOfFunction(reinterpret_cast<THPFunction*>(ctx));
}

Node* nodeOfWrapper(PyObject* wrapper) {
    return reinterpret_cast<torch::autograd::THPCppFunction*>(wrapper)->cdata.get();
}

// PyNode's type_info is not exported by libtorch_python, so no dynamic_cast: compare the
// mangled name of the dynamic type instead.
bool isPyNode(const Node* node) {
    return std::strcmp(typeid(*node).name(), "N5torch8autograd6PyNodeE") == 0;
}

at::Tensor tensorFromImpl(const c10::TensorImpl* impl) {
    return at::Tensor(c10::intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>::reclaim_copy(
        const_cast<c10::TensorImpl*>(impl)));
}

// torch's Python hook types live in libtorch_python without exported type_info (as PyNode),
// so they are told by the mangled name of the dynamic type; their layout is the header's.
PyObject* pythonHookDict(const torch::autograd::FunctionPreHook& hook) {
    const char* name = typeid(hook).name();
    if (std::strcmp(name, "N5torch8autograd23PyFunctionTensorPreHookE") == 0) {
        return static_cast<const torch::autograd::PyFunctionTensorPreHook&>(hook).dict;
    }
    if (std::strcmp(name, "N5torch8autograd17PyFunctionPreHookE") == 0) {
        return static_cast<const torch::autograd::PyFunctionPreHook&>(hook).dict;
    }
    return nullptr;
}

PyObject* pythonHookDict(const torch::autograd::FunctionPostHook& hook) {
    if (std::strcmp(typeid(hook).name(), "N5torch8autograd18PyFunctionPostHookE") == 0) {
        return static_cast<const torch::autograd::PyFunctionPostHook&>(hook).dict;
    }
    return nullptr;
}

std::string typeQualname(PyObject* obj) {
    PyTypeObject* type = Py_TYPE(obj);
    if (type->tp_flags & Py_TPFLAGS_HEAPTYPE) {
        std::string name = utf8(reinterpret_cast<PyHeapTypeObject*>(type)->ht_qualname);
        if (!name.empty()) {
            return name;
        }
    }
    return type->tp_name;
}

} // namespace torchleak::python
