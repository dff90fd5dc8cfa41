// The op descriptions of runtime/ops/call.hpp: binding a call of the C ABI reads the
// problem off the tensors and refuses every inconsistent size, dtype, form and
// layout with a message naming the argument. No GPU: addresses are never touched.
#include "call_support.hpp"
#include "runtime/dispatch/autotune.hpp"
#include "runtime/ops/call.hpp"
#include "runtime/ops/op.hpp"
#include "runtime/ops/selective_scan.hpp"

#include <doctest/doctest.h>

#include <cstring>
#include <string>

using namespace autotune;
using namespace autotune::testing;

namespace {

Tensor make(uintptr_t address, int32_t dtype, std::initializer_list<int64_t> shape,
            std::initializer_list<int64_t> strides = {}) {
  return tensor(reinterpret_cast<const void*>(address), ElementType(dtype), shape, strides);
}

const ArgsDesc& desc_of(const char* op) {
  return find_op(op).args_desc();
}

std::string problem_of(const char* op, const void* args) {
  BoundCall b;
  bind_call(desc_of(op), args, b);
  check_layout(desc_of(op), b);
  return find_op(op).make_problem(call_fields(desc_of(op), b)).key();
}

void refused(const char* op, const void* args, const std::string& message) {
  BoundCall b;
  std::string what;
  try {
    bind_call(desc_of(op), args, b);
    check_layout(desc_of(op), b);
  } catch (const Error& e) {
    what = e.what();
    CHECK(e.kind() == ErrorKind::usage);
  }
  CHECK_MESSAGE(what.find(message) != std::string::npos,
                "expected '" << message << "' in '" << what << "'");
}

size_t kind_size(ScalarKind k) {
  return k == ScalarKind::i32 ? 4 : 8;
}

autotune_causal_conv1d_args conv_call() {
  autotune_causal_conv1d_args a{};
  a.x = make(0x10000, AUTOTUNE_BF16, {2, 8, 100});
  a.weight = make(0x20000, AUTOTUNE_FP32, {8, 4});
  a.bias = make(0x30000, AUTOTUNE_FP32, {8});
  a.out = make(0x40000, AUTOTUNE_BF16, {2, 8, 100});
  a.silu = 1;
  return a;
}

autotune_attention_args attention_call() {
  autotune_attention_args a{};
  // [B, S, H, D] memory, indexed [B, H, S, D]: strides permuted.
  const int64_t B = 2, Hq = 8, Hkv = 2, S = 64, D = 64;
  a.q = make(0x100000, AUTOTUNE_BF16, {B, Hq, S, D}, {S * Hq * D, D, Hq * D, 1});
  a.k = make(0x200000, AUTOTUNE_BF16, {B, Hkv, S, D}, {S * Hkv * D, D, Hkv * D, 1});
  a.v = make(0x300000, AUTOTUNE_BF16, {B, Hkv, S, D}, {S * Hkv * D, D, Hkv * D, 1});
  a.o = make(0x400000, AUTOTUNE_BF16, {B, Hq, S, D}, {S * Hq * D, D, Hq * D, 1});
  a.causal = 1;
  return a;
}

autotune_selective_scan_args scan_call() {
  autotune_selective_scan_args a{};
  const int64_t B = 2, D = 8, L = 32, N = 4;
  a.u = make(0x10000, AUTOTUNE_BF16, {B, D, L});
  a.delta = make(0x20000, AUTOTUNE_BF16, {B, D, L});
  a.A = make(0x30000, AUTOTUNE_FP32, {D, N});
  a.B = make(0x40000, AUTOTUNE_BF16, {B, N, L});
  a.C = make(0x50000, AUTOTUNE_BF16, {B, N, L});
  a.D = make(0x60000, AUTOTUNE_FP32, {D});
  a.out = make(0x70000, AUTOTUNE_BF16, {B, D, L});
  a.delta_softplus = 1;
  return a;
}

} // namespace

TEST_CASE("every op's description covers its C args struct, field by field") {
  for (std::string name : {"causal_conv1d", "attention", "selective_scan", "causal_conv1d_update",
                           "selective_state_update"}) {
    CAPTURE(name);
    const ArgsDesc& d = desc_of(name.c_str());
    // Fields in struct order, each starting where the previous one ends (plus the
    // alignment padding of its kind), the last one ending the struct: a field added
    // to the C struct but not to the description fails here.
    // Tensors and scalars merged by offset (a tensor appended later follows scalars):
    // {offset, size, alignment}.
    std::vector<std::array<size_t, 3>> fields;
    size_t last_offset = SIZE_MAX;
    for (const TensorRule& t : d.tensors) {
      if (t.offset == last_offset) {
        continue; // another form of the same field
      }
      fields.push_back({t.offset, sizeof(autotune_tensor), 8});
      last_offset = t.offset;
    }
    // A bound call holds every field and tensor slot in fixed arrays (call.hpp).
    CHECK(fields.size() <= size_t(k_max_call_tensors));
    CHECK(d.fields.size() <= size_t(k_max_call_fields));
    for (const ScalarRule& s : d.scalars) {
      fields.push_back({s.offset, kind_size(s.kind), kind_size(s.kind)});
    }
    std::sort(fields.begin(), fields.end());
    size_t end = 0;
    for (const auto& [offset, size, align] : fields) {
      CHECK(offset == (end + align - 1) / align * align);
      end = offset + size;
    }
    CHECK((end + 7) / 8 * 8 == d.size);
    CHECK(describe_args(d).find("size " + std::to_string(d.size)) != std::string::npos);
  }
  CHECK(describe_args(desc_of("causal_conv1d")).find("x tensor 0\nweight tensor 80\n") == 0);
}

TEST_CASE("causal_conv1d: the problem is read off the tensors") {
  autotune_causal_conv1d_args a = conv_call();
  CHECK(problem_of("causal_conv1d", &a) ==
        "B=2,C=8,L=100,W=4,x=bf16,w=fp32,bias=1,silu=1,init_states=0,final_states=0,layout=bcl");
  SUBCASE("x as a view of mamba-ssm's in_proj output: batch stride below channel stride") {
    a.x = make(0x10000, AUTOTUNE_BF16, {2, 8, 100}, {100, 2 * 2 * 100, 1});
    CHECK_NOTHROW(problem_of("causal_conv1d", &a));
  }
  SUBCASE("channel-last x and out (Mamba-2's xBC.transpose(1, 2)): layout blc") {
    a.x = make(0x10000, AUTOTUNE_BF16, {2, 8, 100}, {100 * 8, 1, 8});
    a.out = make(0x40000, AUTOTUNE_BF16, {2, 8, 100}, {100 * 8, 1, 8});
    CHECK(problem_of("causal_conv1d", &a).find("layout=blc") != std::string::npos);
    // x a slice of a wider projection's last dimension
    a.x = make(0x10000 + 2 * 16, AUTOTUNE_BF16, {2, 8, 100}, {100 * 40, 1, 40});
    CHECK(problem_of("causal_conv1d", &a).find("layout=blc") != std::string::npos);
    SUBCASE("out must share x's layout") {
      a.out = make(0x40000, AUTOTUNE_BF16, {2, 8, 100});
      refused("causal_conv1d", &a, "out must have x's layout: x is channel-last");
    }
    SUBCASE("and x out's") {
      a.x = make(0x10000, AUTOTUNE_BF16, {2, 8, 100});
      a.out = make(0x40000, AUTOTUNE_BF16, {2, 8, 100}, {100 * 8, 1, 8});
      refused("causal_conv1d", &a, "out must have x's layout: x is channel-first");
    }
    SUBCASE("channel-last outputs may not overlap either") {
      a.out = make(0x40000, AUTOTUNE_BF16, {2, 8, 100}, {100 * 8, 1, 4});
      refused("causal_conv1d", &a, "overlap");
    }
    SUBCASE("packed sequences: int32 seq_idx [B, L], in the key only when given") {
      a.seq_idx = make(0x70000, AUTOTUNE_INT32, {2, 100});
      CHECK(problem_of("causal_conv1d", &a).find("layout=blc,seq_idx=1") != std::string::npos);
      SUBCASE("of another dtype") {
        a.seq_idx.dtype = AUTOTUNE_FP32;
        refused("causal_conv1d", &a, "seq_idx");
      }
      SUBCASE("of another length") {
        a.seq_idx.shape[1] = 99;
        refused("causal_conv1d", &a, "seq_idx has shape [2, 99]");
      }
      SUBCASE("with states, which causal-conv1d refuses too") {
        a.initial_states = make(0x50000, AUTOTUNE_BF16, {2, 8, 3});
        CHECK_THROWS_WITH_AS(problem_of("causal_conv1d", &a),
                             doctest::Contains("takes no initial or final states"), Error);
      }
    }
  }
  SUBCASE("seq_idx needs channel-last x") {
    a.seq_idx = make(0x70000, AUTOTUNE_INT32, {2, 100});
    CHECK_THROWS_WITH_AS(problem_of("causal_conv1d", &a),
                         doctest::Contains("seq_idx (packed sequences) needs channel-last x"),
                         Error);
  }
  SUBCASE("one position or one channel reads as channel-first") {
    a.x = make(0x10000, AUTOTUNE_BF16, {2, 8, 1}, {8, 1, 8});
    a.out = make(0x40000, AUTOTUNE_BF16, {2, 8, 1}, {8, 1, 8});
    CHECK(problem_of("causal_conv1d", &a).find("layout=bcl") != std::string::npos);
  }
  SUBCASE("states") {
    a.initial_states = make(0x50000, AUTOTUNE_BF16, {2, 8, 3});
    a.final_states = make(0x60000, AUTOTUNE_BF16, {2, 8, 3});
    CHECK(problem_of("causal_conv1d", &a).find("init_states=1,final_states=1") !=
          std::string::npos);
  }
  SUBCASE("mistakes are refused, each naming the argument") {
    SUBCASE("a weight with fewer channels than x") {
      a.weight.shape[0] = 4;
      refused("causal_conv1d", &a, "weight has shape [4, 4]; expected [C=8, W]");
    }
    SUBCASE("a short bias") {
      a.bias.shape[0] = 7;
      refused("causal_conv1d", &a, "bias has shape [7]");
    }
    SUBCASE("a bias of another dtype than the weight") {
      a.bias.dtype = AUTOTUNE_BF16;
      refused("causal_conv1d", &a, "bias is bf16 but must have the dtype of weight (fp32)");
    }
    SUBCASE("initial states of the wrong shape") {
      a.initial_states = make(0x50000, AUTOTUNE_BF16, {2, 8, 4});
      refused("causal_conv1d", &a,
              "initial_states has shape [2, 8, 4]; expected [B=2, C=8, W-1=3]");
    }
    SUBCASE("an out of the wrong dtype") {
      a.out.dtype = AUTOTUNE_FP32;
      refused("causal_conv1d", &a, "out is fp32 but must have the dtype of x (bf16)");
    }
    SUBCASE("an out of the wrong length") {
      a.out.shape[2] = 99;
      refused("causal_conv1d", &a, "out has shape [2, 8, 99]");
    }
    SUBCASE("a strided last dimension") {
      a.x.strides[2] = 2;
      refused("causal_conv1d", &a, "contiguous last dimension");
    }
    SUBCASE("neither the last nor the channel dimension contiguous") {
      a.x = make(0x10000, AUTOTUNE_BF16, {2, 8, 100}, {1600, 2, 16});
      refused("causal_conv1d", &a,
              "must have a contiguous last dimension (stride 1) or, channel-last, a "
              "contiguous channel dimension");
    }
    SUBCASE("a non-contiguous weight") {
      a.weight.strides[0] = 8;
      refused("causal_conv1d", &a, "weight (shape [8, 4], strides (8, 1)) must be contiguous");
    }
    SUBCASE("an output whose rows overlap") {
      a.out.strides[1] = 50;
      refused("causal_conv1d", &a, "overlap");
    }
    SUBCASE("a misaligned pointer") {
      a.x.data = reinterpret_cast<const void*>(0x10001);
      refused("causal_conv1d", &a, "not aligned to 2 bytes");
    }
    SUBCASE("a missing x") {
      a.x.data = nullptr;
      refused("causal_conv1d", &a, "x is required");
    }
    SUBCASE("x with two dimensions") {
      a.x.ndim = 2;
      refused("causal_conv1d", &a, "x has 2 dimensions [2, 8]; expected [B, C, L]");
    }
    SUBCASE("an empty dimension") {
      a.x.shape[0] = a.out.shape[0] = 0;
      refused("causal_conv1d", &a, "every dimension must be at least 1");
    }
    SUBCASE("silu that is not 0/1") {
      a.silu = 2;
      refused("causal_conv1d", &a, "silu must be 0 or 1");
    }
    SUBCASE("an unknown dtype code") {
      a.x.dtype = 7;
      refused("causal_conv1d", &a, "x is an unknown dtype");
    }
  }
}

TEST_CASE("attention: GQA, layouts read off Q's strides, and mismatches") {
  autotune_attention_args a = attention_call();
  CHECK(problem_of("attention", &a) ==
        "B=2,Hq=8,Hkv=2,Sq=64,Sk=64,D=64,causal=1,dtype=bf16,lse=0,layout=bshd");
  SUBCASE("[B, H, S, D] memory is the bhsd bucket") {
    a.q = make(0x100000, AUTOTUNE_BF16, {2, 8, 64, 64});
    CHECK(problem_of("attention", &a).find("layout=bhsd") != std::string::npos);
  }
  SUBCASE("k or v broadcast with a stride of 0 is the bcast=1 problem") {
    CHECK(problem_of("attention", &a).find("bcast") == std::string::npos);
    SUBCASE("over the batch") {
      a.k.strides[0] = 0;
    }
    SUBCASE("over the heads") {
      a.v.strides[2] = 0;
    }
    SUBCASE("q over the sequence") {
      a.q.strides[1] = 0;
    }
    CHECK(problem_of("attention", &a) ==
          "B=2,Hq=8,Hkv=2,Sq=64,Sk=64,D=64,causal=1,dtype=bf16,lse=0,layout=bshd,bcast=1");
  }
  SUBCASE("a stride of 0 over one element is no broadcast") {
    a.k.shape[0] = a.v.shape[0] = a.q.shape[0] = a.o.shape[0] = 1;
    a.k.strides[0] = 0;
    CHECK(problem_of("attention", &a).find("bcast") == std::string::npos);
  }
  SUBCASE("lse is fp32 [B, Hq, Sq]") {
    a.lse = make(0x500000, AUTOTUNE_FP32, {2, 8, 64});
    CHECK(problem_of("attention", &a).find("lse=1") != std::string::npos);
    a.lse.dtype = AUTOTUNE_BF16;
    refused("attention", &a, "lse is bf16; it must be fp32");
  }
  SUBCASE("k with another head dim") {
    a.k.shape[3] = 32;
    refused("attention", &a, "k has shape [2, 2, 64, 32]");
  }
  SUBCASE("v shorter than k") {
    a.v.shape[2] = 63;
    refused("attention", &a, "v has shape [2, 2, 63, 64]; expected [B=2, Hkv=2, Sk=64, D=64]");
  }
  SUBCASE("k and v of different dtypes") {
    a.v.dtype = AUTOTUNE_FP16;
    refused("attention", &a, "v is fp16 but must have the dtype of q (bf16)");
  }
  SUBCASE("fp32 q") {
    a.q.dtype = AUTOTUNE_FP32;
    refused("attention", &a, "q is fp32; expected fp16/bf16");
  }
  SUBCASE("strides that break 16-byte rows") {
    a.k.strides[2] = 2 * 64 + 4;
    refused("attention", &a, "multiples of 8 elements");
  }
  SUBCASE("a strided head dimension") {
    a.q.strides[3] = 2;
    refused("attention", &a, "contiguous last dimension");
  }
  SUBCASE("an output whose rows overlap") {
    a.o.strides[1] = 0;
    refused("attention", &a, "overlap");
  }
}

TEST_CASE("selective_scan: B and C as mamba-ssm passes them") {
  autotune_selective_scan_args a = scan_call();
  const std::string variable = "B=2,D=8,L=32,N=4,G=1,dtype=bf16,var_bc=1,delta_bias=0,"
                               "softplus=1,has_d=1,has_z=0,last_state=0";
  CHECK(problem_of("selective_scan", &a) == variable);
  SUBCASE("[B, 1, N, L] is the same problem as [B, N, L]") {
    a.B = make(0x40000, AUTOTUNE_BF16, {2, 1, 4, 32});
    CHECK(problem_of("selective_scan", &a) == variable);
  }
  SUBCASE("groups") {
    a.B = make(0x40000, AUTOTUNE_BF16, {2, 2, 4, 32});
    a.C = make(0x50000, AUTOTUNE_BF16, {2, 2, 4, 32});
    CHECK(problem_of("selective_scan", &a).find("G=2,") != std::string::npos);
  }
  SUBCASE("fixed B and C") {
    a.B = make(0x40000, AUTOTUNE_FP32, {8, 4});
    a.C = make(0x50000, AUTOTUNE_FP32, {8, 4});
    CHECK(problem_of("selective_scan", &a).find("var_bc=0") != std::string::npos);
  }
  SUBCASE("fixed B with variable C, and the reverse (mamba-ssm's is_variable_B/C)") {
    SUBCASE("fixed B, [B, N, L] C") {
      a.B = make(0x40000, AUTOTUNE_FP32, {8, 4});
      CHECK(problem_of("selective_scan", &a) ==
            "B=2,D=8,L=32,N=4,G=1,dtype=bf16,var_bc=C,delta_bias=0,softplus=1,has_d=1,has_z=0,"
            "last_state=0");
    }
    SUBCASE("[B, N, L] B, fixed C") {
      a.C = make(0x50000, AUTOTUNE_FP32, {8, 4});
      CHECK(problem_of("selective_scan", &a).find(",G=1,dtype=bf16,var_bc=B,") !=
            std::string::npos);
    }
    SUBCASE("fixed B, grouped C: G from C") {
      a.B = make(0x40000, AUTOTUNE_FP32, {8, 4});
      a.C = make(0x50000, AUTOTUNE_BF16, {2, 2, 4, 32});
      CHECK(problem_of("selective_scan", &a).find(",G=2,dtype=bf16,var_bc=C,") !=
            std::string::npos);
    }
    SUBCASE("grouped B, fixed C: G from B") {
      a.B = make(0x40000, AUTOTUNE_BF16, {2, 4, 4, 32});
      a.C = make(0x50000, AUTOTUNE_FP32, {8, 4});
      CHECK(problem_of("selective_scan", &a).find(",G=4,dtype=bf16,var_bc=B,") !=
            std::string::npos);
    }
    SUBCASE("a mix is another problem than both variable: its own signature") {
      BoundCall both, mixed;
      bind_call(desc_of("selective_scan"), &a, both);
      a.C = make(0x50000, AUTOTUNE_FP32, {8, 4});
      bind_call(desc_of("selective_scan"), &a, mixed);
      CHECK(both.values != mixed.values);
    }
  }
  SUBCASE("u, delta and z as views with a batch stride below the channel stride") {
    a.u = make(0x10000, AUTOTUNE_BF16, {2, 8, 32}, {32, 64, 1});
    a.z = make(0x90000, AUTOTUNE_BF16, {2, 8, 32}, {32, 64, 1});
    CHECK(problem_of("selective_scan", &a).find("has_z=1") != std::string::npos);
  }
  SUBCASE("mistakes") {
    SUBCASE("a fixed C that is not fp32") {
      a.C = make(0x50000, AUTOTUNE_BF16, {8, 4});
      refused("selective_scan", &a, "C is bf16; it must be fp32");
    }
    SUBCASE("a fixed B of another state size than A") {
      a.B = make(0x40000, AUTOTUNE_FP32, {8, 5});
      refused("selective_scan", &a, "B has shape [8, 5]");
    }
    SUBCASE("grouped B and ungrouped C that disagree on G") {
      a.B = make(0x40000, AUTOTUNE_BF16, {2, 2, 4, 32});
      refused("selective_scan", &a, "C implies G=1, but B gives G=2");
    }
    SUBCASE("fp32 variable B with bf16 u") {
      a.B.dtype = AUTOTUNE_FP32;
      refused("selective_scan", &a, "B is fp32 but must have the dtype of u (bf16)");
    }
    SUBCASE("a bf16 A") {
      a.A.dtype = AUTOTUNE_BF16;
      refused("selective_scan", &a, "A is bf16; it must be fp32");
    }
    SUBCASE("a bf16 D") {
      a.D.dtype = AUTOTUNE_BF16;
      refused("selective_scan", &a, "D is bf16; it must be fp32");
    }
    SUBCASE("B of five dimensions") {
      a.B.ndim = 5;
      refused("selective_scan", &a,
              "expected [D, N] (fixed) or [B, N, L] (variable) or "
              "[B, G, N, L] (variable, grouped)");
    }
    SUBCASE("B with another state size than A") {
      a.B.shape[1] = 5;
      refused("selective_scan", &a, "B has shape [2, 5, 32]");
    }
    SUBCASE("a last state of the wrong shape") {
      a.last_state = make(0x80000, AUTOTUNE_FP32, {2, 8, 5});
      refused("selective_scan", &a, "last_state has shape [2, 8, 5]");
    }
    SUBCASE("a strided u") {
      a.u.strides[2] = 2;
      refused("selective_scan", &a, "contiguous last dimension");
    }
  }
}

namespace {

// The kernel arguments a bf16 selective_scan call packs for `config` (u, delta, z and out as
// given; A, B, C, D contiguous).
SelectiveScanKernelArgs scan_kernel_args_of(const autotune_selective_scan_args& a,
                                            const std::string& config) {
  BoundCall b;
  bind_call(desc_of("selective_scan"), &a, b);
  check_layout(desc_of("selective_scan"), b);
  const Op& op = find_op("selective_scan");
  const Problem p = op.make_problem(call_fields(desc_of("selective_scan"), b));
  auto plan = op.plan(parse_fields(config, "config"), p);
  return packed_args<SelectiveScanKernelArgs>(*plan, &a, b);
}

// [B, D, L] rows at `base` (bytes) with element strides (bs, ds, 1).
Tensor rows(uintptr_t base, int64_t B, int64_t D, int64_t L, int64_t bs, int64_t ds) {
  return make(base, AUTOTUNE_BF16, {B, D, L}, {bs, ds, 1});
}

// A call with u, delta, z, out contiguous [B, D, L] and variable B/C [B, G, N, L].
autotune_selective_scan_args ragged_scan_call(int64_t B, int64_t D, int64_t L, int64_t G = 1) {
  autotune_selective_scan_args a{};
  const int64_t N = 16;
  a.u = rows(0x1000000, B, D, L, D * L, L);
  a.delta = rows(0x2000000, B, D, L, D * L, L);
  a.z = rows(0x3000000, B, D, L, D * L, L);
  a.out = rows(0x4000000, B, D, L, D * L, L);
  a.A = make(0x5000000, AUTOTUNE_FP32, {D, N});
  a.B = make(0x6000000, AUTOTUNE_BF16, {B, G, N, L});
  a.C = make(0x7000000, AUTOTUNE_BF16, {B, G, N, L});
  a.D = make(0x8000000, AUTOTUNE_FP32, {D});
  a.delta_softplus = 1;
  return a;
}

const char* const k_shift_config =
    "threads=128,items=64,cpb=16,nsplit=8,scan=state,vec=8,poly=0,minblocks=1,tsplit=1,"
    "bc=pair,cpl=1,ystore=after,yred=2,ragged=shift";

} // namespace

TEST_CASE("ragged=shift: the channel classes and the fallback a call's layout decides") {
  SUBCASE("contiguous rows of an odd length: 8 classes of channels by their offset") {
    const SelectiveScanKernelArgs k =
        scan_kernel_args_of(ragged_scan_call(2, 64, 1001), k_shift_config);
    CHECK(k.vector_ok == 1);
    CHECK(k.ch_mod == 8);
  }
  SUBCASE("a length of 2 mod 8: 4 classes") {
    const SelectiveScanKernelArgs k =
        scan_kernel_args_of(ragged_scan_call(2, 64, 1002), k_shift_config);
    CHECK(k.vector_ok == 1);
    CHECK(k.ch_mod == 4);
  }
  SUBCASE("Mamba's [D, B, L] memory, z the second half of xz: the rows agree") {
    const int64_t B = 2, D = 64, L = 1001;
    autotune_selective_scan_args a = ragged_scan_call(B, D, L);
    a.u = rows(0x1000000, B, D, L, L, B * L);
    a.delta = rows(0x2000000, B, D, L, L, B * L);
    a.z = rows(0x3000000 + uintptr_t(D * B * L * 2), B, D, L, L, B * L);
    a.out = rows(0x4000000, B, D, L, L, B * L);
    const SelectiveScanKernelArgs k = scan_kernel_args_of(a, k_shift_config);
    CHECK(k.vector_ok == 1);
    CHECK(k.ch_mod == 4); // channel stride 2002: 2 mod 8
  }
  SUBCASE("rows that disagree run one element per access, in one class") {
    const int64_t B = 2, D = 64, L = 1001;
    autotune_selective_scan_args a = ragged_scan_call(B, D, L);
    SUBCASE("delta in Mamba's layout, u contiguous") {
      a.delta = rows(0x2000000, B, D, L, L, B * L);
    }
    SUBCASE("z one element off") {
      a.z = rows(0x3000002, B, D, L, D * L, L);
    }
    SUBCASE("out with another pitch") {
      a.out = rows(0x4000000, B, D, L, D * (L + 1), L + 1);
    }
    const SelectiveScanKernelArgs k = scan_kernel_args_of(a, k_shift_config);
    CHECK(k.vector_ok == 0);
    CHECK(k.ch_mod == 1);
  }
  SUBCASE("one batch: the batch strides need not agree") {
    const int64_t B = 1, D = 64, L = 1001;
    autotune_selective_scan_args a = ragged_scan_call(B, D, L);
    a.delta = rows(0x2000000, B, D, L, 3 * L, L);
    CHECK(scan_kernel_args_of(a, k_shift_config).vector_ok == 1);
  }
  SUBCASE("two B/C groups: a class of 16-channel blocks must stay in one group") {
    // 128 channels a group hold 8 classes of 16 (one block each); 64 do not.
    CHECK(scan_kernel_args_of(ragged_scan_call(2, 256, 1001, 2), k_shift_config).vector_ok == 1);
    const SelectiveScanKernelArgs k =
        scan_kernel_args_of(ragged_scan_call(2, 128, 1001, 2), k_shift_config);
    CHECK(k.vector_ok == 0);
    CHECK(k.ch_mod == 1);
  }
  SUBCASE("the element layouts take one class") {
    std::string async = k_shift_config;
    async.replace(async.find("ragged=shift"), 12, "ragged=async");
    const SelectiveScanKernelArgs k = scan_kernel_args_of(ragged_scan_call(2, 64, 1001), async);
    CHECK(k.vector_ok == 0);
    CHECK(k.ch_mod == 1);
  }
}
