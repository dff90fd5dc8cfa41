// GPU tests for attention against a KV cache (flash-attn's flash_attn_with_kvcache):
// a paged cache with an out-of-order block table, GQA, cache lengths off every page and
// tile (one empty), Sq = 1 and 5, causal and not, appended keys (attended, and written
// into the cache), split-KV, against the float64 reference (attention_reference_paged),
// through the runtime from the C struct; a contiguous cache with cache_leftpad (GQA,
// append, causal, window, ALiBi, out-of-range starts clamped) against a float64 reference
// of flash-attn's semantics; and the GPU reference kernel on the tuner's paged inputs.
#include "attention_reference.hpp"
#include "gpu_support.hpp"

#include "runtime/dispatch/autotune.hpp"
#include "runtime/ops/attention.hpp"
#include "runtime/ops/templates.hpp"
#include "tuner/compile.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <numeric>

using namespace autotune;
using namespace autotune::test;
namespace fs = std::filesystem;

namespace {

// O [B, Sq, Hq, D] as the logical [B, Hq, Sq, D] of the reference.
std::vector<double> logical(const HostTensor& o, int B, int Sq, int Hq, int D) {
  std::vector<double> out(o.n);
  for (int b = 0; b < B; ++b) {
    for (int i = 0; i < Sq; ++i) {
      for (int h = 0; h < Hq; ++h) {
        for (int d = 0; d < D; ++d) {
          out[((size_t(b) * Hq + h) * Sq + i) * D + d] =
              o.get(((size_t(b) * Sq + i) * Hq + h) * D + d);
        }
      }
    }
  }
  return out;
}

Tensor dev(CUdeviceptr p, ElementType t, std::initializer_list<int64_t> shape,
           std::initializer_list<int64_t> strides = {}) {
  return tensor(reinterpret_cast<const void*>(p), t, shape, strides);
}

struct Case {
  int Sq;
  bool causal;
  int snew; // 0: no append
  std::string pinned;
};

// A contiguous cache with cache_leftpad, as flash-attn defines it: q [B, Sq, Hq, D]
// contiguous, the cache k/v [B, Scache, Hkv, D] contiguous; sequence b's keys are cache
// rows pad[b] .. len[b] - 1, then the rows of k_new / v_new [B, Snew, Hkv, D] (null:
// none), indexed from 0 -- so causal, the window and ALiBi see len[b] - pad[b] + Snew keys
// and count them from pad[b] (attention_ref's key_leftpad). len and pad are the values
// the kernel uses (clamped). O [B, Hq, Sq, D] in logical order, LSE [B, Hq, Sq].
Reference attention_reference_leftpad(const HostTensor& q, const HostTensor& k, const HostTensor& v,
                                      const HostTensor* k_new, const HostTensor* v_new, int snew,
                                      const std::vector<int>& len, const std::vector<int>& pad,
                                      int Scache, int Hq, int Hkv, int Sq, int D, bool causal,
                                      double scale, const Features& f) {
  std::vector<int> cached(len.size());
  for (size_t b = 0; b < len.size(); ++b) {
    cached[b] = len[b] - pad[b];
  }
  return attention_reference_cache(
      q, k, v, k_new, v_new, snew, cached,
      [&](int b, int j) { return size_t(b) * Scache + size_t(pad[size_t(b)] + j); }, Hq, Hkv, Sq, D,
      causal, scale, f);
}

// Elements of a contiguous cache [slots, Scache, row] that differ from what a call must
// leave there: in slot s, the rows len[b] .. len[b] + snew - 1 of the sequence b = owner(s)
// (-1: no sequence's slot) hold its new rows (fresh [B, max(snew, 1), row]), every other
// row its old value.
size_t cache_rows_changed(const HostTensor& after, const HostTensor& before,
                          const HostTensor& fresh, int snew, int Scache, int row,
                          const std::vector<int>& len, const std::function<int(int)>& owner) {
  size_t changed = 0;
  const int slots = int(before.n / (size_t(Scache) * size_t(row)));
  for (int s = 0; s < slots; ++s) {
    const int b = owner(s);
    for (int j = 0; j < Scache; ++j) {
      const int r = b < 0 ? -1 : j - len[size_t(b)];
      const bool appended = r >= 0 && r < snew;
      for (size_t e = 0; e < size_t(row); ++e) {
        const size_t at = (size_t(s) * Scache + size_t(j)) * size_t(row) + e;
        const size_t src =
            (size_t(std::max(b, 0)) * std::max(1, snew) + size_t(std::max(r, 0))) * row + e;
        changed += after.get(at) != (appended ? fresh.get(src) : before.get(at));
      }
    }
  }
  return changed;
}

struct LeftpadCase {
  int Sq;
  bool causal;
  int snew;                  // 0: no append
  int left = -1, right = -1; // the window (both -1: none)
  bool alibi = false;
  std::string pinned;
};

// Attention calls of `a` through a runtime pinned to `pinned` (no database), with a
// zeroed workspace of the size the call asks for, kept for every launch.
struct PinnedCall {
  static RuntimeOptions options(const std::string& pinned) {
    RuntimeOptions ro;
    ro.database = (fs::temp_directory_path() / "autotune-does-not-exist.db").string();
    ro.policy = Policy::pin;
    ro.pinned = pinned;
    return ro;
  }
  PinnedCall(AttentionArgs& args, const std::string& pinned)
      : a(args), rt(options(pinned)), bytes(rt.attention_workspace_size(a)),
        ws(std::max<uint64_t>(bytes, 16)) {
    std::vector<unsigned char> zeros(std::max<uint64_t>(bytes, 16), 0);
    ws.upload(zeros.data(), zeros.size());
    a.workspace = reinterpret_cast<void*>(ws.get());
    a.workspace_bytes = bytes;
  }
  // One launch; returns when it has finished, the workspace all zero again (a split
  // call's merge clears the partials it read as well as the counters).
  void launch() {
    rt.attention(a);
    AUTOTUNE_CU(cuda::driver().cuCtxSynchronize());
    std::vector<unsigned char> after(ws_size());
    ws.download(after.data(), after.size());
    CHECK(std::count(after.begin(), after.end(), 0) == long(after.size()));
  }
  size_t ws_size() const { return size_t(std::max<uint64_t>(bytes, 16)); }
  AttentionArgs& a;
  Runtime rt;
  uint64_t bytes;
  cuda::DeviceBuffer ws;
};

} // namespace

TEST_CASE("paged KV cache attention from the C struct: GQA, shuffled pages, append, split-KV") {
  context();
  const int B = 4, Hq = 8, Hkv = 2, D = 128;
  // Off the page (64) and every tile, one empty; each leaves room for the appended rows
  // (the kernel clamps a length past kv_capacity - Snew, flash-attn leaves it undefined).
  const std::vector<int> len0 = {300, 1, 0, 378};
  const std::string split8 = "block_m=64,block_n=64,warps=4,stages=2,swizzle=xor,q=smem,splits=8";
  const std::string plain = "block_m=64,block_n=32,warps=4,stages=1,swizzle=xor,q=smem,splits=1";
  // Warps sharing rows, splitting each key tile: four over one 16-row tile (the 4 grouped
  // heads of a decoding step), two over each of two (Sq=5: 20 rows, tails in both).
  const std::string key4 = "block_m=16,block_n=64,warps=4,stages=2,swizzle=xor,q=smem,splits=4";
  const std::string key2 = "block_m=32,block_n=64,warps=4,stages=1,swizzle=pad,q=regs,splits=1";
  // One stage with split keys over 128-key tiles, no LSE: the H100's built-in decoding
  // points as a decoding step calls them (pages of 128).
  const std::string one_stage16 =
      "block_m=16,block_n=128,warps=4,stages=1,swizzle=xor,q=smem,splits=4";
  const std::string one_stage32 =
      "block_m=32,block_n=128,warps=4,stages=1,swizzle=pad,q=regs,splits=2";
  struct Paged {
    int page;
    std::vector<Case> cases;
  };
  const std::vector<Paged> runs = {
      {64,
       {Case{1, false, 0, plain}, Case{1, true, 1, split8}, Case{5, true, 0, split8},
        Case{5, true, 5, plain}, Case{5, false, 3, split8}, Case{1, false, 0, key4},
        Case{1, true, 2, key4}, Case{5, true, 1, key2}, Case{5, false, 0, key4}}},
      {128,
       {Case{1, false, 0, one_stage16}, Case{1, true, 1, one_stage16},
        Case{1, false, 0, one_stage32}, Case{5, false, 2, one_stage32}}}};
  for (const Paged& run : runs) {
    for (const Case& c : run.cases) {
      const int page = run.page, pages_per_seq = 384 / page;
      const int num_pages = B * pages_per_seq + 3; // a few pages nobody uses
      // The 128-key pages run without LSE, as a decoding step calls (another kernel).
      const bool with_lse = page == 64;
      CAPTURE(page);
      CAPTURE(c.Sq);
      CAPTURE(c.causal);
      CAPTURE(c.snew);
      CAPTURE(c.pinned);
      std::mt19937_64 rng(1234 + c.Sq * 10 + c.snew);
      std::vector<int> table(size_t(B) * pages_per_seq);
      std::iota(table.begin(), table.end(), 3);
      std::shuffle(table.begin(), table.end(), rng);
      HostTensor q(DType::bf16, size_t(B) * c.Sq * Hq * D);
      HostTensor kc(DType::bf16, size_t(num_pages) * page * Hkv * D), vc(kc.type, kc.n);
      HostTensor kn(DType::bf16, size_t(B) * std::max(1, c.snew) * Hkv * D), vn(kn.type, kn.n);
      q.randomize(rng, -2, 2);
      kc.randomize(rng, -1, 1);
      vc.randomize(rng, -1, 1);
      kn.randomize(rng, -1, 1);
      vn.randomize(rng, -1, 1);
      const double scale = 1.0 / std::sqrt(double(D));
      const Reference ref = attention_reference_paged(
          q, kc, vc, c.snew ? &kn : nullptr, c.snew ? &vn : nullptr, c.snew, len0, table,
          pages_per_seq, page, Hq, Hkv, c.Sq, D, c.causal, scale);
      DeviceTensor qd(q), kd(kc), vd(vc), knd(kn), vnd(vn);
      HostTensor out(DType::bf16, q.n), lse(DType::f32, size_t(B) * Hq * c.Sq);
      out.poison();
      DeviceTensor od(out), ld(lse);
      cuda::DeviceBuffer lens(len0.size() * 4), tab(table.size() * 4);
      lens.upload(len0.data(), len0.size() * 4);
      tab.upload(table.data(), table.size() * 4);

      AttentionArgs a{};
      const int64_t qs = int64_t(c.Sq) * Hq * D, ps = int64_t(page) * Hkv * D;
      a.q = dev(qd.get(), ElementType::bf16, {B, Hq, c.Sq, D}, {qs, D, Hq * D, 1});
      a.o = dev(od.get(), ElementType::bf16, {B, Hq, c.Sq, D}, {qs, D, Hq * D, 1});
      a.k = dev(kd.get(), ElementType::bf16, {num_pages, Hkv, page, D}, {ps, D, Hkv * D, 1});
      a.v = dev(vd.get(), ElementType::bf16, {num_pages, Hkv, page, D}, {ps, D, Hkv * D, 1});
      if (with_lse) {
        a.lse = dev(ld.get(), ElementType::fp32, {B, Hq, c.Sq});
      }
      a.causal = c.causal ? 1 : 0;
      a.cache_seqlens = dev(lens.get(), ElementType::int32, {B});
      a.block_table = dev(tab.get(), ElementType::int32, {B, pages_per_seq});
      if (c.snew > 0) {
        const int64_t ns = int64_t(c.snew) * Hkv * D;
        a.k_new = dev(knd.get(), ElementType::bf16, {B, Hkv, c.snew, D}, {ns, D, Hkv * D, 1});
        a.v_new = dev(vnd.get(), ElementType::bf16, {B, Hkv, c.snew, D}, {ns, D, Hkv * D, 1});
      }
      PinnedCall call(a, c.pinned);
      call.launch();
      od.download(out);
      ld.download(lse);
      CHECK(rel_err(logical(out, B, c.Sq, Hq, D), ref.o) <= 1e-2);
      if (with_lse) {
        CHECK(rel_err(values(lse), ref.lse) <= 1e-3);
      }
      if (c.snew > 0) {
        // The new rows are in the cache at cache_seqlens[b].., through the table.
        HostTensor kafter(kc.type, kc.n);
        kd.download(kafter);
        size_t wrong = 0;
        for (int b = 0; b < B; ++b) {
          for (int r = 0; r < c.snew; ++r) {
            const int j = len0[size_t(b)] + r;
            const size_t dst =
                (size_t(table[size_t(b) * pages_per_seq + size_t(j / page)]) * page + j % page) *
                Hkv * D;
            for (size_t e = 0; e < size_t(Hkv) * D; ++e) {
              wrong += kafter.get(dst + e) != kn.get((size_t(b) * c.snew + r) * Hkv * D + e);
            }
          }
        }
        CHECK(wrong == 0);
        // A second launch of the same call (the workspace's counters back at zero).
        call.launch();
        od.download(out);
        CHECK(rel_err(logical(out, B, c.Sq, Hq, D), ref.o) <= 1e-2);
      }
    }
  }
}

TEST_CASE("the GPU reference reads the tuner's paged cache as the float64 one does") {
  context();
  const Problem p = attn().make_problem(
      parse_fields("B=3,Hq=4,Hkv=2,Sq=5,Sk=300,D=72,causal=1,lse=1,paged=1,page=64", "shape"));
  const std::vector<TensorSpec> specs = attn().tensors(p);
  std::vector<cuda::DeviceBuffer> buffers;
  std::vector<CUdeviceptr> ptrs;
  std::vector<HostTensor> hosts;
  std::mt19937_64 rng(11);
  for (const TensorSpec& s : specs) {
    buffers.emplace_back(s.bytes());
    ptrs.push_back(buffers.back().get());
    HostTensor h(s.dtype, s.elements);
    if (!s.values.empty()) {
      std::memcpy(h.bytes.data(), s.values.data(), s.values.size() * 4);
    } else if (!s.output) {
      h.randomize(rng, s.lo, s.hi);
    }
    buffers.back().upload(h.bytes.data(), h.bytes.size());
    hosts.push_back(std::move(h));
  }
  const std::vector<int>& lengths = specs[specs.size() - 2].values;
  const std::vector<int>& table = specs[specs.size() - 1].values;
  const int pages_per_seq = int(table.size() / 3);
  const Reference ref =
      attention_reference_paged(hosts[0], hosts[1], hosts[2], nullptr, nullptr, 0, lengths, table,
                                pages_per_seq, 64, 4, 2, 5, 72, true, 1.0 / std::sqrt(72.0));
  cuda::DeviceBuffer ro(ref.o.size() * 4), rl(ref.lse.size() * 4);
  cuda::CompileRequest r;
  r.source = template_source(attn().reference_path());
  r.name = attn().reference_path();
  r.arch = cuda::query_device(0).arch();
  r.options = base_compile_options();
  auto compiled = cuda::compile(r);
  REQUIRE_MESSAGE(compiled.ok(), (compiled.ok() ? "" : compiled.failure().detail));
  cuda::Module m = cuda::load_module(compiled->binary);
  ArgPack args;
  attn().pack_reference(p, ptrs, {ro.get(), rl.get()}, args);
  launch_and_wait(cuda::get_function(m, attn().reference_kernel(p).c_str()),
                  attn().reference_geometry(p), args, "reference " + p.key());
  HostTensor o(DType::f32, ref.o.size()), l(DType::f32, ref.lse.size());
  ro.download(o.bytes.data(), o.bytes.size());
  rl.download(l.bytes.data(), l.bytes.size());
  // The reference writes O in q's layout [B, Sq, Hq, D].
  CHECK(rel_err(logical(o, 3, 5, 4, 72), ref.o) <= 1e-5);
  CHECK(rel_err(values(l), ref.lse) <= 1e-5);
}

TEST_CASE("contiguous KV cache with cache_leftpad from the C struct: GQA, append, causal, "
          "window, ALiBi, split-KV, out-of-range starts clamped") {
  context();
  const int B = 5, Hq = 8, Hkv = 2, D = 128, Scache = 512;
  // Off every tile; one sequence empty, one whose start is its length (no cached key), one
  // start past its length and one below 0 (both clamped: to the length, and to 0).
  const std::vector<int> len0 = {300, 1, 0, 378, 450};
  const std::vector<int> pad0 = {37, 1, 0, 1000, -5};
  std::vector<int> pad_used(pad0.size());
  for (size_t b = 0; b < pad0.size(); ++b) {
    pad_used[b] = std::clamp(pad0[b], 0, len0[b]);
  }
  const std::string split8 = "block_m=64,block_n=64,warps=4,stages=2,swizzle=xor,q=smem,splits=8";
  const std::string plain = "block_m=64,block_n=32,warps=4,stages=1,swizzle=xor,q=smem,splits=1";
  const std::string key4 = "block_m=16,block_n=64,warps=4,stages=2,swizzle=xor,q=smem,splits=4";
  const std::string key2 = "block_m=32,block_n=64,warps=4,stages=1,swizzle=pad,q=regs,splits=1";
  for (const LeftpadCase& c : {
           LeftpadCase{1, false, 0, -1, -1, false, plain},
           LeftpadCase{1, true, 1, -1, -1, false, split8}, // grouped heads as rows
           LeftpadCase{1, false, 2, -1, -1, false, key4},
           LeftpadCase{5, true, 5, -1, -1, false, plain},
           LeftpadCase{5, true, 3, 40, -1, false, split8}, // causal with a left bound
           LeftpadCase{5, false, 2, 16, 8, false, key2},   // a window on both sides
           LeftpadCase{5, true, 0, -1, -1, true, plain},   // ALiBi counts from the start
           LeftpadCase{1, false, 1, -1, -1, true, key4},
           LeftpadCase{5, false, 4, 64, 3, true, split8},
       }) {
    CAPTURE(c.Sq);
    CAPTURE(c.causal);
    CAPTURE(c.snew);
    CAPTURE(c.left);
    CAPTURE(c.right);
    CAPTURE(c.alibi);
    CAPTURE(c.pinned);
    std::mt19937_64 rng(4321 + c.Sq * 10 + c.snew + (c.alibi ? 100 : 0) + c.left);
    HostTensor q(DType::bf16, size_t(B) * c.Sq * Hq * D);
    HostTensor kc(DType::bf16, size_t(B) * Scache * Hkv * D), vc(kc.type, kc.n);
    HostTensor kn(DType::bf16, size_t(B) * std::max(1, c.snew) * Hkv * D), vn(kn.type, kn.n);
    q.randomize(rng, -2, 2);
    kc.randomize(rng, -1, 1);
    vc.randomize(rng, -1, 1);
    kn.randomize(rng, -1, 1);
    vn.randomize(rng, -1, 1);
    std::vector<float> slopes(size_t(B) * Hq);
    std::uniform_real_distribution<float> slope(0.01f, 0.3f);
    for (float& s : slopes) {
      s = slope(rng);
    }
    const bool window = c.left >= 0 || c.right >= 0;
    Features f;
    if (window) {
      f.left = c.left;
      f.right = c.right;
    }
    if (c.alibi) {
      f.slopes = &slopes;
      f.slope_batch_stride = Hq;
    }
    const double scale = 1.0 / std::sqrt(double(D));
    const Reference ref = attention_reference_leftpad(
        q, kc, vc, c.snew ? &kn : nullptr, c.snew ? &vn : nullptr, c.snew, len0, pad_used, Scache,
        Hq, Hkv, c.Sq, D, c.causal, scale, f);
    DeviceTensor qd(q), kd(kc), vd(vc), knd(kn), vnd(vn);
    HostTensor out(DType::bf16, q.n), lse(DType::f32, size_t(B) * Hq * c.Sq);
    out.poison();
    DeviceTensor od(out), ld(lse);
    cuda::DeviceBuffer lens(len0.size() * 4), pads(pad0.size() * 4), sl(slopes.size() * 4);
    lens.upload(len0.data(), len0.size() * 4);
    pads.upload(pad0.data(), pad0.size() * 4);
    sl.upload(slopes.data(), slopes.size() * 4);

    AttentionArgs a{};
    const int64_t qs = int64_t(c.Sq) * Hq * D, cs = int64_t(Scache) * Hkv * D;
    a.q = dev(qd.get(), ElementType::bf16, {B, Hq, c.Sq, D}, {qs, D, Hq * D, 1});
    a.o = dev(od.get(), ElementType::bf16, {B, Hq, c.Sq, D}, {qs, D, Hq * D, 1});
    a.k = dev(kd.get(), ElementType::bf16, {B, Hkv, Scache, D}, {cs, D, Hkv * D, 1});
    a.v = dev(vd.get(), ElementType::bf16, {B, Hkv, Scache, D}, {cs, D, Hkv * D, 1});
    a.lse = dev(ld.get(), ElementType::fp32, {B, Hq, c.Sq});
    a.causal = c.causal ? 1 : 0;
    a.cache_seqlens = dev(lens.get(), ElementType::int32, {B});
    a.cache_leftpad = dev(pads.get(), ElementType::int32, {B});
    if (window) {
      a.window = 1;
      a.window_left = c.left;
      a.window_right = c.right;
    }
    if (c.alibi) {
      a.alibi_slopes = dev(sl.get(), ElementType::fp32, {B, Hq});
    }
    if (c.snew > 0) {
      const int64_t ns = int64_t(c.snew) * Hkv * D;
      a.k_new = dev(knd.get(), ElementType::bf16, {B, Hkv, c.snew, D}, {ns, D, Hkv * D, 1});
      a.v_new = dev(vnd.get(), ElementType::bf16, {B, Hkv, c.snew, D}, {ns, D, Hkv * D, 1});
    }
    PinnedCall call(a, c.pinned);
    call.launch();
    od.download(out);
    ld.download(lse);
    CHECK(rel_err(logical(out, B, c.Sq, Hq, D), ref.o) <= 1e-2);
    CHECK(rel_err(values(lse), ref.lse) <= 1e-3);
    // The cache afterwards: the new rows at cache_seqlens[b].. (absolute rows, whatever
    // the start), every other row as it was.
    HostTensor kafter(kc.type, kc.n), vafter(vc.type, vc.n);
    kd.download(kafter);
    vd.download(vafter);
    const auto own = [](int slot) { return slot; };
    CHECK(cache_rows_changed(kafter, kc, kn, c.snew, Scache, Hkv * D, len0, own) == 0);
    CHECK(cache_rows_changed(vafter, vc, vn, c.snew, Scache, Hkv * D, len0, own) == 0);
    if (c.snew > 0) {
      // A second launch of the same call (the workspace's counters back at zero).
      call.launch();
      od.download(out);
      CHECK(rel_err(logical(out, B, c.Sq, Hq, D), ref.o) <= 1e-2);
    }
  }
}

TEST_CASE("contiguous KV cache with cache_batch_idx from the C struct: a pool of slots, "
          "append into the sequence's slot, left padding, out-of-range slots clamped") {
  context();
  const int B = 4, Bcache = 6, Hq = 8, Hkv = 2, D = 64, Scache = 384;
  const std::vector<int> len = {300, 0, 129, 377};
  const std::string plain = "block_m=64,block_n=32,warps=4,stages=1,swizzle=xor,q=smem,splits=1";
  const std::string split8 = "block_m=64,block_n=64,warps=4,stages=2,swizzle=xor,q=smem,splits=8";
  const std::string key4 = "block_m=16,block_n=64,warps=4,stages=2,swizzle=xor,q=smem,splits=4";
  struct SlotCase {
    int Sq;
    bool causal;
    int snew;
    std::vector<int> slot; // as passed; the kernel clamps into [0, Bcache)
    std::vector<int> pad;  // empty: no cache_leftpad
    std::string pinned;
  };
  for (const SlotCase& c : {
           SlotCase{1, false, 0, {4, 0, 2, 5}, {}, plain},
           SlotCase{1, true, 2, {5, 1, 3, 0}, {}, split8}, // grouped heads as rows
           SlotCase{5, true, 3, {2, 4, 0, 1}, {17, 0, 128, 0}, key4},
           SlotCase{5, false, 0, {-3, 0, 99, 3}, {}, plain}, // clamped to 0 and 5
       }) {
    CAPTURE(c.Sq);
    CAPTURE(c.causal);
    CAPTURE(c.snew);
    CAPTURE(c.pinned);
    std::mt19937_64 rng(777 + c.Sq * 10 + c.snew);
    HostTensor q(DType::bf16, size_t(B) * c.Sq * Hq * D);
    HostTensor kc(DType::bf16, size_t(Bcache) * Scache * Hkv * D), vc(kc.type, kc.n);
    HostTensor kn(DType::bf16, size_t(B) * std::max(1, c.snew) * Hkv * D), vn(kn.type, kn.n);
    q.randomize(rng, -2, 2);
    kc.randomize(rng, -1, 1);
    vc.randomize(rng, -1, 1);
    kn.randomize(rng, -1, 1);
    vn.randomize(rng, -1, 1);
    std::vector<int> slot(B, 0), pad(B, 0), cached(B, 0);
    for (size_t b = 0; b < size_t(B); ++b) {
      slot[b] = std::clamp(c.slot[b], 0, Bcache - 1);
      pad[b] = c.pad.empty() ? 0 : std::clamp(c.pad[b], 0, len[b]);
      cached[b] = len[b] - pad[b];
    }
    const double scale = 1.0 / std::sqrt(double(D));
    const Reference ref = attention_reference_cache(
        q, kc, vc, c.snew ? &kn : nullptr, c.snew ? &vn : nullptr, c.snew, cached,
        [&](int b, int j) { return size_t(slot[size_t(b)]) * Scache + size_t(pad[size_t(b)] + j); },
        Hq, Hkv, c.Sq, D, c.causal, scale, Features{});
    DeviceTensor qd(q), kd(kc), vd(vc), knd(kn), vnd(vn);
    HostTensor out(DType::bf16, q.n), lse(DType::f32, size_t(B) * Hq * c.Sq);
    out.poison();
    DeviceTensor od(out), ld(lse);
    cuda::DeviceBuffer lens(len.size() * 4), slots(c.slot.size() * 4), pads(size_t(B) * 4);
    lens.upload(len.data(), len.size() * 4);
    slots.upload(c.slot.data(), c.slot.size() * 4);
    if (!c.pad.empty()) {
      pads.upload(c.pad.data(), c.pad.size() * 4);
    }

    AttentionArgs a{};
    const int64_t qs = int64_t(c.Sq) * Hq * D, cs = int64_t(Scache) * Hkv * D;
    a.q = dev(qd.get(), ElementType::bf16, {B, Hq, c.Sq, D}, {qs, D, Hq * D, 1});
    a.o = dev(od.get(), ElementType::bf16, {B, Hq, c.Sq, D}, {qs, D, Hq * D, 1});
    a.k = dev(kd.get(), ElementType::bf16, {Bcache, Hkv, Scache, D}, {cs, D, Hkv * D, 1});
    a.v = dev(vd.get(), ElementType::bf16, {Bcache, Hkv, Scache, D}, {cs, D, Hkv * D, 1});
    a.lse = dev(ld.get(), ElementType::fp32, {B, Hq, c.Sq});
    a.causal = c.causal ? 1 : 0;
    a.cache_seqlens = dev(lens.get(), ElementType::int32, {B});
    a.cache_batch_idx = dev(slots.get(), ElementType::int32, {B});
    if (!c.pad.empty()) {
      a.cache_leftpad = dev(pads.get(), ElementType::int32, {B});
    }
    if (c.snew > 0) {
      const int64_t ns = int64_t(c.snew) * Hkv * D;
      a.k_new = dev(knd.get(), ElementType::bf16, {B, Hkv, c.snew, D}, {ns, D, Hkv * D, 1});
      a.v_new = dev(vnd.get(), ElementType::bf16, {B, Hkv, c.snew, D}, {ns, D, Hkv * D, 1});
    }
    PinnedCall call(a, c.pinned);
    call.launch();
    od.download(out);
    ld.download(lse);
    CHECK(rel_err(logical(out, B, c.Sq, Hq, D), ref.o) <= 1e-2);
    CHECK(rel_err(values(lse), ref.lse) <= 1e-3);
    // The cache afterwards: sequence b's new rows in slot slot[b] at rows len[b].., every
    // other row (the slots no sequence uses included) as it was.
    HostTensor kafter(kc.type, kc.n), vafter(vc.type, vc.n);
    kd.download(kafter);
    vd.download(vafter);
    const auto owner = [&](int s) {
      const auto it = std::find(slot.begin(), slot.end(), s);
      return it == slot.end() ? -1 : int(it - slot.begin());
    };
    CHECK(cache_rows_changed(kafter, kc, kn, c.snew, Scache, Hkv * D, len, owner) == 0);
    CHECK(cache_rows_changed(vafter, vc, vn, c.snew, Scache, Hkv * D, len, owner) == 0);
  }
}
