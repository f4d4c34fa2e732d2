#!/usr/bin/env bash
# qkv attention: any prompt (markup characters, UTF-8, raw bytes) gives
# well-formed SVG (checked with xmllint) with hover titles, and index.html
# (the page's attention views) holds every map; task maps mark where the answer starts; Seq2Seq checkpoints get
# cross-attention maps; an unwritable --out fails.
# usage: attention_maps.sh QKV WORKDIR
set -u
qkv=$1 work=$2
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
. "$(dirname "$0")/lib.sh"
command -v xmllint >/dev/null || fail "xmllint is missing: install libxml2-utils (./qkv.sh test does)"
"$qkv" train --task text --dim 32 --layers 1 --heads 2 --batch 4 --steps 1 --threads 1 --save text.safetensors >/dev/null 2>&1 || fail "text model"
"$qkv" train --dim 32 --layers 2 --heads 2 --steps 0 --save reverse.safetensors >/dev/null 2>&1 || fail "reverse model"
i=0
for prompt in "<&>\"' a</svg>" "héllo ✓ 日本" $'raw \x01\x1b\xff\xfe\xef\xbf\xbe bytes' ']]> <!-- x'; do
  i=$((i + 1))
  "$qkv" attention --checkpoint text.safetensors --prompt "$prompt" --out maps$i >out.txt 2>&1 || { cat out.txt; fail "prompt $i"; }
  n=0
  for svg in maps$i/*.svg; do
    xmllint --noout "$svg" 2>err.txt || { cat err.txt; fail "prompt $i: $svg is not well-formed XML"; }
    n=$((n + 1))
  done
  [ $n -eq 3 ] || fail "prompt $i: $n SVG files, expected 2 heads + the mean"
  [ "$(page_data maps$i/index.html "len(d['attention']['groups'][0]['layers'][0]['maps'])")" = 2 ] \
    || fail "prompt $i: index.html does not hold the layer's 2 heads"
  grep -q "<title>query 0 " maps$i/layer0_head0.svg || fail "prompt $i: no hover titles"
done
echo "ok: markup, UTF-8 and raw-byte prompts give well-formed SVG, and index.html holds them"
"$qkv" attention --checkpoint reverse.safetensors --prompt 1234 --out task >/dev/null || fail "task maps"
grep -q "answer starts" task/layer1_head0.svg || fail "the answer is not marked"
for svg in task/*.svg; do xmllint --noout "$svg" || fail "$svg"; done
# The causal triangle is hatched, as on the page, not white as a weight of 0: n tokens, n(n-1)/2 cells past the diagonal.
n=$(grep -c "<title>query 0 " task/layer0_head0.svg)
[ "$n" -ge 5 ] && [ "$(grep -c 'fill="url(#hatch)"' task/layer0_head0.svg)" -eq $((n * (n - 1) / 2)) ] ||
  fail "the masked cells are not hatched ($n tokens)"
grep -q "<title>query 0 1 -> key 1 2: masked (the query cannot see this key)</title>" task/layer0_head0.svg ||
  fail "a masked cell's title does not say so"
grep -q "<title>query 1 2 -> key 0 1: 0\.[0-9]*</title>" task/layer0_head0.svg || fail "a seen cell lost its weight"
"$qkv" attention --checkpoint text.safetensors --prompt "a b" --out spaces >/dev/null || fail "a prompt with spaces"
[ "$(grep -c '>␣<' spaces/layer0_head0.svg)" -eq 2 ] || fail "a space token's label is blank, not ␣"
echo "ok: task maps mark where the answer starts and hatch what the mask hides; a space shows as ␣"
# Seq2Seq: the encoder's self-attention, and per decoder layer its self-attention
# and its cross-attention, whose rows are the decoder's tokens and columns the input's.
"$qkv" train --model seq2seq --task sort --dim 32 --layers 2 --heads 2 --steps 0 --save s2s.safetensors >/dev/null 2>&1 || fail "seq2seq model"
"$qkv" attention --checkpoint s2s.safetensors --prompt 3142 --out s2s >out.txt 2>&1 || { cat out.txt; fail "seq2seq maps"; }
for layer in 0 1; do
  for map in encoder$layer decoder${layer}_self decoder${layer}_cross; do
    for part in head0 head1 mean; do
      xmllint --noout "s2s/${map}_$part.svg" || fail "seq2seq: ${map}_$part.svg missing or not well-formed"
    done
  done
done
[ "$(page_data s2s/index.html "j(len(g['layers']) for g in d['attention']['groups'])")" = "2 2 2" ] \
  || fail "seq2seq: index.html does not hold 3 tabs of 2 layers"
[ "$(page_data s2s/index.html "j(d['attention']['groups'][2]['cols'])")" = "3 1 4 2" ] || fail "seq2seq: the cross tab's keys are not the input"
cross=s2s/decoder1_cross_head0.svg
grep -q "<title>query 0 = -&gt; key 3 2: " $cross || grep -q "<title>query 0 = -> key 3 2: " $cross || fail "seq2seq: the cross map's first row is not the start mark over the input 3142"
grep -q "key 4 " $cross && fail "seq2seq: the cross map has more columns than the input's 4 symbols"
grep -q "key 3 2: " s2s/encoder0_head0.svg || fail "seq2seq: the encoder map is not over the input"
echo "ok: Seq2Seq checkpoints get encoder, decoder and cross-attention maps, the cross maps input-wide"
"$qkv" attention --checkpoint reverse.safetensors --prompt 12 --out /proc/qkv-maps >/dev/null 2>err.txt && fail "an unwritable --out succeeded"
[ "$(wc -l <err.txt)" -eq 1 ] || { cat err.txt; fail "not a one-line error"; }
echo "ok: an unwritable --out exits non-zero: $(cat err.txt)"
