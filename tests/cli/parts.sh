#!/usr/bin/env bash
# The part flags through the program: a text GPT of RMSNorm, SwiGLU, rotary
# positions and grouped-query attention
# trains, resumes bit-identically, samples the same text with and without the
# key/value cache, and keeps its parts in its checkpoint (info shows them;
# sample, eval and attention read them); a seq2seq of them trains; gradcheck
# and graph take them for a fresh model; bad or misplaced part flags are
# one-line errors.
# usage: parts.sh QKV WORKDIR [sanitized]
set -u
qkv=$(readlink -f "$1")
work=$2
sanitized=${3:-}  # the sanitizer build reserves terabytes of address space: no memory limit there
limit=120
. "$(dirname "$0")/lib.sh"
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
common=(--no-log --task text --steps 20 --eval-every 10 --batch 4 --context 32 --dim 32 --schedule constant --threads 1
        --norm rmsnorm --mlp swiglu --position rope --heads 4 --kv-heads 2)
"$qkv" train "${common[@]}" --save full.safetensors >log.txt 2>&1 || { cat log.txt; fail "training failed"; }
"$qkv" train "${common[@]}" --steps 10 --save half.safetensors >/dev/null 2>&1 || fail "half run failed"
"$qkv" train --resume half.safetensors --steps 20 --threads 1 >/dev/null 2>&1 || fail "resume failed"
cmp -s full.safetensors half.safetensors || fail "10 + 10 resumed steps differ from 20 steps"
"$qkv" info full.safetensors >info.txt || fail "info failed"
grep -q "rmsnorm norm, swiglu mlp, rope position, 2 kv-heads" info.txt || { cat info.txt; fail "info does not show the parts"; }
"$qkv" sample --checkpoint full.safetensors --prompt "Alice " --max-new 40 --threads 1 >a.txt || fail "sample failed"
"$qkv" sample --checkpoint full.safetensors --prompt "Alice " --max-new 40 --no-cache >b.txt || fail "sample --no-cache failed"
cmp -s a.txt b.txt || fail "cached and recomputed sampling differ"
"$qkv" eval --checkpoint full.safetensors --examples 10 >/dev/null 2>&1 || fail "eval failed"
"$qkv" attention --checkpoint full.safetensors --prompt "Alice went" --out maps >/dev/null || fail "attention maps failed"
ok "a GPT of rmsnorm, swiglu, rope and 2 kv-heads trains, resumes bit-identically, samples, evaluates and draws its maps"

"$qkv" train --no-log --task reverse --model seq2seq --steps 5 --norm rmsnorm --mlp swiglu --threads 1 \
  --save s2s.safetensors >/dev/null 2>&1 || fail "seq2seq of the parts failed to train"
"$qkv" sample --checkpoint s2s.safetensors --prompt 123 >/dev/null 2>&1 || fail "seq2seq of the parts failed to sample"
"$qkv" gradcheck --model encoder --norm rmsnorm --mlp swiglu --position rope --kv-heads 1 >gc.txt 2>&1 || { cat gc.txt; fail "gradcheck of the parts failed"; }
grep -q "mlp.gate.weight" gc.txt || fail "gradcheck did not check the swiglu's weights"
"$qkv" graph --model gpt --norm rmsnorm --out g.dot >/dev/null 2>&1 || fail "graph of the parts failed"
grep -q "rms_norm" g.dot || fail "the graph does not draw rms_norm"
ok "seq2seq of the parts trains and samples; gradcheck and graph take the parts for a fresh model"

refused "an unknown norm" "$qkv" train --norm groupnorm --steps 1
grep -q "unknown norm 'groupnorm' (layernorm, rmsnorm" err.txt || fail "the unknown norm's error does not list the norms"
refused "an unknown mlp" "$qkv" gradcheck --model gpt --mlp relu
refused "--norm on --resume" "$qkv" train --resume full.safetensors --steps 30 --norm layernorm
refused "--norm for mha" "$qkv" gradcheck --model mha --norm rmsnorm
refused "kv-heads that do not divide the heads" "$qkv" train --heads 4 --kv-heads 3 --steps 1
refused "a bad kv-heads" "$qkv" train --kv-heads two --steps 1
refused "--mlp with a checkpoint" "$qkv" graph --checkpoint full.safetensors --prompt Alice --mlp swiglu
refused "export of other parts" "$qkv" export full.safetensors --format hf --out hf
ok "bad and misplaced part flags are one-line errors"
