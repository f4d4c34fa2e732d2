#!/usr/bin/env bash
# qkv graph: the DOT holds one box per op the engine recorded (the same op
# names, as many of each), Graphviz renders it without a warning into valid
# SVG, --focus draws one attention layer, checkpoints are drawn for a
# prompt, and without Graphviz the DOT is still written with a way to render it.
# usage: graph.sh QKV DOT WORKDIR
set -u
qkv=$1 dot_bin=$2 work=$3
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
. "$(dirname "$0")/lib.sh"

# The engine's op names in a DOT file's boxes (the first line of each label: the op, or the page's name for it
# with the op in brackets, "causal mask (masked_fill)"), counted: "linear 4" per line, sorted.
dot_ops() { sed -n 's/^ *n[0-9]* \[shape=box.*label="\([^"\\]*\)\\n.*/\1/p' "$1" | sed 's/.*(\([a-z_0-9]*\))$/\1/' | sort | uniq -c | awk '{print $2, $1}'; }
# The engine's own count, from the command's "the engine recorded N ops: a 1, b 2" line.
engine_ops() { sed -n 's/^the engine recorded [0-9]* ops: //p' "$1" | tr ',' '\n' | sed 's/^ *//' | sort; }

check_graph() {  # name, then qkv graph's arguments
  local name=$1; shift
  "$qkv" graph "$@" --out "$name.dot" >"$name.txt" 2>&1 || { cat "$name.txt"; fail "$name: qkv graph failed"; }
  [ -s "$name.dot" ] && [ -s "$name.svg" ] || fail "$name: no DOT or SVG"
  diff <(dot_ops "$name.dot") <(engine_ops "$name.txt") >"$name.diff" || { cat "$name.diff"; fail "$name: DOT boxes differ from the engine's ops"; }
  boxes=$(grep -c '^ *n[0-9]* \[shape=box' "$name.dot")
  grep -q "^$boxes nodes\|: $boxes ops and" "$name.txt" || { cat "$name.txt"; fail "$name: $boxes boxes, not the ops counted"; }
  # Graphviz itself: no warning, and the SVG is XML.
  "$dot_bin" -Tsvg "$name.dot" -o "$name.check.svg" 2>"$name.dot_err" || fail "$name: dot failed"
  [ ! -s "$name.dot_err" ] || { cat "$name.dot_err"; fail "$name: dot warned"; }
  xmllint --noout "$name.svg" || fail "$name: SVG is not well-formed XML"
  grep -q '|grad| ' "$name.dot" || fail "$name: no gradient norms"
}

check_graph mha --model mha
grep -q 'label="q_proj"' mha.dot || fail "mha: no q_proj cluster"
grep -q 'label="softmax\\n\[1, 2, 4, 4\]' mha.dot || fail "mha: no softmax box with its shape"
grep -q 'label="causal mask (masked_fill)' mha.dot && grep -q 'label="scale (mul_scalar)' mha.dot || fail "mha: the ops not named as the page names them"
check_graph gpt --model gpt
for block in blocks.0 blocks.1 blocks.0.attn blocks.1.mlp; do
  grep -q "label=\"$block\"" gpt.dot || fail "gpt: no cluster $block"
done
check_graph s2s --model seq2seq
grep -q 'cross_attn' s2s.dot || fail "seq2seq: no cross-attention cluster"
check_graph fused --model gpt --fused
grep -q 'fused_self_attention' fused.dot || fail "--fused: no fused kernel box"
echo "ok: DOT boxes match the engine's recorded ops for mha, gpt, seq2seq (composed and fused); dot renders them cleanly"

# --focus attention: the first attention layer alone, its inputs as dashed stand-ins.
"$qkv" graph --model gpt --focus attention --out focus.dot >focus.txt 2>&1 || { cat focus.txt; fail "--focus attention"; }
grep -q 'label="blocks.0.attn"' focus.dot || fail "--focus: no blocks.0.attn box"
grep -q 'blocks.1' focus.dot && fail "--focus attention drew blocks.1"
grep -q 'style="rounded,dashed"' focus.dot || fail "--focus: no stand-in for the layer's input"
"$dot_bin" -Tsvg focus.dot -o /dev/null 2>focus.err && [ ! -s focus.err ] || fail "--focus: dot warned"
"$qkv" graph --model gpt --focus blocks.7 --out bad.dot >bad.txt 2>&1 && fail "--focus on a missing module succeeded"
[ "$(wc -l <bad.txt)" -eq 1 ] && grep -q "no node lies in module 'blocks.7'" bad.txt || { cat bad.txt; fail "--focus error"; }
echo "ok: --focus draws one attention layer; an unknown module is a one-line error"

# A checkpoint and a prompt; bad combinations are one-line errors.
"$qkv" train --dim 16 --layers 1 --heads 2 --steps 2 --batch 4 --threads 1 --save ck.safetensors >/dev/null 2>&1 || fail "train"
check_graph ck --checkpoint ck.safetensors --prompt 123
"$qkv" graph --checkpoint ck.safetensors --out x.dot >err.txt 2>&1 && fail "--checkpoint without --prompt succeeded"
grep -q "prompt" err.txt || fail "no --prompt error"
"$qkv" graph --model gpt --checkpoint ck.safetensors --prompt 1 --out x.dot >err.txt 2>&1 && fail "--model with --checkpoint"
"$qkv" graph --model lstm --out x.dot >err.txt 2>&1 && fail "--model lstm succeeded"
"$qkv" graph --model mha --out /proc/x.dot >err.txt 2>&1 && fail "an unwritable --out succeeded"
[ "$(wc -l <err.txt)" -eq 1 ] || { cat err.txt; fail "unwritable --out: not one line"; }
echo "ok: a checkpoint is drawn for a prompt; bad flags give one-line errors"

# Without Graphviz: the DOT, and how to render it.
mkdir -p nodot
PATH=$work/nodot "$qkv" graph --model mha --out plain.dot >plain.txt 2>&1 || { cat plain.txt; fail "without dot"; }
[ -s plain.dot ] && [ ! -e plain.svg ] || fail "without dot: expected the DOT only"
grep -q "dot -Tsvg plain.dot -o plain.svg" plain.txt || { cat plain.txt; fail "without dot: no rendering hint"; }
echo "ok: without Graphviz the DOT is written with the command that renders it"
