#!/usr/bin/env bash
# qkv's two commands (and the steps under them). On a fresh Debian machine it
# installs what is missing, builds, then trains or tests.
#
#   ./qkv.sh train [args]   set up, build the program (Release), train the default model (args go to
#                           qkv train, run from the directory qkv.sh was started in, so its paths are
#                           the caller's)
#   ./qkv.sh test           set up, build, run the whole suite through ctest:
#                           Release, then Debug with AddressSanitizer + UBSan
#   ./qkv.sh build          set up and build Release only (everything: library, program, suite)
#
# Environment: QKV_SANITIZE=0 skips the sanitizer pass of `test` (quicker
# local runs; CI always runs it). QKV_JOBS sets build parallelism.
# QKV_CUDA=AUTO|ON builds the CUDA backend (CMake's default is OFF until the
# kernels have run on a GPU: see docs/devices.md). QKV_ARM_CI=1 makes `test`
# also cross-build for aarch64 and run a subset of the suite under qemu
# (tests/arm/check.sh; about 8 more minutes on 2 cores). On an aarch64
# Debian machine the same commands build and test natively.
set -euo pipefail
caller=$PWD  # train's arguments (--data notes.txt, --save x) name files from where it was started
cd "$(dirname "$(readlink -f "$0")")"
root=$PWD

PACKAGES=(cmake g++ make libopenblas-openmp-dev catch2 libcxxopts-dev libxsimd-dev libopenmpi-dev openmpi-bin nlohmann-json3-dev libpcre2-dev pkgconf graphviz libjs-dygraphs python3-xstatic-dagre)
# Only the suite needs these: a real browser for the pages' tests (tests/browser/), and Python to drive it.
TEST_PACKAGES=(chromium python3 libxml2-utils qemu-user)
# QKV_ARM_CI=1's too: Debian's cross compiler and the arm64 builds of the libraries qkv links, and of the C++
# runtime the binaries load (cmake/aarch64-linux-gnu.cmake says why not the cross toolchain's own). MPI stays
# off there: libopenmpi-dev:arm64 cannot be installed beside the host's.
ARM_PACKAGES=(g++-aarch64-linux-gnu libopenblas-openmp-dev:arm64 libxsimd-dev:arm64 libpcre2-dev:arm64 libstdc++6:arm64)
JOBS="${QKV_JOBS:-$(nproc)}"

# Each step with the seconds since the start, so a slow step (and CI's time budget) shows in the log.
log() { printf '\033[1m==> [%4d s] %s\033[0m\n' "$SECONDS" "$*" >&2; }

install_packages() {  # install_packages [extra packages...]
  local missing=()
  for p in "${PACKAGES[@]}" "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  log "installing Debian packages: ${missing[*]}"
  local sudo=()
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { echo "qkv.sh: need root (or sudo) to install: ${missing[*]}" >&2; exit 1; }
    sudo=(sudo)
  fi
  # An arm64 package needs its architecture known to dpkg before apt-get reads the package lists.
  if [[ " ${missing[*]}" == *:arm64* ]] && ! dpkg --print-foreign-architectures | grep -qx arm64; then
    "${sudo[@]}" dpkg --add-architecture arm64
  fi
  "${sudo[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
}

build() {  # build DIR [cmake args...]: everything, or only $TARGET where it is set
  local dir=$1; shift
  log "configuring $dir"
  # Quiet but for qkv's own lines: whether MPI and the CUDA backend are built in.
  cmake -S . -B "$dir" ${QKV_CUDA:+-DQKV_CUDA="$QKV_CUDA"} "$@" | { grep '^-- qkv:' || true; }
  log "building ${TARGET:-everything} in $dir ($JOBS jobs)"
  cmake --build "$dir" -j "$JOBS" ${TARGET:+--target "$TARGET"}
}

run_tests() {  # run_tests DIR
  log "testing $1"
  # One test more than the build's jobs: some tests wait on a browser, a signal or a timer, and leave a
  # core idle (on 2 cores, 3 at a time took the Release pass from 124 to 113 s, the sanitized from 200 to 181).
  ctest --test-dir "$1" --output-on-failure -j "$((JOBS + 1))"
}

command=${1:-}
[ $# -gt 0 ] && shift
# build and test take no arguments (a ctest filter there would still run the whole suite, silently).
if [ "$command" = build ] || [ "$command" = test ]; then
  [ $# -eq 0 ] || { echo "qkv.sh $command takes no arguments, got: $*" >&2; exit 2; }
fi
case "$command" in
  build)
    install_packages
    build build/release -DCMAKE_BUILD_TYPE=Release
    ;;
  train)
    install_packages
    # The program and the library under it, not the suite: a newcomer's first model in about two minutes.
    TARGET=qkv_cli build build/release -DCMAKE_BUILD_TYPE=Release
    log "training: build/release/qkv train $*"
    cd "$caller"
    "$root/build/release/qkv" train "$@"
    ;;
  test)
    extra=("${TEST_PACKAGES[@]}")
    [ "${QKV_ARM_CI:-0}" = 1 ] && extra+=("${ARM_PACKAGES[@]}")
    install_packages "${extra[@]}"
    build build/release -DCMAKE_BUILD_TYPE=Release
    run_tests build/release
    if [ "${QKV_SANITIZE:-1}" != 0 ]; then
      # A unity build (CMake joins each target's files, 8 to a translation
      # unit): the headers' templates are instrumented once per batch instead
      # of once per file, which halved this build (276 -> ~140 s on 2 cores).
      # The Release build stays one file at a time, so each file is still
      # checked to compile on its own includes.
      build build/sanitize -DCMAKE_BUILD_TYPE=Debug -DQKV_SANITIZE=ON -DCMAKE_UNITY_BUILD=ON
      run_tests build/sanitize
    fi
    if [ "${QKV_ARM_CI:-0}" = 1 ]; then
      log "aarch64, cross-built and emulated (QKV_ARM_CI=1)"
      # Past 45 minutes something is wrong (it takes about 8): stop rather than hold CI's runner.
      timeout --kill-after=30 2700 bash tests/arm/check.sh build/aarch64
    fi
    ;;
  *)
    echo "usage: ./qkv.sh train|test|build" >&2
    exit 2
    ;;
esac
