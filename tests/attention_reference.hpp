// The float64 attention reference of the GPU tests (both kernel families), and the
// error measure they judge outputs by.
#pragma once

#include "gpu_support.hpp"

#include "runtime/ops/attention.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <vector>

namespace autotune::test {

// The attention op, as the GPU tests call it.
inline const AttentionOp& attn() {
  return static_cast<const AttentionOp&>(find_op("attention"));
}

// A host tensor's elements as doubles, in storage order.
inline std::vector<double> values(const HostTensor& t) {
  std::vector<double> out(t.n);
  for (size_t i = 0; i < t.n; ++i) {
    out[i] = t.get(i);
  }
  return out;
}

// Element strides of a [B, H, S, D] tensor (D contiguous).
struct Layout {
  long long batch, head, seq;
};

// A [B, H, S, D] tensor stored with layout `l`, in the logical (contiguous) order of a
// Reference's O.
inline std::vector<double> logical_order(const HostTensor& t, Layout l, int B, int H, int S,
                                         int D) {
  std::vector<double> out(size_t(B) * H * S * D);
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < H; ++h) {
      for (int i = 0; i < S; ++i) {
        for (int d = 0; d < D; ++d) {
          out[((size_t(b) * H + h) * S + i) * D + d] =
              t.get(size_t(b * l.batch + h * l.head + i * l.seq + d));
        }
      }
    }
  }
  return out;
}

// O (in the logical order [B, Hq, Sq, D]) and LSE [B, Hq, Sq].
struct Reference {
  std::vector<double> o, lse;
};

// flash-attn 2's features (runtime/ops/attention.hpp defines them): a sliding window
// (bounds -1: unbounded; causal makes the right one 0), softcap (0: off), ALiBi slopes
// (null: none) indexed [b * slope_batch_stride + h].
struct Features {
  int left = -1, right = -1;
  double softcap = 0;
  const std::vector<float>* slopes = nullptr;
  long long slope_batch_stride = 0;
};

// O and LSE in float64 from the stored inputs. Causal masks are bottom-right aligned
// (query i sees keys j <= i + Sk - Sq), and so is a window; a row that sees no key
// (causal: i < Sq - Sk) has O = 0, as flash-attn's tests define it, and LSE = -inf,
// the log of an empty sum (the op's documented value). The logit of query i and key
// j is scale * q.k, then softcap * tanh(logit / softcap), then minus
// slope * |i + Sk - Sq - j|.
inline Reference attention_reference(const HostTensor& q, const HostTensor& k, const HostTensor& v,
                                     Layout qs, Layout ks, Layout vs, int B, int Hq, int Hkv,
                                     int Sq, int Sk, int D, bool causal, double scale,
                                     const Features& f = {}) {
  Reference r;
  r.o.assign(size_t(B) * Hq * Sq * D, 0.0);
  r.lse.assign(size_t(B) * Hq * Sq, -std::numeric_limits<double>::infinity());
  std::vector<double> s(static_cast<size_t>(Sk));
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < Hq; ++h) {
      int hk = h / (Hq / Hkv);
      const double slope =
          f.slopes ? double((*f.slopes)[size_t(b * f.slope_batch_stride + h)]) : 0.0;
      for (int i = 0; i < Sq; ++i) {
        const int diag = i + Sk - Sq;
        const int right = causal ? 0 : f.right;
        const int last = right >= 0 ? std::min(Sk - 1, diag + right) : Sk - 1;
        const int first = f.left >= 0 ? std::max(0, diag - f.left) : 0;
        if (last < first) {
          continue;
        }
        double mx = -1e300;
        for (int j = first; j <= last; ++j) {
          double dot = 0;
          for (int d = 0; d < D; ++d) {
            dot += double(q.get(size_t(b * qs.batch + h * qs.head + i * qs.seq + d))) *
                   double(k.get(size_t(b * ks.batch + hk * ks.head + j * ks.seq + d)));
          }
          double x = dot * scale;
          if (f.softcap > 0) {
            x = f.softcap * std::tanh(x / f.softcap);
          }
          x -= slope * std::abs(double(diag - j));
          s[size_t(j)] = x;
          mx = std::max(mx, s[size_t(j)]);
        }
        double sum = 0;
        for (int j = first; j <= last; ++j) {
          s[size_t(j)] = std::exp(s[size_t(j)] - mx);
          sum += s[size_t(j)];
        }
        double* o = &r.o[((size_t(b) * Hq + h) * Sq + i) * D];
        for (int j = first; j <= last; ++j) {
          double p = s[size_t(j)] / sum;
          for (int d = 0; d < D; ++d) {
            o[d] += p * double(v.get(size_t(b * vs.batch + hk * vs.head + j * vs.seq + d)));
          }
        }
        r.lse[(size_t(b) * Hq + h) * Sq + i] = mx + std::log(sum);
      }
    }
  }
  return r;
}

// The features of batch b alone: its ALiBi slopes ([Hq] at b * stride) copied into
// `slopes` and read as [Hq]; the rest as given.
inline Features batch_features(const Features& f, int b, int Hq, std::vector<float>& slopes) {
  Features fb = f;
  if (f.slopes) {
    slopes.assign(f.slopes->begin() + b * f.slope_batch_stride,
                  f.slopes->begin() + b * f.slope_batch_stride + Hq);
    fb.slopes = &slopes;
    fb.slope_batch_stride = 0;
  }
  return fb;
}

// Variable-length batches (flash-attn's varlen): q [Tq, Hq, D], k and v [Tk, Hkv, D]
// packed and contiguous, sequence b's rows from cu_q[b] (keys from cu_k[b]); each
// sequence is its own problem (its own bottom-right corner). O is [Tq, Hq, D] and LSE
// [Hq, Tq], as the kernel stores them.
inline Reference attention_reference_varlen(const HostTensor& q, const HostTensor& k,
                                            const HostTensor& v, const std::vector<int>& cu_q,
                                            const std::vector<int>& cu_k, int Hq, int Hkv, int D,
                                            bool causal, double scale, const Features& f = {}) {
  const int B = int(cu_q.size()) - 1;
  const int Tq = cu_q.back();
  Reference r;
  r.o.assign(size_t(Tq) * Hq * D, 0.0);
  r.lse.assign(size_t(Hq) * Tq, -std::numeric_limits<double>::infinity());
  for (int b = 0; b < B; ++b) {
    const int lq = cu_q[size_t(b) + 1] - cu_q[size_t(b)];
    const int lk = cu_k[size_t(b) + 1] - cu_k[size_t(b)];
    if (lq == 0) {
      continue;
    }
    HostTensor qb(q.type, size_t(lq) * Hq * D), kb(k.type, size_t(lk) * Hkv * D),
        vb(v.type, size_t(lk) * Hkv * D);
    for (size_t i = 0; i < qb.n; ++i) {
      qb.set(i, q.get(size_t(cu_q[size_t(b)]) * Hq * D + i));
    }
    for (size_t i = 0; i < kb.n; ++i) {
      kb.set(i, k.get(size_t(cu_k[size_t(b)]) * Hkv * D + i));
      vb.set(i, v.get(size_t(cu_k[size_t(b)]) * Hkv * D + i));
    }
    std::vector<float> slopes;
    const Features fb = batch_features(f, b, Hq, slopes);
    const Reference one =
        attention_reference(qb, kb, vb, {0, D, Hq * D}, {0, D, Hkv * D}, {0, D, Hkv * D}, 1, Hq,
                            Hkv, lq, lk, D, causal, scale, fb);
    for (int h = 0; h < Hq; ++h) {
      for (int i = 0; i < lq; ++i) {
        const size_t row = size_t(cu_q[size_t(b)] + i);
        for (int d = 0; d < D; ++d) {
          r.o[(row * Hq + size_t(h)) * D + size_t(d)] = one.o[((size_t(h) * lq) + i) * D + d];
        }
        r.lse[size_t(h) * Tq + row] = one.lse[size_t(h) * lq + size_t(i)];
      }
    }
  }
  return r;
}

// A KV cache (flash-attn's flash_attn_with_kvcache): q [B, Sq, Hq, D] contiguous, the
// cache k/v rows of Hkv x D contiguous elements; sequence b's key j is cache row
// cache_row(b, j) for j < cached[b], then the rows of k_new / v_new [B, Snew, Hkv, D]
// (null: none). Each sequence is attended as a problem of Sq queries and cached[b] + Snew
// keys. O [B, Hq, Sq, D] in logical order, LSE [B, Hq, Sq].
inline Reference attention_reference_cache(const HostTensor& q, const HostTensor& k,
                                           const HostTensor& v, const HostTensor* k_new,
                                           const HostTensor* v_new, int snew,
                                           const std::vector<int>& cached,
                                           const std::function<size_t(int, int)>& cache_row, int Hq,
                                           int Hkv, int Sq, int D, bool causal, double scale,
                                           const Features& f) {
  const int B = int(cached.size());
  Reference r;
  r.o.assign(size_t(B) * Hq * Sq * D, 0.0);
  r.lse.assign(size_t(B) * Hq * Sq, -std::numeric_limits<double>::infinity());
  const size_t row = size_t(Hkv) * D;
  for (int b = 0; b < B; ++b) {
    const int in_cache = cached[size_t(b)];
    const int sk = in_cache + (k_new ? snew : 0);
    HostTensor qb(q.type, size_t(Sq) * Hq * D), kb(k.type, std::max<size_t>(1, size_t(sk) * row)),
        vb(v.type, std::max<size_t>(1, size_t(sk) * row));
    for (size_t i = 0; i < qb.n; ++i) {
      qb.set(i, q.get(size_t(b) * Sq * Hq * D + i));
    }
    for (int j = 0; j < sk; ++j) {
      const bool from_cache = j < in_cache;
      const size_t src =
          from_cache ? cache_row(b, j) * row : (size_t(b) * snew + size_t(j - in_cache)) * row;
      for (size_t e = 0; e < row; ++e) {
        kb.set(size_t(j) * row + e, (from_cache ? k : *k_new).get(src + e));
        vb.set(size_t(j) * row + e, (from_cache ? v : *v_new).get(src + e));
      }
    }
    std::vector<float> slopes;
    const Features fb = batch_features(f, b, Hq, slopes);
    const Reference one =
        attention_reference(qb, kb, vb, {0, D, Hq * D}, {0, D, Hkv * D}, {0, D, Hkv * D}, 1, Hq,
                            Hkv, Sq, sk, D, causal, scale, fb);
    std::copy(one.o.begin(), one.o.end(), r.o.begin() + ptrdiff_t(size_t(b) * Hq * Sq * D));
    std::copy(one.lse.begin(), one.lse.end(), r.lse.begin() + ptrdiff_t(size_t(b) * Hq * Sq));
  }
  return r;
}

// A paged cache [num_pages, page, Hkv, D]: sequence b's key j (j < len[b]) is row j % page
// of page table[b * pages_per_seq + j / page].
inline Reference attention_reference_paged(const HostTensor& q, const HostTensor& k,
                                           const HostTensor& v, const HostTensor* k_new,
                                           const HostTensor* v_new, int snew,
                                           const std::vector<int>& len,
                                           const std::vector<int>& table, int pages_per_seq,
                                           int page, int Hq, int Hkv, int Sq, int D, bool causal,
                                           double scale, const Features& f = {}) {
  return attention_reference_cache(
      q, k, v, k_new, v_new, snew, len,
      [&](int b, int j) {
        return size_t(table[size_t(b) * pages_per_seq + size_t(j / page)]) * page +
               size_t(j % page);
      },
      Hq, Hkv, Sq, D, causal, scale, f);
}

// ||out - ref|| / ||ref|| over the finite elements; an infinity must be matched exactly
// (a row that sees no key must say so: LSE -inf), and a NaN gives +inf.
inline double rel_err(const std::vector<double>& out, const std::vector<double>& ref) {
  double d2 = 0, r2 = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (std::isinf(ref[i]) || std::isinf(out[i])) {
      if (out[i] != ref[i]) {
        return INFINITY;
      }
      continue;
    }
    if (!std::isfinite(out[i])) {
      return INFINITY;
    }
    d2 += (out[i] - ref[i]) * (out[i] - ref[i]);
    r2 += ref[i] * ref[i];
  }
  return std::sqrt(d2 / (r2 > 0 ? r2 : 1));
}

} // namespace autotune::test
