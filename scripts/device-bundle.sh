#!/usr/bin/env bash
# Collects what the GPU machine needs into ${BUNDLE_DIR:-.device}/ (git-ignored as
# /.device*/; name it in the device tool's `carry`): the CLI, the runtime library, the GPU tests, the
# examples, and libsqlite3 (the GPU machine has no SQLite). Stripped, no NVRTC.
set -euo pipefail
cd "$(dirname "$0")/.."
build="${BUILD_DIR:-build}"
out="${BUNDLE_DIR:-.device}"
case "$out" in .device*) ;; *) echo "BUNDLE_DIR must start with .device (git-ignored)" >&2; exit 2;; esac
rm -rf "$out" && mkdir -p "$out"
cp "$build"/autotune "$build"/libautotune.so.0 "$build"/tests/autotune_gpu_tests \
   "$build"/examples/conv1d_example "$build"/examples/conv1d_example_c \
   "$build"/autotune_dispatch_bench "$out"/
ln -s libautotune.so.0 "$out"/libautotune.so
cp -L "$(ldconfig -p | awk '/libsqlite3.so.0 .*x86-64/ {print $NF; exit}')" "$out"/libsqlite3.so.0
strip "$out"/autotune "$out"/autotune_gpu_tests "$out"/autotune_dispatch_bench "$out"/conv1d_example "$out"/conv1d_example_c \
  "$out"/libautotune.so.0
# The commit the bundle was built from (+dirty when the tree had changes), for results.
{ git rev-parse --short HEAD 2>/dev/null || echo unknown; } | tr -d '\n' >"$out"/COMMIT
git diff --quiet HEAD 2>/dev/null || echo -n "+dirty" >>"$out"/COMMIT
du -sh "$out"
