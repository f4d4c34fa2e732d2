#!/usr/bin/env bash
# qkv on 64-bit ARM, emulated: a cross build (cmake/aarch64-linux-gnu.cmake,
# Debian's cross compiler and arm64 libraries) run under qemu-user's
# qemu-aarch64 on this x86-64 machine. It runs the NEON level's SIMD tests
# (ULP bounds), the sgemm tests (NEON's own micro-kernel: bounds, and the same
# bits at 1, 2, 3, 5 and 16 threads), the float64 gradient checks and the
# PyTorch fixtures, at 1 and at 2 OpenMP threads; then the program: its
# kernels and a short training run on 2 threads. Emulated, so correctness
# only: no timing means anything here. ./qkv.sh test runs it when
# QKV_ARM_CI=1 (README: "On 64-bit ARM"), after installing its packages.
# usage: tests/arm/check.sh [BUILD_DIR]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$(realpath -m "${1:-$root/build/aarch64}")
jobs=${QKV_JOBS:-$(nproc)}
log() { printf '\033[1m==> [%4d s] arm: %s\033[0m\n' "$SECONDS" "$*" >&2; }
fail() { echo "arm: FAILED: $*" >&2; exit 1; }

# The cross compiler, qemu and the arm64 libraries: ./qkv.sh installs them (its ARM_PACKAGES) with QKV_ARM_CI=1.
for tool in aarch64-linux-gnu-g++ qemu-aarch64; do
  command -v $tool >/dev/null || fail "no $tool: QKV_ARM_CI=1 ./qkv.sh test installs what this needs"
done

log "configuring $build (cross, aarch64)"
cmake -S "$root" -B "$build" -DCMAKE_TOOLCHAIN_FILE="$root/cmake/aarch64-linux-gnu.cmake" \
  -DCMAKE_BUILD_TYPE=Release -DQKV_MPI=OFF -DQKV_BUILD_EXAMPLES=OFF | { grep '^-- qkv:' || true; }
log "building the suite's binary and the program ($jobs jobs)"
cmake --build "$build" -j "$jobs" --target qkv_tests qkv_cli

# What runs: the emulated CPU's own choices, never this machine's (an OPENBLAS_CORETYPE names an x86 core).
unset OPENBLAS_CORETYPE OPENBLAS_L2_SIZE QKV_SIMD QKV_OPENBLAS_REPLACED
# The spin the program would set by restarting itself, which qemu-user cannot do (exec of an arm64 file).
export GOMP_SPINCOUNT=30000
emulated() {  # emulated SECONDS PROGRAM ARGS...: under qemu-aarch64, killed past SECONDS
  local limit=$1; shift
  timeout --kill-after=10 "$limit" qemu-aarch64 "$@"
}
tests="simd:*,sgemm:*,matmul through the own kernel*,[gradcheck],[fixtures]"
for threads in 1 2; do
  log "qkv_tests on $threads thread(s): $tests"
  OMP_NUM_THREADS=$threads emulated 900 "$build/tests/qkv_tests" "$tests" >"$build/arm_tests_$threads.txt" 2>&1 \
    || { tail -40 "$build/arm_tests_$threads.txt"; fail "qkv_tests on $threads thread(s) (exit $?)"; }
  tail -3 "$build/arm_tests_$threads.txt"
done

qkv=$build/qkv
emulated 120 "$qkv" info --system >"$build/arm_info.txt" 2>&1 || { cat "$build/arm_info.txt"; fail "qkv info --system"; }
grep -q "vector kernels neon, CPU neon" "$build/arm_info.txt" || { cat "$build/arm_info.txt"; fail "not the neon kernels"; }
grep "kernels" "$build/arm_info.txt"
QKV_SIMD=neon emulated 120 "$qkv" info --system >/dev/null 2>&1 || fail "QKV_SIMD=neon"
set +e
QKV_SIMD=avx2 emulated 120 "$qkv" info --system >/dev/null 2>"$build/arm_err.txt"; rc=$?
set -e
[ $rc -ne 0 ] && [ "$(wc -l <"$build/arm_err.txt")" -eq 1 ] || { cat "$build/arm_err.txt"; fail "QKV_SIMD=avx2: not a one-line error"; }
echo "ok: QKV_SIMD=avx2 on aarch64: $(cat "$build/arm_err.txt")"
log "qkv train on 2 threads"
(cd "$build" && emulated 600 "$qkv" train --steps 20 --eval-every 10 --threads 2 --save arm.safetensors --force) \
  >"$build/arm_train.txt" 2>&1 || { cat "$build/arm_train.txt"; fail "qkv train --threads 2"; }
grep -E "^qkv train|step 20/20" "$build/arm_train.txt" | cut -c1-160
log "all passed (emulated aarch64)"
