// Self-contained numeric helpers for autotune's templates. NVRTC finds no headers
// by itself and a deployment machine may only have the driver and libnvrtc, so the
// templates include nothing from the toolkit: the 16-bit types, their conversions,
// vector accesses and the special-function-unit math the kernels use are defined
// here (sm_80 and newer). Every inline PTX instruction of the templates' numerics is
// behind one named function in this file; helpers that compute differently (a
// division against an approximate reciprocal, ex2 against a polynomial) have
// different names and say which trade-off they make.
#pragma once

struct __align__(2) at_bf16 {
  unsigned short bits;
};
struct __align__(2) at_f16 {
  unsigned short bits;
};

__device__ __forceinline__ float at_to_float(float x) {
  return x;
}
__device__ __forceinline__ float at_to_float(at_bf16 x) {
  return __uint_as_float(static_cast<unsigned>(x.bits) << 16);
}
__device__ __forceinline__ float at_to_float(at_f16 x) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(x.bits));
  return f;
}

template <typename T> __device__ __forceinline__ T at_from_float(float x);
template <> __device__ __forceinline__ float at_from_float<float>(float x) {
  return x;
}
template <> __device__ __forceinline__ at_bf16 at_from_float<at_bf16>(float x) {
  at_bf16 r;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(r.bits) : "f"(x));
  return r;
}
template <> __device__ __forceinline__ at_f16 at_from_float<at_f16>(float x) {
  at_f16 r;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(r.bits) : "f"(x));
  return r;
}

// Two floats rounded to a packed pair of 16-bit values, lo in the low half (the
// register layout of an mma.sync A operand).
__device__ __forceinline__ unsigned at_pack2(float lo, float hi, at_bf16) {
  unsigned r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
__device__ __forceinline__ unsigned at_pack2(float lo, float hi, at_f16) {
  unsigned r;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

// A packed pair of 16-bit values as two floats, lo from the low half. A bf16 is the
// top half of an fp32: the low one shifted up, the high one masked (one instruction
// each, where extracting the high half first would take two).
__device__ __forceinline__ void at_unpack2(unsigned w, float& lo, float& hi, at_bf16) {
  lo = __uint_as_float(w << 16);
  hi = __uint_as_float(w & 0xffff0000u);
}
__device__ __forceinline__ void at_unpack2(unsigned w, float& lo, float& hi, at_f16) {
  asm("{\n\t.reg .b16 lo, hi;\n\tmov.b32 {lo, hi}, %2;\n\tcvt.f32.f16 %0, lo;\n\t"
      "cvt.f32.f16 %1, hi;\n\t}"
      : "=f"(lo), "=f"(hi)
      : "r"(w));
}

// -infinity (NVRTC has no INFINITY without the toolkit headers).
__device__ __forceinline__ float at_neg_inf() {
  return __uint_as_float(0xff800000u);
}

// Special-function-unit approximations: one MUFU instruction each, issued at an
// eighth of the FMA rate on sm_80..sm_90 (16 per clock per SM). The .ftz forms
// flush subnormal inputs and results to zero.

// 2^x (ex2.approx.ftz).
__device__ __forceinline__ float at_exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
// log2(x) (lg2.approx.ftz).
__device__ __forceinline__ float at_log2_approx(float x) {
  float y;
  asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
// 1/x (rcp.approx.ftz), where an IEEE division is an instruction sequence with a
// slow path.
__device__ __forceinline__ float at_rcp_approx(float x) {
  float y;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
// tanh(x) (tanh.approx, no ftz form: about 2^-11 relative error).
__device__ __forceinline__ float at_tanh_approx(float x) {
  float y;
  asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// e^x as 2^(x log2 e): one multiply and one ex2.approx.
__device__ __forceinline__ float at_exp(float x) {
  return at_exp2_approx(x * 1.4426950408889634f);
}

// 2^x on the FMA pipes instead of the SFU (for kernels where the SFU is the floor):
// Cody-Waite split x = k + f (|f| <= 1/2, k by the 1.5*2^23 rounding trick), a
// degree-5 polynomial for 2^f (relative error 1.1e-7, fitted to relative error on
// Chebyshev nodes), and k added to the exponent field. The clamp keeps
// k + exponent(2^f) a normal exponent; 2^-125 stands in for smaller results.
__device__ __forceinline__ float at_exp2_poly(float x) {
  x = fminf(fmaxf(x, -125.0f), 127.0f);
  const float k_round = 12582912.0f; // 1.5 * 2^23: float addition rounds to an integer
  float r = x + k_round;
  unsigned k = __float_as_uint(r); // low bits hold k (bias bits vanish in the shift below)
  float f = x - (r - k_round);
  float p = 1.321867247e-3f;
  p = fmaf(p, f, 9.671697938e-3f);
  p = fmaf(p, f, 5.550892952e-2f);
  p = fmaf(p, f, 2.402223800e-1f);
  p = fmaf(p, f, 6.931468559e-1f);
  p = fmaf(p, f, 1.0f);
  return __uint_as_float(__float_as_uint(p) + (k << 23));
}

// silu(x) = x * sigmoid(x), two ways (an IEEE division, x / (1 + e^-x), costs a
// branch to its slow path and about ten instructions per element):
//   at_silu_rcp   x * rcp.approx(1 + e^-x): two SFU instructions and no division,
//                 about 2^-21 relative error (fp32 results too).
//   at_silu_tanh  h * (1 + tanh.approx(h)) with h = x/2 (sigmoid(x) = (1 + tanh(x/2))
//                 / 2): one SFU instruction and one FMA, about 2^-11 relative error:
//                 under half an ulp of a 16-bit result.
__device__ __forceinline__ float at_silu_rcp(float x) {
  return x * at_rcp_approx(1.0f + at_exp(-x));
}
__device__ __forceinline__ float at_silu_tanh(float x) {
  const float h = 0.5f * x;
  return fmaf(h, at_tanh_approx(h), h);
}

// One element from global memory where `in`, else zero: a predicated load, no branch,
// and (volatile asm) issued where it stands. selective_scan issues the next chunk's
// elements before a chunk's scan (as plain loads the compiler moved them next to their
// use after it, which left their latency in front of every chunk's barrier);
// causal_conv1d reads the elements of vectors that straddle a row's ends (as plain
// loads behind their bounds checks, each was a branch of its own).
__device__ __forceinline__ unsigned short at_load_or_zero_u16(const void* p, bool in) {
  unsigned short v;
  asm volatile("{\n\t.reg .pred q;\n\tsetp.ne.b32 q, %2, 0;\n\tmov.u16 %0, 0;\n\t"
               "@q ld.global.u16 %0, [%1];\n\t}"
               : "=h"(v)
               : "l"(p), "r"(int(in)));
  return v;
}
__device__ __forceinline__ at_bf16 at_load_or_zero(const at_bf16* p, bool in) {
  return at_bf16{at_load_or_zero_u16(p, in)};
}
__device__ __forceinline__ at_f16 at_load_or_zero(const at_f16* p, bool in) {
  return at_f16{at_load_or_zero_u16(p, in)};
}
__device__ __forceinline__ float at_load_or_zero(const float* p, bool in) {
  float v;
  asm volatile("{\n\t.reg .pred q;\n\tsetp.ne.b32 q, %2, 0;\n\tmov.f32 %0, 0f00000000;\n\t"
               "@q ld.global.f32 %0, [%1];\n\t}"
               : "=f"(v)
               : "l"(p), "r"(int(in)));
  return v;
}

// A register array of N elements of T, loaded and stored with the widest accesses
// that fit (16-byte vectors, then 8, 4, 2): ld.global.v4 when N*sizeof(T) is a multiple
// of 16. The caller guarantees alignment to the word (at_vec::k_word bytes).
template <int BYTES> struct at_word;
template <> struct at_word<16> { typedef uint4 type; };
template <> struct at_word<8> { typedef uint2 type; };
template <> struct at_word<4> { typedef unsigned type; };
template <> struct at_word<2> { typedef unsigned short type; };

template <typename T> struct at_is_bf16 { static constexpr bool value = false; };
template <> struct at_is_bf16<at_bf16> { static constexpr bool value = true; };

template <typename T, int N> struct at_vec {
  static constexpr int k_bytes = N * static_cast<int>(sizeof(T));
  // The widest word that divides the array (16 bytes for every power of two from 16 on).
  static constexpr int k_word = k_bytes % 16 == 0  ? 16
                                : k_bytes % 8 == 0 ? 8
                                : k_bytes % 4 == 0 ? 4
                                                   : 2;
  static constexpr int k_words = k_bytes / k_word;
  typedef typename at_word<k_word>::type word;
  union {
    T elem[N];
    word words[k_words];
  };

  __device__ __forceinline__ void load(const T* p) {
    const word* w = reinterpret_cast<const word*>(p);
#pragma unroll
    for (int i = 0; i < k_words; ++i) {
      words[i] = w[i];
    }
  }
  // The elements as fp32; bf16 pairs convert a 32-bit word at a time (at_unpack2).
  __device__ __forceinline__ void to_float(float (&out)[N]) const {
    if constexpr (at_is_bf16<T>::value && N % 2 == 0) {
      const unsigned* w = reinterpret_cast<const unsigned*>(words);
#pragma unroll
      for (int i = 0; i < N / 2; ++i) {
        at_unpack2(w[i], out[2 * i], out[2 * i + 1], at_bf16{});
      }
    } else {
#pragma unroll
      for (int i = 0; i < N; ++i) {
        out[i] = at_to_float(elem[i]);
      }
    }
  }
  __device__ __forceinline__ void store(T* p) const {
    word* w = reinterpret_cast<word*>(p);
#pragma unroll
    for (int i = 0; i < k_words; ++i) {
      w[i] = words[i];
    }
  }
};
