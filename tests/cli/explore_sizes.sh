#!/usr/bin/env bash
# The study page at every size: untrained text models of 2 x 4, 6 x 8 and
# 12 x 12 (layers x heads) on prompts of 10, 65 and 128 bytes, and one of
# GPT-2 small's shape in GPT-2's tokens. Every page must
# stay under 5 MB; a headless Chromium (tests/browser/explore_test.py) opens
# each, keeps a screenshot of every view, and runs every check on the largest.
# A prompt past the page's bound is refused naming the longest that fits.
# usage: explore_sizes.sh QKV CHROMIUM_OR_EMPTY SCREENSHOT_DIR WORKDIR [sanitized]
set -u
qkv=$1 chromium=$2 shots=$3 work=$4 sanitized=${5:-}
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$work" "$shots" && mkdir -p "$work" "$shots" && cd "$work" || exit 1
. "$here/lib.sh"
limit=120
# Under the sanitizers the 12-layer runs cost minutes and draw the same pages: the Release pass stands for both.
if [ -n "$sanitized" ]; then
  ok "the page sizes are checked in the Release pass"
  exit 0
fi
text65="The quick brown fox jumps over the lazy dog; then it rests a while."
text128="$text65 Pack my box with five dozen liquor jugs, and say it twice, slowly!"
prompts=("${text65:0:10}" "${text65:0:65}" "${text128:0:128}")
sizes=()
for shape in "2 4 64" "6 8 64" "12 12 192"; do
  read -r layers heads dim <<<"$shape"
  name=m${layers}x$heads
  "$qkv" train --task text --layers "$layers" --heads "$heads" --dim "$dim" --context 256 --steps 1 --batch 2 --threads 1 \
    --save "$name.safetensors" >"$name.txt" 2>&1 || { cat "$name.txt"; fail "training $name"; }
  for prompt in "${prompts[@]}"; do
    page=$name-${#prompt}.html
    bounded "$qkv" explore --checkpoint "$name.safetensors" --prompt "$prompt" --out "$page" >out.txt 2>&1 || { cat out.txt; fail "explore $page"; }
    # Every check on the largest page; the others' size, tabs (screenshots), model and head views.
    [ "$page" = m12x12-128.html ] && sizes+=("$page") || sizes+=(--light "$page")
  done
done
# GPT-2 small's shape: 12 x 12, width 768, GPT-2's 50,257 BPE tokens, random weights (made here, never kept:
# 500 MB); its page labels BPE tokens as text, and every check runs on it, token attribution included. Its
# 124M parameters and their gradients need more than bounded's 1 GB of address space.
gpt2=$here/../fixtures/gpt2
"$qkv" train --task text --tokenizer "$gpt2" --layers 12 --heads 12 --dim 768 --context 512 --steps 0 --batch 1 \
  --no-log --no-best --save gpt2-small.safetensors >gpt2-small.txt 2>&1 || { cat gpt2-small.txt; fail "a GPT-2 small"; }
timeout -k 10 "$limit" "$qkv" explore gpt2-small.safetensors --prompt "$text128" --out gpt2-small-128.html >out.txt 2>&1 \
  || { cat out.txt; fail "explore gpt2-small-128.html"; }
grep -q "12 attention maps x 12 heads" out.txt || { cat out.txt; fail "the GPT-2 small page's maps"; }
rm gpt2-small.safetensors
sizes+=(gpt2-small-128.html)
# The refusal names the longest prompt that fits: 12 x 12 maps of n x n weights, at most 2^22 of them (a text
# model reads 200 bytes as 199 tokens: the last byte is only predicted).
long=$(printf '%0200d' 0)
refused "explore of a prompt too long for a page" "$qkv" explore --checkpoint m12x12.safetensors --prompt "$long" --out long.html
grep -q "this prompt gives 199 tokens, and the longest that fits this model gives 170: give a shorter prompt" err.txt \
  || { cat err.txt; fail "the refusal does not name the longest prompt that fits (170 tokens: 144 x 170² <= 2^22 < 144 x 171²)"; }
ok "explore: pages of 2 x 4, 6 x 8 and 12 x 12 models on 10-, 65- and 128-byte prompts and of GPT-2 small's shape; a longer one is refused naming 170"
need_chromium "$chromium"
CHROMIUM=$chromium python3 "$here/../browser/explore_test.py" "${sizes[@]}" --shots "$shots" --max-mb 5 >browser.txt 2>&1 \
  || { cat browser.txt; fail "the browser test of the page sizes"; }
grep "^size:" browser.txt | sed 's/^/  /'
echo "  $(tail -1 browser.txt)"
ok "Chromium opens every size's page without a console error, each under 5 MB (screenshots in $shots)"
