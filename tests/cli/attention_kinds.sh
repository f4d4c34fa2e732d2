#!/usr/bin/env bash
# --attention window:W and linear through the program: a text model of each
# trains, evaluates, samples (the same text with and without the key/value
# cache, on one thread and on the default count: results never depend on
# it) and resumes bit-identically; its checkpoint keeps the choice.
# usage: attention_kinds.sh QKV WORKDIR
set -u
qkv=$1
work=$2
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
. "$(dirname "$0")/lib.sh"
common=(--no-log --task text --steps 20 --eval-every 10 --batch 4 --context 32 --dim 32 --schedule constant --threads 1)
for kind in window:8 linear; do
  name=${kind%%:*}
  "$qkv" train "${common[@]}" --attention "$kind" --save "full_$name.safetensors" >log_$name.txt 2>&1 || { cat log_$name.txt; fail "$kind: training failed"; }
  "$qkv" train "${common[@]}" --attention "$kind" --steps 10 --save "half_$name.safetensors" >/dev/null 2>&1 || fail "$kind: half run failed"
  "$qkv" train --resume "half_$name.safetensors" --steps 20 --threads 1 >/dev/null 2>&1 || fail "$kind: resume failed"
  cmp -s "full_$name.safetensors" "half_$name.safetensors" || fail "$kind: 10 + 10 resumed steps differ from 20 steps"
  "$qkv" eval --checkpoint "full_$name.safetensors" --examples 20 >eval_$name.txt 2>&1 || { cat eval_$name.txt; fail "$kind: eval failed"; }
  for t in 0 0.9; do
    "$qkv" sample --checkpoint "full_$name.safetensors" --prompt "Alice " --max-new 60 --temperature $t --threads 1 >a.txt || fail "$kind: sample failed"
    "$qkv" sample --checkpoint "full_$name.safetensors" --prompt "Alice " --max-new 60 --temperature $t --no-cache >b.txt || fail "$kind: sample --no-cache failed"
    cmp -s a.txt b.txt || fail "$kind: cached and recomputed sampling differ at temperature $t"
  done
  grep -q "$kind" "full_$name.safetensors" || fail "$kind: the checkpoint does not record its attention"
  echo "ok: $kind trains, resumes bit-identically, evaluates and samples"
done
"$qkv" attention --checkpoint full_linear.safetensors --prompt "Alice" --out maps 2>err.txt && fail "maps of linear attention should be refused"
grep -q "linear attention" err.txt || fail "the refusal does not say why"
[ "$(wc -l <err.txt)" -eq 1 ] || fail "the refusal is not one line"
"$qkv" attention --checkpoint full_window.safetensors --prompt "Alice went" --out maps >/dev/null || fail "window maps failed"
echo "ok: maps drawn for window attention, refused with a reason for linear"
