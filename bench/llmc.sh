#!/usr/bin/env bash
# llm.c's CPU training step beside qkv's, on GPT-2 small's shape (12 layers,
# 12 heads, width 768, vocabulary 50,257; B = 4, T = 64: train_gpt2.c's own
# run, and `qkv bench --config gpt2`). A measuring instrument only: nothing in
# qkv's build or tests uses it, and nothing of llm.c is kept in this tree.
#
#   bench/llmc.sh LLMC_CHECKOUT [--rounds 3] [--steps 8] [--threads 2]
#
# From the checkout it builds a copy of train_gpt2.c as its Makefile does on
# the CPU (gcc -Ofast -march=native -fopenmp -DOMP), changed only in how many
# steps its loop takes (41, with text sampled at step 20, would take minutes
# a round). It writes what the copy reads into a scratch folder: random
# weights in gpt2_124M.bin's format (version 3: the vocabulary padded to
# 50,304 rows, as llm.c pads it; weights N(0, 0.02), LayerNorms 1 and 0) and
# random tokens in its data files' format (no tokenizer: it samples no text).
# Each round runs llm.c and then `qkv bench` (the baseline first in every
# other round), each its own process with the same thread count; a step's time
# is the median of llm.c's "took N ms" lines after its first step, and qkv
# bench's median. Peak resident memory from /usr/bin/time. Needs gcc, libgomp
# and python3 with numpy (apt-get install python3-numpy).
set -euo pipefail
fail() {
  echo "llmc.sh: $*" >&2
  exit 1
}
[ $# -ge 1 ] || fail "usage: bench/llmc.sh LLMC_CHECKOUT [--rounds N] [--steps N] [--threads N]"
llmc=$(realpath "$1")
shift
rounds=3 steps=8 threads=2
while [ $# -gt 0 ]; do
  [ $# -ge 2 ] || fail "$1 needs a value"
  case "$1" in
    --rounds) rounds=$2 ;;
    --steps) steps=$2 ;;
    --threads) threads=$2 ;;
    *) fail "unknown option $1 (--rounds, --steps, --threads)" ;;
  esac
  [[ "$2" =~ ^[1-9][0-9]{0,2}$ ]] || fail "$1 takes a count from 1 to 999, got '$2'"
  shift 2
done
[ "$steps" -lt 20 ] || fail "--steps must be below 20 (train_gpt2.c samples text at step 20)"
top=$(cd "$(dirname "$0")/.." && pwd)
qkv="$top/build/release/qkv"
[ -x "$qkv" ] || fail "build qkv first ($qkv is missing; ./qkv.sh build)"
[ -f "$llmc/train_gpt2.c" ] && [ -d "$llmc/llmc" ] || fail "$llmc is not an llm.c checkout (no train_gpt2.c, llmc/)"
[ -x /usr/bin/time ] || fail "/usr/bin/time is missing (apt-get install time)"
py=/usr/bin/python3  # Debian's, where python3-numpy installs (another python3 may come first in PATH)
[ -x "$py" ] || py=python3
"$py" -c 'import numpy' 2>/dev/null || fail "$py has no numpy (apt-get install python3-numpy)"

work=$(mktemp -d /tmp/qkv-llmc.XXXXXX)
trap 'rm -rf "$work"' EXIT
sed "s/for (int step = 0; step <= 40; step++)/for (int step = 0; step <= $steps; step++)/" "$llmc/train_gpt2.c" \
  >"$work/train_gpt2.c"
grep -q "step <= $steps; step++" "$work/train_gpt2.c" || fail "train_gpt2.c's training loop (step <= 40) was not found"
echo "llmc.sh: building train_gpt2.c ($(git -C "$llmc" log -1 --format=%h 2>/dev/null || echo 'no git'))" >&2
gcc -Ofast -march=native -fopenmp -DOMP -Wno-unused-result -I"$llmc" "$work/train_gpt2.c" -lm -o "$work/train_gpt2"

echo "llmc.sh: random weights and tokens in llm.c's formats" >&2
mkdir -p "$work/dev/data/tinyshakespeare"
"$py" - "$work" <<'EOF'
import sys
import numpy as np
work = sys.argv[1]
maxT, V, Vp, L, H, C = 1024, 50257, 50304, 12, 12, 768
rng = np.random.default_rng(1)
header = np.zeros(256, np.int32)
header[:8] = [20240326, 3, maxT, V, L, H, C, Vp]
normal = lambda n: (rng.standard_normal(n, dtype=np.float32) * 0.02)
sizes = [("w", Vp * C), ("w", maxT * C), ("1", L * C), ("0", L * C), ("w", L * 3 * C * C), ("0", L * 3 * C),
         ("w", L * C * C), ("0", L * C), ("1", L * C), ("0", L * C), ("w", L * 4 * C * C), ("0", L * 4 * C),
         ("w", L * 4 * C * C), ("0", L * C), ("1", C), ("0", C)]
with open(f"{work}/gpt2_124M.bin", "wb") as f:
    header.tofile(f)
    for kind, n in sizes:
        (normal(n) if kind == "w" else np.full(n, float(kind), np.float32)).tofile(f)
for name in ("train", "val"):
    tokens = rng.integers(0, V, 65536, dtype=np.uint16)
    header = np.zeros(256, np.int32)
    header[:3] = [20240520, 1, len(tokens)]
    with open(f"{work}/dev/data/tinyshakespeare/tiny_shakespeare_{name}.bin", "wb") as f:
        header.tofile(f)
        tokens.tofile(f)
EOF

median() { sort -n | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
peak_mib() { awk -F': ' '/Maximum resident set size/ {printf "%.0f", $2 / 1024}' "$1"; }
run_llmc() {  # prints "ms MiB"
  (cd "$work" && OMP_NUM_THREADS=$threads /usr/bin/time -v ./train_gpt2 >out.txt 2>time.txt) ||
    fail "train_gpt2 failed: $(tail -3 "$work/out.txt" "$work/time.txt")"
  local ms
  ms=$(sed -n 's/^step \([0-9]*\): .*(took \([0-9.]*\) ms)$/\1 \2/p' "$work/out.txt" | awk '$1 > 0 {print $2}' | median)
  echo "$ms $(peak_mib "$work/time.txt")"
}
run_qkv() {
  /usr/bin/time -v "$qkv" bench --config gpt2 --steps "$steps" --warmup 1 --threads "$threads" >"$work/qkv.txt" \
    2>"$work/qkv_time.txt" || fail "qkv bench failed: $(tail -3 "$work/qkv.txt" "$work/qkv_time.txt")"
  echo "$(sed -n 's/.*median \([0-9.]*\) ms\/step.*/\1/p' "$work/qkv.txt") $(peak_mib "$work/qkv_time.txt")"
}

echo "gpt2 (B=4 T=64), $threads threads, $rounds rounds of $steps steps; CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-)"
: >"$work/rounds.txt"
for ((r = 1; r <= rounds; r++)); do
  if ((r % 2)); then
    l=$(run_llmc) q=$(run_qkv)
  else
    q=$(run_qkv) l=$(run_llmc)
  fi
  read -r lms lmib <<<"$l"
  read -r qms qmib <<<"$q"
  echo "$lms $qms $lmib $qmib" >>"$work/rounds.txt"
  awk -v r="$r" '{printf "  round %d: llm.c %.0f ms/step (%.0f MiB), qkv %.0f ms/step (%.0f MiB), qkv %.2fx llm.c\n",
                  r, $1, $3, $2, $4, $1 / $2}' <<<"$lms $qms $lmib $qmib"
done
l_med=$(cut -d' ' -f1 "$work/rounds.txt" | median) q_med=$(cut -d' ' -f2 "$work/rounds.txt" | median)
r_med=$(awk '{print $1 / $2}' "$work/rounds.txt" | median)
awk -v l="$l_med" -v q="$q_med" -v r="$r_med" 'BEGIN {
  printf "\n| system | step (median) | tokens/s | peak resident MiB |\n| --- | --- | --- | --- |\n" }
  { lm = ($3 > lm ? $3 : lm); qm = ($4 > qm ? $4 : qm) }
  END { printf "| llm.c train_gpt2.c | %.0f ms | %.0f | %.0f |\n| qkv | %.0f ms | %.0f | %.0f |\n", l, 256000 / l, lm,
        q, 256000 / q, qm; printf "qkv is %.2fx llm.c (median of the rounds'\'' ratios)\n", r }' "$work/rounds.txt"
