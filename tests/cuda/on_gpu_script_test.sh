#!/usr/bin/env bash
# on_gpu.sh's own logic, here, without a GPU: stand-ins for cmake, ctest,
# nvcc, nvidia-smi, compute-sanitizer and the CUDA build's programs on PATH,
# so the script cannot rot or lie between device windows. A sanitizer (or a
# ctest) that passes makes the mode pass; one that reports an error fails it,
# its report printed whole; one that hangs past its limit fails it with a
# PARTIAL line naming the last test it finished, never "all passed".
# usage: on_gpu_script_test.sh WORKDIR
set -u
here=$(cd "$(dirname "$0")" && pwd)
work=$1
rm -rf "$work" && mkdir -p "$work/bin" "$work/build/gpu/tests" && cd "$work" || exit 1
fail() { echo "FAIL: $*"; exit 1; }
stub() { printf '#!/usr/bin/env bash\n%s\n' "$2" >"$1" && chmod +x "$1"; }
stub bin/cmake 'exit 0'
stub bin/nvidia-smi 'echo "Stand-in H200, 000.00"'
stub bin/nvcc 'echo "Cuda compilation tools, release 0.0 (a stand-in)"'
stub build/gpu/qkv 'echo "  cuda       cuda:0 a stand-in GPU"'
stub build/gpu/tests/qkv_cuda_tests 'exit 0'
# The sanitizer: pass, report (an error, exit 3) or hang, after finishing one test case.
stub bin/compute-sanitizer '
echo "========= COMPUTE-SANITIZER"
echo "0.25 s: the first test case"
case "$STUB" in
  pass) echo "All tests passed (3 assertions in 1 test case)"; echo "========= ERROR SUMMARY: 0 errors" ;;
  report) echo "========= Uninitialized __global__ memory read of size 4 bytes"
          echo "=========     at kernel_that_reads+0x70 in attention.cu:123"
          echo "=========     by thread (3,0,0) in block (0,0,0)"
          echo "========="
          echo "========= ERROR SUMMARY: 1 error"; exit 3 ;;
  hang) sleep 60 ;;
esac'
# ctest, for the suite mode: pass, fail (a failed test) or hang, after one test.
stub bin/ctest '
echo "1/2 Test #1: tensor_basics ....   Passed    0.01 sec"
case "$STUB" in
  pass) echo "100% tests passed, 0 tests failed out of 2" ;;
  report) echo "2/2 Test #2: reliability ....***Failed    0.02 sec"; echo "50% tests passed, 1 tests failed out of 2"; exit 8 ;;
  hang) sleep 60 ;;
esac'
run() {  # run STUB MODE: on_gpu.sh MODE with the stand-ins; its output in out.txt, its exit status in $rc
  STUB=$1 PATH="$work/bin:$PATH" QKV_ON_GPU_MAX_SECONDS=2 OUT="$work/logs" bash "$here/on_gpu.sh" "$2" >out.txt 2>&1
  rc=$?
}
for mode in initcheck synccheck race sanitize; do
  run pass "$mode"
  [ "$rc" = 0 ] && grep -q "== on_gpu $mode: all passed" out.txt || { cat out.txt; fail "$mode: a passing sanitizer did not pass"; }
done
echo "ok: a sanitizer that passes: initcheck, synccheck, race and sanitize pass"
run report initcheck
[ "$rc" = 1 ] || { cat out.txt; fail "a sanitizer's report did not fail the mode (exit $rc)"; }
grep -q "FAILED" out.txt && grep -q "by thread (3,0,0) in block (0,0,0)" out.txt && grep -q "ERROR SUMMARY: 1 error" out.txt ||
  { cat out.txt; fail "the report was not printed whole"; }
grep -q "all passed" out.txt && { cat out.txt; fail "a report ended in 'all passed'"; }
echo "ok: a sanitizer's report fails the mode and is printed whole"
start=$SECONDS
run hang synccheck
[ "$rc" = 1 ] || { cat out.txt; fail "a hang past the limit did not fail the mode (exit $rc)"; }
grep -q "PARTIAL: synccheck on \[attention\] stopped at its limit of 2 s; the last test it finished: the first test case" out.txt ||
  { cat out.txt; fail "no PARTIAL line naming the last test finished"; }
grep -q "all passed" out.txt && { cat out.txt; fail "a timed-out run ended in 'all passed'"; }
echo "ok: a sanitizer that hangs fails the mode with a PARTIAL line naming its last test ($((SECONDS - start)) s)"
for stub in pass report hang; do
  run "$stub" suite
  case $stub in
    pass) [ "$rc" = 0 ] && grep -q "all passed" out.txt || { cat out.txt; fail "suite: a passing ctest did not pass"; } ;;
    report) [ "$rc" = 1 ] && grep -q "Failed" out.txt && ! grep -q "all passed" out.txt ||
      { cat out.txt; fail "suite: a failing ctest did not fail the mode"; } ;;
    hang) [ "$rc" = 1 ] && grep -q "PARTIAL: the rest of the suite stopped at its limit of 2 s; the last test it finished: tensor_basics" out.txt &&
      ! grep -q "all passed" out.txt || { cat out.txt; fail "suite: a hanging ctest did not fail with a PARTIAL line"; } ;;
  esac
done
echo "ok: the suite mode passes a passing ctest and fails a failing or hanging one (PARTIAL)"
