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
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>

typedef struct CUstream_st* CUstream;

namespace autotune {

enum class ElementType {
  fp32 = AUTOTUNE_FP32,
  fp16 = AUTOTUNE_FP16,
  bf16 = AUTOTUNE_BF16,
  int32 = AUTOTUNE_INT32 // index tensors (attention's cu_seqlens)
};

using Tensor = autotune_tensor;
using CausalConv1dArgs = autotune_causal_conv1d_args;
using AttentionArgs = autotune_attention_args;
using SelectiveScanArgs = autotune_selective_scan_args;
using CausalConv1dUpdateArgs = autotune_causal_conv1d_update_args;
using SelectiveStateUpdateArgs = autotune_selective_state_update_args;

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
  // Tune the problem now (RuntimeOptions::tuner, by default the `autotune` CLI in a
  // child process, within tune_budget_s), store the winner in the runtime's database
  // and run it. A tune that fails (no CLI, a non-zero exit, no winner stored) is an
  // Error(not_tuned) saying what happened: never a silent fallback.
  tune,
};

// What Policy::tune asks of the tuner: tune one problem on the runtime's GPU and
// store its winner in `database`.
struct TuneRequest {
  std::string op;       // "causal_conv1d", "causal_conv1d_update", "attention", ...
  std::string problem;  // canonical problem key, e.g. "B=2,C=256,L=1000,W=4,x=bf16,..."
  std::string database; // the runtime's database path
  double budget_s = 0;  // seconds of compiling and measuring (the CLI's --budget-s)
  int device = 0;       // the runtime's GPU ordinal, as this process counts them
};

// The hook of Policy::tune. Returns when the tuner has finished; throws Error saying
// why when it failed. The runtime then reads the winner from the database itself.
// Called by one thread at a time per runtime, with no lock of the runtime held.
using Tuner = std::function<void(const TuneRequest&)>;

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
  // Policy::tune: the budget per problem, passed as --budget-s (the CLI's default: 2 s
  // with tuned neighbours in the database; the CLI allows 10x that with none).
  double tune_budget_s = 2.0;
  // Policy::tune with the default tuner: the `autotune` executable; empty: $AUTOTUNE_CLI,
  // then `autotune` beside the library (or executable) holding this runtime, in
  // ../bin or ../../bin from it (see find_tuner_cli).
  std::string tuner_path;
  // Policy::tune: the hook that tunes; empty: run_tuner_cli(request, tuner_path).
  Tuner tuner;
};

// Where a problem's variant came from.
struct Selection {
  std::string variant; // configuration id, e.g. "threads=128,vec=8,items=2,cpb=1,load=direct"
  // "tuned"; "tuned (policy tune)" (tuned by this runtime on a miss); "nearest
  // PROBLEM" (the tuned problem whose winner runs); "heuristic ARCH point FIELDS";
  // "default"; "pinned"
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
  // A decoding step of the conv against each sequence's state, which it updates in place.
  void causal_conv1d_update(const CausalConv1dUpdateArgs& args, CUstream stream = nullptr);
  Selection select_causal_conv1d_update(const CausalConv1dUpdateArgs& args);
  void attention(const AttentionArgs& args, CUstream stream = nullptr);
  Selection select_attention(const AttentionArgs& args);
  // Bytes of workspace the variant `args` resolve to needs (0 unless it splits the
  // keys); ask once per shape, before the first call. Zero-filled once, the workspace is
  // left all zero by every call, so one buffer of the largest size serves every shape
  // whose calls run one after another (one stream).
  uint64_t attention_workspace_size(const AttentionArgs& args);
  void selective_scan(const SelectiveScanArgs& args, CUstream stream = nullptr);
  Selection select_selective_scan(const SelectiveScanArgs& args);

  // A decoding step of the selective scan; its state is updated in place.
  void selective_state_update(const SelectiveStateUpdateArgs& args, CUstream stream = nullptr);
  Selection select_selective_state_update(const SelectiveStateUpdateArgs& args);

  // Number of distinct variants loaded so far (one module each).
  size_t loaded_variants() const;

private:
  struct Impl;
  std::unique_ptr<Impl> m_impl;
};

// Forget the device allocations every thread's calls have checked their tensors against:
// call after freeing device memory whose address a later call may pass again, re-allocated
// smaller (autotune_forget_device_memory says when it matters).
void forget_device_memory();

// The layout and rules of an op's args struct as text (autotune_describe_args).
std::string describe_args(const std::string& op);

// The `autotune` CLI the default tuner runs: `tuner_path` when given, else
// $AUTOTUNE_CLI, else the first executable `autotune` in the directory of the library
// (or executable) holding this code, its ../bin or its ../../bin. Throws
// Error(not_tuned) naming every place it looked when there is none.
std::string find_tuner_cli(const std::string& tuner_path = "");

// The default Tuner: runs `CLI --arch auto --op OP --shape PROBLEM --db DATABASE
// --budget-s S --quiet` (CLI from find_tuner_cli(tuner_path)) as a child process,
// without a shell, on the request's GPU (CUDA_VISIBLE_DEVICES narrowed to it when it
// is not device 0), and waits for it. Its output is kept out of the caller's stdout
// and stderr. Throws Error(not_tuned) with the command, its exit status and what it
// printed last when it does not exit with 0.
void run_tuner_cli(const TuneRequest& request, const std::string& tuner_path = "");

} // namespace autotune
