#include "device.hpp"

#include "runtime/base/error.hpp"

#include <sstream>

namespace autotune::cuda {

std::string DeviceInfo::arch() const {
  std::string a = "sm_" + std::to_string(cc_major) + std::to_string(cc_minor);
  // The arch-specific targets (wgmma, setmaxnreg) exist for 9.0 and 10.x/12.x;
  // our templates use them only on 9.0.
  if (cc_major == 9 && cc_minor == 0) {
    a += "a";
  }
  return a;
}

std::string DeviceInfo::summary() const {
  std::ostringstream s;
  s << name << " (sm_" << cc_major << cc_minor << ", " << sm_count << " SMs, "
    << l2_bytes / (1024 * 1024) << " MiB L2, driver " << driver_version / 1000 << "."
    << (driver_version % 1000) / 10 << ")";
  return s.str();
}

DeviceInfo query_device(int ordinal) {
  const auto& d = driver();
  int count = 0;
  AUTOTUNE_CU(d.cuDeviceGetCount(&count));
  if (ordinal < 0 || ordinal >= count) {
    throw Error(ErrorKind::no_device, "GPU " + std::to_string(ordinal) + " does not exist (" +
                                          std::to_string(count) + " visible)");
  }
  CUdevice dev = 0;
  AUTOTUNE_CU(d.cuDeviceGet(&dev, ordinal));
  DeviceInfo info;
  info.ordinal = ordinal;
  char name[256] = {};
  AUTOTUNE_CU(d.cuDeviceGetName(name, sizeof name, dev));
  info.name = name;
  auto attr = [&](CUdevice_attribute a) {
    int v = 0;
    AUTOTUNE_CU(d.cuDeviceGetAttribute(&v, a, dev));
    return v;
  };
  info.cc_major = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
  info.cc_minor = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
  info.sm_count = attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
  info.l2_bytes = attr(CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE);
  info.smem_per_block_optin = attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN);
  info.smem_per_sm = attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR);
  info.regs_per_sm = attr(CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR);
  info.max_threads_per_block = attr(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
  info.clock_khz = attr(CU_DEVICE_ATTRIBUTE_CLOCK_RATE);
  info.memory_clock_khz = attr(CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE);
  info.memory_bus_bits = attr(CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH);
  AUTOTUNE_CU(d.cuDeviceTotalMem(&info.total_memory, dev));
  info.driver_version = d.version;
  return info;
}

PrimaryContext::PrimaryContext(int ordinal) {
  const auto& d = driver();
  AUTOTUNE_CU(d.cuDeviceGet(&m_dev, ordinal));
  AUTOTUNE_CU(d.cuDevicePrimaryCtxRetain(&m_ctx, m_dev));
  make_current();
}

PrimaryContext::~PrimaryContext() {
  if (m_ctx) {
    driver().cuDevicePrimaryCtxRelease(m_dev);
  }
}

void PrimaryContext::make_current() const {
  AUTOTUNE_CU(driver().cuCtxSetCurrent(m_ctx));
}

Module load_module(const std::string& image) {
  CUmodule m = nullptr;
  AUTOTUNE_CU(driver().cuModuleLoadData(&m, image.data()));
  return Module(m);
}

CUfunction get_function(const Module& module, const char* name) {
  CUfunction f = nullptr;
  CUresult rc = driver().cuModuleGetFunction(&f, module.get(), name);
  if (rc != CUDA_SUCCESS) {
    throw Error(ErrorKind::cuda,
                std::string("kernel '") + name + "' not found in module: " + error_string(rc));
  }
  return f;
}

void allow_dynamic_smem(CUfunction function, unsigned bytes) {
  constexpr unsigned k_default_limit = 48 * 1024;
  if (bytes > k_default_limit) {
    AUTOTUNE_CU(driver().cuFuncSetAttribute(
        function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, int(bytes)));
  }
}

Event create_event() {
  CUevent e = nullptr;
  AUTOTUNE_CU(driver().cuEventCreate(&e, CU_EVENT_DEFAULT));
  return Event(e);
}

Stream create_stream() {
  CUstream s = nullptr;
  AUTOTUNE_CU(driver().cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  return Stream(s);
}

DeviceBuffer::DeviceBuffer(size_t bytes) : m_bytes(bytes) {
  CUdeviceptr p = 0;
  // cuMemAlloc rejects 0 bytes; keep one byte so every buffer has an address.
  AUTOTUNE_CU(driver().cuMemAlloc(&p, bytes ? bytes : 1));
  m_ptr = Unique<CUdeviceptr, MemoryDeleter>(p);
}

void DeviceBuffer::upload(const void* host, size_t bytes) {
  if (bytes > m_bytes) {
    throw Error(ErrorKind::internal, "DeviceBuffer::upload past the end");
  }
  AUTOTUNE_CU(driver().cuMemcpyHtoD(get(), host, bytes));
}

void DeviceBuffer::download(void* host, size_t bytes) const {
  if (bytes > m_bytes) {
    throw Error(ErrorKind::internal, "DeviceBuffer::download past the end");
  }
  AUTOTUNE_CU(driver().cuMemcpyDtoH(host, get(), bytes));
}

} // namespace autotune::cuda
