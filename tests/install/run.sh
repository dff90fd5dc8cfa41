#!/usr/bin/env bash
# The installed package as its users meet it (ctest: install_consumers). Installs the
# build into a temporary prefix, then, from copies outside the source tree:
#   - builds cxx/ with find_package(autotune VERSION) + autotune::autotune, and checks
#     that asking for another major version is refused (the version file);
#   - builds c/main.c with `pkg-config --cflags --libs autotune`;
#   - runs both: exit 0 on a GPU machine, else exit 3 with the library's no-GPU message;
#   - moves the prefix elsewhere and does it all again (relocatable), with the installed
#     CLI run from there and no installed file naming the old prefix.
#
#   run.sh BUILD_DIR CMAKE GENERATOR C_COMPILER CXX_COMPILER LIBDIR VERSION
set -euo pipefail
build=$1 cmake=$2 generator=$3 cc=$4 cxx=$5 libdir=$6 version=$7
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/autotune-install.XXXXXX")
trap 'rm -rf "$work"' EXIT
# The consumers read no tuning database of the user's.
export AUTOTUNE_DB="$work/no-such.db"

fail() {
  echo "install test: $*" >&2
  exit 1
}

# Runs LOG-producing COMMAND...; on failure shows its output and fails with WHAT.
quiet() {
  local what=$1 log=$2
  shift 2
  "$@" >"$log" 2>&1 || {
    cat "$log" >&2
    fail "$what failed: $*"
  }
}

# A consumer either runs (a GPU is present) or stops at the no-GPU exit with the
# library's message; any other outcome fails.
check_run() {
  local name=$1 program=$2 rc=0
  "$program" >"$work/$name.out" 2>&1 || rc=$?
  cat "$work/$name.out"
  case $rc in
  0) ;;
  3) grep -Eq 'CUDA driver|cuInit|no GPU' "$work/$name.out" ||
    fail "$name exited 3 without the library's no-GPU message" ;;
  *) fail "$name exited $rc (expected 0 with a GPU, 3 without)" ;;
  esac
}

# Builds and runs both consumers against the package installed at PREFIX.
consume() {
  local prefix=$1 tag=$2
  local cxx_build="$work/build-cxx-$tag"
  quiet "configuring the find_package consumer ($tag)" "$work/cxx-configure-$tag.log" \
    "$cmake" -S "$work/src/cxx" -B "$cxx_build" -G "$generator" \
    -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_PREFIX_PATH="$prefix" \
    -DAUTOTUNE_WANTED_VERSION="$version"
  grep -q "found autotune $version in $prefix/" "$work/cxx-configure-$tag.log" ||
    fail "find_package did not find autotune $version under $prefix: $(cat "$work/cxx-configure-$tag.log")"
  quiet "building the find_package consumer ($tag)" "$work/cxx-build-$tag.log" \
    "$cmake" --build "$cxx_build"
  check_run "cxx_consumer ($tag)" "$cxx_build/cxx_consumer"

  local flags pc_libdir
  export PKG_CONFIG_PATH="$prefix/$libdir/pkgconfig"
  flags=$(pkg-config --cflags --libs autotune) || fail "pkg-config does not find autotune in $PKG_CONFIG_PATH"
  [ "$(pkg-config --modversion autotune)" = "$version" ] || fail "pkg-config reports version $(pkg-config --modversion autotune), expected $version"
  pc_libdir=$(pkg-config --variable=libdir autotune)
  [ "$(cd "$pc_libdir" && pwd -P)" = "$(cd "$prefix/$libdir" && pwd -P)" ] ||
    fail "pkg-config's libdir $pc_libdir is not $prefix/$libdir"
  # shellcheck disable=SC2086 # flags is a list of compiler options
  quiet "building the pkg-config consumer ($tag)" "$work/c-build-$tag.log" \
    "$cc" -std=c11 -Wall -Wextra -Wpedantic -Werror "$work/src/c/main.c" $flags \
    -Wl,-rpath,"$pc_libdir" -o "$work/c_consumer-$tag"
  check_run "c_consumer ($tag)" "$work/c_consumer-$tag"
}

command -v pkg-config >/dev/null || fail "pkg-config is not installed (scripts/setup-debian.sh installs it)"
first="$work/prefix"
quiet "cmake --install $build --prefix $first" "$work/install.log" \
  "$cmake" --install "$build" --prefix "$first"
for f in include/autotune/autotune.h include/autotune/autotune.hpp \
  "$libdir/cmake/autotune/autotuneConfig.cmake" "$libdir/cmake/autotune/autotuneConfigVersion.cmake" \
  "$libdir/pkgconfig/autotune.pc" bin/autotune; do
  [ -e "$first/$f" ] || fail "the install lacks $f"
done

# Consumers are built from copies, so nothing of the source tree is on any path.
mkdir -p "$work/src"
cp -r "$here/cxx" "$here/c" "$work/src/"
consume "$first" installed

# Another major version must be refused by the version file.
major=${version%%.*}
if "$cmake" -S "$work/src/cxx" -B "$work/build-cxx-wrong-version" -G "$generator" \
  -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_PREFIX_PATH="$first" \
  -DAUTOTUNE_WANTED_VERSION="$((major + 1)).0" >"$work/wrong-version.log" 2>&1; then
  cat "$work/wrong-version.log" >&2
  fail "find_package(autotune $((major + 1)).0) accepted version $version"
fi
grep -q "$version" "$work/wrong-version.log" ||
  fail "the refusal of version $((major + 1)).0 does not name the installed $version: $(cat "$work/wrong-version.log")"

# Relocatable: the same tree under another name still works and never names the old one.
moved="$work/elsewhere/autotune-moved"
mkdir -p "$work/elsewhere"
mv "$first" "$moved"
if grep -rlF -- "$first" "$moved"; then
  fail "the installed files above name the install prefix $first: the package is not relocatable"
fi
"$moved/bin/autotune" --version | grep -q "autotune $version" ||
  fail "the installed CLI does not run from the moved prefix $moved"
consume "$moved" moved
echo "install test: C++ (find_package) and C (pkg-config) consumers built and ran from $first and, moved, from $moved"
