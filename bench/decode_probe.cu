// A standalone probe of templates/attention/kernel.cuh on the paged decoding shape of
// bench/notes/attention-features.md (B=8, Hq=32, Hkv=8, D=128, bf16, page 256, every cache
// full, the pages shuffled), outside the library: the variant is fixed at compile time
// (-DAT_BLOCK_M=... as runtime/ops/attention.cpp passes them to NVRTC), so a kernel change
// and a trace of where a block's time goes can be tried without the tuner.
//
// Build (development machine), one binary per variant:
//   nvcc -O3 -std=c++17 -arch=sm_90a -Itemplates -DAT_BLOCK_M=32 -DAT_BLOCK_N=128 \
//        -DAT_WARPS=4 -DAT_STAGES=1 -DAT_SPLITS=4 -DAT_Q_REGS=1 bench/decode_probe.cu -o probe
// Trace: python3 bench/decode_probe_patch.py templates/attention/kernel.cuh DIR/attention/kernel.cuh
// (with the other templates copied beside it) and build with -IDIR -DPROBE_TRACE.
// Run (GPU machine): ./probe [context=1024] [batch=8] [reps=50]
// prints the median kernel time with a clean L2 (the flush zeroes one buffer, then reads
// another, so no dirty line is left for the kernel to write back), a device copy of the
// same bytes timed the same way, the max error against a CPU reference, and with
// -DPROBE_TRACE the spread of the per-block timestamps the kernel records at AT_PROBE(i).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#ifdef PROBE_TRACE
constexpr int k_probe_points = 8;
__device__ unsigned long long g_probe[1 << 14][k_probe_points];
#define AT_PROBE(i)                                                                            \
  do {                                                                                         \
    if (threadIdx.x == 0) {                                                                    \
      unsigned long long t_;                                                                   \
      asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t_));                                  \
      g_probe[(blockIdx.z * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x][i] = t_;         \
    }                                                                                          \
  } while (0)
#endif

#define AT_T at_bf16
#define AT_HEAD_DIM 128
#define AT_CAUSAL 0
#define AT_LSE 0
#define AT_SWIZZLE 1
#define AT_KVCACHE 1
#include "attention/kernel.cuh"

#define CHECK(x)                                                                               \
  do {                                                                                         \
    cudaError_t e_ = (x);                                                                      \
    if (e_ != cudaSuccess) {                                                                   \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));  \
      std::exit(1);                                                                            \
    }                                                                                          \
  } while (0)

__global__ void read_all(const float4* p, size_t n, float* sink) {
  float acc = 0.0f;
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    const float4 v = p[i];
    acc += v.x + v.y + v.z + v.w;
  }
  if (acc == 1.2345f) {
    *sink = acc;
  }
}

__global__ void empty_kernel() {}

static float bf16_to_float(unsigned short h) {
  unsigned u = unsigned(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
static unsigned short float_to_bf16(float f) {
  unsigned u;
  std::memcpy(&u, &f, 4);
  return static_cast<unsigned short>((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}

int main(int argc, char** argv) {
  const int context = argc > 1 ? std::atoi(argv[1]) : 1024;
  const int B = argc > 2 ? std::atoi(argv[2]) : 8;
  const int reps = argc > 3 ? std::atoi(argv[3]) : 50;
  const int Hq = 32, Hkv = 8, D = 128, page = 256, g = Hq / Hkv;
  const int pages_per_seq = (context + page - 1) / page;
  const int num_pages = B * pages_per_seq;

  std::mt19937 rng(1234);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const size_t kv_elems = size_t(num_pages) * page * Hkv * D;
  std::vector<unsigned short> hq(size_t(B) * Hq * D), hk(kv_elems), hv(kv_elems);
  for (auto& x : hq) x = float_to_bf16(normal(rng));
  for (auto& x : hk) x = float_to_bf16(normal(rng));
  for (auto& x : hv) x = float_to_bf16(normal(rng));
  std::vector<int> table(num_pages);
  for (int i = 0; i < num_pages; ++i) table[i] = i;
  std::shuffle(table.begin(), table.end(), rng);
  std::vector<int> lens(B, context);

  at_bf16 *q, *k, *v, *o;
  int *d_table, *d_lens;
  CHECK(cudaMalloc(&q, hq.size() * 2));
  CHECK(cudaMalloc(&o, hq.size() * 2));
  CHECK(cudaMalloc(&k, kv_elems * 2));
  CHECK(cudaMalloc(&v, kv_elems * 2));
  CHECK(cudaMalloc(&d_table, num_pages * 4));
  CHECK(cudaMalloc(&d_lens, B * 4));
  CHECK(cudaMemcpy(q, hq.data(), hq.size() * 2, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(k, hk.data(), kv_elems * 2, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(v, hv.data(), kv_elems * 2, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(d_table, table.data(), num_pages * 4, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(d_lens, lens.data(), B * 4, cudaMemcpyHostToDevice));

  // The g query heads of a K/V head as g rows of it (runtime/ops/attention.cpp dims()).
  AttnArgs a{};
  a.q = q;
  a.k = k;
  a.v = v;
  a.o = o;
  a.q_batch_stride = a.o_batch_stride = Hq * D;
  a.q_head_stride = a.o_head_stride = g * D;
  a.q_seq_stride = a.o_seq_stride = D;
  a.k_batch_stride = a.v_batch_stride = (long long)page * Hkv * D;
  a.k_head_stride = a.v_head_stride = D;
  a.k_seq_stride = a.v_seq_stride = Hkv * D;
  a.heads_q = Hkv;
  a.heads_kv = Hkv;
  a.seq_q = g;
  a.seq_k = context;
  a.scale_log2 = float(1.4426950408889634 / std::sqrt(double(D)));
  a.batch = B;
  a.window_left = a.window_right = -1;
  a.cache_seqlens = d_lens;
  a.block_table = d_table;
  a.block_table_stride = pages_per_seq;
  a.page_size = page;
  a.num_pages = num_pages;
  a.kv_capacity = pages_per_seq * page;
  const long long rows = (long long)B * Hkv * g;
  const long long counter_words = ((long long)B * Hkv * ((g + 15) / 16) + 3) / 4 * 4;
  const size_t ws_bytes = size_t(counter_words + AT_SPLITS * rows * (D + 1)) * 4;
  unsigned char* ws;
  CHECK(cudaMalloc(&ws, ws_bytes));
  CHECK(cudaMemset(ws, 0, ws_bytes));
  a.ws_count = reinterpret_cast<unsigned*>(ws);
  a.ws_o = reinterpret_cast<float*>(ws + counter_words * 4);
  a.ws_lse = a.ws_o + AT_SPLITS * rows * D;

  const dim3 grid((g + AT_BLOCK_M - 1) / AT_BLOCK_M * AT_SPLITS, Hkv, B);
  const int smem = (AT_BLOCK_M + 2 * AT_STAGES * AT_BLOCK_N) * D * 2;
  CHECK(cudaFuncSetAttribute(attention_fwd, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  int per_sm = 0;
  CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, attention_fwd, 32 * AT_WARPS, smem));

  // Clean-L2 flush buffers and the copy of the same bytes (read + written = K/V bytes).
  const size_t flush_bytes = 256ull << 20;
  float4 *fa, *fb;
  float* sink;
  CHECK(cudaMalloc(&fa, flush_bytes));
  CHECK(cudaMalloc(&fb, flush_bytes));
  CHECK(cudaMalloc(&sink, 4));
  CHECK(cudaMemset(fb, 0, flush_bytes));
  const size_t kv_bytes = 2 * size_t(B) * context * Hkv * D * 2;
  unsigned char *csrc, *cdst;
  CHECK(cudaMalloc(&csrc, kv_bytes / 2));
  CHECK(cudaMalloc(&cdst, kv_bytes / 2));
  CHECK(cudaMemset(csrc, 1, kv_bytes / 2));
  cudaEvent_t e0, e1;
  CHECK(cudaEventCreate(&e0));
  CHECK(cudaEventCreate(&e1));
  auto flush = [&] {
    CHECK(cudaMemsetAsync(fa, 0, flush_bytes));
    read_all<<<528, 512>>>(fb, flush_bytes / 16, sink);
  };
  auto time_it = [&](auto&& launch) {
    std::vector<float> t;
    for (int r = 0; r < reps + 5; ++r) {
      flush();
      CHECK(cudaEventRecord(e0));
      launch();
      CHECK(cudaEventRecord(e1));
      CHECK(cudaEventSynchronize(e1));
      float ms;
      CHECK(cudaEventElapsedTime(&ms, e0, e1));
      if (r >= 5) t.push_back(ms * 1000.0f);
    }
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
  };
  auto run = [&] { attention_fwd<<<grid, 32 * AT_WARPS, smem>>>(a); };
  // Launch cost alone: an empty kernel of the same grid, block and shared memory, timed
  // the same way, once with the flush kernel leaving the SMs configured for little
  // shared memory (as a read kernel does) and once for the most (carveout 100).
  CHECK(cudaFuncSetAttribute(empty_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  const float empty_us = time_it([&] { empty_kernel<<<grid, 32 * AT_WARPS, smem>>>(); });
  const float empty0_us = time_it([&] { empty_kernel<<<grid, 32 * AT_WARPS, 0>>>(); });
  CHECK(cudaFuncSetAttribute(read_all, cudaFuncAttributePreferredSharedMemoryCarveout, 100));
  const float us_carve = time_it(run);
  const float empty_carve_us = time_it([&] { empty_kernel<<<grid, 32 * AT_WARPS, smem>>>(); });
  CHECK(cudaFuncSetAttribute(read_all, cudaFuncAttributePreferredSharedMemoryCarveout, -1));
  std::printf("launch: empty kernel %.2f us (no smem %.2f); flush with carveout 100: kernel %.2f us, "
              "empty %.2f us\n", empty_us, empty0_us, us_carve, empty_carve_us);
  const float us = time_it(run);
  CHECK(cudaGetLastError());
  const float copy_us =
      time_it([&] { CHECK(cudaMemcpyAsync(cdst, csrc, kv_bytes / 2, cudaMemcpyDeviceToDevice)); });

  // Reference: every (b, query head) against its sequence's keys, in double.
  CHECK(cudaMemset(o, 0xff, hq.size() * 2));
  run();
  CHECK(cudaDeviceSynchronize());
  std::vector<unsigned short> ho(hq.size());
  CHECK(cudaMemcpy(ho.data(), o, ho.size() * 2, cudaMemcpyDeviceToHost));
  double max_err = 0.0;
  std::vector<double> s(context), acc(D);
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < Hq; ++h) {
      const int kh = h / g;
      double mx = -1e300;
      for (int j = 0; j < context; ++j) {
        const size_t row = (size_t(table[b * pages_per_seq + j / page]) * page + j % page) * Hkv + kh;
        double dot = 0.0;
        for (int d = 0; d < D; ++d) {
          dot += double(bf16_to_float(hq[(size_t(b) * Hq + h) * D + d])) * bf16_to_float(hk[row * D + d]);
        }
        s[j] = dot / std::sqrt(double(D));
        mx = std::max(mx, s[j]);
      }
      double sum = 0.0;
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int j = 0; j < context; ++j) {
        const size_t row = (size_t(table[b * pages_per_seq + j / page]) * page + j % page) * Hkv + kh;
        const double p = std::exp(s[j] - mx);
        sum += p;
        for (int d = 0; d < D; ++d) acc[d] += p * bf16_to_float(hv[row * D + d]);
      }
      for (int d = 0; d < D; ++d) {
        const double got = bf16_to_float(ho[(size_t(b) * Hq + h) * D + d]);
        max_err = std::max(max_err, std::fabs(got - acc[d] / sum));
      }
    }
  }
  std::printf("B=%d ctx=%d bm=%d bn=%d warps=%d stages=%d splits=%d qregs=%d blocks=%u (%d/SM) "
              "smem=%d: %.2f us, copy %.2f us, %.1f%% of copy, %.0f GB/s, max err %.2e\n",
              B, context, AT_BLOCK_M, AT_BLOCK_N, AT_WARPS, AT_STAGES, AT_SPLITS, AT_Q_REGS,
              grid.x * grid.y * grid.z, per_sm, smem, us, copy_us, 100.0 * copy_us / us,
              kv_bytes / us * 1e-3, max_err);

#ifdef PROBE_TRACE
  // One traced launch after a flush; per probe point, the spread over blocks of its time
  // after the earliest block's entry (µs).
  static unsigned long long probe[1 << 14][k_probe_points];
  CHECK(cudaMemcpyToSymbol(g_probe, probe, sizeof(probe)));
  flush();
  run();
  CHECK(cudaDeviceSynchronize());
  CHECK(cudaMemcpyFromSymbol(probe, g_probe, sizeof(probe)));
  const int blocks = int(grid.x * grid.y * grid.z);
  unsigned long long t0 = ~0ull;
  for (int i = 0; i < blocks; ++i) t0 = std::min(t0, probe[i][0]);
  for (int p = 0; p < k_probe_points; ++p) {
    std::vector<double> t;
    for (int i = 0; i < blocks; ++i) {
      if (probe[i][p] != 0) t.push_back((probe[i][p] - t0) * 1e-3);
    }
    if (t.empty()) continue;
    std::sort(t.begin(), t.end());
    std::printf("  probe %d: %4zu blocks, min %6.2f  p10 %6.2f  median %6.2f  p90 %6.2f  max %6.2f us\n",
                p, t.size(), t.front(), t[t.size() / 10], t[t.size() / 2], t[t.size() * 9 / 10],
                t.back());
  }
#endif
  return 0;
}
