# Sourced by the program's shell tests: what each of them needs.
#   fail MESSAGE              print FAIL: MESSAGE and exit 1
#   ok MESSAGE                print ok: MESSAGE
#   wait_for PATTERN FILE S   wait up to S seconds until FILE has a line matching PATTERN (grep -E); 1 if it never does
#   wait_exit PID S           wait up to S seconds until process PID is gone; 1 if it still runs
#   bounded CMD...            run CMD within $limit seconds (and, unless $sanitized, 1 GB of address space)
#   refused LABEL CMD...      CMD must fail, in time, with a one-line error on stderr (no raw escape byte)
#   need_chromium CHROMIUM    go on if CHROMIUM is set; else fail in CI, or skip (exit 77)
fail() { echo "FAIL: $*"; exit 1; }
ok() { echo "ok: $*"; }
wait_for() {
  local pattern=$1 file=$2 tenths=$(($3 * 10)) _
  for _ in $(seq "$tenths"); do grep -qE "$pattern" "$file" 2>/dev/null && return 0; sleep 0.1; done
  grep -qE "$pattern" "$file" 2>/dev/null
}
wait_exit() {
  local pid=$1 tenths=$(($2 * 10)) _
  for _ in $(seq "$tenths"); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
  ! kill -0 "$pid" 2>/dev/null
}
# bounded CMD...: within the time limit (killed 10 s after the TERM that qkv
# train answers by finishing its step), and within 1 GB of address space for
# qkv's own use. Not in the sanitizer build, which reserves terabytes for its
# shadow memory, nor with --device cuda, where the GPU's driver reserves
# address space for the device's memory.
bounded() {
  if [ -n "${sanitized:-}" ] || [[ " $* " == *" --device cuda"* ]]; then
    timeout -k 10 "$limit" "$@"
  else
    cuda_libraries_kib "$1" >/dev/null  # measured here, in this shell, so it is remembered
    (ulimit -v $((1048576 + ${cuda_kib_of[$1]})); exec timeout -k 10 "$limit" "$@")
  fi
}
# cuda_libraries_kib PROGRAM: the KiB that a CUDA build (-DQKV_CUDA=ON) maps
# for the CUDA runtime and cuBLAS when it loads (~0.6 GB), 0 for a CPU build:
# an address-space limit meant for qkv itself sits that much higher.
# Measured once per program (ldd runs the loader) and remembered, unless called in $(...).
declare -gA cuda_kib_of=()
cuda_libraries_kib() {
  if [ -z "${cuda_kib_of[$1]:-}" ]; then
    local kib=0 lib
    for lib in $(ldd "$1" 2>/dev/null | awk '/libcu(dart|blas|blasLt)\.so/ {print $3}'); do
      kib=$((kib + $(stat -Lc %s "$lib") / 1024))
    done
    cuda_kib_of[$1]=$kib
  fi
  echo "${cuda_kib_of[$1]}"
}
# refused LABEL CMD...: a non-zero exit, not a timeout, with a one-line error on stderr.
refused() {
  local label=$1; shift
  bounded "$@" >out.txt 2>err.txt
  local rc=$?
  [ $rc -ne 0 ] || { cat out.txt; fail "$label: exit 0"; }
  [ $rc -ne 124 ] && [ $rc -ne 137 ] || fail "$label: ran past ${limit} s"
  [ "$(wc -l <err.txt)" -eq 1 ] || { cat err.txt; fail "$label: not a one-line error"; }
  grep -q $'\e' err.txt && fail "$label: a raw escape byte reached the terminal"
  echo "  $label: $(cat err.txt)"
}
# What a qkv page holds (its JSON): page_data PAGE EXPRESSION (tests/cli/page_data.py).
page_data() { python3 "$(dirname "${BASH_SOURCE[0]}")/page_data.py" "$@"; }
# need_chromium CHROMIUM: return if the browser test can run; without chromium,
# a failure in CI (which ./qkv.sh test equips; any CI other than empty, false or
# 0 counts), else a skip (ctest exit 77: the device machine has no package registry).
need_chromium() {
  [ -n "$1" ] && return 0
  case "${CI:-}" in
    "" | false | 0) ;;
    *) fail "no chromium: install Debian's chromium (./qkv.sh test does) for the browser test" ;;
  esac
  echo "skipped: the browser part needs Debian's chromium (./qkv.sh test installs it; in CI it must run)"
  exit 77
}
