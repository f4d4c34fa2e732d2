# Sourced by the program's shell tests: what each of them needs.
#   fail MESSAGE              print FAIL: MESSAGE and exit 1
#   ok MESSAGE                print ok: MESSAGE
#   wait_for PATTERN FILE S   wait up to S seconds until FILE has a line matching PATTERN (grep -E); 1 if it never does
#   wait_exit PID S           wait up to S seconds until process PID is gone; 1 if it still runs
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
