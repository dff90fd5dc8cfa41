#!/usr/bin/env bash
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$PWD/.device
echo "== tune"; timeout 200 ./.device/autotune --arch auto --op causal_conv1d --shape "B=8,C=4096,L=2048,W=4,layout=blc" --shape "B=1,C=4096,L=16383,W=4,layout=blc" --shape "B=2,C=4096,L=3000,W=4,layout=blc" --shape "B=64,C=1536,L=333,W=2,layout=blc" --shape "B=2,C=768,L=2047,W=4,layout=blc" --strategy exhaustive --db /tmp/t.db --json --quiet > $OUT/tune_blc.json; python3 - <<'PY'
import json,os
d=json.load(open(os.environ["OUT"]+"/tune_blc.json"))
for p in d["problems"]:
    vs=sorted([v for v in p["variants"] if v.get("median_us")], key=lambda v:v["median_us"])
    print(p.get("problem"), "copy", p.get("copy_us"))
    for v in vs[:5]: print("  ", v["variant"], v["median_us"], round(100*p["copy_us"]/v["median_us"],1))
    print("   worst", vs[-1]["variant"], vs[-1]["median_us"], "n", len(vs))
PY
echo "== GPU tests conv"; timeout 200 ./.device/autotune_gpu_tests -sf="*test_gpu_causal_conv1d*" 2>&1 | grep -E "ERROR|FAILED|CHECK|test cases|assertions|Status" | head -30
