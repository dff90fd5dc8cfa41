// Reference attention: one warp per query row, keys streamed in order with an
// online softmax in fp32 (accurate expf), the stored (rounded) 16-bit inputs read
// as they are. Written as fp32 in the output's own layout, LSE as [B, Hq, Sq].
// Deliberately simple: it shares no code with kernel.cuh (only the common types,
// conversions and -inf), so a bug there cannot hide in both. The causal mask is
// bottom-right aligned (query i sees keys j <= i + Sk - Sq); a row that sees no key
// (causal, Sq > Sk, i < Sq - Sk) gives O = 0 and LSE = -inf, the op's definition.
#include "common/numeric.cuh"

constexpr int k_ref_max_dim = 256;
constexpr int k_ref_warps = 8; // query rows per block

#define AT_DEFINE_ATTENTION_REF(T, NAME)                                                           \
  extern "C" __global__ void attention_ref_##NAME(                                                 \
      const T* q, const T* k, const T* v, float* o, float* lse, int batch, int heads_q,            \
      int heads_kv, int seq_q, int seq_k, int dim, int causal, float scale, long long qbs,         \
      long long qhs, long long qss, long long kbs, long long khs, long long kss, long long vbs,    \
      long long vhs, long long vss, long long obs, long long ohs, long long oss) {                 \
    const int lane = threadIdx.x % 32;                                                             \
    const int per = dim / 32;                                                                      \
    const long long rows = static_cast<long long>(batch) * heads_q * seq_q;                        \
    for (long long r = static_cast<long long>(blockIdx.x) * k_ref_warps + threadIdx.x / 32;        \
         r < rows; r += static_cast<long long>(gridDim.x) * k_ref_warps) {                         \
      const int i = static_cast<int>(r % seq_q);                                                   \
      const int h = static_cast<int>((r / seq_q) % heads_q);                                       \
      const int b = static_cast<int>(r / (static_cast<long long>(seq_q) * heads_q));               \
      const int hk = h / (heads_q / heads_kv);                                                     \
      float qv[k_ref_max_dim / 32];                                                                \
      float acc[k_ref_max_dim / 32];                                                               \
      for (int e = 0; e < per; ++e) {                                                              \
        qv[e] = at_to_float(q[b * qbs + h * qhs + i * qss + lane + 32 * e]);                       \
        acc[e] = 0.0f;                                                                             \
      }                                                                                            \
      int last = seq_k - 1;                                                                        \
      if (causal) {                                                                                \
        last = min(last, i + seq_k - seq_q);                                                       \
      }                                                                                            \
      float m = at_neg_inf();                                                                      \
      float l = 0.0f;                                                                              \
      for (int j = 0; j <= last; ++j) {                                                            \
        const T* kr = k + b * kbs + hk * khs + j * kss;                                            \
        float dot = 0.0f;                                                                          \
        for (int e = 0; e < per; ++e) {                                                            \
          dot = fmaf(qv[e], at_to_float(kr[lane + 32 * e]), dot);                                  \
        }                                                                                          \
        for (int s = 16; s > 0; s /= 2) {                                                          \
          dot += __shfl_xor_sync(0xffffffffu, dot, s);                                             \
        }                                                                                          \
        const float x = dot * scale;                                                               \
        const float m_new = fmaxf(m, x);                                                           \
        const float corr = m == at_neg_inf() ? 0.0f : expf(m - m_new);                             \
        const float p = expf(x - m_new);                                                           \
        l = l * corr + p;                                                                          \
        const T* vr = v + b * vbs + hk * vhs + j * vss;                                            \
        for (int e = 0; e < per; ++e) {                                                            \
          acc[e] = fmaf(p, at_to_float(vr[lane + 32 * e]), acc[e] * corr);                         \
        }                                                                                          \
        m = m_new;                                                                                 \
      }                                                                                            \
      for (int e = 0; e < per; ++e) {                                                              \
        o[b * obs + h * ohs + i * oss + lane + 32 * e] = l > 0.0f ? acc[e] / l : 0.0f;             \
      }                                                                                            \
      if (lse && lane == 0) {                                                                      \
        lse[r] = l > 0.0f ? m + logf(l) : at_neg_inf();                                            \
      }                                                                                            \
    }                                                                                              \
  }

AT_DEFINE_ATTENTION_REF(at_bf16, bf16)
AT_DEFINE_ATTENTION_REF(at_f16, f16)
