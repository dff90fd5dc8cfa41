// Hopper (sm_90a) building blocks: mbarriers, tensor-memory-accelerator loads, wgmma
// synchronisation and descriptors, register reallocation. Each inline PTX instruction
// is behind one named function here, as in common/numeric.cuh; nothing is included
// from the toolkit.
#pragma once

#include "common/async.cuh"

// The driver's CUtensorMap (cuda.h): 128 opaque bytes, 128-byte aligned as cuda.h declares
// it (so that an argument struct ends where the host's does), built on the
// host by cuTensorMapEncodeTiled and passed as (part of) a __grid_constant__
// parameter, so TMA instructions may take its address in parameter space.
struct __align__(128) at_tensor_map {
  unsigned long long opaque[16];
};

// ---- mbarrier -------------------------------------------------------------------

__device__ __forceinline__ void mbar_init(unsigned bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}

// Makes barrier initialisation visible to the async proxy (TMA completes on them).
__device__ __forceinline__ void mbar_fence_init() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

// Arrives once and adds `bytes` to the transaction count the phase waits for.
__device__ __forceinline__ void mbar_arrive_expect_tx(unsigned bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes)
               : "memory");
}

__device__ __forceinline__ void mbar_arrive(unsigned bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}

// mbar_arrive where `pred` holds, predicated rather than branched (it may sit between a
// wgmma and its wait, where ptxas serialises the products around divergent code).
__device__ __forceinline__ void mbar_arrive_if(unsigned bar, bool pred) {
  asm volatile("{\n"
               ".reg .pred p;\n"
               "setp.ne.b32 p, %1, 0;\n"
               "@p mbarrier.arrive.shared::cta.b64 _, [%0];\n"
               "}\n" ::"r"(bar),
               "r"(static_cast<unsigned>(pred))
               : "memory");
}

// Waits until the phase of parity `parity` has completed. A fresh barrier is in phase
// 0, and waiting on parity 1 returns at once (the phase before it counts as done):
// producers wait on their "empty" barriers with the flipped parity.
__device__ __forceinline__ void mbar_wait(unsigned bar, unsigned parity) {
  asm volatile("{\n"
               ".reg .pred done;\n"
               "WAIT_%=:\n"
               "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
               "@!done bra WAIT_%=;\n"
               "}\n" ::"r"(bar),
               "r"(parity)
               : "memory");
}

// One arrival on barrier `bar` (a shared::cta address) of block `rank` of this block's
// cluster, where `pred` holds (predicated as mbar_arrive_if).
__device__ __forceinline__ void mbar_arrive_cluster_if(unsigned bar, unsigned rank, bool pred) {
  asm volatile("{\n"
               ".reg .pred p;\n"
               ".reg .b32 remote;\n"
               "setp.ne.b32 p, %2, 0;\n"
               "mapa.shared::cluster.u32 remote, %0, %1;\n"
               "@p mbarrier.arrive.shared::cluster.b64 _, [remote];\n"
               "}\n" ::"r"(bar),
               "r"(rank), "r"(static_cast<unsigned>(pred))
               : "memory");
}

// ---- clusters -------------------------------------------------------------------

__device__ __forceinline__ unsigned cluster_rank() {
  unsigned r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}

// Every (non-exited) thread of the cluster: what each did before is seen by all after.
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n"
               "barrier.cluster.wait.acquire.aligned;" ::
                   : "memory");
}

// ---- TMA ------------------------------------------------------------------------

// A 4-d box of `map` at coordinates (c0 innermost .. c3) into shared memory at `dst`,
// completing on `bar` (which must expect the box's bytes). Coordinates past the
// tensor's extent read zeros.
__device__ __forceinline__ void tma_load_4d(unsigned dst, const at_tensor_map* map, unsigned bar,
                                            int c0, int c1, int c2, int c3) {
  asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
               " [%0], [%1, {%3, %4, %5, %6}], [%2];" ::"r"(dst),
               "l"(reinterpret_cast<unsigned long long>(map)), "r"(bar), "r"(c0), "r"(c1), "r"(c2),
               "r"(c3)
               : "memory");
}

// tma_load_4d into the same shared-memory offset of every block of the cluster in
// `mask` (bit r: rank r), completing on the barrier at `bar`'s offset in each.
__device__ __forceinline__ void tma_load_4d_multicast(unsigned dst, const at_tensor_map* map,
                                                      unsigned bar, int c0, int c1, int c2, int c3,
                                                      unsigned short mask) {
  asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
               ".multicast::cluster [%0], [%1, {%3, %4, %5, %6}], [%2], %7;" ::"r"(dst),
               "l"(reinterpret_cast<unsigned long long>(map)), "r"(bar), "r"(c0), "r"(c1), "r"(c2),
               "r"(c3), "h"(mask)
               : "memory");
}

// ---- wgmma ----------------------------------------------------------------------

// Orders this warpgroup's register writes (accumulators, A fragments) before the
// wgmma instructions that follow.
__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}
// Waits until at most N committed groups of this warpgroup are still running.
template <int N> __device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}

// Pins registers at this point of the program: the compiler may not move their reads
// or writes across it. wgmma accumulators are written asynchronously, so reads placed
// after a wgmma_wait must not drift above it (ptxas then serialises the products).
template <int N> __device__ __forceinline__ void wgmma_pin(float (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) {
    asm volatile("" : "+f"(r[i])::"memory");
  }
}

// A shared-memory matrix descriptor for a 128-byte-swizzled tile whose 1024-byte
// swizzle atoms (8 rows of 128 bytes) start at 1024-byte aligned addresses.
//   K-major (rows of the M/N dimension, 64 K elements per 128-byte row): lbo unused,
//     sbo = 1024 (the next 8 rows); a k=16 step is +32 bytes inside the atom.
//   MN-major (rows of the K dimension, 64 M/N elements per 128-byte row): lbo = the
//     distance to the next 64 M/N columns, sbo = 1024 (the next 8 K rows).
__device__ __forceinline__ unsigned long long wgmma_desc(unsigned addr, unsigned lbo,
                                                         unsigned sbo) {
  unsigned long long d = 0;
  d |= static_cast<unsigned long long>((addr & 0x3ffff) >> 4);
  d |= static_cast<unsigned long long>((lbo & 0x3ffff) >> 4) << 16;
  d |= static_cast<unsigned long long>((sbo & 0x3ffff) >> 4) << 32;
  d |= 1ull << 62; // 128-byte swizzle
  return d;
}

// ---- registers ------------------------------------------------------------------

// Register reallocation between warpgroups: takes effect only with a register cap at
// entry (__launch_bounds__(threads, 1)) and the roles in one if/else.
template <int N> __device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(N));
}
template <int N> __device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(N));
}

// Named barrier over `threads` threads (a multiple of 32), ids 1..15 (0 is
// __syncthreads): sync waits for all of them, arrive counts this warp and goes on.
__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_barrier_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

// ---- plain shared / global accesses by address ----------------------------------

__device__ __forceinline__ void st_shared_u32(unsigned addr, unsigned v) {
  asm volatile("st.shared.u32 [%0], %1;" ::"r"(addr), "r"(v) : "memory");
}
__device__ __forceinline__ unsigned ld_shared_u32(unsigned addr) {
  unsigned v;
  asm volatile("ld.shared.u32 %0, [%1];" : "=r"(v) : "r"(addr) : "memory");
  return v;
}
__device__ __forceinline__ uint4 ld_shared_16(unsigned addr) {
  uint4 v;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "r"(addr)
               : "memory");
  return v;
}
template <typename T> __device__ __forceinline__ void st_global_16(T* p, uint4 v) {
  *reinterpret_cast<uint4*>(p) = v;
}
// A global store where `in` holds, predicated rather than branched around, and spelt
// st.global: ptxas waits for the wgmma products in flight before any store that may reach
// shared memory, and serialises them around divergent code.
template <typename T> __device__ __forceinline__ void st_global_u32_if(T* p, unsigned v, bool in) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %2, 0;\n@p st.global.b32 [%0], %1;\n}" ::"l"(p),
               "r"(v), "r"(static_cast<int>(in))
               : "memory");
}
template <typename T> __device__ __forceinline__ void st_global_16_if(T* p, uint4 v, bool in) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %4, 0;\n@p st.global.v4.b32 [%0], {%1, %2, %3, "
               "%5};\n}" ::"l"(p),
               "r"(v.x), "r"(v.y), "r"(v.z), "r"(static_cast<int>(in)), "r"(v.w)
               : "memory");
}
