#!/usr/bin/env bash
# The thread count never changes a run: checkpoints trained with --threads 1,
# 2 and every core of this machine (16 on the 16-core test machine) are the
# same bytes. The model is sized so that its products run qkv's own sgemm
# (8M multiply-adds and up) shared by the threads, its column sums, copies and
# optimizer step split over them, and dropout draws its masks.
# usage: threads.sh QKV WORKDIR [sanitized]
set -u
qkv=$1 work=$2 sanitized=${3:-}
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
. "$(dirname "$0")/lib.sh"
cores=$(getconf _NPROCESSORS_ONLN)  # nproc would follow OMP_NUM_THREADS
counts="1 2"; [ "$cores" -gt 2 ] && counts="$counts $cores"
[ "$cores" -lt 2 ] && counts=1
steps=3; [ -n "$sanitized" ] && steps=1  # the sanitizers run 10-20x slower
run=(--no-log --task text --context 64 --dim 128 --layers 2 --heads 4 --batch 16 --steps $steps --eval-every $steps
     --dropout 0.1 --seed 3)
for n in $counts; do
  "$qkv" train "${run[@]}" --threads "$n" --save "t$n.safetensors" >"t$n.txt" 2>&1 || { cat "t$n.txt"; fail "training at --threads $n"; }
  head -1 "t$n.txt" | grep -qE ", $n threads?$" || { cat "t$n.txt"; fail "the banner does not say $n threads"; }
done
for n in $counts; do
  cmp -s t1.safetensors "t$n.safetensors" || fail "--threads $n gives a different checkpoint than --threads 1"
done
ok "checkpoints are byte-identical for --threads $(echo $counts | tr ' ' ',') ($steps steps, own sgemm, dropout 0.1)"
