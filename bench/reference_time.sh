#!/bin/bash
# Seconds the tuner spends on the attention reference (templates/attention/reference.cuh)
# for three large problems, per template tree: the worker's `inputs` (random inputs and
# one reference), and the phases setup and recheck (a reference each), from
# `autotune --json` tuning one fixed variant with --force. Each tree runs twice,
# interleaved. Results: bench/notes/untuned-shapes.md.
#
#   bash bench/reference_time.sh new DIR...   (on the GPU machine, bundle in .device/)
# new: the templates built into the bundle; DIR: a tree holding templates/ (e.g. a
# `git archive OLD templates` extracted there), read through AUTOTUNE_TEMPLATE_DIR.
set -euo pipefail
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$PWD/.device
P=(--param family=mma --param block_m=64 --param block_n=64 --param warps=4 --param stages=2
   --param swizzle=xor --param q=smem --param splits=1)
for S in "B=1,Hq=32,Hkv=32,Sq=16384,Sk=16384,D=64,causal=0,dtype=bf16" \
         "B=1,Hq=16,Hkv=16,Sq=16384,Sk=16384,D=128,causal=1,dtype=fp16" \
         "B=2,Hq=16,Hkv=16,Sq=4096,Sk=4096,D=256,causal=0,dtype=bf16"; do
  for T in "$@" "$@"; do
    if [ "$T" = new ]; then
      unset AUTOTUNE_TEMPLATE_DIR
    else
      export AUTOTUNE_TEMPLATE_DIR=$(cd "$T" && pwd)/templates
    fi
    db=$(mktemp -u /tmp/reference-time-XXXXXX.db)
    .device/autotune --arch auto --op attention --shape "$S" --db "$db" --strategy exhaustive \
      --force "${P[@]}" --json > "$db.json"
    python3 - "$T" "$S" "$db.json" <<'PY'
import json, sys
tree, shape, path = sys.argv[1:]
for p in json.load(open(path))["problems"]:
    print(tree, shape, "setup", round(p["phases_s"]["setup"], 2), "recheck",
          round(p["phases_s"]["recheck"], 2), "inputs", round(p["worker_s"]["inputs"], 2))
PY
    rm -f "$db" "$db.json"
  done
done
