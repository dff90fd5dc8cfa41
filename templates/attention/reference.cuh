// Reference attention: one warp per query row (its O columns in registers, lanes over
// them), keys streamed in order in chunks of 32 (one key per lane for the logits, then
// lanes over the columns for O += p V), online softmax in fp32 (accurate expf), the
// stored (rounded) 16-bit inputs read as they are. Written as fp32 in the output's own
// layout, LSE as [B, Hq, Sq].
// Deliberately simple: it shares no code with kernel.cuh (only the common types,
// conversions and -inf), so a bug there cannot hide in both. The causal mask is
// bottom-right aligned (query i sees keys j <= i + Sk - Sq); a window keeps keys
// i + Sk - Sq - left <= j <= i + Sk - Sq + right (-1: unbounded; causal: right 0); a
// row that sees no key gives O = 0 and LSE = -inf, the op's definition. softcap > 0
// turns the logit x into softcap * tanh(x / softcap); alibi (slopes non-null) then
// subtracts slope * |i + Sk - Sq - j|. Any head dim up to 256 (lanes past it idle).
// Variable-length batches (cu_q non-null): sequence b's rows start at packed row
// cu_q[b] (keys at cu_k[b]), its lengths replace Sq and Sk (seq_q, seq_k are the
// longest; rows past a sequence's length are skipped), the batch strides are unused
// and LSE is [Hq, Tq] with head stride lse_hs.
// A KV cache (cache_len non-null): sequence b's keys are its first cache_len[b] cache
// rows (its length replaces Sk); with a block table (table non-null, row stride
// table_stride), key j is row j % page of page table[b][j / page] (the batch strides
// step pages), else row j of sequence b's own cache.
#include "common/numeric.cuh"

constexpr int k_ref_max_dim = 256;
constexpr int k_ref_warps = 8; // query rows per block

#define AT_DEFINE_ATTENTION_REF(T, NAME)                                                           \
  extern "C" __global__ void attention_ref_##NAME(                                                 \
      const T* q, const T* k, const T* v, float* o, float* lse, int batch, int heads_q,            \
      int heads_kv, int seq_q, int seq_k, int dim, int causal, float scale, long long qbs,         \
      long long qhs, long long qss, long long kbs, long long khs, long long kss, long long vbs,    \
      long long vhs, long long vss, long long obs, long long ohs, long long oss, int left,         \
      int right, float softcap, const float* slopes, long long slope_bs, const int* cu_q,          \
      const int* cu_k, long long lse_hs, const int* cache_len, const int* table,                   \
      long long table_stride, int page) {                                                          \
    const int lane = threadIdx.x % 32;                                                             \
    const int warp = threadIdx.x / 32;                                                             \
    __shared__ float q_sh[k_ref_warps][k_ref_max_dim];                                             \
    const int per = (dim + 31) / 32;                                                               \
    const long long rows = static_cast<long long>(batch) * heads_q * seq_q;                        \
    for (long long r = static_cast<long long>(blockIdx.x) * k_ref_warps + threadIdx.x / 32;        \
         r < rows; r += static_cast<long long>(gridDim.x) * k_ref_warps) {                         \
      const int i = static_cast<int>(r % seq_q);                                                   \
      const int h = static_cast<int>((r / seq_q) % heads_q);                                       \
      const int b = static_cast<int>(r / (static_cast<long long>(seq_q) * heads_q));               \
      const int hk = h / (heads_q / heads_kv);                                                     \
      long long q0 = static_cast<long long>(b) * qbs, k0 = static_cast<long long>(b) * kbs;        \
      long long v0 = static_cast<long long>(b) * vbs, o0 = static_cast<long long>(b) * obs;        \
      int sq = seq_q, sk = seq_k;                                                                  \
      if (cu_q) {                                                                                  \
        sq = cu_q[b + 1] - cu_q[b];                                                                \
        sk = cu_k[b + 1] - cu_k[b];                                                                \
        if (i >= sq) {                                                                             \
          continue;                                                                                \
        }                                                                                          \
        q0 = cu_q[b] * qss;                                                                        \
        o0 = cu_q[b] * oss;                                                                        \
        k0 = cu_k[b] * kss;                                                                        \
        v0 = cu_k[b] * vss;                                                                        \
      }                                                                                            \
      if (cache_len) {                                                                             \
        sk = cache_len[b];                                                                         \
      }                                                                                            \
      /* Element offset of key row j of sequence b (head 0): through the block table when */       \
      /* there is one. */                                                                          \
      auto key_row = [&](int j, long long base, long long seq_stride, long long batch_stride) {    \
        if (table) {                                                                               \
          const long long pg = table[b * table_stride + j / page];                                 \
          return pg * batch_stride + (j % page) * seq_stride;                                      \
        }                                                                                          \
        return base + j * seq_stride;                                                              \
      };                                                                                           \
      /* The row's q in shared memory: each lane reads all of it for its own key. */               \
      __syncwarp();                                                                                \
      for (int c = lane; c < dim; c += 32) {                                                       \
        q_sh[warp][c] = at_to_float(q[q0 + h * qhs + i * qss + c]);                                \
      }                                                                                            \
      __syncwarp();                                                                                \
      float acc[k_ref_max_dim / 32];                                                               \
      _Pragma("unroll") for (int e = 0; e < k_ref_max_dim / 32; ++e) if (e < per) {                \
        acc[e] = 0.0f;                                                                             \
      }                                                                                            \
      const int diag = i + sk - sq;                                                                \
      int first = 0;                                                                               \
      int last = sk - 1;                                                                           \
      const int row_right = causal ? 0 : right;                                                    \
      if (row_right >= 0) {                                                                        \
        last = min(last, diag + row_right);                                                        \
      }                                                                                            \
      if (left >= 0) {                                                                             \
        first = max(first, diag - left);                                                           \
      }                                                                                            \
      const float slope = slopes ? slopes[b * slope_bs + h] : 0.0f;                                \
      float m = at_neg_inf();                                                                      \
      float l = 0.0f;                                                                              \
      /* Keys in chunks of 32, one per lane: its logit, then the chunk's max and sum over */       \
      /* the warp, then O += p_j v_j for each key of the chunk (lanes over the columns). */        \
      for (int j0 = first; j0 <= last; j0 += 32) {                                                 \
        const int j = j0 + lane;                                                                   \
        float x = at_neg_inf();                                                                    \
        if (j <= last) {                                                                           \
          const T* kr = k + key_row(j, k0, kss, kbs) + hk * khs;                                   \
          float dot = 0.0f;                                                                        \
          for (int c = 0; c < dim; ++c) {                                                          \
            dot = fmaf(q_sh[warp][c], at_to_float(kr[c]), dot);                                    \
          }                                                                                        \
          x = dot * scale;                                                                         \
          if (softcap > 0.0f) {                                                                    \
            x = softcap * tanhf(x / softcap);                                                      \
          }                                                                                        \
          x -= slope * fabsf(static_cast<float>(diag - j));                                        \
        }                                                                                          \
        float chunk_max = x;                                                                       \
        for (int s = 16; s > 0; s /= 2) {                                                          \
          chunk_max = fmaxf(chunk_max, __shfl_xor_sync(0xffffffffu, chunk_max, s));                \
        }                                                                                          \
        /* Lane 0's key is always in range: chunk_max and m_new are finite. */                     \
        const float m_new = fmaxf(m, chunk_max);                                                   \
        const float corr = m == at_neg_inf() ? 0.0f : expf(m - m_new);                             \
        const float p = j <= last ? expf(x - m_new) : 0.0f;                                        \
        float p_sum = p;                                                                           \
        for (int s = 16; s > 0; s /= 2) {                                                          \
          p_sum += __shfl_xor_sync(0xffffffffu, p_sum, s);                                         \
        }                                                                                          \
        l = l * corr + p_sum;                                                                      \
        _Pragma("unroll") for (int e = 0; e < k_ref_max_dim / 32; ++e) if (e < per) {              \
          acc[e] *= corr;                                                                          \
        }                                                                                          \
        const int n = min(32, last - j0 + 1);                                                      \
        for (int jj = 0; jj < n; ++jj) {                                                           \
          const float pj = __shfl_sync(0xffffffffu, p, jj);                                        \
          const T* vr = v + key_row(j0 + jj, v0, vss, vbs) + hk * vhs;                             \
          _Pragma("unroll") for (int e = 0; e < k_ref_max_dim / 32; ++e) if (e < per) {            \
            const int c = lane + 32 * e;                                                           \
            acc[e] = fmaf(pj, c < dim ? at_to_float(vr[c]) : 0.0f, acc[e]);                        \
          }                                                                                        \
        }                                                                                          \
        m = m_new;                                                                                 \
      }                                                                                            \
      _Pragma("unroll") for (int e = 0; e < k_ref_max_dim / 32; ++e) if (e < per) {                \
        if (lane + 32 * e < dim) {                                                                 \
          o[o0 + h * ohs + i * oss + lane + 32 * e] = l > 0.0f ? acc[e] / l : 0.0f;                \
        }                                                                                          \
      }                                                                                            \
      if (lse && lane == 0) {                                                                      \
        lse[cu_q ? h * lse_hs + cu_q[b] + i : r] = l > 0.0f ? m + logf(l) : at_neg_inf();          \
      }                                                                                            \
    }                                                                                              \
  }

AT_DEFINE_ATTENTION_REF(at_bf16, bf16)
AT_DEFINE_ATTENTION_REF(at_f16, f16)
