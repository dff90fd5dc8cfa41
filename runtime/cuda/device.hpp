// Device query, the primary context, and move-only owners of driver handles
// (STYLE.md rule 5: one owner per C handle, destructors never throw).
#pragma once

#include "driver.hpp"

#include <cstddef>
#include <string>
#include <utility>

namespace autotune::cuda {

struct DeviceInfo {
  int ordinal = 0;
  std::string name;
  int cc_major = 0;
  int cc_minor = 0;
  int sm_count = 0;
  int l2_bytes = 0;
  int smem_per_block_optin = 0; // the most a block may ask for after cuFuncSetAttribute
  int smem_per_sm = 0;
  int regs_per_sm = 0;
  int max_threads_per_block = 0;
  int clock_khz = 0; // boost clock reported by the driver
  int memory_clock_khz = 0;
  int memory_bus_bits = 0;
  size_t total_memory = 0;
  int driver_version = 0;

  // "sm_90a" on Hopper (the arch-specific target with wgmma), "sm_XY" elsewhere.
  std::string arch() const;
  std::string summary() const;
};

DeviceInfo query_device(int ordinal = 0);

// Retains the device's primary context (the one the runtime API and PyTorch use)
// and makes it current on construction; releases it on destruction.
class PrimaryContext {
public:
  explicit PrimaryContext(int ordinal = 0);
  PrimaryContext(const PrimaryContext&) = delete;
  PrimaryContext& operator=(const PrimaryContext&) = delete;
  ~PrimaryContext();
  CUcontext get() const { return m_ctx; }
  CUdevice device() const { return m_dev; }
  void make_current() const;

private:
  CUdevice m_dev = 0;
  CUcontext m_ctx = nullptr;
};

template <typename Handle, typename Deleter> class Unique {
public:
  Unique() = default;
  explicit Unique(Handle h) : m_h(h) {}
  Unique(Unique&& o) noexcept : m_h(std::exchange(o.m_h, Handle{})) {}
  Unique& operator=(Unique&& o) noexcept {
    if (this != &o) {
      reset();
      m_h = std::exchange(o.m_h, Handle{});
    }
    return *this;
  }
  Unique(const Unique&) = delete;
  Unique& operator=(const Unique&) = delete;
  ~Unique() { reset(); }
  Handle get() const { return m_h; }
  explicit operator bool() const { return m_h != Handle{}; }
  void reset() {
    if (m_h != Handle{}) {
      Deleter{}(m_h);
      m_h = Handle{};
    }
  }

private:
  Handle m_h{};
};

struct ModuleDeleter {
  void operator()(CUmodule m) const noexcept { driver().cuModuleUnload(m); }
};
struct EventDeleter {
  void operator()(CUevent e) const noexcept { driver().cuEventDestroy(e); }
};
struct StreamDeleter {
  void operator()(CUstream s) const noexcept { driver().cuStreamDestroy(s); }
};
struct MemoryDeleter {
  void operator()(CUdeviceptr p) const noexcept { driver().cuMemFree(p); }
};

using Module = Unique<CUmodule, ModuleDeleter>;
using Event = Unique<CUevent, EventDeleter>;
using Stream = Unique<CUstream, StreamDeleter>;

// Loads a cubin (or PTX) image into the current context.
Module load_module(const std::string& image);
CUfunction get_function(const Module& module, const char* name);
// Lets `function` take `bytes` of dynamic shared memory; above 48 KiB the driver
// requires this opt-in before the launch.
void allow_dynamic_smem(CUfunction function, unsigned bytes);
Event create_event();
Stream create_stream();

class DeviceBuffer {
public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes);
  CUdeviceptr get() const { return m_ptr.get(); }
  size_t size() const { return m_bytes; }
  void upload(const void* host, size_t bytes);
  void download(void* host, size_t bytes) const;

private:
  Unique<CUdeviceptr, MemoryDeleter> m_ptr;
  size_t m_bytes = 0;
};

} // namespace autotune::cuda
