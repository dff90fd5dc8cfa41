// Runs causal_conv1d through the runtime library: the tuned winner for this shape
// if the tuning database has one, else the documented default variant.
//   autotune --arch auto --op causal_conv1d --shape "B=4,C=1024,L=2048,W=4,dtype=bf16,silu=1"
//   ./conv1d_example
#include <autotune/autotune.hpp> // the installed header, as a user's program includes it

// In-tree helpers for the example's device buffers and error codes; a program of yours
// allocates with cudaMalloc / cuMemAlloc instead.
#include "runtime/base/error.hpp"
#include "runtime/cuda/device.hpp"

#include <cstdio>
#include <cstring>
#include <vector>

int main() {
  try {
    autotune::Runtime rt; // default database path, primary context of GPU 0
    const int64_t B = 4, C = 1024, L = 2048, W = 4;
    // Inputs in bf16; 0x3f80 is 1.0, 0x3f00 is 0.5: x = 1, w = 0.5, bias = 0.5.
    std::vector<uint16_t> x(size_t(B * C * L), 0x3f80), w(size_t(C * W), 0x3f00),
        bias(size_t(C), 0x3f00), out(size_t(B * C * L));
    autotune::cuda::DeviceBuffer dx(x.size() * 2), dw(w.size() * 2), db(bias.size() * 2),
        dout(out.size() * 2);
    dx.upload(x.data(), x.size() * 2);
    dw.upload(w.data(), w.size() * 2);
    db.upload(bias.data(), bias.size() * 2);

    using autotune::ElementType;
    autotune::CausalConv1dArgs a{};
    a.x = autotune::tensor(reinterpret_cast<const void*>(dx.get()), ElementType::bf16, {B, C, L});
    a.weight = autotune::tensor(reinterpret_cast<const void*>(dw.get()), ElementType::bf16, {C, W});
    a.bias = autotune::tensor(reinterpret_cast<const void*>(db.get()), ElementType::bf16, {C});
    a.out =
        autotune::tensor(reinterpret_cast<const void*>(dout.get()), ElementType::bf16, {B, C, L});
    a.silu = 1;
    autotune::Selection s = rt.select_causal_conv1d(a);
    rt.causal_conv1d(a);
    dout.download(out.data(), out.size() * 2);
    // At t >= 3 every output is silu(0.5 + 4 * 0.5) = silu(2.5) = 2.3103.
    uint32_t bits = uint32_t(out[100]) << 16;
    float v;
    std::memcpy(&v, &bits, 4);
    std::printf("variant: %s (%s)\nout[0,0,100] = %.4f (expected 2.3103)\n", s.variant.c_str(),
                s.source.c_str(), v);
    return v > 2.29f && v < 2.33f ? 0 : 1;
  } catch (const autotune::Error& e) {
    std::fprintf(stderr, "conv1d_example: %s\n", e.what());
    return autotune::exit_code_for(e.kind());
  }
}
