// The CUDA Driver API, loaded with dlopen so that every autotune binary starts on
// machines without a driver (CPU-only CI, compile-only runs) and fails only when a
// GPU is actually needed, with ErrorKind::no_device and a message saying why.
#pragma once

#include "runtime/base/error.hpp"

#include <cuda.h>

#include <string>

namespace autotune::cuda {

// X(member, symbol in libcuda): symbol names are the ABI ones cuda.h maps to.
#define AUTOTUNE_DRIVER_FUNCTIONS(X)                                                               \
  X(cuInit, "cuInit")                                                                              \
  X(cuDriverGetVersion, "cuDriverGetVersion")                                                      \
  X(cuGetErrorString, "cuGetErrorString")                                                          \
  X(cuGetErrorName, "cuGetErrorName")                                                              \
  X(cuDeviceGetCount, "cuDeviceGetCount")                                                          \
  X(cuDeviceGet, "cuDeviceGet")                                                                    \
  X(cuDeviceGetName, "cuDeviceGetName")                                                            \
  X(cuDeviceGetAttribute, "cuDeviceGetAttribute")                                                  \
  X(cuDeviceTotalMem, "cuDeviceTotalMem_v2")                                                       \
  X(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain")                                          \
  X(cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2")                                     \
  X(cuCtxSetCurrent, "cuCtxSetCurrent")                                                            \
  X(cuCtxGetCurrent, "cuCtxGetCurrent")                                                            \
  X(cuCtxGetDevice, "cuCtxGetDevice")                                                              \
  X(cuCtxSynchronize, "cuCtxSynchronize")                                                          \
  X(cuMemAlloc, "cuMemAlloc_v2")                                                                   \
  X(cuMemFree, "cuMemFree_v2")                                                                     \
  X(cuMemGetInfo, "cuMemGetInfo_v2")                                                               \
  X(cuMemGetAddressRange, "cuMemGetAddressRange_v2")                                               \
  X(cuMemcpyHtoD, "cuMemcpyHtoD_v2")                                                               \
  X(cuMemcpyDtoH, "cuMemcpyDtoH_v2")                                                               \
  X(cuMemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2")                                                     \
  X(cuMemsetD8Async, "cuMemsetD8Async")                                                            \
  X(cuMemsetD16Async, "cuMemsetD16Async")                                                          \
  X(cuMemsetD32Async, "cuMemsetD32Async")                                                          \
  X(cuPointerGetAttribute, "cuPointerGetAttribute")                                                \
  X(cuPointerGetAttributes, "cuPointerGetAttributes")                                              \
  X(cuModuleLoadData, "cuModuleLoadData")                                                          \
  X(cuModuleUnload, "cuModuleUnload")                                                              \
  X(cuModuleGetFunction, "cuModuleGetFunction")                                                    \
  X(cuFuncGetAttribute, "cuFuncGetAttribute")                                                      \
  X(cuFuncSetAttribute, "cuFuncSetAttribute")                                                      \
  X(cuOccupancyMaxActiveBlocksPerMultiprocessor, "cuOccupancyMaxActiveBlocksPerMultiprocessor")    \
  X(cuLaunchKernel, "cuLaunchKernel")                                                              \
  X(cuStreamCreate, "cuStreamCreate")                                                              \
  X(cuStreamDestroy, "cuStreamDestroy_v2")                                                         \
  X(cuStreamSynchronize, "cuStreamSynchronize")                                                    \
  X(cuEventCreate, "cuEventCreate")                                                                \
  X(cuEventDestroy, "cuEventDestroy_v2")                                                           \
  X(cuEventRecord, "cuEventRecord")                                                                \
  X(cuEventSynchronize, "cuEventSynchronize")

struct DriverApi {
#define AUTOTUNE_DECLARE_MEMBER(name, symbol) decltype(&::name) name = nullptr;
  AUTOTUNE_DRIVER_FUNCTIONS(AUTOTUNE_DECLARE_MEMBER)
#undef AUTOTUNE_DECLARE_MEMBER
  // cuEventElapsedTime is versioned: _v2 since CUDA 12.8, the plain symbol before.
  CUresult (*cuEventElapsedTime)(float*, CUevent, CUevent) = nullptr;
  // Tensor maps for the tensor-memory accelerator (CUDA 12.0+ drivers); null on older
  // drivers, where encode_tensor_map() refuses with the reason (nothing else needs it).
  decltype(&::cuTensorMapEncodeTiled) cuTensorMapEncodeTiled = nullptr;
  // Virtual memory management (CUDA 10.2+): whether memory was mapped by cuMemMap (the
  // allocation checks follow such mappings, PyTorch's expandable segments); null where
  // missing, and such memory is then checked as the mapped chunk holding the pointer.
  decltype(&::cuMemRetainAllocationHandle) cuMemRetainAllocationHandle = nullptr;
  decltype(&::cuMemRelease) cuMemRelease = nullptr;
  int version = 0; // cuDriverGetVersion, e.g. 13000
};

// Loads libcuda on first use and runs cuInit(0). Throws Error(no_device) when the
// library, a symbol or a device is missing.
const DriverApi& driver();

// True when a driver loads and reports at least one device; never throws.
bool gpu_available(std::string* why = nullptr);

// A driver call failed; carries the CUresult so callers can tell a sticky fault
// (the context is lost) from a refusal (bad launch configuration).
class CudaError : public Error {
public:
  CudaError(CUresult result, const std::string& message)
      : Error(ErrorKind::cuda, message), m_result(result) {}
  CUresult result() const { return m_result; }
  // True for errors after which the context cannot be used again.
  bool sticky() const;
  // True for launches refused for their resources (threads, registers, shared memory).
  bool resource() const;

private:
  CUresult m_result;
};

// Throws CudaError carrying cuGetErrorName/cuGetErrorString and `what`.
void check(CUresult result, const char* what);

std::string error_string(CUresult result);

// cuTensorMapEncodeTiled through the loaded driver. Throws CudaError (with the
// driver's reason and `what`) when it refuses, Error(no_device) when the driver lacks
// the entry point.
void encode_tensor_map_tiled(CUtensorMap* map, CUtensorMapDataType type, cuuint32_t rank,
                             void* address, const cuuint64_t* dims, const cuuint64_t* strides,
                             const cuuint32_t* box, const cuuint32_t* element_strides,
                             CUtensorMapSwizzle swizzle, const char* what);

} // namespace autotune::cuda

#define AUTOTUNE_CU(call) ::autotune::cuda::check((call), #call)
