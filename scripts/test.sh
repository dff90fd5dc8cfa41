#!/usr/bin/env bash
# Builds, checks the formatting (scripts/check-format.sh) and runs the test suite.
# Without a GPU the GPU tests report themselves skipped; on a GPU machine they run.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/build.sh
./scripts/check-format.sh
ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure
