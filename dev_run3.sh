#!/usr/bin/env bash
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$PWD/.device
timeout 150 ./.device/autotune --arch auto --op causal_conv1d --shape "B=8,C=4096,L=2048,W=4,layout=blc" --shape "B=2,C=4096,L=3000,W=4,layout=blc" --strategy exhaustive --param "vec=4" --param "items=4|8|16" --param "threads=32|64|128" --db /tmp/t3.db --json --quiet > $OUT/tune3.json; python3 - <<'PY'
import json,os
d=json.load(open(os.environ["OUT"]+"/tune3.json"))
for p in d["problems"]:
    vs=sorted([v for v in p["variants"] if v.get("median_us")], key=lambda v:v["median_us"])
    print(p.get("problem")[:24], "copy", p.get("copy_us"))
    for v in vs: print("  ", v["variant"], v["median_us"], round(100*p["copy_us"]/v["median_us"],1))
PY
timeout 120 ncu --clock-control none --kernel-name regex:causal_conv1d --launch-skip 3 --launch-count 1 --section SpeedOfLight --section Occupancy --section WarpStateStats --section MemoryWorkloadAnalysis python3 bench/profile_call.py causal_conv1d "B=8,C=4096,L=2048,W=4,layout=blc" --policy pin:threads=64,vec=4,items=4,cpb=1,load=direct 2>&1 | grep -E "variant|DRAM Throughput|Memory Throughput|Duration|Achieved Occupancy|Registers Per|Theoretical Occ|Stall|Warp Cycles Per Issued|Eligible|L2 Hit|Mem Busy|Max Bandwidth|Block Limit" | head -40
