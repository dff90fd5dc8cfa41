#!/usr/bin/env bash
# Installs what autotune builds against on Debian 12 (bookworm). The CUDA toolkit
# (NVRTC, headers) is expected at ${CUDA_HOME:-/usr/local/cuda}; everything else
# comes from Debian's packages. Safe to run again: apt-get skips what is there.
set -euo pipefail
pkgs=(cmake ninja-build g++ pkg-config libsqlite3-dev doctest-dev libtomlplusplus-dev llvm-14-tools python3
  clang-format)
# One test renders the HTML report in headless Chromium (tests/report/check_render.py).
# Chromium is large, so it comes where every test must run: in CI (CI=true), or when
# asked with AUTOTUNE_WITH_CHROMIUM=1. Elsewhere that test reports itself skipped; in CI
# it fails without Chromium.
wants_chromium() {
  case "${CI:-}" in true | 1 | yes) return 0 ;; esac
  [ "${AUTOTUNE_WITH_CHROMIUM:-0}" = 1 ]
}
if wants_chromium; then
  pkgs+=(chromium fonts-dejavu-core)
fi
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
cuda="${CUDA_HOME:-/usr/local/cuda}"
if [ ! -f "$cuda/include/nvrtc.h" ]; then
  echo "setup-debian.sh: the CUDA toolkit was not found at $cuda (need include/nvrtc.h); set CUDA_HOME" >&2
  exit 2
fi
