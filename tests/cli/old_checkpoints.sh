#!/usr/bin/env bash
# Checkpoints written before the library took over training (the Trainer,
# one learning rate, models that describe themselves) still load, evaluate
# and resume, to the same numbers the code of that time gave.
# usage: old_checkpoints.sh QKV FIXTURE_DIR WORKDIR
set -u
qkv=$1 fixtures=$2 work=$3
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
. "$(dirname "$0")/lib.sh"
# Within a float32 rounding's drift, as another CPU's BLAS kernels may round
# differently: the accuracy within one example in 200, the loss within 1e-4.
near() { awk -v a="$1" -v b="$2" -v tol="$3" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= tol) }'; }
# model, eval line, its accuracy, loss after resuming from step 300 to 320, the answer to 1234
for row in "reverse|gpt reverse, exact match|48.00|1.910270|4321" \
           "seq2seq|seq2seq sort, exact match|17.50|1.666503|1234"; do
  IFS='|' read -r name eval_line accuracy loss answer <<<"$row"
  cp "$fixtures/${name}_before_trainer.safetensors" $name.safetensors
  "$qkv" info $name.safetensors >info.txt 2>&1 || { cat info.txt; fail "$name: info"; }
  grep -q "step       300" info.txt || { cat info.txt; fail "$name: info does not show step 300"; }
  "$qkv" eval --checkpoint $name.safetensors --examples 200 --threads 1 >out.txt 2>&1 || { cat out.txt; fail "$name: eval"; }
  acc=$(grep -o "$eval_line [0-9.]*% on 200" out.txt | grep -o '[0-9.]*%' | tr -d %)
  [ -n "$acc" ] && near "$acc" "$accuracy" 0.5 || { cat out.txt; fail "$name: eval gave another accuracy than $accuracy%"; }
  "$qkv" train --resume $name.safetensors --steps 320 --threads 1 >out.txt 2>&1 || { cat out.txt; fail "$name: resume"; }
  "$qkv" grads --checkpoint $name.safetensors --prompt 1234 --out g_$name.safetensors >out.txt 2>&1 || { cat out.txt; fail "$name: grads"; }
  got=$(head -1 out.txt | grep -o "answer $answer (5 tokens with the end mark): [0-9.]*" | grep -o '[0-9.]*$')
  [ -n "$got" ] && near "$got" "$loss" 1e-4 || { head -1 out.txt; fail "$name: after resuming, the loss is not $loss"; }
  echo "ok: $name checkpoint from before the Trainer: info, eval $acc% (then $accuracy%), resumed to 320: loss $got (then $loss)"
done
