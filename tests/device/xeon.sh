#!/usr/bin/env bash
# Issue 19's checklist on the device machine's 16-core AVX-512 Xeon, in two
# device calls (each well under run's 600 s limit), from the project's root:
#
#   bash tests/device/pack.sh                  # here, once: fills .device/
#   run carry [".device"]:  bash tests/device/xeon.sh check
#   run carry [".device"]:  bash tests/device/xeon.sh speed
#
#   check  both builds and suites (.device/on-device.sh test), then through
#          the Release CLI: which kernels run, checkpoints byte-identical at
#          --threads 1, 2 and 16 (a model whose products take qkv's own
#          kernel, dropout on), and the one-line errors of a bad QKV_SIMD
#          (a level the CPU lacks among them, read from /proc/cpuinfo, so
#          the step is right on any x86-64 host: tests/cuda/on_gpu.sh test
#          runs it on the GPU machine's CPU with XEON_QKV set)
#   speed  qkv bench --profile 2,8,16 on small and mini, then
#          bench/compare_torch.py over tiny, small and mini at 1, 2, 4, 8 and
#          16 threads (3 interleaved rounds), no environment variables
#
# Each step's output goes to stdout (run returns its tail) and to $OUT (run
# brings those files back). XEON_QKV=path/to/qkv skips the build and uses that
# binary instead, and XEON_THREADS (default "1 2 16", or up to the cores
# there are) sets the thread counts whose checkpoints must match;
# XEON_PROFILE (2,8,16), XEON_SWEEP (1,2,4,8,16) and XEON_ROUNDS (3) likewise
# for speed.
set -uo pipefail
mode=${1:-}
out=${OUT:-/tmp/xeon}
mkdir -p "$out"
qkv=${XEON_QKV:-build/device-release/qkv}
# Where on-device.sh unpacks the runtime libraries (OpenBLAS, libgfortran): its own runs export the same.
export LD_LIBRARY_PATH=/opt/qkv-deps/usr/lib/x86_64-linux-gnu:/usr/lib/x86_64-linux-gnu/openblas-openmp${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
status=0
step() {  # step NAME COMMAND...: run it, keep its output in $out/NAME.txt, remember a failure
  local name=$1
  shift
  echo "== $name"
  if ! "$@" 2>&1 | tee "$out/$name.txt"; then
    echo "== $name FAILED"
    status=1
  fi
}
release() {  # the Release CLI alone (the test mode builds it along with the suites)
  [ -n "${XEON_QKV:-}" ] && return 0
  [ -x "$qkv" ] && return 0
  bash .device/on-device.sh bench --help >/dev/null  # unpacks the packages and builds Release without tests
}

identical_checkpoints() {
  local dir cores counts
  cores=$(nproc)
  # 1, 2 and 16, or as many as there are cores where fewer (the CLI refuses more threads than cores)
  counts=${XEON_THREADS:-$(printf '%s\n' 1 $((cores < 2 ? cores : 2)) $((cores < 16 ? cores : 16)) | sort -nu | xargs)}
  dir=$(mktemp -d)
  local result=0
  for t in $counts; do
    "$qkv" train --no-log --task text --data cli/data/text.txt --dim 256 --layers 2 --heads 4 --steps 12 \
      --eval-every 6 --threads "$t" --save "$dir/t$t.safetensors" >"$dir/t$t.log" 2>&1 ||
      {
        tail -3 "$dir/t$t.log"
        result=1
        break
      }
  done
  if [ $result = 0 ]; then
    for t in $counts; do cmp "$dir/t${counts%% *}.safetensors" "$dir/t$t.safetensors" || result=1; done
    [ $result = 0 ] && echo "checkpoints byte-identical at --threads ${counts// /, }" \
      "($(stat -c %s "$dir/t${counts%% *}.safetensors") bytes)"
  fi
  rm -rf "$dir"  # 20 MB a checkpoint
  return $result
}

# A name that is not a level, or a level this CPU lacks: exit non-zero with one line on stderr; its own levels run.
simd_errors() {
  local ok=0 flags
  flags="$(grep -m1 '^flags' /proc/cpuinfo) "
  for value in bogus sse3 sse2 avx2 avx512; do
    local err code lines has=no
    err=$(QKV_SIMD=$value "$qkv" info --system 2>&1 >/dev/null)
    code=$?
    lines=$(printf '%s' "$err" | grep -c '')
    case $value in  # the features autograd/cpu.cpp asks each level for
      sse2) has=yes ;;
      avx2) [[ $flags == *" avx2 "* && $flags == *" fma "* ]] && has=yes ;;
      avx512) [[ $flags == *" avx512f "* && $flags == *" avx512dq "* && $flags == *" fma "* ]] && has=yes ;;
    esac
    echo "QKV_SIMD=$value (CPU has it: $has): exit $code, $lines line(s) on stderr${err:+: $err}"
    if [ $has = yes ]; then
      [ "$code" = 0 ] || ok=1
    else
      [ "$code" != 0 ] && [ "$lines" = 1 ] || ok=1
    fi
  done
  return $ok
}

case "$mode" in
  check)
    if [ -z "${XEON_QKV:-}" ]; then
      step suites bash .device/on-device.sh test
    fi
    step kernels "$qkv" info --system
    step identical identical_checkpoints
    step simd_errors simd_errors
    ;;
  speed)
    step build release
    for config in small mini; do step "profile_$config" "$qkv" bench --config "$config" --profile "${XEON_PROFILE:-2,8,16}"; done
    step compare python3 bench/compare_torch.py --qkv "$qkv" --configs tiny,small,mini \
      --threads "${XEON_SWEEP:-1,2,4,8,16}" --rounds "${XEON_ROUNDS:-3}"
    ;;
  *)
    echo "usage: tests/device/xeon.sh check | speed   (see its first lines)" >&2
    exit 2
    ;;
esac
echo "== xeon.sh $mode: $([ $status = 0 ] && echo all steps passed || echo 'a step FAILED'); outputs in $out"
exit $status
