// Asynchronous global -> shared copies (cp.async, sm_80 and newer) and the shared
// state-space address they take, each one PTX instruction behind a named function.
#pragma once

// 32-bit shared-state-space address of a generic pointer into shared memory (what
// cp.async, ldmatrix, mbarriers and TMA take).
__device__ __forceinline__ unsigned at_smem_addr(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// 16 bytes global -> shared without passing through registers; src and dst 16-byte
// aligned. With valid == false nothing is read (src may point anywhere) and the 16
// bytes are zero-filled.
__device__ __forceinline__ void cp_async_16(unsigned dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src),
               "r"(valid ? 16 : 0)
               : "memory");
}
// BYTES (4, 8 or 16) global -> shared, of which only the first src_bytes are read and
// the rest zero-filled (src_bytes 0: nothing is read); src and dst BYTES-aligned. 16-byte
// copies bypass L1 (.cg), smaller ones cannot (.ca).
template <int BYTES>
__device__ __forceinline__ void cp_async_bytes(unsigned dst, const void* src, int src_bytes) {
  static_assert(BYTES == 4 || BYTES == 8 || BYTES == 16, "cp.async copies 4, 8 or 16 bytes");
  if constexpr (BYTES == 16) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src),
                 "r"(src_bytes)
                 : "memory");
  } else {
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;" ::"r"(dst), "l"(src), "n"(BYTES),
                 "r"(src_bytes)
                 : "memory");
  }
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;" ::: "memory");
}
// Waits until at most N of this thread's committed groups are still in flight.
template <int N> __device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}
