/* autotune's runtime library, C ABI (for C programs and for Python via ctypes).
 * Every function returns AUTOTUNE_OK (0) or an error code; autotune_last_error()
 * gives the message of the last failure on the calling thread.
 *
 * Every tensor argument is an autotune_tensor: a device pointer with its dtype,
 * shape and strides (DLPack-like). The library checks every tensor of a call
 * against the op's description before anything launches: device memory of the
 * runtime's GPU, dtype, each size against the others (the shape fields B, C, L, ...
 * are read off the tensors), strides the kernel can read, alignment, and that
 * outputs do not overlap themselves. A call that fails a check returns
 * AUTOTUNE_ERROR_INVALID_ARGUMENT naming the argument; nothing is launched. */
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
  AUTOTUNE_ERROR_NOT_TUNED = 5,        /* nothing is stored and the policy is error, or
                                          policy tune failed (the message says how) */
  AUTOTUNE_ERROR_INTERNAL = 6
};

enum autotune_dtype {
  AUTOTUNE_FP32 = 0,
  AUTOTUNE_FP16 = 1,
  AUTOTUNE_BF16 = 2,
  AUTOTUNE_INT32 = 3 /* index tensors only (attention's cu_seqlens, cache_seqlens, block_table,
                        cache_leftpad, cache_batch_idx) */
};

#define AUTOTUNE_MAX_DIMS 4

/* A strided view of device memory. data NULL marks an absent optional tensor (the
 * other fields are then ignored). Strides are in elements; a stride of a dimension
 * of size 1 is ignored. */
typedef struct autotune_tensor {
  const void* data;
  int32_t dtype; /* enum autotune_dtype */
  int32_t ndim;  /* 1..AUTOTUNE_MAX_DIMS */
  int64_t shape[AUTOTUNE_MAX_DIMS];
  int64_t strides[AUTOTUNE_MAX_DIMS];
} autotune_tensor;

typedef struct autotune_runtime autotune_runtime;

/* database: path or NULL for the default path. A shape with no tuned winner runs
 * the winner of the nearest tuned problem (policy "nearest"), or with require_tuned
 * fails with AUTOTUNE_ERROR_NOT_TUNED. */
int autotune_runtime_create(const char* database, int require_tuned, autotune_runtime** out);
/* policy, for shapes with no tuned winner: "nearest" (the configuration of the
 * nearest tuned problem of the same op, dtypes and flags; else "heuristic"),
 * "heuristic" (the nearest of the tuning points built into the op for this GPU
 * family), "default" (the op's default variant), "error", "tune" (tune the shape
 * now with the autotune CLI, store the winner in the database and run it; see
 * autotune_runtime_create_tuning), or "pin:CONFIG" (e.g.
 * "pin:threads=128,vec=8,items=2,cpb=1,load=direct"). What a call runs, and which
 * policy chose it, is what the *_variant functions report. */
int autotune_runtime_create_with_policy(const char* database, const char* policy,
                                        autotune_runtime** out);
/* The same for GPU `device` (an ordinal as CUDA counts them; the policy one of the
 * above). Every tensor of a call must live on that GPU. */
int autotune_runtime_create_on_device(const char* database, const char* policy, int device,
                                      autotune_runtime** out);
/* The same with the options of policy "tune": tune_budget_s, the seconds of
 * compiling and measuring per problem (the CLI's --budget-s; 0: 2 s), and
 * tuner_path, the autotune executable (NULL: $AUTOTUNE_CLI, else `autotune` beside
 * libautotune.so or in its ../bin). A tune runs `autotune --arch auto --op OP --shape
 * PROBLEM --db DATABASE --budget-s S --quiet` as a child process; when it fails (no
 * CLI, a non-zero exit, no winner stored) the call returns AUTOTUNE_ERROR_NOT_TUNED
 * saying what happened: it never falls back to another policy. Creating fails with
 * AUTOTUNE_ERROR_INVALID_ARGUMENT for a bad budget or no database path, and with
 * AUTOTUNE_ERROR_NOT_TUNED when no CLI is found. */
int autotune_runtime_create_tuning(const char* database, const char* policy, int device,
                                   double tune_budget_s, const char* tuner_path,
                                   autotune_runtime** out);
void autotune_runtime_destroy(autotune_runtime* rt);
const char* autotune_last_error(void);
/* Every call checks that its tensors are device memory of the runtime's GPU and lie
 * inside their allocations. The allocations' ranges are remembered per thread, and a
 * view is taken on trust up to the furthest byte a view of its allocation reached
 * before; further, the driver is asked again. Memory freed and re-allocated smaller at
 * the same address is therefore still trusted up to what views of the old allocation
 * reached: after freeing device memory a later call may pass again at its old address,
 * call this (any thread, for all runtimes of the process; cheap, the next call of each
 * thread asks the driver again). Not needed for PyTorch tensors, which never reach past
 * their storage. */
void autotune_forget_device_memory(void);

/* The layout of an op's args struct as text, one field per line,
 * "NAME KIND OFFSET" (KIND: tensor, i32, f64, ptr, u64), then "size BYTES"; and
 * after a line "rules", one line per tensor with its shape and dtype rules. Python
 * builds its ctypes structs from this. op: "causal_conv1d", "causal_conv1d_update",
 * "attention", "selective_scan" or "selective_state_update". */
int autotune_describe_args(const char* op, char* buffer, uint64_t size);

/* causal_conv1d: out[b,c,t] = act(bias[c] + sum_{k<W} weight[c,k] x[b,c,t-W+1+k]),
 * x zero before t = 0 unless initial_states are given. */
typedef struct autotune_causal_conv1d_args {
  autotune_tensor x;              /* [B, C, L] fp32/fp16/bf16; any batch and channel
                                     strides (views of a packed projection work),
                                     contiguous last dimension; or channel-last
                                     (channel stride 1, any batch and length
                                     strides: Mamba-2's xBC.transpose(1, 2)) */
  autotune_tensor weight;         /* [C, W], W in 2..4, fp32/fp16/bf16, contiguous */
  autotune_tensor bias;           /* [C], weight's dtype; optional */
  autotune_tensor initial_states; /* [B, C, W-1], x's dtype, contiguous; optional */
  autotune_tensor out;            /* [B, C, L], x's dtype and layout (channel-last
                                     when x is) */
  autotune_tensor final_states;   /* [B, C, W-1], x's dtype, contiguous; optional output
                                     (the last W-1 inputs, for the next call) */
  int32_t silu;                   /* 1: SiLU activation; 0: identity */
  autotune_tensor seq_idx;        /* int32 [B, L], contiguous last dimension; optional,
                                     channel-last x only, without states (as
                                     causal-conv1d): packed sequences, x at position s
                                     counts for out at t only when seq_idx[b, s] ==
                                     seq_idx[b, t]; a negative id marks padding, whose
                                     out is 0 (as causal-conv1d's) */
} autotune_causal_conv1d_args;

int autotune_causal_conv1d(autotune_runtime* rt, const autotune_causal_conv1d_args* args,
                           void* stream);
/* Writes "SOURCE VARIANT" (e.g. "tuned threads=128,...") of the variant args resolve to. */
int autotune_causal_conv1d_variant(autotune_runtime* rt, const autotune_causal_conv1d_args* args,
                                   char* buffer, uint64_t size);

/* causal_conv1d_update: a decoding step (L new positions, usually 1) of causal_conv1d
 * against each sequence's rolling state of its last S inputs, updated in place
 * (causal-conv1d's causal_conv1d_update): out[b,c,t] = act(bias[c] + sum_{k<W}
 * weight[c,k] in[b,c,t-W+1+k]), where in(i) is x[b,c,i] for i >= 0 and the state's
 * inputs before x otherwise; then the state holds the last S inputs. One launch. */
typedef struct autotune_causal_conv1d_update_args {
  autotune_tensor x;                  /* [B, C, L] fp32/fp16/bf16, any non-negative strides */
  autotune_tensor conv_state;         /* [B, C, S] (or [E, C, S] with conv_state_indices), x's
                                         dtype, any non-negative strides, S in W-1..64; read and
                                         written: linear, the inputs before x are its last W-1
                                         and it shifts left by L; circular (cache_seqlens), they
                                         end at position cache_seqlens[b] - 1 (mod S) and x is
                                         written from cache_seqlens[b] (mod S) on */
  autotune_tensor weight;             /* [C, W], W in 2..4, fp32/fp16/bf16, contiguous */
  autotune_tensor bias;               /* [C], weight's dtype, contiguous; optional */
  autotune_tensor out;                /* [B, C, L], x's dtype, any non-overlapping strides */
  autotune_tensor cache_seqlens;      /* int32 [B], contiguous; optional: a circular state */
  autotune_tensor conv_state_indices; /* int32 [B], contiguous; optional: sequence b's
                                         state is row conv_state_indices[b]; a row outside
                                         [0, E) (e.g. -1) is padding: out 0, no state
                                         written */
  int32_t silu;                       /* 1: SiLU activation; 0: identity */
} autotune_causal_conv1d_update_args;

int autotune_causal_conv1d_update(autotune_runtime* rt,
                                  const autotune_causal_conv1d_update_args* args, void* stream);
int autotune_causal_conv1d_update_variant(autotune_runtime* rt,
                                          const autotune_causal_conv1d_update_args* args,
                                          char* buffer, uint64_t size);

/* selective_state_update: one decoding step of the Mamba selective scan against a state
 * updated in place (mamba-ssm's selective_state_update). Per batch b, head h, channel p
 * and state n, with g = h / (H / G) and dt = softplus(dt + dt_bias) when asked:
 *   state[b,h,p,n] = state[b,h,p,n] exp(dt A[h,p,n]) + dt B[b,g,n] x[b,h,p],
 *   out[b,h,p] = (sum_n state[b,h,p,n] C[b,g,n] + D[h,p] x[b,h,p]) silu(z[b,h,p]).
 * The head dimension is optional throughout (Mamba-1: x [B, P], state [B, P, N], A [P, N],
 * B and C [B, N], D and dt_bias [P]). Any non-negative strides (mamba-ssm passes A, dt, D
 * and dt_bias as broadcast views with stride 0). One launch. */
typedef struct autotune_selective_state_update_args {
  autotune_tensor state;               /* [B, H, P, N] or [B, P, N] (or E rows with
                                          state_batch_indices), fp32/fp16/bf16; read and written */
  autotune_tensor x;                   /* [B, H, P] or [B, P], fp32/fp16/bf16 */
  autotune_tensor dt;                  /* x's shape and dtype */
  autotune_tensor A;                   /* [H, P, N] or [P, N], fp32/fp16/bf16 */
  autotune_tensor B;                   /* [B, G, N] or [B, N] (G = 1), G dividing H */
  autotune_tensor C;                   /* B's shape and dtype */
  autotune_tensor D;                   /* [H, P] or [P]; optional */
  autotune_tensor z;                   /* x's shape and dtype; optional: out *= silu(z) */
  autotune_tensor dt_bias;             /* D's shape; D's dtype when both are given; optional */
  autotune_tensor out;                 /* x's shape and dtype, elements not overlapping */
  autotune_tensor state_batch_indices; /* int32 [B], contiguous; optional: sequence b's
                                          state is row state_batch_indices[b]; a row
                                          outside [0, E) is padding: out 0, no state
                                          written */
  int32_t dt_softplus;                 /* 1: dt = softplus(dt + dt_bias) */
} autotune_selective_state_update_args;

int autotune_selective_state_update(autotune_runtime* rt,
                                    const autotune_selective_state_update_args* args, void* stream);
int autotune_selective_state_update_variant(autotune_runtime* rt,
                                            const autotune_selective_state_update_args* args,
                                            char* buffer, uint64_t size);

/* attention: o = softmax(scale q k^T + mask) v; GQA/MQA when Hkv divides Hq. Tensors
 * are indexed [batch, head, seq, dim] whatever their memory order: pass a
 * [B, S, H, D] tensor with its strides permuted. */
typedef struct autotune_attention_args {
  autotune_tensor q;   /* [B, Hq, Sq, D] fp16/bf16, D a multiple of 8 in 32..256;
                          batch/head/seq strides multiples of 8 elements, 16-byte
                          aligned, contiguous last dimension */
  autotune_tensor k;   /* [B, Hkv, Sk, D], q's dtype */
  autotune_tensor v;   /* [B, Hkv, Sk, D], q's dtype */
  autotune_tensor o;   /* [B, Hq, Sq, D], q's dtype */
  autotune_tensor lse; /* fp32 [B, Hq, Sq] contiguous; optional output */
  int32_t causal;      /* bottom-right aligned when Sq != Sk */
  double scale;        /* 0: 1/sqrt(D); negative or not finite: refused */
  /* split-KV variants only: zero-filled once before first use, at least
     autotune_attention_workspace_size bytes; NULL/0 otherwise. Every call leaves
     it all zero, so one buffer of the largest size serves the calls of any shape
     that run one after another (calls that may overlap need one each). */
  void* workspace;
  uint64_t workspace_bytes;
  /* The fields below came later; a zero-filled struct leaves every one of them off.
     Together they are flash-attn 2's window_size, softcap and alibi_slopes. */
  int32_t window;               /* 1: a sliding window bounds the keys each query sees: query i
                                   sees key j iff i + Sk - Sq - window_left <= j <= i + Sk - Sq +
                                   window_right (bounds of -1 are unbounded; causal makes the
                                   right bound 0 whatever window_right says); 0: no window */
  int32_t window_left;          /* window=1: keys before the diagonal, >= 0, or -1 */
  int32_t window_right;         /* window=1: keys after the diagonal, >= 0, or -1 */
  double softcap;               /* > 0: logits s = scale q.k become softcap * tanh(s / softcap);
                                   0: off */
  autotune_tensor alibi_slopes; /* fp32 [Hq] or [B, Hq] contiguous; optional: adds
                                   -slope[b, h] * |i + Sk - Sq - j| to the logit of
                                   query i and key j (after softcap) */
  /* Variable-length batches (flash-attn 2's flash_attn_varlen_func), appended later: with
     cu_seqlens_q given, the B sequences' tokens are packed one after another: q and o are
     [Tq, Hq, D], k and v [Tk, Hkv, D] (token, head and dim strides; contiguous last
     dimension), lse fp32 [Hq, Tq] contiguous. Sequence b's queries are the rows
     cu_seqlens_q[b] .. cu_seqlens_q[b+1] - 1, its keys those of cu_seqlens_k; causal, the
     window and ALiBi are aligned to each sequence's own bottom-right corner. The
     offsets live on the GPU and are read, not checked: they must start at 0, never
     decrease, end at most at Tq (Tk), and no sequence may be longer than max_seqlen_q
     (max_seqlen_k) -- rows past max_seqlen_q are not computed. Each sequence is clamped
     into the tensors' rows, so a wrong offset never reads or writes past them. A sequence
     may be empty.
     With block_table given (and no cache_seqlens; flash_attn_varlen_func's block_table),
     k and v are a paged KV cache as described below and sequence b's keys are the first
     cu_seqlens_k[b+1] - cu_seqlens_k[b] keys of its pages (clamped into them). */
  autotune_tensor cu_seqlens_q; /* int32 [B + 1] contiguous; optional (varlen iff given) */
  autotune_tensor cu_seqlens_k; /* int32 [B + 1] contiguous; given iff cu_seqlens_q is */
  int32_t max_seqlen_q;         /* varlen: the longest query sequence, >= 1; else 0 (or Sq) */
  int32_t max_seqlen_k;         /* varlen: the longest key sequence, >= 1; else 0 (or Sk;
                                   with a KV cache: 0) */
  /* Decoding with a KV cache (flash-attn 2's flash_attn_with_kvcache), appended later:
     with cache_seqlens given, k and v are the cache and sequence b's keys are its first
     cache_seqlens[b] rows, then the Snew rows of k_new / v_new when given (written into
     the cache at rows cache_seqlens[b].. by the same launch, and attended). Causal, the
     window and ALiBi are aligned to each sequence's bottom-right corner (Sk there is
     cache_seqlens[b] + Snew). Paged (block_table given): k and v are [num_blocks, Hkv,
     page, D] (flash-attn's [num_blocks, page, Hkv, D] with permuted strides) and key j
     of sequence b is row j % page of page block_table[b][j / page]; page must be a
     multiple of the variant's block_n (16..256 multiples of 16 are served; flash-attn
     uses multiples of 256). Contiguous (no block_table): k and v are [B, Hkv, Scache, D]
     ([B_cache, Hkv, Scache, D] with cache_batch_idx, below).
     The lengths and the table live on the GPU and are read, not checked: cache_seqlens[b]
     + Snew must fit the sequence's cache (blocks_per_seq * page, or Scache) -- lengths
     are clamped into it --, and table entries must be pages of the cache (they are
     clamped into [0, num_blocks)). The cache is written only by the append. */
  autotune_tensor cache_seqlens; /* int32 [B] contiguous; optional (a KV cache iff given) */
  autotune_tensor block_table;   /* int32 [B, blocks_per_seq], contiguous last dimension;
                                    optional (paged cache), with cache_seqlens or with
                                    cu_seqlens (varlen) */
  autotune_tensor k_new;         /* [B, Hkv, Snew, D], q's dtype; optional, only with
                                    cache_seqlens; Snew <= the cache's size per sequence */
  autotune_tensor v_new;         /* [B, Hkv, Snew, D], q's dtype; given iff k_new is */
  /* Appended later (flash-attn 2's cache_leftpad): where each sequence's keys start in a
     contiguous cache. Sequence b's keys are then cache rows cache_leftpad[b] ..
     cache_seqlens[b] - 1, then the new rows, which are still written at rows
     cache_seqlens[b].. ; causal, the window and ALiBi count keys from cache_leftpad[b]
     (Sk there is cache_seqlens[b] - cache_leftpad[b] + Snew). Read, not checked: values
     are clamped into [0, the clamped cache_seqlens[b]]. Refused with block_table, as
     flash-attn refuses it. */
  autotune_tensor cache_leftpad; /* int32 [B] contiguous; optional, only with cache_seqlens
                                    and no block_table */
  /* Appended later (flash-attn 2's cache_batch_idx): a contiguous cache as a pool of
     B_cache slots, k and v [B_cache, Hkv, Scache, D] (any B_cache >= 1); sequence b reads
     (and appends to) slot cache_batch_idx[b], while cache_seqlens, cache_leftpad and the
     new rows stay indexed by b. Read, not checked: values are clamped into [0, B_cache).
     Refused with block_table, as flash-attn refuses it. */
  autotune_tensor cache_batch_idx; /* int32 [B] contiguous; optional, only with cache_seqlens
                                      and no block_table */
} autotune_attention_args;

int autotune_attention(autotune_runtime* rt, const autotune_attention_args* args, void* stream);
/* Bytes of workspace the variant args resolve to needs (0 unless it splits the keys). */
int autotune_attention_workspace_size(autotune_runtime* rt, const autotune_attention_args* args,
                                      uint64_t* bytes);
int autotune_attention_variant(autotune_runtime* rt, const autotune_attention_args* args,
                               char* buffer, uint64_t size);

/* selective_scan: the Mamba-1 selective scan forward. */
typedef struct autotune_selective_scan_args {
  autotune_tensor u;          /* [B, D, L] fp32/fp16/bf16, any batch/channel strides,
                                 contiguous last dimension */
  autotune_tensor delta;      /* [B, D, L], u's dtype */
  autotune_tensor A;          /* fp32 [D, N] contiguous, N <= 64 */
  autotune_tensor B;          /* fixed: fp32 [D, N] contiguous; variable: [B, G, N, L] or
                                 [B, N, L] (G = 1) in u's dtype, contiguous last dim */
  autotune_tensor C;          /* as B (both fixed or both variable) */
  autotune_tensor D;          /* fp32 [D]; optional */
  autotune_tensor z;          /* [B, D, L], u's dtype; optional (no gate) */
  autotune_tensor delta_bias; /* fp32 [D]; optional */
  autotune_tensor out;        /* [B, D, L], u's dtype */
  autotune_tensor last_state; /* fp32 [B, D, N] contiguous; optional output */
  int32_t delta_softplus;     /* 1: delta = softplus(delta + delta_bias) */
} autotune_selective_scan_args;

int autotune_selective_scan(autotune_runtime* rt, const autotune_selective_scan_args* args,
                            void* stream);
int autotune_selective_scan_variant(autotune_runtime* rt, const autotune_selective_scan_args* args,
                                    char* buffer, uint64_t size);

#ifdef __cplusplus
}
#endif

#endif
