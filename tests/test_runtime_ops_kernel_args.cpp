// The host's kernel-argument structs (runtime/ops/*.hpp) against the structs the kernels
// declare: each kernel is compiled with NVRTC (no GPU needed) and the size and every
// field's offset of its struct compared with the host's, so a field added, dropped or
// reordered on one side only fails here instead of passing wrong arguments.
#include "runtime/base/error.hpp"
#include "runtime/dispatch/variant.hpp"
#include "runtime/ops/attention.hpp"
#include "runtime/ops/causal_conv1d.hpp"
#include "runtime/ops/causal_conv1d_update.hpp"
#include "runtime/ops/selective_scan.hpp"
#include "runtime/ops/selective_state_update.hpp"
#include "runtime/ops/space.hpp"
#include "runtime/ops/templates.hpp"

#include <doctest/doctest.h>

#include <cstddef>
#include <string>
#include <vector>

using namespace autotune;

namespace {

struct Field {
  const char* name;
  size_t offset;
};

#define HOST_FIELD(type, name)                                                                     \
  Field {                                                                                          \
#name, offsetof(type, name)                                                                    \
  }

// Compiles op's variant (config, shape) to PTX for sm_90a with `device_struct` checked
// against the host's: its size by a static assertion, each field's offset read off the
// PTX of a probe kernel that loads the field's first byte from the by-value struct
// (NVRTC has no offsetof).
void check_layout(const char* op_name, const char* shape, const char* config,
                  const char* device_struct, size_t host_size, const std::vector<Field>& fields) {
  const std::string variant = std::string(op_name) + " " + config;
  CAPTURE(variant);
  const Op& op = find_op(op_name);
  const Problem problem = op.make_problem(parse_fields(shape, "shape"));
  const Config c = parse_fields(config, "config");
  REQUIRE(op.check(c, problem, "sm_90a"));
  VariantSource v = describe_variant(op, c, problem, "sm_90a");
  const std::string type = device_struct;
  std::string probe = "\nstatic_assert(sizeof(" + type + ") == " + std::to_string(host_size) +
                      ", \"the size of " + type + " differs from the host's\");\n";
  for (const Field& f : fields) {
    probe += "extern \"C\" __global__ void at_probe_" + std::string(f.name) +
             "(const __grid_constant__ " + type +
             " a, unsigned char* out) { *out = " + "*reinterpret_cast<const unsigned char*>(&a." +
             f.name + "); }\n";
  }
  v.request.source += probe;
  v.request.arch = "compute_90a";
  auto out = cuda::compile(v.request);
  REQUIRE_MESSAGE(out.ok(), (out.ok() ? "" : out.failure().detail));
  const std::string& ptx = out->binary;
  for (const Field& f : fields) {
    const std::string field = f.name;
    CAPTURE(field);
    const std::string entry = std::string("at_probe_") + f.name;
    const size_t at = ptx.find(".entry " + entry + "(");
    REQUIRE(at != std::string::npos);
    const std::string param = "[" + entry + "_param_0";
    const size_t load = ptx.find(param, ptx.find("ld.param.u8", at));
    REQUIRE(load != std::string::npos);
    size_t device_offset = 0;
    const size_t after = load + param.size();
    if (ptx[after] == '+') {
      device_offset = size_t(std::stoul(ptx.substr(after + 1)));
    } else {
      REQUIRE(ptx[after] == ']');
    }
    CHECK(device_offset == f.offset);
  }
}

} // namespace

TEST_CASE("the portable attention kernel's AttnArgs is AttentionKernelArgs, field for field") {
  using A = AttentionKernelArgs;
  const std::vector<Field> fields = {
      HOST_FIELD(A, q),
      HOST_FIELD(A, k),
      HOST_FIELD(A, v),
      HOST_FIELD(A, o),
      HOST_FIELD(A, lse),
      HOST_FIELD(A, q_batch_stride),
      HOST_FIELD(A, q_head_stride),
      HOST_FIELD(A, q_seq_stride),
      HOST_FIELD(A, k_batch_stride),
      HOST_FIELD(A, k_head_stride),
      HOST_FIELD(A, k_seq_stride),
      HOST_FIELD(A, v_batch_stride),
      HOST_FIELD(A, v_head_stride),
      HOST_FIELD(A, v_seq_stride),
      HOST_FIELD(A, o_batch_stride),
      HOST_FIELD(A, o_head_stride),
      HOST_FIELD(A, o_seq_stride),
      HOST_FIELD(A, heads_q),
      HOST_FIELD(A, heads_kv),
      HOST_FIELD(A, seq_q),
      HOST_FIELD(A, seq_k),
      HOST_FIELD(A, scale_log2),
      HOST_FIELD(A, ws_o),
      HOST_FIELD(A, ws_lse),
      HOST_FIELD(A, ws_count),
      HOST_FIELD(A, batch),
      HOST_FIELD(A, window_left),
      HOST_FIELD(A, window_right),
      HOST_FIELD(A, softcap_scale),
      HOST_FIELD(A, alibi_scale),
      HOST_FIELD(A, alibi_slopes),
      HOST_FIELD(A, alibi_batch_stride),
      HOST_FIELD(A, cu_seqlens_q),
      HOST_FIELD(A, cu_seqlens_k),
      HOST_FIELD(A, lse_head_stride),
      HOST_FIELD(A, cache_seqlens),
      HOST_FIELD(A, block_table),
      HOST_FIELD(A, block_table_stride),
      HOST_FIELD(A, page_size),
      HOST_FIELD(A, num_pages),
      HOST_FIELD(A, kv_capacity),
      HOST_FIELD(A, seq_new),
      HOST_FIELD(A, k_new),
      HOST_FIELD(A, v_new),
      HOST_FIELD(A, kn_batch_stride),
      HOST_FIELD(A, kn_head_stride),
      HOST_FIELD(A, kn_seq_stride),
      HOST_FIELD(A, vn_batch_stride),
      HOST_FIELD(A, vn_head_stride),
      HOST_FIELD(A, vn_seq_stride),
      HOST_FIELD(A, cache_leftpad),
      HOST_FIELD(A, cache_batch_idx),
      HOST_FIELD(A, q_group_stride),
      HOST_FIELD(A, o_group_stride),
      HOST_FIELD(A, group_sq),
      HOST_FIELD(A, tokens_q),
      HOST_FIELD(A, tokens_k),
  };
  // Plain, split keys, every feature on, and a KV cache: the struct is the same in each.
  check_layout("attention", "B=2,H=4,S=256,D=128,dtype=bf16",
               "block_m=64,block_n=64,warps=4,stages=1,swizzle=xor,q=smem,splits=1,family=mma",
               "AttnArgs", sizeof(A), fields);
  check_layout("attention", "B=1,Hq=8,Hkv=2,Sq=1,Sk=4096,D=80,causal=1,window=1,softcap=1,alibi=1",
               "block_m=64,block_n=64,warps=4,stages=2,swizzle=pad,q=smem,splits=4,family=mma",
               "AttnArgs", sizeof(A), fields);
  check_layout("attention", "B=2,Hq=8,Hkv=2,Sq=1,Sk=1000,D=128,causal=1,kvcache=1",
               "block_m=16,block_n=64,warps=4,stages=2,swizzle=xor,q=smem,splits=4,family=mma",
               "AttnArgs", sizeof(A), fields);
}

TEST_CASE("the Hopper attention kernel's AttnArgs is AttentionHopperKernelArgs, field for field") {
  using A = AttentionHopperKernelArgs;
  const std::vector<Field> fields = {
      HOST_FIELD(A, q_map),
      HOST_FIELD(A, k_map),
      HOST_FIELD(A, v_map),
      HOST_FIELD(A, o),
      HOST_FIELD(A, lse),
      HOST_FIELD(A, o_batch_stride),
      HOST_FIELD(A, o_head_stride),
      HOST_FIELD(A, o_seq_stride),
      HOST_FIELD(A, heads_q),
      HOST_FIELD(A, heads_kv),
      HOST_FIELD(A, seq_q),
      HOST_FIELD(A, seq_k),
      HOST_FIELD(A, scale_log2),
      HOST_FIELD(A, batch),
      HOST_FIELD(A, q_seq_inner),
      HOST_FIELD(A, k_seq_inner),
      HOST_FIELD(A, v_seq_inner),
      HOST_FIELD(A, window_left),
      HOST_FIELD(A, window_right),
      HOST_FIELD(A, sched_slot),
      HOST_FIELD(A, sched_group),
      HOST_FIELD(A, softcap_scale),
      HOST_FIELD(A, alibi_scale),
      HOST_FIELD(A, alibi_slopes),
      HOST_FIELD(A, alibi_batch_stride),
      HOST_FIELD(A, cu_seqlens_q),
      HOST_FIELD(A, cu_seqlens_k),
      HOST_FIELD(A, lse_head_stride),
      HOST_FIELD(A, block_table),
      HOST_FIELD(A, block_table_stride),
      HOST_FIELD(A, page_size),
      HOST_FIELD(A, kv_capacity),
      HOST_FIELD(A, tokens_q),
      HOST_FIELD(A, tokens_k),
  };
  // Plain, every feature on, and packed sequences: the struct is the same in each.
  check_layout("attention", "B=4,H=16,S=4096,D=128,dtype=bf16",
               "block_m=128,block_n=96,warps=4,stages=2,swizzle=xor,q=smem,splits=1,"
               "family=wgmma_persistent",
               "AttnArgs", sizeof(A), fields);
  check_layout("attention", "B=2,Hq=8,Hkv=2,S=1000,D=96,causal=1,window=1,softcap=1,alibi=1",
               "block_m=128,block_n=128,warps=4,stages=2,swizzle=xor,q=smem,splits=1,"
               "family=wgmma_overlap_persistent",
               "AttnArgs", sizeof(A), fields);
  check_layout("attention", "B=3,Hq=8,Hkv=2,S=1000,D=128,causal=1,varlen=1,Tq=2000,Tk=2000,lse=1",
               "block_m=128,block_n=128,warps=4,stages=2,swizzle=xor,q=smem,splits=1,"
               "family=wgmma_overlap",
               "AttnArgs", sizeof(A), fields);
  check_layout("attention", "B=3,Hq=8,Hkv=2,S=1000,D=128,causal=1,varlen=1,Tq=2000,paged=1",
               "block_m=128,block_n=128,warps=4,stages=2,swizzle=xor,q=smem,splits=1,"
               "family=wgmma",
               "AttnArgs", sizeof(A), fields);
}

TEST_CASE("the causal_conv1d kernel's ConvArgs is CausalConv1dKernelArgs, field for field") {
  using A = CausalConv1dKernelArgs;
  const std::vector<Field> fields = {
      HOST_FIELD(A, x),
      HOST_FIELD(A, weight),
      HOST_FIELD(A, bias),
      HOST_FIELD(A, out),
      HOST_FIELD(A, initial_states),
      HOST_FIELD(A, final_states),
      HOST_FIELD(A, batch),
      HOST_FIELD(A, channels),
      HOST_FIELD(A, length),
      HOST_FIELD(A, x_batch_stride),
      HOST_FIELD(A, x_channel_stride),
      HOST_FIELD(A, out_batch_stride),
      HOST_FIELD(A, out_channel_stride),
      HOST_FIELD(A, vector_mode),
  };
  const Op& op = find_op("causal_conv1d");
  const Space space = parse_space(template_file(op.space_path()), op.space_path());
  // Aligned rows and the ragged-row kernel (L not a multiple of the vector).
  for (const char* shape : {"B=2,C=64,L=1024,W=4", "B=2,C=64,L=1001,W=3,dtype=fp16"}) {
    check_layout("causal_conv1d", shape, format_fields(space.default_config).c_str(), "ConvArgs",
                 sizeof(A), fields);
  }
}

TEST_CASE("the causal_conv1d_update kernel's UpdateArgs is CausalConv1dUpdateKernelArgs, field "
          "for field") {
  using A = CausalConv1dUpdateKernelArgs;
  const std::vector<Field> fields = {
      HOST_FIELD(A, x),
      HOST_FIELD(A, weight),
      HOST_FIELD(A, bias),
      HOST_FIELD(A, out),
      HOST_FIELD(A, state_in),
      HOST_FIELD(A, state_out),
      HOST_FIELD(A, cache_seqlens),
      HOST_FIELD(A, state_indices),
      HOST_FIELD(A, batch),
      HOST_FIELD(A, channels),
      HOST_FIELD(A, length),
      HOST_FIELD(A, entries),
      HOST_FIELD(A, x_batch_stride),
      HOST_FIELD(A, x_channel_stride),
      HOST_FIELD(A, x_length_stride),
      HOST_FIELD(A, out_batch_stride),
      HOST_FIELD(A, out_channel_stride),
      HOST_FIELD(A, out_length_stride),
      HOST_FIELD(A, state_entry_stride),
      HOST_FIELD(A, state_channel_stride),
      HOST_FIELD(A, state_pos_stride),
  };
  for (const char* shape :
       {"B=2,C=64,L=1,W=4,S=4", "B=2,C=64,L=3,W=3,S=7,dtype=fp16,circular=1,gather=1"}) {
    check_layout("causal_conv1d_update", shape, "threads=128", "UpdateArgs", sizeof(A), fields);
  }
}

TEST_CASE("the selective_state_update kernel's StateUpdateArgs is SelectiveStateUpdateKernelArgs, "
          "field for field") {
  using A = SelectiveStateUpdateKernelArgs;
  const std::vector<Field> fields = {
      HOST_FIELD(A, x),
      HOST_FIELD(A, dt),
      HOST_FIELD(A, dt_bias),
      HOST_FIELD(A, A),
      HOST_FIELD(A, B),
      HOST_FIELD(A, C),
      HOST_FIELD(A, D),
      HOST_FIELD(A, z),
      HOST_FIELD(A, out),
      HOST_FIELD(A, state_in),
      HOST_FIELD(A, state_out),
      HOST_FIELD(A, state_indices),
      HOST_FIELD(A, batch),
      HOST_FIELD(A, heads),
      HOST_FIELD(A, dim),
      HOST_FIELD(A, groups),
      HOST_FIELD(A, entries),
      HOST_FIELD(A, x_stride),
      HOST_FIELD(A, dt_stride),
      HOST_FIELD(A, z_stride),
      HOST_FIELD(A, out_stride),
      HOST_FIELD(A, D_stride),
      HOST_FIELD(A, dt_bias_stride),
      HOST_FIELD(A, A_stride),
      HOST_FIELD(A, B_stride),
      HOST_FIELD(A, C_stride),
      HOST_FIELD(A, state_stride),
  };
  for (const char* shape :
       {"B=2,P=64,N=16", "B=2,H=4,P=64,N=128,G=2,heads=1,gather=1,sdtype=fp32"}) {
    check_layout("selective_state_update", shape, "threads=128,lanes=4", "StateUpdateArgs",
                 sizeof(A), fields);
  }
}

TEST_CASE("the selective_scan kernels' ScanArgs is SelectiveScanKernelArgs, field for field") {
  using A = SelectiveScanKernelArgs;
  const std::vector<Field> fields = {
      HOST_FIELD(A, u),          HOST_FIELD(A, delta),      HOST_FIELD(A, A),
      HOST_FIELD(A, B),          HOST_FIELD(A, C),          HOST_FIELD(A, D),
      HOST_FIELD(A, z),          HOST_FIELD(A, delta_bias), HOST_FIELD(A, out),
      HOST_FIELD(A, last_state), HOST_FIELD(A, batch),      HOST_FIELD(A, dim),
      HOST_FIELD(A, length),     HOST_FIELD(A, groups),     HOST_FIELD(A, u_bs),
      HOST_FIELD(A, u_ds),       HOST_FIELD(A, delta_bs),   HOST_FIELD(A, delta_ds),
      HOST_FIELD(A, z_bs),       HOST_FIELD(A, z_ds),       HOST_FIELD(A, out_bs),
      HOST_FIELD(A, out_ds),     HOST_FIELD(A, b_bs),       HOST_FIELD(A, b_gs),
      HOST_FIELD(A, b_ns),       HOST_FIELD(A, c_bs),       HOST_FIELD(A, c_gs),
      HOST_FIELD(A, c_ns),       HOST_FIELD(A, vector_ok),
  };
  const Op& op = find_op("selective_scan");
  const Space space = parse_space(template_file(op.space_path()), op.space_path());
  // The default (shuffle scan) kernel, and the state-parallel one on a ragged length.
  check_layout("selective_scan", "B=2,D=64,L=256,N=16", format_fields(space.default_config).c_str(),
               "ScanArgs", sizeof(A), fields);
  check_layout("selective_scan", "B=2,D=2048,L=2047,N=16",
               "threads=128,items=32,cpb=64,nsplit=2,scan=state,vec=8,poly=0,minblocks=1,"
               "tsplit=1,bc=f32,cpl=1,ystore=after,yred=1",
               "ScanArgs", sizeof(A), fields);
}
