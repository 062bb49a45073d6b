#include "inspect/tensor_index.h"

#include "inspect/frame_capture.h"

#include <cctype>
#include <torch/csrc/autograd/python_variable.h>

namespace torchleak::python {

namespace {

void addTensor(std::unordered_map<uintptr_t, LiveTensorIndex::Entry>& index,
               const std::unordered_set<uintptr_t>& wanted,
               const at::Tensor& t);

} // namespace

LiveTensorIndex LiveTensorIndex::scan(const std::vector<uintptr_t>& blocks) {
    LiveTensorIndex index;
    const std::unordered_set<uintptr_t> wanted(blocks.begin(), blocks.end());
    if (wanted.empty()) {
        return index;
    }
    PyObject* objects = gcObjects();
    if (objects == nullptr) {
        return index;
    }
    // An exact type test: THPVariable_Check falls back to isinstance(), which can run a
    // __class__ property or __instancecheck__ of user objects (lazy modules, proxies).
    auto* tensorType = reinterpret_cast<PyTypeObject*>(THPVariableClass);
    Py_ssize_t n = PyList_GET_SIZE(objects);
    for (Py_ssize_t i = 0; i < n; ++i) {
        PyObject* obj = PyList_GET_ITEM(objects, i);
        if (tensorType == nullptr || !PyObject_TypeCheck(obj, tensorType)) {
            continue;
        }
        try {
            const at::Tensor& t = THPVariable_Unpack(obj);
            addTensor(index.d_byBlock, wanted, t);
            if (t.defined() && t.is_leaf()) {
                const at::Tensor& grad = t.grad();
                addTensor(index.d_byBlock, wanted, grad);
            }
        } catch (...) {
            // Tensor subclasses without storage (fake, functional, nested wrappers): skip.
        }
    }
    Py_DECREF(objects);
    return index;
}

std::string dtypeName(at::ScalarType type) {
    switch (type) {
    case at::kFloat:
        return "float32";
    case at::kDouble:
        return "float64";
    case at::kHalf:
        return "float16";
    case at::kBFloat16:
        return "bfloat16";
    case at::kByte:
        return "uint8";
    case at::kChar:
        return "int8";
    case at::kShort:
        return "int16";
    case at::kInt:
        return "int32";
    case at::kLong:
        return "int64";
    case at::kBool:
        return "bool";
    case at::kComplexFloat:
        return "complex64";
    case at::kComplexDouble:
        return "complex128";
    default:
        break;
    }
    std::string name = c10::toString(type);
    for (char& c : name) {
        c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    }
    return name;
}

namespace {

void addTensor(std::unordered_map<uintptr_t, LiveTensorIndex::Entry>& index,
               const std::unordered_set<uintptr_t>& wanted,
               const at::Tensor& t) {
    if (!t.defined() || !t.has_storage()) {
        return;
    }
    const c10::Storage& storage = t.storage();
    auto ptr = reinterpret_cast<uintptr_t>(storage.data_ptr().get());
    if (ptr == 0 || !wanted.count(ptr)) {
        return;
    }
    uint64_t bytes = static_cast<uint64_t>(t.numel()) * t.element_size();
    auto& entry = index[ptr];
    if (entry.description.dtype.empty() || bytes > entry.bytes) {
        entry.bytes = bytes;
        entry.description.dtype = dtypeName(t.scalar_type());
        auto sizes = t.sizes();
        entry.description.shape.assign(sizes.begin(), sizes.end());
    }
}

} // namespace

LiveTensorIndex LiveTensorIndex::onFirstUse() {
    LiveTensorIndex index;
    index.d_scanPending = true;
    return index;
}

std::vector<std::optional<BlockDescription>>
LiveTensorIndex::describe(const std::vector<uintptr_t>& blocks) {
    if (d_scanPending) {
        d_scanPending = false;
        d_byBlock = scan(blocks).d_byBlock;
    }
    std::vector<std::optional<BlockDescription>> out;
    out.reserve(blocks.size());
    for (uintptr_t block : blocks) {
        auto it = d_byBlock.find(block);
        out.push_back(it != d_byBlock.end() ? std::optional(it->second.description) : std::nullopt);
    }
    return out;
}

} // namespace torchleak::python
