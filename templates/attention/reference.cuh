// Reference attention: one warp per query row (lanes over the columns, q and O in
// registers), keys streamed in order, k_ref_keys at a time, with an online softmax in
// fp32 (accurate expf), the stored (rounded) 16-bit inputs read as they are. Written as
// fp32 in the output's own layout, LSE as [B, Hq, Sq].
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
constexpr int k_ref_keys = 4;  // keys a warp handles at once (independent dot products)

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
      float qv[k_ref_max_dim / 32];                                                                \
      float acc[k_ref_max_dim / 32];                                                               \
      /* Unrolled over the most columns a lane holds, so q and O stay in registers. */             \
      _Pragma("unroll") for (int e = 0; e < k_ref_max_dim / 32; ++e) {                             \
        const int c = lane + 32 * e;                                                               \
        qv[e] = e < per && c < dim ? at_to_float(q[q0 + h * qhs + i * qss + c]) : 0.0f;            \
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
      /* k_ref_keys keys at a time: their dot products and warp sums are independent, so */        \
      /* they overlap; then one max, one rescale, and their share of O. */                         \
      for (int j0 = first; j0 <= last; j0 += k_ref_keys) {                                         \
        float x[k_ref_keys];                                                                       \
        _Pragma("unroll") for (int u = 0; u < k_ref_keys; ++u) {                                   \
          x[u] = 0.0f;                                                                             \
          const int j = min(j0 + u, last); /* past the last: a copy, weighed 0 below */            \
          const T* kr = k + key_row(j, k0, kss, kbs) + hk * khs;                                   \
          _Pragma("unroll") for (int e = 0; e < k_ref_max_dim / 32; ++e) {                         \
            const int c = lane + 32 * e;                                                           \
            if (e < per && c < dim) {                                                              \
              x[u] = fmaf(qv[e], at_to_float(kr[c]), x[u]);                                        \
            }                                                                                      \
          }                                                                                        \
        }                                                                                          \
        for (int s = 16; s > 0; s /= 2) {                                                          \
          _Pragma("unroll") for (int u = 0; u < k_ref_keys; ++u) {                                 \
            x[u] += __shfl_xor_sync(0xffffffffu, x[u], s);                                         \
          }                                                                                        \
        }                                                                                          \
        float m_new = m;                                                                           \
        _Pragma("unroll") for (int u = 0; u < k_ref_keys; ++u) {                                   \
          x[u] *= scale;                                                                           \
          if (softcap > 0.0f) {                                                                    \
            x[u] = softcap * tanhf(x[u] / softcap);                                                \
          }                                                                                        \
          x[u] -= slope * fabsf(static_cast<float>(diag - (j0 + u)));                              \
          if (j0 + u <= last) {                                                                    \
            m_new = fmaxf(m_new, x[u]);                                                            \
          }                                                                                        \
        }                                                                                          \
        const float corr = m == at_neg_inf() ? 0.0f : expf(m - m_new);                             \
        l *= corr;                                                                                 \
        _Pragma("unroll") for (int e = 0; e < k_ref_max_dim / 32; ++e) {                           \
          acc[e] *= corr;                                                                          \
        }                                                                                          \
        _Pragma("unroll") for (int u = 0; u < k_ref_keys; ++u) {                                   \
          const float p = j0 + u <= last ? expf(x[u] - m_new) : 0.0f;                              \
          l += p;                                                                                  \
          const T* vr = v + key_row(min(j0 + u, last), v0, vss, vbs) + hk * vhs;                   \
          _Pragma("unroll") for (int e = 0; e < k_ref_max_dim / 32; ++e) {                         \
            const int c = lane + 32 * e;                                                           \
            if (e < per && c < dim) {                                                              \
              acc[e] = fmaf(p, at_to_float(vr[c]), acc[e]);                                        \
            }                                                                                      \
          }                                                                                        \
        }                                                                                          \
        m = m_new;                                                                                 \
      }                                                                                            \
      _Pragma("unroll") for (int e = 0; e < k_ref_max_dim / 32; ++e) {                             \
        if (e < per && lane + 32 * e < dim) {                                                      \
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
