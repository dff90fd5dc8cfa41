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
  // A database that other users may write (group/other-writable file or
  // directory, or another owner) could feed this process their kernels. By
  // default that is a warning; true (or AUTOTUNE_INSECURE_DB=refuse) makes it an
  // Error(database) instead.
  bool refuse_insecure_database = false;
};

// x, out: [batch, channels, length], last dimension contiguous; weight: [channels,
// width] contiguous; bias: [channels] or null. Strides in elements; a negative
// stride means "contiguous".
struct CausalConv1dArgs {
  const void* x = nullptr;
  const void* weight = nullptr;
  const void* bias = nullptr;
  void* out = nullptr;
  // [batch, channels, width - 1] contiguous, in x's type. initial_states: the inputs
  // before t = 0 (zeros when null); final_states: receives the last width - 1 inputs.
  const void* initial_states = nullptr;
  void* final_states = nullptr;
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

// q, o: [batch, heads_q, seq_q, head_dim]-shaped, k, v: [batch, heads_kv, seq_k,
// head_dim]-shaped, any batch/head/seq strides (elements, multiples of 8, 16-byte
// aligned pointers) with a contiguous last dimension; a negative stride means the
// contiguous value of `layout_bhsd` ([B,H,S,D]) or else [B,S,H,D]. lse: fp32
// [batch, heads_q, seq_q] contiguous, or null. causal: bottom-right aligned (query
// i sees keys j <= i + seq_k - seq_q). scale <= 0 means 1/sqrt(head_dim).
struct AttentionArgs {
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* o = nullptr;
  float* lse = nullptr;
  int64_t batch = 0;
  int64_t heads_q = 0;
  int64_t heads_kv = 0;
  int64_t seq_q = 0;
  int64_t seq_k = 0;
  int64_t head_dim = 0;
  ElementType type = ElementType::bf16;
  bool causal = false;
  double scale = 0;
  bool layout_bhsd = false;
  int64_t q_strides[3] = {-1, -1, -1}; // batch, head, seq
  int64_t k_strides[3] = {-1, -1, -1};
  int64_t v_strides[3] = {-1, -1, -1};
  int64_t o_strides[3] = {-1, -1, -1};
  // Split-KV variants (flash-decoding, tuned for problems with few query blocks)
  // need a workspace: Runtime::attention_workspace_size says how many bytes (0 for
  // the others). Zero-fill it once before its first use; every call leaves it so.
  void* workspace = nullptr;
  uint64_t workspace_bytes = 0;
};

// Mamba-1 selective scan forward. u, delta, z, out: [batch, dim, length], element
// type `type`, contiguous last dimension. A: fp32 [dim, dstate]. B and C: with
// variable_bc [batch, groups, dstate, length] of `type` (contiguous last dimension;
// channel d reads group d / (dim / groups)), else fp32 [dim, dstate]. D and
// delta_bias: fp32 [dim] or null; z null for no gate; last_state: fp32
// [batch, dim, dstate] contiguous or null. Strides in elements; negative means
// contiguous. dstate <= 64.
struct SelectiveScanArgs {
  const void* u = nullptr;
  const void* delta = nullptr;
  const float* A = nullptr;
  const void* B = nullptr;
  const void* C = nullptr;
  const float* D = nullptr;
  const void* z = nullptr;
  const float* delta_bias = nullptr;
  void* out = nullptr;
  float* last_state = nullptr;
  int64_t batch = 0;
  int64_t dim = 0;
  int64_t length = 0;
  int64_t dstate = 16;
  int64_t groups = 1;
  ElementType type = ElementType::bf16;
  bool variable_bc = true;
  bool delta_softplus = true;
  int64_t u_strides[2] = {-1, -1}; // batch, dim
  int64_t delta_strides[2] = {-1, -1};
  int64_t z_strides[2] = {-1, -1};
  int64_t out_strides[2] = {-1, -1};
  int64_t b_strides[3] = {-1, -1, -1}; // batch, group, state
  int64_t c_strides[3] = {-1, -1, -1};
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

} // namespace autotune
