#!/usr/bin/env bash
# qkv grads for every model kind: a table of gradient norms whose per-head
# norms add up (in squares) to each attention projection's norm, and a file
# that examples/compare_grads.py reads (when python3 is installed).
# usage: grads.sh QKV COMPARE_GRADS_PY WORKDIR
set -u
qkv=$1 compare=$2 work=$3
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
. "$(dirname "$0")/lib.sh"
small=(--dim 32 --layers 1 --heads 4 --steps 3 --batch 8 --threads 1)
"$qkv" train "${small[@]}" --save gpt.safetensors >/dev/null 2>&1 || fail "gpt"
"$qkv" train "${small[@]}" --model seq2seq --task sort --save s2s.safetensors >/dev/null 2>&1 || fail "seq2seq"
"$qkv" train "${small[@]}" --task text --context 32 --save text.safetensors >/dev/null 2>&1 || fail "text"
for run in "gpt.safetensors 1234" "s2s.safetensors 3141" "text.safetensors Alice was beginning"; do
  set -- $run
  ck=$1; shift
  "$qkv" grads --checkpoint "$ck" --prompt "$*" --out "g_$ck" >table.txt 2>&1 || { cat table.txt; fail "grads $ck"; }
  rows=$(grep -c "attn.*_proj.weight" table.txt)
  [ "$rows" -ge 4 ] || { cat table.txt; fail "$ck: no attention rows"; }
  # Each attention weight: 4 per-head norms whose squares sum to the total's square.
  # Columns: name, shape (two words: "[32, 32]"), total norm, 4 per-head norms.
  awk -v ck="$ck" '/attn.*_proj.weight/ {
      if (NF != 8) { print ck ": " $1 " has " NF - 4 " per-head norms"; bad = 1; next }
      s = 0; for (i = 5; i <= 8; i++) s += $i * $i
      t = $4 * $4
      if (t > 1e-30 && (s - t) / t > 1e-3 || (t - s) / (t + 1e-300) > 1e-3) { print ck ": " $1 " heads " s " total " t; bad = 1 }
    } END { exit bad }' table.txt || fail "$ck: per-head norms do not add up"
done
echo "ok: grads tables for gpt, seq2seq and text models; per-head norms add up"
if command -v python3 >/dev/null; then
  python3 "$compare" g_gpt.safetensors g_gpt.safetensors >cmp.txt || { cat cmp.txt; fail "compare_grads.py on identical files"; }
  python3 "$compare" g_gpt.safetensors g_s2s.safetensors >cmp.txt 2>&1 && fail "compare_grads.py found two models' gradients equal"
  echo "ok: compare_grads.py reads qkv's grads files"
fi
