#!/usr/bin/env bash
# The benchmark run of one op on the GPU machine, over a bundle made here with
# ./scripts/device-bundle.sh (carried as .device/):
#   [BENCH_ARGS="--rep 100"] [STEP=tune|bench] bash bench/run_on_device.sh OP
#     [autotune options, e.g. --strategy halving --budget-s 20]
# STEP splits a run that would outlast one device call (10 minutes) into two calls on
# the same warm machine: STEP=tune fills the database, STEP=bench (same options) then
# measures from it. STEP=resume is STEP=tune on the database a cut-off tune left
# (variants already measured are not measured again).
# Tunes OP's benchmark shapes into a fresh database, then runs bench/bench_OP.py,
# which measures the winners beside their peers in one process. Results (and the
# tuning report) go to $OUT when set (the device tool brings that folder back),
# else to bench/results; copy them into bench/results/ and commit them.
set -euo pipefail
cd "$(dirname "$0")/.."
op=${1:?usage: run_on_device.sh OP [autotune options]}
shift
out=${OUT:-bench/results}
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$PWD/.device:${LD_LIBRARY_PATH:-}
export AUTOTUNE_DB=${AUTOTUNE_DB:-/tmp/autotune-bench-$op.db}
export PYTHONUNBUFFERED=1
step=${STEP:-all}
commit=$(cat .device/COMMIT 2>/dev/null || echo unknown)
# attention_features (flash-attn's features: head dims 96/256, a sliding window, varlen,
# paged decode) tunes its own shapes: bench/bench_attention_features.py runs `autotune --op
# attention --shape ...` with the options given here, STEP as above (tune|resume:
# --tune-only, bench: --bench-only), SECTIONS=a,b,c,d (default all) picks its sections.
# All of it outlasts one call: STEP=tune SECTIONS=a, then STEP=resume SECTIONS=b,c,d,
# then STEP=bench (the script's docstring has the times).
if [ "$op" = attention_features ]; then
  [ "$step" = resume ] || [ "$step" = bench ] || rm -f "$AUTOTUNE_DB"
  mode=""
  case "$step" in
    tune | resume) mode=--tune-only ;;
    bench) mode=--bench-only ;;
  esac
  # shellcheck disable=SC2086 # BENCH_ARGS is a list of options
  python3 bench/bench_attention_features.py --lib .device/libautotune.so \
    --autotune .device/autotune --db "$AUTOTUNE_DB" --out "$out" --commit "$commit" \
    ${SECTIONS:+--only "$SECTIONS"} ${mode:+"$mode"} --tune-args="$*" ${BENCH_ARGS:-} \
    --command "STEP=$step SECTIONS=${SECTIONS:-} BENCH_ARGS=\"${BENCH_ARGS:-}\" bash bench/run_on_device.sh $op $*"
  if [ -z "$mode" ] || [ "$mode" = --bench-only ]; then
    tail -n 80 "$out"/*-attention-features.md || true
  fi
  exit 0
fi
if [ "$step" != bench ]; then
  [ "$step" = resume ] || rm -f "$AUTOTUNE_DB"
  start=$(date +%s)
  .device/autotune --arch auto --op "$op" "$@" --quiet >"$out/tune-$op.txt"
  echo "tuned $op in $(($(date +%s) - start)) s"
  [ "$step" = tune ] || [ "$step" = resume ] && exit 0
fi
# shellcheck disable=SC2086 # BENCH_ARGS is a list of options
python3 "bench/bench_$op.py" --lib .device/libautotune.so --db "$AUTOTUNE_DB" --out "$out" \
  --commit "$commit" ${BENCH_ARGS:-} \
  --command "autotune --arch auto --op $op $* && python3 bench/bench_$op.py --lib .device/libautotune.so --db \$AUTOTUNE_DB --out bench/results ${BENCH_ARGS:-} (bench/run_on_device.sh $op $*)"
tail -n 70 "$out"/*-"$op".md
