// Self-contained numeric helpers for autotune's templates. NVRTC finds no headers
// by itself and a deployment machine may only have the driver and libnvrtc, so the
// templates include nothing from the toolkit: the 16-bit types and the few
// conversions we need are defined here with inline PTX (sm_80 and newer).
#pragma once

struct __align__(2) at_bf16 {
  unsigned short bits;
};
struct __align__(2) at_f16 {
  unsigned short bits;
};

__device__ __forceinline__ float at_to_float(float x) { return x; }
__device__ __forceinline__ float at_to_float(at_bf16 x) {
  return __uint_as_float(static_cast<unsigned>(x.bits) << 16);
}
__device__ __forceinline__ float at_to_float(at_f16 x) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(x.bits));
  return f;
}

template <typename T> __device__ __forceinline__ T at_from_float(float x);
template <> __device__ __forceinline__ float at_from_float<float>(float x) { return x; }
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

// exp(x) as one ex2.approx on the special-function unit.
__device__ __forceinline__ float at_exp(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x * 1.4426950408889634f));
  return y;
}

__device__ __forceinline__ float at_silu(float x) { return x / (1.0f + at_exp(-x)); }

// A register array of N elements of T, loaded and stored with the widest accesses
// that fit (16-byte vectors, then 8, 4, 2): ld.global.v4 when N*sizeof(T) >= 16.
// The caller guarantees alignment to min(16, N*sizeof(T)) bytes.
template <int BYTES> struct at_word;
template <> struct at_word<16> { typedef uint4 type; };
template <> struct at_word<8> { typedef uint2 type; };
template <> struct at_word<4> { typedef unsigned type; };
template <> struct at_word<2> { typedef unsigned short type; };

template <typename T> struct at_is_bf16 { static constexpr bool value = false; };
template <> struct at_is_bf16<at_bf16> { static constexpr bool value = true; };

template <typename T, int N> struct at_vec {
  static constexpr int k_bytes = N * static_cast<int>(sizeof(T));
  static constexpr int k_word = k_bytes >= 16 ? 16 : k_bytes;
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
  // The elements as fp32. bf16 pairs convert a 32-bit word at a time: the low one
  // shifted up, the high one masked (one instruction each, where extracting the
  // high half first would take two).
  __device__ __forceinline__ void to_float(float (&out)[N]) const {
    if constexpr (at_is_bf16<T>::value && N % 2 == 0) {
      const unsigned* w = reinterpret_cast<const unsigned*>(words);
#pragma unroll
      for (int i = 0; i < N / 2; ++i) {
        out[2 * i] = __uint_as_float(w[i] << 16);
        out[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
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
