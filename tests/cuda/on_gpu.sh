#!/usr/bin/env bash
# Issue 23's checks and figures on a machine with an NVIDIA GPU: the device
# machine of DEVELOPERS.md (run tests/device/pack.sh here once, then the
# device tool's run with carry [".device"]), or any Linux box with CUDA.
# Each mode builds build/gpu (Release, -DQKV_CUDA=ON) first, so each device
# call stands alone, and each ends within the device tool's 600 s; logs go to
# $OUT when it is set (the device tool brings them back), else build/gpu/logs.
#
#   bash tests/cuda/on_gpu.sh test      ctest -L cuda (launches made blocking, so a
#                                       kernel's fault names that kernel); qkv train
#                                       --task reverse --device cuda to its target, its
#                                       checkpoint evaluated on the CPU and the GPU; the
#                                       CPU's vector kernels and tests/device/xeon.sh's CLI
#                                       checks; the rest of the suite if time is left
#   bash tests/cuda/on_gpu.sh suite     the rest of the suite (label not cuda) in the CUDA build
#   bash tests/cuda/on_gpu.sh sanitize  compute-sanitizer memcheck on every CUDA test,
#                                       with the caching allocator off (QKV_CUDA_NO_CACHE=1)
#   bash tests/cuda/on_gpu.sh race      compute-sanitizer racecheck on the kernels whose
#                                       threads share memory (attention's tiles, the shape
#                                       and reduction blocks, through the models' test)
#   bash tests/cuda/on_gpu.sh initcheck compute-sanitizer initcheck: a kernel that reads
#                                       device memory nothing wrote
#   bash tests/cuda/on_gpu.sh synccheck compute-sanitizer synccheck: barriers not reached
#                                       by every thread of a block
#
# A sanitizer run cut short by its time limit is a failure, with a PARTIAL line
# naming the last test it finished: never a pass. Each run's whole output is in
# its own log under the logs folder, and its reports are printed whole.
#   bash tests/cuda/on_gpu.sh bench     tokens/s against PyTorch eager on the same GPU
#                                       (SDPA, fused AdamW, TF32 off on both sides) for
#                                       tiny, small, mini and deep; the fused attention
#                                       kernel alone at n = 1024, 4096 and 16384
#
# compute-sanitizer needs a Firecracker machine (the device tool's KINDS.md
# says which runtime a kind has); on gVisor it says "Device not supported".
# Without .device/ (a machine with Debian's packages) the build uses the system's.
set -uo pipefail
mode=${1:-test}
root=$(pwd)
logs=${OUT:-$root/build/gpu/logs}
mkdir -p "$logs"
exec > >(tee "$logs/on_gpu_$mode.log") 2>&1

# Debian's build dependencies, brought in .device/ by tests/device/pack.sh (unpacked as on-device.sh does).
if [ -d .device/debs ]; then
  for d in .device/debs/*.deb; do
    case "$d" in
      */libgfortran5_*|*/libxml2_*|*/libicu72_*) dpkg -x "$d" /opt/qkv-deps ;;
      *) dpkg -x "$d" / ;;
    esac
  done
  export LD_LIBRARY_PATH=/opt/qkv-deps/usr/lib/x86_64-linux-gnu:/usr/lib/x86_64-linux-gnu/openblas-openmp${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  ln -sf libopenblas.so.0 /usr/lib/x86_64-linux-gnu/openblas-openmp/libopenblas.so
  ln -sf /opt/qkv-deps/usr/lib/x86_64-linux-gnu/libgfortran.so.5 /usr/lib/x86_64-linux-gnu/libgfortran.so.5 2>/dev/null || true
fi
command -v nvcc >/dev/null || export PATH=/usr/local/cuda/bin:$PATH
echo "on_gpu $mode: $(nproc) cores, $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | head -1)," \
  "$(nvcc --version | tail -1)"

# Only what the mode needs, for this GPU's architecture alone (sm_90: attention.cu took about a minute for
# each of the two the default build makes): the window is 15 minutes. -lineinfo: a sanitizer's report names
# the kernel's source line, not only its PC (no change to the code).
build_targets() {  # build_targets TARGET...: build them, timed, into build/gpu (its log: build_TARGETS.log)
  local s=$SECONDS log="$logs/build_${*// /_}.log"
  cmake --build build/gpu -j "$(nproc)" --target "$@" >"$log" 2>&1 || { grep -E 'error' "$log" | head -40; exit 1; }
  echo "== built $* in $((SECONDS - s)) s"
}
s=$SECONDS
cmake -S . -B build/gpu -DCMAKE_BUILD_TYPE=Release -DQKV_CUDA=ON -DQKV_MPI=OFF -DGRAPHVIZ_DOT=/bin/false \
  -DCMAKE_CUDA_ARCHITECTURES=90-real -DCMAKE_CUDA_FLAGS=-lineinfo \
  >"$logs/configure.log" 2>&1 || { tail -30 "$logs/configure.log"; exit 1; }
echo "== configured in $((SECONDS - s)) s"
case "$mode" in
  test) build_targets qkv_cuda_tests qkv_cli qkv_tests compare_checkpoints ;;  # everything label cuda runs
  suite) build_targets all ;;
  *) build_targets qkv_cuda_tests qkv_cli ;;
esac
qkv=build/gpu/qkv
"$qkv" info --system | sed 's/^/  /'
if "$qkv" info --system | grep -q "no CUDA device visible"; then
  echo "on_gpu: this machine's GPU is not usable (above): nothing to check"  # not 77: here a GPU is the point
  exit 1
fi
failed=0
step() { echo; echo "== $* ($SECONDS s)"; }
sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
capped() {  # capped SECONDS: a limit, shortened by the script's own test (tests/cuda/on_gpu_script_test.sh)
  local cap=${QKV_ON_GPU_MAX_SECONDS:-$1}
  echo $((cap < $1 ? cap : $1))
}
verdict() {  # verdict RC WHAT LIMIT LOG LAST: a run cut short by its limit is PARTIAL, a failure, never a pass
  if [ "$1" = 124 ] || [ "$1" = 137 ]; then
    echo "PARTIAL: $2 stopped at its limit of $3 s; the last test it finished: ${5:-none}"
    failed=1
  elif [ "$1" != 0 ]; then
    echo "FAILED: $2 (exit $1; the whole output: $4)"
    failed=1
  fi
}
sanitize() {  # sanitize TOOL SECONDS PART: compute-sanitizer on one part of the CUDA tests
  step "compute-sanitizer --tool $1 on [$3]"
  local log="$logs/$1_$3.log" limit; limit=$(capped "$2")
  # API errors are not reported: qkv checks every call it makes (a failed one fails its test), and cuBLAS's
  # own probing calls would count as errors. Memory, initialisation, barrier and race reports are what this
  # is for. --durations: each test case's line as it ends, so a run cut short says how far it got.
  QKV_CUDA_NO_CACHE=1 timeout -k 5 "$limit" "$sanitizer" --tool "$1" --report-api-errors no --error-exitcode 3 \
    build/gpu/tests/qkv_cuda_tests "[$3]" --durations yes >"$log" 2>&1
  local rc=$?
  # Every report whole (from its first line to the blank line after it), then the summary lines.
  awk '/^========= (Invalid|Uninitialized|Barrier|Race|Error|Program hit|Malloc|Cuda|Leaked|Memcheck|Racecheck)/{p=1} p; /^=========$/{p=0}' "$log"
  grep -E "^========= (ERROR SUMMARY|RACECHECK SUMMARY)|^(All tests passed|test cases:)" "$log"
  verdict "$rc" "$1 on [$3]" "$limit" "$log" "$(grep -E "^[0-9.]+ s: " "$log" | tail -1 | sed -E 's/^[0-9.]+ s: //')"
}

rest_of_suite() {  # rest_of_suite SECONDS: the suite's other tests in the CUDA build, stopped after SECONDS
  step "the rest of the suite in the CUDA build"
  local log="$logs/ctest_rest.log" limit; limit=$(capped "$1")
  timeout -k 5 "$limit" ctest --test-dir build/gpu -LE cuda -E cli_graph -j "$(nproc)" --timeout 120 --output-on-failure \
    >"$log" 2>&1
  local rc=$?
  grep -vE '^ +Start |Passed +[0-9.]+ sec$' "$log"
  verdict "$rc" "the rest of the suite" "$limit" "$log" \
    "$(grep -E "Test +#[0-9]+: " "$log" | tail -1 | sed -E 's/.*Test +#[0-9]+: ([^ ]+).*/\1/')"
}

case "$mode" in
  test)
    step "the CUDA tests (label cuda), first and on their own, each test's time logged"
    CUDA_LAUNCH_BLOCKING=1 ctest --test-dir build/gpu -L cuda --output-on-failure --timeout 240 2>&1 |
      tee "$logs/ctest_cuda.log" | grep -E "Test +#|tests passed|FAILED|Timeout|Not Run"
    [ "${PIPESTATUS[0]}" = 0 ] || failed=1
    step "qkv train --task reverse on the GPU, to its target; its checkpoint on the CPU"
    work=build/gpu/reverse && rm -rf "$work" && mkdir -p "$work"
    timeout -k 5 150 "$qkv" train --task reverse --device cuda --save "$work/reverse.safetensors" >"$work/train.txt" 2>&1 ||
      { failed=1; tail -5 "$work/train.txt"; }
    grep -E 'trains on|target|accuracy|stopped|saved' "$work/train.txt" | tail -8
    for where in cpu cuda; do
      "$qkv" eval --checkpoint "$work/reverse.safetensors" --device "$where" >"$work/eval_$where.txt" 2>&1 || failed=1
      echo "eval on $where: $(tr '\n' ' ' <"$work/eval_$where.txt")"
    done
    cmp -s "$work/eval_cpu.txt" "$work/eval_cuda.txt" && echo "the two evaluations are identical" ||
      echo "the two evaluations differ (see above)"
    # Issue 19's checks on this machine's own CPU (16 cores; AVX-512 where it has it), about 30 s: the vector
    # kernels of every level it has, run by the suite, and the CLI's (kernels, checkpoints at 1, 2 and 16
    # threads, QKV_SIMD errors). The rest of the suite below covers the same tests; this runs them first.
    step "this machine's CPU: the vector kernels of every level it has, and the CLI's checks"
    build_targets all
    build/gpu/tests/qkv_tests "simd:*,sgemm:*" >"$logs/cpu_kernels.txt" 2>&1 || failed=1
    grep -E "executed by this suite|passed|failed" "$logs/cpu_kernels.txt"
    XEON_QKV=$qkv bash tests/device/xeon.sh check || failed=1
    if [ $SECONDS -lt 420 ]; then  # the device tool stops a call at 600 s: leave the last line time to print
      rest_of_suite $((570 - SECONDS))
    else
      echo; echo "== the rest of the suite: skipped at $SECONDS s (run on_gpu.sh suite)"
    fi
    ;;
  suite)
    rest_of_suite $((570 - SECONDS))
    ;;
  race)  # racecheck looks at shared memory, which only block kernels use; the models' test runs every kernel
    for part in attention:120 shape:60 models:240; do sanitize racecheck "${part#*:}" "${part%:*}"; done
    ;;
  initcheck)  # every kernel, through the models' test, and the ops' own parts
    for part in memory:30 shape:40 attention:80 models:240; do sanitize initcheck "${part#*:}" "${part%:*}"; done
    ;;
  synccheck)  # barriers: the block kernels (attention's tiles, the shape and reduction blocks)
    for part in attention:120 shape:60 models:240; do sanitize synccheck "${part#*:}" "${part%:*}"; done
    ;;
  sanitize)
    for part in memory:30 matmul:40 optim:40 attention:60 shape:20 faults:20 models:100 registry:250; do
      sanitize memcheck "${part#*:}" "${part%:*}"
    done
    ;;
  bench)
    "$qkv" bench --config tiny --device cuda --steps 3 --warmup 1 | sed 's/^/  /'
    step "GPT training steps, qkv against PyTorch eager"
    PYTHONUNBUFFERED=1 python3 bench/compare_torch.py --qkv "$qkv" --device cuda --configs tiny,small,mini,deep \
      --rounds 3 --steps 10 --threads 4 || failed=1
    for n in 1024:3 4096:3 16384:1; do  # n:rounds (one round at 16384: 25x the work of 4096, within the call's time)
      step "causal attention alone (B=8, 8 heads, d=32), forward and backward, n=${n%:*}"
      PYTHONUNBUFFERED=1 timeout -k 5 150 python3 bench/compare_torch.py --qkv "$qkv" --device cuda --configs attention \
        --context "${n%:*}" --rounds "${n#*:}" --steps 5 --warmup 2 --threads 4 || failed=1
    done
    ;;
  *)
    echo "usage: on_gpu.sh test | suite | sanitize | race | initcheck | synccheck | bench" >&2
    exit 2
    ;;
esac
echo; echo "== on_gpu $mode: $([ $failed = 0 ] && echo all passed || echo FAILED) in $SECONDS s"
exit $failed
