// Reference attention: one warp per query row, q and O in registers with the lanes over
// the columns, keys streamed in order 32 at a time with an online softmax in fp32
// (accurate expf), the stored (rounded) 16-bit inputs read as they are. Each lane first
// sums its columns' share of all 32 dot products; one exchange over halves of the warp
// (31 shuffles) then leaves lane u with key u's full dot product, so masking, softcap,
// ALiBi and exp run once per key, on its lane; P V walks the 32 keys with the weight
// broadcast from its lane. Written as fp32 in the output's own layout, LSE as
// [B, Hq, Sq].
// Deliberately simple: it shares no code with kernel.cuh (only the common types,
// conversions and -inf), so a bug there cannot hide in both. The causal mask is
// bottom-right aligned (query i sees keys j <= i + Sk - Sq); a window keeps keys
// i + Sk - Sq - left <= j <= i + Sk - Sq + right (-1: unbounded; causal: right 0); a
// row that sees no key gives O = 0 and LSE = -inf, the op's definition. softcap > 0
// turns the logit x into softcap * tanh(x / softcap); alibi (slopes non-null) then
// subtracts slope * |i + Sk - Sq - j|. Any head dim up to 256: a lane holds PER = 2, 4
// or 8 columns, the fewest that cover it (lanes past it idle).
// Variable-length batches (cu_q non-null): sequence b's rows start at packed row
// cu_q[b] (keys at cu_k[b]), its lengths replace Sq and Sk (seq_q, seq_k are the
// longest; rows past a sequence's length are skipped), the batch strides are unused
// and LSE is [Hq, Tq] with head stride lse_hs.
// A KV cache (cache_len non-null): sequence b's keys are its first cache_len[b] cache
// rows (its length replaces Sk); with a block table (table non-null, row stride
// table_stride), key j is row j % page of page table[b][j / page] (the batch strides
// step pages), else row j of sequence b's own cache. Variable-length batches may read
// pages too (table non-null, cache_len null): sequence b's cu_k[b + 1] - cu_k[b] keys.
#include "common/numeric.cuh"

constexpr int k_ref_warps = 8;     // query rows per block
constexpr int k_ref_keys = 32;     // keys a warp handles at once: one per lane
constexpr int k_ref_wide_keys = 4; // rows with more than 4 columns a lane: keys at once

template <typename T> struct AtRefArgs {
  const T* q;
  const T* k;
  const T* v;
  float* o;
  float* lse;
  int batch, heads_q, heads_kv, seq_q, seq_k, dim, causal;
  float scale;
  long long qbs, qhs, qss, kbs, khs, kss, vbs, vhs, vss, obs, ohs, oss;
  int left, right;
  float softcap;
  const float* slopes;
  long long slope_bs;
  const int* cu_q;
  const int* cu_k;
  long long lse_hs;
  const int* cache_len;
  const int* table;
  long long table_stride;
  int page;
};

// The lane's columns' share of q . row (lanes over the columns, PER a lane).
template <typename T, int PER>
__device__ __forceinline__ float at_ref_dot(const float (&qv)[PER], const T* row, int lane,
                                            int dim) {
  float x = 0.0f;
#pragma unroll
  for (int e = 0; e < PER; ++e) {
    const int c = lane + 32 * e;
    if (c < dim) {
      x = fmaf(qv[e], at_to_float(row[c]), x);
    }
  }
  return x;
}

// acc += w * row over the lane's columns.
template <typename T, int PER>
__device__ __forceinline__ void at_ref_axpy(float (&acc)[PER], float w, const T* row, int lane,
                                            int dim) {
#pragma unroll
  for (int e = 0; e < PER; ++e) {
    const int c = lane + 32 * e;
    if (c < dim) {
      acc[e] = fmaf(w, at_to_float(row[c]), acc[e]);
    }
  }
}

// Query row r (b, h, i) of the problem, by one warp; lane holds columns lane + 32 e.
template <typename T, int PER>
__device__ __forceinline__ void at_ref_row(const AtRefArgs<T>& a, long long r, int lane) {
  const int i = static_cast<int>(r % a.seq_q);
  const int h = static_cast<int>((r / a.seq_q) % a.heads_q);
  const int b = static_cast<int>(r / (static_cast<long long>(a.seq_q) * a.heads_q));
  const int hk = h / (a.heads_q / a.heads_kv);
  long long q0 = static_cast<long long>(b) * a.qbs, k0 = static_cast<long long>(b) * a.kbs;
  long long v0 = static_cast<long long>(b) * a.vbs, o0 = static_cast<long long>(b) * a.obs;
  int sq = a.seq_q, sk = a.seq_k;
  if (a.cu_q) {
    sq = a.cu_q[b + 1] - a.cu_q[b];
    sk = a.cu_k[b + 1] - a.cu_k[b];
    if (i >= sq) {
      return;
    }
    q0 = a.cu_q[b] * a.qss;
    o0 = a.cu_q[b] * a.oss;
    k0 = a.cu_k[b] * a.kss;
    v0 = a.cu_k[b] * a.vss;
  }
  if (a.cache_len) {
    sk = a.cache_len[b];
  }
  // Element offset of key row j of sequence b (head 0): through the block table when
  // there is one.
  auto key_row = [&](int j, long long base, long long seq_stride, long long batch_stride) {
    if (a.table) {
      const long long pg = a.table[b * a.table_stride + j / a.page];
      return pg * batch_stride + (j % a.page) * seq_stride;
    }
    return base + j * seq_stride;
  };
  float qv[PER];
  float acc[PER];
#pragma unroll
  for (int e = 0; e < PER; ++e) {
    const int c = lane + 32 * e;
    qv[e] = c < a.dim ? at_to_float(a.q[q0 + h * a.qhs + i * a.qss + c]) : 0.0f;
    acc[e] = 0.0f;
  }
  const int diag = i + sk - sq;
  int first = 0;
  int last = sk - 1;
  const int row_right = a.causal ? 0 : a.right;
  if (row_right >= 0) {
    last = min(last, diag + row_right);
  }
  if (a.left >= 0) {
    first = max(first, diag - a.left);
  }
  const float slope = a.slopes ? a.slopes[b * a.slope_bs + h] : 0.0f;
  // The logit of key j from its dot product x: scaled, softcapped, ALiBi's bias added.
  auto logit = [&](float x, int j) {
    x *= a.scale;
    if (a.softcap > 0.0f) {
      x = a.softcap * tanhf(x / a.softcap);
    }
    return x - slope * fabsf(static_cast<float>(diag - j));
  };
  float m = at_neg_inf(); // the running maximum, the same in every lane
  float l = 0.0f;         // the softmax sum (up to 4 columns a lane: this lane's keys' share)
  if (PER <= 4) {
    for (int j0 = first; j0 <= last; j0 += k_ref_keys) {
      // x[u]: this lane's columns' share of key j0 + u's dot product (keys past the last
      // read the last one's row and are weighed 0 below).
      float x[k_ref_keys];
#pragma unroll
      for (int u = 0; u < k_ref_keys; ++u) {
        const T* kr = a.k + key_row(min(j0 + u, last), k0, a.kss, a.kbs) + hk * a.khs;
        x[u] = at_ref_dot<T, PER>(qv, kr, lane, a.dim);
      }
      // Halving exchange: at width w a lane keeps the half of its w partial sums its bit
      // w selects and adds its partner's share of them, so x[0] ends as the whole dot
      // product of key j0 + lane.
#pragma unroll
      for (int w = k_ref_keys / 2; w >= 1; w /= 2) {
        const bool upper = (lane & w) != 0;
#pragma unroll
        for (int u = 0; u < k_ref_keys / 2; ++u) {
          if (u < w) {
            const float send = upper ? x[u] : x[u + w];
            const float keep = upper ? x[u + w] : x[u];
            x[u] = keep + __shfl_xor_sync(0xffffffffu, send, w);
          }
        }
      }
      const int j = j0 + lane;
      const float s = logit(x[0], j);
      float m_new = j <= last ? s : at_neg_inf();
      for (int o = 16; o > 0; o /= 2) {
        m_new = fmaxf(m_new, __shfl_xor_sync(0xffffffffu, m_new, o));
      }
      m_new = fmaxf(m_new, m);
      const float corr = m == at_neg_inf() ? 0.0f : expf(m - m_new);
      const float p = j <= last ? expf(s - m_new) : 0.0f;
      l = l * corr + p;
#pragma unroll
      for (int e = 0; e < PER; ++e) {
        acc[e] *= corr;
      }
      // Unrolled by 8, so that many rows' loads are in flight together (fully: 4x the
      // compile time); keys past the last reread its row with weight 0.
#pragma unroll 8
      for (int u = 0; u < k_ref_keys; ++u) {
        const float pu = __shfl_sync(0xffffffffu, p, u);
        const T* vr = a.v + key_row(min(j0 + u, last), v0, a.vss, a.vbs) + hk * a.vhs;
        at_ref_axpy<T, PER>(acc, pu, vr, lane, a.dim);
      }
      m = m_new;
    }
    for (int o = 16; o > 0; o /= 2) {
      l += __shfl_xor_sync(0xffffffffu, l, o);
    }
  } else {
    // Wide rows (more than 4 columns a lane, where 32 keys' partial sums would not fit
    // beside them): k_ref_wide_keys keys at a time, each dot product summed over the
    // warp (independent sums, so they overlap), then one max, one rescale and their
    // share of O; m and l are the same in every lane.
    for (int j0 = first; j0 <= last; j0 += k_ref_wide_keys) {
      float x[k_ref_wide_keys];
#pragma unroll
      for (int u = 0; u < k_ref_wide_keys; ++u) {
        const int j = min(j0 + u, last); // past the last: a copy, weighed 0 below
        const T* kr = a.k + key_row(j, k0, a.kss, a.kbs) + hk * a.khs;
        x[u] = at_ref_dot<T, PER>(qv, kr, lane, a.dim);
      }
      for (int s = 16; s > 0; s /= 2) {
#pragma unroll
        for (int u = 0; u < k_ref_wide_keys; ++u) {
          x[u] += __shfl_xor_sync(0xffffffffu, x[u], s);
        }
      }
      float m_new = m;
#pragma unroll
      for (int u = 0; u < k_ref_wide_keys; ++u) {
        x[u] = logit(x[u], j0 + u);
        if (j0 + u <= last) {
          m_new = fmaxf(m_new, x[u]);
        }
      }
      const float corr = m == at_neg_inf() ? 0.0f : expf(m - m_new);
      l *= corr;
#pragma unroll
      for (int e = 0; e < PER; ++e) {
        acc[e] *= corr;
      }
#pragma unroll
      for (int u = 0; u < k_ref_wide_keys; ++u) {
        const float p = j0 + u <= last ? expf(x[u] - m_new) : 0.0f;
        l += p;
        const T* vr = a.v + key_row(min(j0 + u, last), v0, a.vss, a.vbs) + hk * a.vhs;
        at_ref_axpy<T, PER>(acc, p, vr, lane, a.dim);
      }
      m = m_new;
    }
  }
#pragma unroll
  for (int e = 0; e < PER; ++e) {
    if (lane + 32 * e < a.dim) {
      a.o[o0 + h * a.ohs + i * a.oss + lane + 32 * e] = l > 0.0f ? acc[e] / l : 0.0f;
    }
  }
  if (a.lse && lane == 0) {
    a.lse[a.cu_q ? h * a.lse_hs + a.cu_q[b] + i : r] = l > 0.0f ? m + logf(l) : at_neg_inf();
  }
}

template <typename T> __device__ __forceinline__ void at_ref_rows(const AtRefArgs<T>& a) {
  const int lane = threadIdx.x % 32;
  const long long rows = static_cast<long long>(a.batch) * a.heads_q * a.seq_q;
  for (long long r = static_cast<long long>(blockIdx.x) * k_ref_warps + threadIdx.x / 32; r < rows;
       r += static_cast<long long>(gridDim.x) * k_ref_warps) {
    if (a.dim <= 64) {
      at_ref_row<T, 2>(a, r, lane);
    } else if (a.dim <= 128) {
      at_ref_row<T, 4>(a, r, lane);
    } else {
      at_ref_row<T, 8>(a, r, lane);
    }
  }
}

#define AT_DEFINE_ATTENTION_REF(T, NAME)                                                           \
  extern "C" __global__ void attention_ref_##NAME(                                                 \
      const T* q, const T* k, const T* v, float* o, float* lse, int batch, int heads_q,            \
      int heads_kv, int seq_q, int seq_k, int dim, int causal, float scale, long long qbs,         \
      long long qhs, long long qss, long long kbs, long long khs, long long kss, long long vbs,    \
      long long vhs, long long vss, long long obs, long long ohs, long long oss, int left,         \
      int right, float softcap, const float* slopes, long long slope_bs, const int* cu_q,          \
      const int* cu_k, long long lse_hs, const int* cache_len, const int* table,                   \
      long long table_stride, int page) {                                                          \
    at_ref_rows<T>({q,       k,        v,      o,         lse,    batch,                           \
                    heads_q, heads_kv, seq_q,  seq_k,     dim,    causal,                          \
                    scale,   qbs,      qhs,    qss,       kbs,    khs,                             \
                    kss,     vbs,      vhs,    vss,       obs,    ohs,                             \
                    oss,     left,     right,  softcap,   slopes, slope_bs,                        \
                    cu_q,    cu_k,     lse_hs, cache_len, table,  table_stride,                    \
                    page});                                                                        \
  }

AT_DEFINE_ATTENTION_REF(at_bf16, bf16)
AT_DEFINE_ATTENTION_REF(at_f16, f16)
