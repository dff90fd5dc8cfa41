#!/usr/bin/env bash
for d in .device_old .device; do
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$PWD/$d
echo "=== $d"
timeout 140 ./$d/autotune --arch auto --op causal_conv1d --shape "B=4,C=2560,L=2047,W=4,layout=blc" --shape "B=8,C=1536,L=1001,W=4,layout=blc" --shape "B=16,C=2048,L=333,W=4,layout=blc" --shape "B=2,C=768,L=2048,W=4,layout=blc" --shape "B=8,C=4096,L=2048,W=4,layout=blc" --shape "B=2,C=4096,L=3000,W=4,layout=blc" --shape "B=64,C=1536,L=333,W=2,layout=blc" --strategy exhaustive --param "threads=64|128" --db /tmp/t9$d.db --json --quiet > $OUT/tune9$d.json; python3 - $d <<'PY'
import json,os,sys
d=json.load(open(os.environ["OUT"]+"/tune9"+sys.argv[1]+".json"))
for p in d["problems"]:
    vs=sorted([v for v in p["variants"] if v.get("median_us")], key=lambda v:v["median_us"])
    f=lambda v: "/".join(x.split("=")[1] for x in v["variant"].split(",")[:3])
    print(p.get("problem")[:24], "copy", p.get("copy_us"), " ".join(f'{f(v)}:{round(100*p["copy_us"]/v["median_us"],1)}' for v in vs[:4]))
PY
done
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$PWD/.device
echo "== GPU tests conv"; timeout 240 ./.device/autotune_gpu_tests -sf="*test_gpu_causal_conv1d*" 2>&1 | grep -E "ERROR|FAILED|CHECK|values|test cases|assertions|Status" | head -20
