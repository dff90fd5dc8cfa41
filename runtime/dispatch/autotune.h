/* autotune's runtime library, C ABI (for C programs and for Python via ctypes).
 * Every function returns AUTOTUNE_OK (0) or an error code; autotune_last_error()
 * gives the message of the last failure on the calling thread. */
#ifndef AUTOTUNE_H
#define AUTOTUNE_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum autotune_status {
  AUTOTUNE_OK = 0,
  AUTOTUNE_ERROR_INVALID_ARGUMENT = 1, /* bad shape, dtype, stride, pointer */
  AUTOTUNE_ERROR_NO_DEVICE = 2,        /* no driver or no GPU */
  AUTOTUNE_ERROR_CUDA = 3,             /* a driver call or a launch failed */
  AUTOTUNE_ERROR_DATABASE = 4,         /* the tuning database cannot be used */
  AUTOTUNE_ERROR_NOT_TUNED = 5,        /* require_tuned was set and nothing is stored */
  AUTOTUNE_ERROR_INTERNAL = 6
};

enum autotune_dtype { AUTOTUNE_FP32 = 0, AUTOTUNE_FP16 = 1, AUTOTUNE_BF16 = 2 };

typedef struct autotune_runtime autotune_runtime;

/* database: path or NULL for the default path. */
int autotune_runtime_create(const char* database, int require_tuned, autotune_runtime** out);
void autotune_runtime_destroy(autotune_runtime* rt);
const char* autotune_last_error(void);

typedef struct autotune_causal_conv1d_args {
  const void* x;
  const void* weight;
  const void* bias; /* NULL: no bias */
  void* out;
  int64_t batch, channels, length, width;
  int32_t x_dtype, weight_dtype; /* enum autotune_dtype */
  int32_t silu;
  /* strides in elements; negative means contiguous */
  int64_t x_batch_stride, x_channel_stride, out_batch_stride, out_channel_stride;
  /* [batch, channels, width - 1] contiguous, x's dtype; NULL: zeros before t = 0 / not written */
  const void* initial_states;
  void* final_states;
} autotune_causal_conv1d_args;

/* stream: a CUstream (cudaStream_t), NULL for the legacy default stream. */
int autotune_causal_conv1d(autotune_runtime* rt, const autotune_causal_conv1d_args* args,
                           void* stream);
/* Writes "source variant" (e.g. "tuned threads=128,...") of the variant args resolve to. */
int autotune_causal_conv1d_variant(autotune_runtime* rt, const autotune_causal_conv1d_args* args,
                                   char* buffer, uint64_t size);

typedef struct autotune_attention_args {
  const void* q; /* [B, Hq, Sq, D]-shaped, strides below */
  const void* k; /* [B, Hkv, Sk, D]-shaped */
  const void* v;
  void* o;
  float* lse; /* fp32 [B, Hq, Sq] contiguous, or NULL */
  int64_t batch, heads_q, heads_kv, seq_q, seq_k, head_dim;
  int32_t dtype;       /* enum autotune_dtype: FP16 or BF16 */
  int32_t causal;      /* bottom-right aligned when seq_q != seq_k */
  int32_t layout_bhsd; /* what negative strides mean: 1 [B,H,S,D], 0 [B,S,H,D] */
  double scale;        /* <= 0: 1/sqrt(head_dim) */
  /* strides in elements, {batch, head, seq}; negative means contiguous */
  int64_t q_strides[3], k_strides[3], v_strides[3], o_strides[3];
  /* split-KV variants only: zero-filled once before first use, at least
     autotune_attention_workspace_size bytes; NULL/0 otherwise */
  void* workspace;
  uint64_t workspace_bytes;
} autotune_attention_args;

int autotune_attention(autotune_runtime* rt, const autotune_attention_args* args, void* stream);
/* Bytes of workspace the variant args resolve to needs (0 unless it splits the keys). */
int autotune_attention_workspace_size(autotune_runtime* rt, const autotune_attention_args* args,
                                      uint64_t* bytes);
int autotune_attention_variant(autotune_runtime* rt, const autotune_attention_args* args,
                               char* buffer, uint64_t size);

typedef struct autotune_selective_scan_args {
  const void* u;     /* [B, D, L], contiguous last dimension */
  const void* delta; /* [B, D, L] */
  const float* A;    /* fp32 [D, N] */
  const void* B;     /* variable_bc: [B, G, N, L] of dtype; else fp32 [D, N] */
  const void* C;
  const float* D;          /* fp32 [D] or NULL */
  const void* z;           /* [B, D, L] or NULL (no gate) */
  const float* delta_bias; /* fp32 [D] or NULL */
  void* out;               /* [B, D, L] */
  float* last_state;       /* fp32 [B, D, N] contiguous, or NULL */
  int64_t batch, dim, length, dstate, groups;
  int32_t dtype;          /* enum autotune_dtype, of u/delta/z/out and variable B/C */
  int32_t variable_bc;    /* 1: B/C are [B, G, N, L]; 0: [D, N] fp32 */
  int32_t delta_softplus; /* 1: delta = softplus(delta + delta_bias) */
  /* strides in elements; negative means contiguous */
  int64_t u_strides[2], delta_strides[2], z_strides[2], out_strides[2]; /* batch, dim */
  int64_t b_strides[3], c_strides[3];                                   /* batch, group, state */
} autotune_selective_scan_args;

int autotune_selective_scan(autotune_runtime* rt, const autotune_selective_scan_args* args,
                            void* stream);
int autotune_selective_scan_variant(autotune_runtime* rt, const autotune_selective_scan_args* args,
                                    char* buffer, uint64_t size);

#ifdef __cplusplus
}
#endif

#endif
