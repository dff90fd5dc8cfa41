#!/usr/bin/env bash
# Configures and builds autotune (Release) into ${BUILD_DIR:-build}, after installing
# the Debian packages it needs.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup-debian.sh
build="${BUILD_DIR:-build}"
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DAUTOTUNE_WERROR=ON
cmake --build "$build"
