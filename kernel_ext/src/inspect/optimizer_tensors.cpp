#include "inspect/optimizer_tensors.h"

#include "inspect/torch_objects.h"
#include "torchleak/errors.h"

#include <string>
#include <torch/csrc/autograd/python_variable.h>

namespace torchleak::python {

namespace {

// A new reference to obj.name, or an InvalidArgument naming it (the Python error cleared:
// the registry words it once for the user).
PyObject* attribute(PyObject* obj, const char* name) {
    PyObject* value = PyObject_GetAttrString(obj, name);
    if (value == nullptr) {
        PyErr_Clear();
        throw InvalidArgument(std::string("the optimizer has no readable '") + name + "'");
    }
    return value;
}

class Reference {
  public:
    explicit Reference(PyObject* obj) noexcept : d_obj(obj) {}
    ~Reference() { Py_XDECREF(d_obj); }
    Reference(const Reference&) = delete;
    Reference& operator=(const Reference&) = delete;
    PyObject* get() const noexcept { return d_obj; }

  private:
    PyObject* d_obj;
};

void addParameters(PyObject* params, OptimizerTensors& out) {
    if (!PyList_Check(params) && !PyTuple_Check(params)) {
        throw InvalidArgument("a param group's 'params' is not a list");
    }
    // Borrowed items of a sequence the group holds; no Python code runs while they are read.
    const Py_ssize_t n = PySequence_Fast_GET_SIZE(params);
    PyObject** items = PySequence_Fast_ITEMS(params);
    for (Py_ssize_t i = 0; i < n; ++i) {
        if (!isTensor(items[i])) {
            continue;
        }
        const at::Tensor& p = THPVariable_Unpack(items[i]);
        out.parameters.push_back(p);
        if (const at::Tensor& grad = p.grad(); grad.defined()) {
            out.gradients.push_back(grad);
        }
    }
}

} // namespace

void addOptimizerTensors(PyObject* optimizer, OptimizerTensors& out) {
    Reference groups(attribute(optimizer, "param_groups"));
    if (!PyList_Check(groups.get())) {
        throw InvalidArgument("the optimizer's 'param_groups' is not a list");
    }
    for (Py_ssize_t g = 0; g < PyList_GET_SIZE(groups.get()); ++g) {
        PyObject* group = PyList_GET_ITEM(groups.get(), g);
        PyObject* params = PyDict_Check(group) ? PyDict_GetItemString(group, "params") : nullptr;
        if (params == nullptr) {
            throw InvalidArgument("a param group is not a dict with 'params'");
        }
        addParameters(params, out);
    }
    Reference state(attribute(optimizer, "state"));
    if (!PyDict_Check(state.get())) {
        throw InvalidArgument("the optimizer's 'state' is not a dict");
    }
    Py_ssize_t at = 0;
    PyObject* key = nullptr;
    PyObject* values = nullptr;
    while (PyDict_Next(state.get(), &at, &key, &values)) {
        if (!PyDict_Check(values)) {
            continue;
        }
        Py_ssize_t inner = 0;
        PyObject* name = nullptr;
        PyObject* value = nullptr;
        while (PyDict_Next(values, &inner, &name, &value)) {
            if (isTensor(value)) {
                out.state.push_back(THPVariable_Unpack(value));
            }
        }
    }
}

} // namespace torchleak::python
