// _torchleak_fake_device: a fake accelerator for torchleak's device tier. Test-only: built by
// `make test` into build/fake-device, never installed with the package.
//
// It registers a backend on PyTorch's PrivateUse1 device (the open-registration mechanism
// PyTorch tests itself with; fakegpu.py renames it "fakegpu"), two devices of it, and puts a
// CachingPool per device behind c10's allocator interface. The allocator reports every block
// to c10's memory-reporting hook with its device's allocated and reserved totals, and an
// out-of-memory to the profiler hook before raising torch.OutOfMemoryError, the way the CUDA
// caching allocator does; so torchleak's hook sees a fake device exactly as it sees a GPU.
// Kernels: the handful that must know the backend (empty, views, copies, .item()) are here;
// every other op runs through PyTorch's CPU fallback on the same memory (it is host memory).
//
// Unlike the CUDA allocator, the reports are made after the pool's mutex is released, so
// torchleak's hook takes the allocating Python stack right there (for CUDA it asks PyTorch's
// history recording instead).

#include "caching_pool.h"

#include <ATen/EmptyTensor.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/_local_scalar_dense_native.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_cpu_dispatch.h>
#include <ATen/ops/copy_native.h>
#include <ATen/ops/from_blob.h>
#include <ATen/ops/resize_native.h>
#include <ATen/ops/set_cpu_dispatch.h>
#include <ATen/ops/set_native.h>
#include <ATen/ops/view_native.h>
#include <c10/core/Allocator.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Exception.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/library.h>

#include <array>
#include <atomic>
#include <cstring>
#include <mutex>
#include <sstream>

namespace py = pybind11;

namespace torchleak::fakedev {
namespace {

constexpr c10::DeviceIndex kDeviceCount = 2;
constexpr uint64_t kDefaultCapacity = 256ull << 20;

struct DeviceMemory {
    std::mutex mutex;
    CachingPool pool{kDefaultCapacity};
};

std::array<DeviceMemory, kDeviceCount> g_devices;
// An allocator that reports no totals (0, 0) or no reports at all: torchleak must cope with
// both, so the tests can switch them off.
std::atomic<bool> g_reportTotals{true};
std::atomic<bool> g_reportEvents{true};
thread_local c10::DeviceIndex t_currentDevice = 0;

c10::Device deviceOf(c10::DeviceIndex index) {
    return c10::Device(c10::DeviceType::PrivateUse1, index);
}

DeviceMemory& memoryOf(c10::DeviceIndex index) {
    TORCH_CHECK(index >= 0 && index < kDeviceCount, "fakegpu: no device ", int(index));
    return g_devices[static_cast<size_t>(index)];
}

std::string mib(uint64_t bytes) {
    std::ostringstream out;
    out.precision(2);
    out << std::fixed << static_cast<double>(bytes) / (1 << 20) << " MiB";
    return out.str();
}

void report(void* ptr, int64_t size, const PoolTotals& totals, c10::DeviceIndex index) {
    if (!g_reportEvents.load()) {
        return;
    }
    bool withTotals = g_reportTotals.load();
    c10::reportMemoryUsageToProfiler(ptr, size, withTotals ? totals.allocated : 0,
                                     withTotals ? totals.reserved : 0, deviceOf(index));
}

template <c10::DeviceIndex Index> void freeBlock(void* ptr) {
    PoolTotals totals;
    size_t size = 0;
    {
        std::lock_guard<std::mutex> lock(g_devices[Index].mutex);
        size = g_devices[Index].pool.free(ptr);
        totals = g_devices[Index].pool.totals();
    }
    if (size != 0) {
        report(ptr, -static_cast<int64_t>(size), totals, Index);
    }
}

void freeNothing(void*) {}

c10::DeleterFnPtr deleterFor(c10::DeviceIndex index) {
    static_assert(kDeviceCount == 2);
    return index == 0 ? &freeBlock<0> : &freeBlock<1>;
}

struct FakeAllocator final : public c10::Allocator {
    c10::DataPtr allocate(size_t bytes) override {
        c10::DeviceIndex index = t_currentDevice;
        DeviceMemory& memory = memoryOf(index);
        if (bytes == 0) {
            return {nullptr, nullptr, &freeNothing, deviceOf(index)};
        }
        size_t size = 0;
        void* ptr = nullptr;
        PoolTotals totals;
        {
            std::lock_guard<std::mutex> lock(memory.mutex);
            ptr = memory.pool.allocate(bytes, &size);
            totals = memory.pool.totals();
        }
        if (ptr == nullptr) {
            if (g_reportEvents.load()) {
                c10::reportOutOfMemoryToProfiler(static_cast<int64_t>(bytes), totals.allocated,
                                                 totals.reserved, deviceOf(index));
            }
            TORCH_CHECK_WITH(OutOfMemoryError, false, "fakegpu out of memory. Tried to allocate ",
                             mib(bytes), ". fakegpu:", int(index), " has a total capacity of ",
                             mib(totals.capacity), " of which ", mib(totals.allocated),
                             " is allocated by PyTorch and ", mib(totals.reserved),
                             " is reserved by PyTorch");
        }
        report(ptr, static_cast<int64_t>(size), totals, index);
        return {ptr, ptr, deleterFor(index), deviceOf(index)};
    }
    c10::DeleterFnPtr raw_deleter() const override { return nullptr; }
    void copy_data(void* dest, const void* src, std::size_t count) const final {
        std::memcpy(dest, src, count);
    }
};

FakeAllocator g_allocator;

struct FakeGuard final : public c10::impl::DeviceGuardImplInterface {
    c10::DeviceType type() const override { return c10::DeviceType::PrivateUse1; }
    c10::Device exchangeDevice(c10::Device device) const override {
        c10::Device old = getDevice();
        setDevice(device);
        return old;
    }
    c10::Device getDevice() const override { return deviceOf(t_currentDevice); }
    void setDevice(c10::Device device) const override {
        TORCH_CHECK(device.index() >= 0 && device.index() < kDeviceCount, "fakegpu: no device ",
                    int(device.index()));
        t_currentDevice = device.index();
    }
    void uncheckedSetDevice(c10::Device device) const noexcept override {
        if (device.index() >= 0 && device.index() < kDeviceCount) {
            t_currentDevice = device.index();
        }
    }
    c10::Stream getStream(c10::Device device) const override {
        return c10::Stream(c10::Stream::DEFAULT, device);
    }
    c10::Stream exchangeStream(c10::Stream stream) const override {
        return c10::Stream(c10::Stream::DEFAULT, stream.device());
    }
    c10::DeviceIndex deviceCount() const noexcept override { return kDeviceCount; }
};

C10_REGISTER_GUARD_IMPL(PrivateUse1, FakeGuard);

struct FakeHooks final : public at::PrivateUse1HooksInterface {
    bool isBuilt() const override { return true; }
    bool isAvailable() const override { return true; }
    bool hasPrimaryContext(c10::DeviceIndex) const override { return true; }
    c10::DeviceIndex deviceCount() const override { return kDeviceCount; }
    void setCurrentDevice(c10::DeviceIndex device) const override { t_currentDevice = device; }
    c10::DeviceIndex getCurrentDevice() const override { return t_currentDevice; }
    c10::DeviceIndex exchangeDevice(c10::DeviceIndex device) const override {
        c10::DeviceIndex old = t_currentDevice;
        t_currentDevice = device;
        return old;
    }
    c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex device) const override {
        return exchangeDevice(device);
    }
    bool isPinnedPtr(const void*) const override { return false; }
};

// ---- kernels that must know the backend ----------------------------------------------------

at::Tensor emptyMemoryFormat(c10::IntArrayRef size,
                             std::optional<c10::ScalarType> dtype,
                             std::optional<c10::Layout>,
                             std::optional<c10::Device> device,
                             std::optional<bool>,
                             std::optional<c10::MemoryFormat> memoryFormat) {
    const c10::DeviceGuard guard(c10::device_or_default(device));
    constexpr c10::DispatchKeySet keys(c10::DispatchKey::PrivateUse1);
    return at::detail::empty_generic(size, &g_allocator, keys, c10::dtype_or_default(dtype),
                                     memoryFormat);
}

at::Tensor emptyStrided(c10::IntArrayRef size,
                        c10::IntArrayRef stride,
                        std::optional<c10::ScalarType> dtype,
                        std::optional<c10::Layout>,
                        std::optional<c10::Device> device,
                        std::optional<bool>) {
    const c10::DeviceGuard guard(c10::device_or_default(device));
    constexpr c10::DispatchKeySet keys(c10::DispatchKey::PrivateUse1);
    return at::detail::empty_strided_generic(size, stride, &g_allocator, keys,
                                             c10::dtype_or_default(dtype));
}

at::Tensor asStrided(const at::Tensor& self,
                     c10::SymIntArrayRef size,
                     c10::SymIntArrayRef stride,
                     std::optional<c10::SymInt> offset) {
    return at::cpu::as_strided_symint(self, size, stride, std::move(offset));
}

const at::Tensor& resize(const at::Tensor& self,
                         c10::SymIntArrayRef size,
                         std::optional<at::MemoryFormat> memoryFormat) {
    return at::native::resize_(self, C10_AS_INTARRAYREF_SLOW(size), memoryFormat);
}

at::Tensor
reshapeAlias(const at::Tensor& self, c10::SymIntArrayRef size, c10::SymIntArrayRef stride) {
    return at::native::_reshape_alias(self, C10_AS_INTARRAYREF_SLOW(size),
                                      C10_AS_INTARRAYREF_SLOW(stride));
}

at::Tensor hostAlias(const at::Tensor& t) {
    return at::from_blob(t.data_ptr(), t.sizes(), t.strides(), t.options().device(at::kCPU));
}

// Device memory is host memory: a copy in any direction is a CPU copy between aliases.
at::Tensor copyFrom(const at::Tensor& self, const at::Tensor& dst, bool nonBlocking) {
    at::Tensor dstHost = dst.is_cpu() ? dst : hostAlias(dst);
    at::Tensor selfHost = self.is_cpu() ? self : hostAlias(self);
    at::native::copy_(dstHost, selfHost, nonBlocking);
    return dst;
}

at::Tensor copyFromAndResize(const at::Tensor& self, const at::Tensor& dst) {
    at::native::resize_(dst, self.sizes(), std::nullopt);
    return copyFrom(self, dst, false);
}

at::Scalar localScalarDense(const at::Tensor& self) {
    return at::native::_local_scalar_dense_cpu(hostAlias(self));
}

at::Tensor& setSourceTensor(at::Tensor& self, const at::Tensor& source) {
    return at::native::set_tensor_(self, source);
}

at::Tensor& setSourceStorage(at::Tensor& self, at::Storage source) {
    return at::native::set_(self, std::move(source));
}

at::Tensor& setSourceStorageOffset(at::Tensor& self,
                                   at::Storage storage,
                                   int64_t offset,
                                   c10::IntArrayRef size,
                                   c10::IntArrayRef stride) {
    return at::cpu::set_(self, std::move(storage), offset, size, stride);
}

at::Tensor view(const at::Tensor& self, c10::SymIntArrayRef size) {
    return at::native::view(self, C10_AS_INTARRAYREF_SLOW(size));
}

void cpuFallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
    at::native::cpu_fallback(op, stack);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("empty.memory_format", emptyMemoryFormat);
    m.impl("empty_strided", emptyStrided);
    m.impl("as_strided", asStrided);
    m.impl("resize_", resize);
    m.impl("_reshape_alias", reshapeAlias);
    m.impl("_copy_from", copyFrom);
    m.impl("_copy_from_and_resize", copyFromAndResize);
    m.impl("_local_scalar_dense", localScalarDense);
    m.impl("set_.source_Tensor", setSourceTensor);
    m.impl("set_.source_Storage", setSourceStorage);
    m.impl("set_.source_Storage_storage_offset", setSourceStorageOffset);
    m.impl("view", view);
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
    m.fallback(torch::CppFunction::makeFromBoxedFunction<&cpuFallback>());
}

// Runs `fn` on device `index`'s pool under its mutex: the test module's controls.
template <class Fn> auto withPool(int index, Fn fn) {
    DeviceMemory& memory = memoryOf(static_cast<c10::DeviceIndex>(index));
    std::lock_guard<std::mutex> lock(memory.mutex);
    return fn(memory.pool);
}

struct Registration {
    Registration() {
        c10::SetAllocator(c10::DeviceType::PrivateUse1, &g_allocator);
        at::RegisterPrivateUse1HooksInterface(new FakeHooks());
    }
};

} // namespace
} // namespace torchleak::fakedev

PYBIND11_MODULE(_torchleak_fake_device, m) {
    using namespace torchleak::fakedev;
    static Registration registration;
    m.doc() = "A fake accelerator on PrivateUse1 for torchleak's device tests. Not for users.";
    m.def("device_count", []() { return int(kDeviceCount); });
    m.def("current_device", []() { return int(t_currentDevice); });
    m.def("set_device", [](int index) {
        memoryOf(static_cast<c10::DeviceIndex>(index));
        t_currentDevice = static_cast<c10::DeviceIndex>(index);
    });
    m.def("memory_allocated", [](int index) {
        return withPool(index, [](CachingPool& p) { return p.totals().allocated; });
    });
    m.def("memory_reserved", [](int index) {
        return withPool(index, [](CachingPool& p) { return p.totals().reserved; });
    });
    m.def("capacity", [](int index) {
        return withPool(index, [](CachingPool& p) { return p.totals().capacity; });
    });
    m.def("set_capacity", [](int index, uint64_t bytes) {
        withPool(index, [bytes](CachingPool& p) { p.setCapacity(bytes); });
    });
    m.def("allocated_blocks", [](int index) {
        return withPool(index, [](CachingPool& p) { return p.allocatedBlocks(); });
    });
    m.def("segment_count", [](int index) {
        return withPool(index, [](CachingPool& p) { return p.segmentCount(); });
    });
    m.def("empty_cache",
          [](int index) { withPool(index, [](CachingPool& p) { p.releaseCached(); }); });
    m.def("set_report_totals", [](bool on) { g_reportTotals.store(on); });
    m.def("set_report_events", [](bool on) { g_reportEvents.store(on); });
    // A raw report through c10's hook, as a buggy allocator might send it: the fault tests'
    // way to hand torchleak frees it never saw, totals that go backwards, unknown devices.
    m.def(
        "report_raw",
        [](uint64_t ptr, int64_t size, uint64_t allocated, uint64_t reserved, int index) {
            c10::reportMemoryUsageToProfiler(reinterpret_cast<void*>(ptr), size, allocated,
                                             reserved,
                                             deviceOf(static_cast<c10::DeviceIndex>(index)));
        },
        py::arg("ptr"), py::arg("size"), py::arg("allocated"), py::arg("reserved"),
        py::arg("index"));
    m.def(
        "report_out_of_memory",
        [](int64_t size, uint64_t allocated, uint64_t reserved, int index) {
            c10::reportOutOfMemoryToProfiler(size, allocated, reserved,
                                             deviceOf(static_cast<c10::DeviceIndex>(index)));
        },
        py::arg("size"), py::arg("allocated"), py::arg("reserved"), py::arg("index"));
}
