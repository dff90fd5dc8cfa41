#include "driver.hpp"

#include "runtime/base/error.hpp"

#include <dlfcn.h>

#include <mutex>

namespace autotune::cuda {
namespace {

struct Loaded {
  DriverApi api;
  std::string error; // empty when loading worked
};

Loaded load() {
  Loaded out;
  // libcuda.so.1 is the driver's ABI name; libcuda.so only exists with dev symlinks.
  void* lib = nullptr;
  for (const char* name : {"libcuda.so.1", "libcuda.so"}) {
    lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (lib) {
      break;
    }
  }
  if (!lib) {
    const char* why = dlerror();
    out.error = std::string("cannot load the CUDA driver (libcuda.so.1): ") +
                (why ? why : "not found") + " (is an NVIDIA driver installed?)";
    return out;
  }
  auto sym = [&](const char* symbol) -> void* {
    void* p = dlsym(lib, symbol);
    if (!p && out.error.empty()) {
      out.error = std::string("the CUDA driver lacks the symbol ") + symbol +
                  " (driver too old for this build?)";
    }
    return p;
  };
#define AUTOTUNE_LOAD_MEMBER(name, symbol)                                                         \
  out.api.name = reinterpret_cast<decltype(out.api.name)>(sym(symbol));
  AUTOTUNE_DRIVER_FUNCTIONS(AUTOTUNE_LOAD_MEMBER)
#undef AUTOTUNE_LOAD_MEMBER
  void* elapsed = dlsym(lib, "cuEventElapsedTime_v2");
  if (!elapsed) {
    elapsed = sym("cuEventElapsedTime");
  }
  out.api.cuEventElapsedTime = reinterpret_cast<decltype(out.api.cuEventElapsedTime)>(elapsed);
  out.api.cuTensorMapEncodeTiled = reinterpret_cast<decltype(out.api.cuTensorMapEncodeTiled)>(
      dlsym(lib, "cuTensorMapEncodeTiled"));
  out.api.cuMemRetainAllocationHandle =
      reinterpret_cast<decltype(out.api.cuMemRetainAllocationHandle)>(
          dlsym(lib, "cuMemRetainAllocationHandle"));
  out.api.cuMemRelease =
      reinterpret_cast<decltype(out.api.cuMemRelease)>(dlsym(lib, "cuMemRelease"));
  if (!out.error.empty()) {
    return out;
  }
  CUresult rc = out.api.cuInit(0);
  if (rc != CUDA_SUCCESS) {
    const char* name = nullptr;
    const char* text = nullptr;
    out.api.cuGetErrorName(rc, &name);
    out.api.cuGetErrorString(rc, &text);
    out.error = std::string("cuInit failed: ") + (name ? name : "?") + ": " +
                (text ? text : "unknown error");
    return out;
  }
  out.api.cuDriverGetVersion(&out.api.version);
  int count = 0;
  out.api.cuDeviceGetCount(&count);
  if (count == 0) {
    out.error = "the CUDA driver reports no GPU";
  }
  return out;
}

const Loaded& loaded() {
  static const Loaded instance = load();
  return instance;
}

} // namespace

const DriverApi& driver() {
  const Loaded& l = loaded();
  if (!l.error.empty()) {
    throw Error(ErrorKind::no_device, l.error);
  }
  return l.api;
}

bool gpu_available(std::string* why) {
  const Loaded& l = loaded();
  if (why) {
    *why = l.error;
  }
  return l.error.empty();
}

std::string error_string(CUresult result) {
  const Loaded& l = loaded();
  const char* name = nullptr;
  const char* text = nullptr;
  if (l.api.cuGetErrorName) {
    l.api.cuGetErrorName(result, &name);
    l.api.cuGetErrorString(result, &text);
  }
  return std::string(name ? name : "CUDA_ERROR_" + std::to_string(int(result))) + ": " +
         (text ? text : "unknown error");
}

void check(CUresult result, const char* what) {
  if (result != CUDA_SUCCESS) {
    throw CudaError(result, std::string(what) + " failed: " + error_string(result));
  }
}

bool CudaError::sticky() const {
  switch (m_result) {
  case CUDA_ERROR_ILLEGAL_ADDRESS:
  case CUDA_ERROR_LAUNCH_FAILED:
  case CUDA_ERROR_MISALIGNED_ADDRESS:
  case CUDA_ERROR_ILLEGAL_INSTRUCTION:
  case CUDA_ERROR_INVALID_ADDRESS_SPACE:
  case CUDA_ERROR_INVALID_PC:
  case CUDA_ERROR_HARDWARE_STACK_ERROR:
  case CUDA_ERROR_ASSERT:
  case CUDA_ERROR_LAUNCH_TIMEOUT:
  case CUDA_ERROR_ECC_UNCORRECTABLE:
  case CUDA_ERROR_CONTEXT_IS_DESTROYED:
    return true;
  default:
    return false;
  }
}

bool CudaError::resource() const {
  return m_result == CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES || m_result == CUDA_ERROR_INVALID_VALUE ||
         m_result == CUDA_ERROR_SHARED_OBJECT_INIT_FAILED;
}

void encode_tensor_map_tiled(CUtensorMap* map, CUtensorMapDataType type, cuuint32_t rank,
                             void* address, const cuuint64_t* dims, const cuuint64_t* strides,
                             const cuuint32_t* box, const cuuint32_t* element_strides,
                             CUtensorMapSwizzle swizzle, const char* what) {
  const DriverApi& api = driver();
  if (!api.cuTensorMapEncodeTiled) {
    throw Error(ErrorKind::no_device, std::string(what) +
                                          ": the CUDA driver lacks cuTensorMapEncodeTiled "
                                          "(tensor maps need a CUDA 12.0 or newer driver)");
  }
  check(api.cuTensorMapEncodeTiled(map, type, rank, address, dims, strides, box, element_strides,
                                   CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle,
                                   CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
                                   CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
        what);
}

} // namespace autotune::cuda
