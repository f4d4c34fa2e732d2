#!/usr/bin/env bash
# Which kernels run, and the choices a user can force: QKV_SIMD (a bad value
# or a level the CPU lacks is a one-line error), and OpenBLAS's fallback
# kernels on a CPU it does not know (qkv restarts with OPENBLAS_CORETYPE; a
# library user is warned). Where qemu-x86_64 exists, the same binary also
# runs as an x86-64-v2 CPU without AVX (portable builds).
# usage: kernels.sh QKV FAKE_OPENBLAS_CORE_SO WORKDIR [sanitized]
set -u
qkv=$1 shim=$2 work=$3 sanitized=${4:-}
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
. "$(dirname "$0")/lib.sh"
one_line_error() {  # one_line_error LABEL: the last command's err.txt holds one line and it failed
  [ "$rc" -ne 0 ] || fail "$1: exit 0"
  [ "$(wc -l <err.txt)" -eq 1 ] || { cat err.txt; fail "$1: not a one-line error"; }
  echo "ok: $1: $(cat err.txt)"
}
unset OPENBLAS_CORETYPE QKV_SIMD QKV_OPENBLAS_REPLACED
# On aarch64 the one level is NEON, x86's are one-line errors, and OpenBLAS's choice stands (its cores all
# run NEON kernels); the rest of this script (x86's levels, the Prescott fallback) does not apply there.
if [ "$(uname -m)" = aarch64 ]; then
  "$qkv" info --system >info.txt 2>&1 || { cat info.txt; fail "qkv info --system"; }
  grep -q "vector kernels neon, CPU neon" info.txt || { cat info.txt; fail "not the neon kernels"; }
  QKV_SIMD=neon "$qkv" info --system >/dev/null 2>&1 || fail "QKV_SIMD=neon"
  QKV_SIMD=avx2 "$qkv" info --system >/dev/null 2>err.txt; rc=$?
  one_line_error "QKV_SIMD=avx2 on aarch64"
  echo "skipped: x86-64's levels and OpenBLAS's x86 fallback (this is aarch64)"
  echo "kernels.sh: all passed"
  exit 0
fi
flags=$(grep -m1 '^flags' /proc/cpuinfo)
level=sse; [[ $flags == *" avx2 "* && $flags == *" fma "* ]] && level=avx2
[[ $level == avx2 && $flags == *" avx512f "* && $flags == *" avx512dq "* && $flags == *" avx512bw "* && $flags == *" avx512vl "* ]] && level=avx512

"$qkv" info --system >info.txt 2>&1 || { cat info.txt; fail "qkv info --system"; }
cat info.txt
grep -q "CPU $level" info.txt || fail "info --system does not name the CPU's level $level"
best=sse2; [ $level = avx2 ] && best=avx2; [ $level = avx512 ] && best=avx512
grep -q "vector kernels $best," info.txt || fail "the default vector kernels are not $best"

QKV_SIMD=sse2 "$qkv" info --system >info.txt 2>&1 || fail "QKV_SIMD=sse2"
grep -q "vector kernels sse2," info.txt || fail "QKV_SIMD=sse2 does not run the sse2 kernels"
QKV_SIMD=avx9 "$qkv" info --system >/dev/null 2>err.txt; rc=$?
one_line_error "QKV_SIMD=avx9"
grep -q "QKV_SIMD='avx9' is not an instruction set" err.txt || fail "QKV_SIMD=avx9: the error does not name it"
QKV_SIMD=neon "$qkv" info --system >/dev/null 2>err.txt; rc=$?
one_line_error "QKV_SIMD=neon on x86-64"
grep -q "this CPU lacks that instruction set" err.txt || fail "QKV_SIMD=neon: the error does not say the CPU lacks it"
QKV_SIMD=avx2 "$qkv" train --steps 1 --dim 8 --layers 1 --heads 1 --save t.safetensors --threads 1 >out.txt 2>&1 \
  || [ $level = sse ] || { cat out.txt; fail "QKV_SIMD=avx2 on a CPU with AVX2"; }

# OpenBLAS that takes this CPU for Prescott (the shim): the program restarts
# with the kernels the CPU's flags allow and says so.
want=; [ $level = avx2 ] && want=Haswell; [ $level = avx512 ] && want=SkylakeX
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0"
LD_PRELOAD=$shim "$qkv" info --system >info.txt 2>&1 || { cat info.txt; fail "info --system with the Prescott shim"; }
if [ -n "$want" ]; then
  grep -q "OpenBLAS kernels $want (chosen by qkv: OpenBLAS took this CPU for Prescott)" info.txt \
    || { cat info.txt; fail "qkv did not replace OpenBLAS's Prescott kernels with $want"; }
  grep -q warning info.txt && fail "a warning after the fix"
  echo "ok: OpenBLAS's Prescott fallback replaced by $want"
  # The user's own choice stands, with a one-line warning (the library's too).
  OPENBLAS_CORETYPE=Prescott "$qkv" train --steps 1 --dim 8 --layers 1 --heads 1 --save p.safetensors --threads 1 \
    >out.txt 2>err.txt || { cat out.txt err.txt; fail "training with OPENBLAS_CORETYPE=Prescott"; }
  grep -q "OpenBLAS kernels Prescott (OPENBLAS_CORETYPE)" out.txt || { cat out.txt; fail "the banner hides the forced kernels"; }
  [ "$(grep -c "warning: OpenBLAS runs its Prescott kernels.*start with OPENBLAS_CORETYPE=$want" err.txt)" -eq 1 ] \
    || { cat err.txt; fail "no single warning with the fix"; }
  echo "ok: a forced slow core is warned about once: $(cat err.txt)"
fi

# The portable binary on older CPUs, emulated: x86-64-v2 without AVX runs the
# sse2 kernels, and a forced level it lacks is a one-line error.
if command -v qemu-x86_64 >/dev/null && [ -z "$sanitized" ]; then
  export GOMP_SPINCOUNT=30000  # no restart: qemu would start the restarted program natively
  qemu-x86_64 -cpu Nehalem "$qkv" info --system >info.txt 2>&1 || { cat info.txt; fail "qkv on an emulated Nehalem"; }
  grep -q "vector kernels sse2, CPU sse" info.txt || { cat info.txt; fail "Nehalem: not the sse2 kernels"; }
  echo "ok: the binary runs on an emulated Nehalem (x86-64-v2): $(grep kernels info.txt)"
  QKV_SIMD=avx2 qemu-x86_64 -cpu Nehalem "$qkv" info --system >/dev/null 2>err.txt; rc=$?
  one_line_error "QKV_SIMD=avx2 on a CPU without AVX2"
  grep -q "this CPU lacks that instruction set (it has sse2)" err.txt || fail "the error does not say what the CPU has"
else
  echo "skipped: no qemu-x86_64 (or a sanitizer build): the emulated-CPU checks"
fi
echo "kernels.sh: all passed"
