#!/usr/bin/env bash
# One GPU-machine run for the Hopper attention family (issue 17): the wgmma GPU tests,
# then every wgmma variant of a few FlashAttention-grid shapes (--strategy exhaustive,
# family=wgmma; WGMMA_FAMILY=wgmma_pingpong for the other) beside the portable family's tuned H100 winner for the same shape (its
# [[heuristic]] point in templates/attention/space.toml), each in its own database.
# Usage (bundle built with scripts/device-bundle.sh into BUNDLE):
#   BUNDLE=.device-h1 bench/attention_hopper_device.sh [tests|time|all]
set -uo pipefail
bundle="${BUNDLE:-.device}"
out="${OUT:-/tmp}"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$PWD/$bundle:${LD_LIBRARY_PATH:-}
what="${1:-all}"
if [[ "$what" == tests || "$what" == all ]]; then
  "$bundle"/autotune_gpu_tests -tc="*Hopper*" 2>&1 | tail -40
fi
if [[ "$what" == time || "$what" == all ]]; then
  # shape | the portable winner (space.toml [[heuristic]])
  while IFS='|' read -r shape mma; do
    [[ -z "$shape" ]] && continue
    for fam in wgmma mma; do
      if [[ $fam == wgmma ]]; then
        params=(--param "family=${WGMMA_FAMILY:-wgmma}")
      else
        params=()
        IFS=',' read -ra kv <<<"$mma"
        for p in "${kv[@]}"; do params+=(--param "$p"); done
      fi
      "$bundle"/autotune --arch auto --op attention --strategy exhaustive --quiet \
        --db "$out/hopper-$fam.db" --shape "$shape" "${params[@]}" --json \
        >"$out/hopper-$fam-$(echo "$shape" | tr ',=' '__').json" 2>"$out/err-$fam.txt" ||
        { echo "FAILED $fam $shape"; tail -5 "$out/err-$fam.txt"; }
    done
  done <<'SHAPES'
B=4,H=16,S=4096,D=128,causal=0,dtype=bf16|block_m=256,block_n=64,warps=8,stages=1,swizzle=pad,q=smem,splits=1,family=mma
B=4,H=16,S=4096,D=128,causal=1,dtype=bf16|block_m=128,block_n=64,warps=4,stages=1,swizzle=pad,q=smem,splits=1,family=mma
B=4,H=32,S=4096,D=64,causal=0,dtype=bf16|block_m=128,block_n=64,warps=4,stages=1,swizzle=xor,q=regs,splits=1,family=mma
B=32,H=16,S=512,D=128,causal=0,dtype=fp16|block_m=128,block_n=64,warps=4,stages=1,swizzle=pad,q=smem,splits=1,family=mma
B=16,H=96,S=512,D=64,causal=0,dtype=fp16,layout=bhsd|block_m=128,block_n=128,warps=4,stages=1,swizzle=pad,q=smem,splits=1,family=mma
B=4,H=32,S=4096,D=64,causal=1,dtype=bf16|block_m=128,block_n=96,warps=4,stages=1,swizzle=xor,q=smem,splits=1,family=mma
B=1,H=16,S=16384,D=128,causal=0,dtype=bf16|block_m=256,block_n=64,warps=8,stages=1,swizzle=pad,q=smem,splits=1,family=mma
B=8,H=16,S=2048,D=128,causal=0,dtype=fp16|block_m=256,block_n=64,warps=8,stages=1,swizzle=pad,q=smem,splits=1,family=mma
SHAPES
  python3 - "$out" <<'PY'
import json, sys, glob, os
out = sys.argv[1]
for f in sorted(glob.glob(os.path.join(out, "hopper-*.json"))):
    try:
        data = json.load(open(f))
    except Exception as e:
        print(f, "unreadable", e); continue
    for p in data.get("problems", []):
        flops = p.get("flops") or 0
        vs = p.get("variants", [])
        ok = sorted([v for v in vs if v.get("outcome") == "OK"], key=lambda v: v["median_us"])
        bad = [v for v in vs if v.get("outcome") != "OK"]
        print(os.path.basename(f), p.get("problem"), "ok", len(ok), "not ok", len(bad),
              sorted(set(v.get("outcome") for v in bad)))
        for v in bad[:3]:
            print("   ", v.get("outcome"), v.get("variant"), (v.get("message") or "")[:300], v.get("rel_err"))
        for v in ok[:4]:
            us = v["median_us"]
            print("   %9.1f us %7.1f TFLOP/s  %s" % (us, flops / (us * 1e6) if us else 0, v.get("variant")))
PY
fi
