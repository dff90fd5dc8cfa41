// Host time of single cuLaunchKernel calls against the size of the kernel's one
// parameter (a struct of P bytes: 16 to 4000), outside the library: whether the tail of
// a warm call's host time (issue 14's python_call_p99_us) grows with the parameter block
// our attention kernels pass (400-500 bytes). Results: bench/notes/host-call.md.
//
// Build (development machine; the kernels are generated into the cubin by nvcc):
//   mkdir -p /tmp/lps && python3 - <<'PY' > /tmp/lps/k.cu
//   sizes = [16, 128, 256, 512, 1024, 2048, 4000]
//   print("template <int P> struct Params { unsigned char b[P]; };")
//   for p in sizes:
//       print(f'extern "C" __global__ void k_{p}(Params<{p}> p, int* out) '
//             f'{{ if (p.b[{p - 1}] == 7 && out) out[threadIdx.x] = p.b[0]; }}')
//   PY
//   nvcc -arch=sm_90 -cubin /tmp/lps/k.cu -o bench_k.cubin
//   g++ -O2 -std=c++17 -I/usr/local/cuda/include bench/launch_param_size.cpp
//       -o launch_param_size -L/usr/local/cuda/lib64/stubs -lcuda   (one line)
// Run (GPU machine): ./launch_param_size bench_k.cubin
// Per size and repetition (3, interleaved): 4000 single launches of one warp, each timed
// with steady_clock, the stream synchronized (untimed) every 50 as bench/python_call.py
// does; the median, p90, p99, the share of launches over 1.5x the median and the commonest
// gaps (in launches) between such slow ones.
#include <cuda.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <utility>
#include <vector>

#define CHECK_CU(x)                                                                                \
  do {                                                                                             \
    CUresult r = (x);                                                                              \
    if (r != CUDA_SUCCESS) {                                                                       \
      std::printf("error %d at %s\n", int(r), #x);                                                 \
      return 1;                                                                                    \
    }                                                                                              \
  } while (0)

int main(int argc, char** argv) {
  if (argc < 2) {
    std::printf("usage: %s KERNELS.cubin\n", argv[0]);
    return 2;
  }
  CHECK_CU(cuInit(0));
  CUdevice dev;
  CHECK_CU(cuDeviceGet(&dev, 0));
  CUcontext ctx;
  CHECK_CU(cuDevicePrimaryCtxRetain(&ctx, dev));
  CHECK_CU(cuCtxSetCurrent(ctx));
  CUmodule module;
  CHECK_CU(cuModuleLoad(&module, argv[1]));
  CUstream stream;
  CHECK_CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  const int sizes[] = {16, 128, 256, 512, 1024, 2048, 4000};
  static unsigned char param[4096];
  std::memset(param, 1, sizeof param);
  CUdeviceptr out = 0; // the kernels write nothing: their byte never equals 7
  constexpr int k_calls = 4000;
  constexpr int k_sync_every = 50;
  for (int rep = 0; rep < 3; ++rep) {
    for (int size : sizes) {
      char name[32];
      std::snprintf(name, sizeof name, "k_%d", size);
      CUfunction fn;
      CHECK_CU(cuModuleGetFunction(&fn, module, name));
      void* args[] = {param, &out};
      for (int i = 0; i < 200; ++i) {
        CHECK_CU(cuLaunchKernel(fn, 1, 1, 1, 32, 1, 1, 0, stream, args, nullptr));
      }
      CHECK_CU(cuStreamSynchronize(stream));
      std::vector<double> us(k_calls);
      for (int i = 0; i < k_calls; ++i) {
        if (i % k_sync_every == 0) {
          CHECK_CU(cuStreamSynchronize(stream));
        }
        const auto t0 = std::chrono::steady_clock::now();
        CHECK_CU(cuLaunchKernel(fn, 1, 1, 1, 32, 1, 1, 0, stream, args, nullptr));
        const auto t1 = std::chrono::steady_clock::now();
        us[i] = std::chrono::duration<double, std::micro>(t1 - t0).count();
      }
      std::vector<double> sorted = us;
      std::sort(sorted.begin(), sorted.end());
      const double median = sorted[k_calls / 2];
      std::map<int, int> gaps;
      int last = -1;
      int slow = 0;
      for (int i = 0; i < k_calls; ++i) {
        if (us[i] > 1.5 * median) {
          ++slow;
          if (last >= 0) {
            ++gaps[i - last];
          }
          last = i;
        }
      }
      std::vector<std::pair<int, int>> common(gaps.begin(), gaps.end());
      std::sort(common.begin(), common.end(),
                [](const auto& a, const auto& b) { return a.second > b.second; });
      std::printf("rep %d P=%5d median %.2f p90 %.2f p99 %.2f (%.2fx) slow %.2f%% gaps:", rep, size,
                  median, sorted[k_calls * 9 / 10], sorted[k_calls * 99 / 100],
                  sorted[k_calls * 99 / 100] / median, 100.0 * slow / k_calls);
      for (size_t k = 0; k < common.size() && k < 4; ++k) {
        std::printf(" %d(%d)", common[k].first, common[k].second);
      }
      std::printf("\n");
    }
  }
  return 0;
}
