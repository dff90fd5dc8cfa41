#!/usr/bin/env bash
# The main job: build, then tune causal_conv1d's default shapes on this machine's
# GPU and store the winners in the default database. Extra arguments go to autotune.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/build.sh
exec "${BUILD_DIR:-build}/autotune" --arch auto --op causal_conv1d "$@"
