// autotune's runtime library, C++ API. Finds the tuned winner for a problem in
// the tuning database, loads its cubin once, and launches it on the caller's
// stream in the device's primary context (the one PyTorch uses). When nothing is
// tuned for a shape it runs the op's documented default variant (the [default]
// table of templates/<op>/space.toml), compiled with NVRTC on first use, unless
// RuntimeOptions::require_tuned asks for an error instead.
//
// Warm path: one map lookup under a shared lock; no NVRTC, no SQLite per call.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

typedef struct CUstream_st* CUstream;

namespace autotune {

enum class DType;

enum class ElementType { fp32 = 0, fp16 = 1, bf16 = 2 };

struct RuntimeOptions {
  // Tuning database; empty means the default path ($AUTOTUNE_DB, then
  // $XDG_CACHE_HOME/autotune/tuning.db, then ~/.cache/autotune/tuning.db).
  // A missing file is not an error: every problem then runs its default variant.
  std::string database;
  bool require_tuned = false;
  int device = 0;
};

// x, out: [batch, channels, length], last dimension contiguous; weight: [channels,
// width] contiguous; bias: [channels] or null. Strides in elements; a negative
// stride means "contiguous".
struct CausalConv1dArgs {
  const void* x = nullptr;
  const void* weight = nullptr;
  const void* bias = nullptr;
  void* out = nullptr;
  int64_t batch = 0;
  int64_t channels = 0;
  int64_t length = 0;
  int64_t width = 4;
  ElementType x_type = ElementType::bf16;
  ElementType weight_type = ElementType::bf16;
  bool silu = true;
  int64_t x_batch_stride = -1;
  int64_t x_channel_stride = -1;
  int64_t out_batch_stride = -1;
  int64_t out_channel_stride = -1;
};

// Where a problem's variant came from.
struct Selection {
  std::string variant;  // configuration id, e.g. "threads=128,vec=8,items=2,cpb=1,load=direct"
  std::string source;   // "tuned" or "default"
  std::string problem;  // canonical problem key
};

class Runtime {
public:
  explicit Runtime(const RuntimeOptions& options = {});
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  // Throws autotune::Error (usage: bad arguments; cuda: launch failure).
  void causal_conv1d(const CausalConv1dArgs& args, CUstream stream = nullptr);
  Selection select_causal_conv1d(const CausalConv1dArgs& args);

  // Number of distinct variants loaded so far (one module each).
  size_t loaded_variants() const;

private:
  struct Impl;
  std::unique_ptr<Impl> m_impl;
};

} // namespace autotune
