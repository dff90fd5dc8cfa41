#!/usr/bin/env bash
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$PWD/.device
nvidia-smi --query-gpu=name --format=csv,noheader
echo "== GPU tests conv"; timeout 200 ./.device/autotune_gpu_tests -sf="*test_gpu_causal_conv1d*" 2>&1 | grep -E "ERROR|FAILED|CHECK|variants checked|test cases|assertions|Status" | head -60
echo "== python conv"; timeout 120 python3 tests/python/run_gpu.py --lib .device/libautotune.so --out $OUT --only conv 2>&1 | tail -8
echo "== layouts"; timeout 150 python3 bench/conv_layouts.py --lib new=.device/libautotune.so --layouts channel_last,mamba2_xbc --rounds 1 --out $OUT 2>&1 | tail -30
echo "== tune"; timeout 100 ./.device/autotune --arch auto --op causal_conv1d --shape "B=8,C=4096,L=2048,W=4,layout=blc" --shape "B=64,C=1536,L=333,W=2,layout=blc" --strategy exhaustive --db /tmp/t.db --json --quiet > $OUT/tune_blc.json; python3 - <<'PY'
import json,os
d=json.load(open(os.environ["OUT"]+"/tune_blc.json"))
for p in d["problems"]:
    vs=sorted([v for v in p["variants"] if v.get("median_us")], key=lambda v:v["median_us"])
    print(p.get("problem"), "copy", p.get("copy_us"))
    for v in vs[:6]: print("  ", v["variant"], v["median_us"])
    print("   worst", vs[-1]["variant"], vs[-1]["median_us"], "n", len(vs))
PY
