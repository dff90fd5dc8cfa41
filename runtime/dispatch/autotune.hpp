// autotune's runtime library, C++ API. Finds the tuned winner for a problem in
// the tuning database, loads its cubin once, and launches it on the caller's
// stream in the device's primary context (the one PyTorch uses). When nothing is
// tuned for a shape it follows RuntimeOptions::policy (by default the winner of the
// nearest tuned problem), compiled with NVRTC on first use.
//
// The arguments are the C ABI's structs (autotune.h): every tensor an
// autotune::Tensor with its dtype, shape and strides, checked against the op's
// description before anything launches.
//
// Warm path: the call's fields are read off its tensors, a hash lookup finds the
// plan of that signature; no strings, no NVRTC, no SQLite per call.
#pragma once

#include "autotune.h"

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>

typedef struct CUstream_st* CUstream;

namespace autotune {

enum class ElementType { fp32 = AUTOTUNE_FP32, fp16 = AUTOTUNE_FP16, bf16 = AUTOTUNE_BF16 };

using Tensor = autotune_tensor;
using CausalConv1dArgs = autotune_causal_conv1d_args;
using AttentionArgs = autotune_attention_args;
using SelectiveScanArgs = autotune_selective_scan_args;

// A tensor view of device memory: shape, and strides in elements (omitted:
// row-major contiguous). At most AUTOTUNE_MAX_DIMS dimensions.
inline Tensor tensor(const void* data, ElementType type, std::initializer_list<int64_t> shape,
                     std::initializer_list<int64_t> strides = {}) {
  Tensor t{};
  t.data = data;
  t.dtype = int32_t(type);
  t.ndim = int32_t(shape.size() <= AUTOTUNE_MAX_DIMS ? shape.size() : AUTOTUNE_MAX_DIMS + 1);
  int i = 0;
  for (int64_t s : shape) {
    if (i < AUTOTUNE_MAX_DIMS) {
      t.shape[i++] = s;
    }
  }
  if (strides.size() == 0) {
    int64_t stride = 1;
    for (int d = i - 1; d >= 0; --d) {
      t.strides[d] = stride;
      stride *= t.shape[d];
    }
  } else {
    i = 0;
    for (int64_t s : strides) {
      if (i < AUTOTUNE_MAX_DIMS) {
        t.strides[i++] = s;
      }
    }
  }
  return t;
}

// What the runtime runs for a problem with no tuned winner stored.
enum class Policy {
  // The configuration of the nearest tuned problem of the same op, dtypes and flags
  // on this GPU (distance: the sum over shape fields of |log2 of their ratio|, the
  // fields the kernel is instantiated for, W, D and N, weighted 4), compiled on first
  // use; when nothing comparable is stored, the heuristic choice.
  nearest,
  // A configuration built into the op from tuning data of this GPU family (the
  // [[heuristic]] points of templates/<op>/space.toml: the nearest one that can run
  // the problem); on a GPU with no points of its own, the nearest point of another
  // family that this GPU's limits allow; else the default variant.
  heuristic,
  default_variant, // the op's [default] configuration (templates/<op>/space.toml)
  error,           // Error(not_tuned) naming the command that tunes the shape
  pin,             // RuntimeOptions::pinned, for every problem without a winner
};

struct RuntimeOptions {
  // Tuning database; empty means the default path ($AUTOTUNE_DB, then
  // $XDG_CACHE_HOME/autotune/tuning.db, then ~/.cache/autotune/tuning.db).
  // A missing file is not an error: every problem then runs its default variant.
  std::string database;
  Policy policy = Policy::nearest;
  std::string pinned;         // Policy::pin: a configuration id, e.g. "threads=128,vec=8,..."
  bool require_tuned = false; // the same as Policy::error
  int device = 0;
  // A database that other users may write (group/other-writable file or
  // directory, or another owner) could feed this process their kernels. By
  // default that is a warning; true (or AUTOTUNE_INSECURE_DB=refuse) makes it an
  // Error(database) instead.
  bool refuse_insecure_database = false;
};

// Where a problem's variant came from.
struct Selection {
  std::string variant; // configuration id, e.g. "threads=128,vec=8,items=2,cpb=1,load=direct"
  // "tuned"; "nearest PROBLEM" (the tuned problem whose winner runs); "heuristic
  // ARCH point FIELDS"; "default"; "pinned"
  std::string source;
  std::string problem; // canonical problem key
};

class Runtime {
public:
  explicit Runtime(const RuntimeOptions& options = {});
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  // Throw autotune::Error (usage: a bad argument, named; cuda: launch failure).
  void causal_conv1d(const CausalConv1dArgs& args, CUstream stream = nullptr);
  Selection select_causal_conv1d(const CausalConv1dArgs& args);
  void attention(const AttentionArgs& args, CUstream stream = nullptr);
  Selection select_attention(const AttentionArgs& args);
  // Bytes of workspace the variant `args` resolve to needs (0 unless it splits the
  // keys); ask once per shape, before the first call.
  uint64_t attention_workspace_size(const AttentionArgs& args);
  void selective_scan(const SelectiveScanArgs& args, CUstream stream = nullptr);
  Selection select_selective_scan(const SelectiveScanArgs& args);

  // Number of distinct variants loaded so far (one module each).
  size_t loaded_variants() const;

private:
  struct Impl;
  std::unique_ptr<Impl> m_impl;
};

// The layout and rules of an op's args struct as text (autotune_describe_args).
std::string describe_args(const std::string& op);

} // namespace autotune
