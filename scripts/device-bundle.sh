#!/usr/bin/env bash
# Collects what the GPU machine needs into .device/ (git-ignored; name it in the
# device tool's `carry`): the CLI, the runtime library, the GPU tests, the
# examples, and libsqlite3 (the GPU machine has no SQLite). Stripped, no NVRTC.
set -euo pipefail
cd "$(dirname "$0")/.."
build="${BUILD_DIR:-build}"
rm -rf .device && mkdir -p .device
cp "$build"/autotune "$build"/libautotune.so.0 "$build"/tests/autotune_gpu_tests \
   "$build"/examples/conv1d_example "$build"/examples/conv1d_example_c .device/
ln -s libautotune.so.0 .device/libautotune.so
cp -L "$(ldconfig -p | awk '/libsqlite3.so.0 .*x86-64/ {print $NF; exit}')" .device/libsqlite3.so.0
strip .device/autotune .device/autotune_gpu_tests .device/conv1d_example .device/conv1d_example_c \
  .device/libautotune.so.0
du -sh .device
