#!/usr/bin/env bash
# The encoder classifier (brackets), the ViT (digits) and the recommender
# (sessions) from the command line: each trains, resumes bit for bit, is
# evaluated (accuracy and a confusion matrix, or HR@10 and NDCG@10 against
# the popularity baseline), samples, draws its attention (the ViT's [CLS]
# row over the digit, the classifier's [CLS] row over its tokens), shows its
# gradients, graph and info; and every hostile digits CSV gets a one-line
# error in bounded time and memory.
# usage: label_models.sh QKV COMPARE_CHECKPOINTS WORKDIR [sanitized]
set -u
qkv=$1 compare=$2 work=$3 sanitized=${4:-}
here=$(cd "$(dirname "$0")" && pwd)
digits=$here/../../cli/data/digits.csv
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
. "$here/lib.sh"
small=(--dim 16 --heads 2 --layers 1 --batch 8 --eval-every 10 --threads 1 --schedule constant --warmup 0)
limit=5; [ -n "$sanitized" ] && limit=60  # seconds; the sanitizers run 10-20x slower

for task in brackets digits sessions; do
  "$qkv" train --task "$task" "${small[@]}" --steps 20 --save "$task.safetensors" >"$task.txt" 2>&1 ||
    { cat "$task.txt"; fail "$task: train"; }
  # Resuming continues the same run: 10 + 10 steps give the very same weights as 20.
  "$qkv" train --task "$task" "${small[@]}" --steps 10 --save "half_$task.safetensors" >/dev/null 2>&1 ||
    fail "$task: the first half"
  "$qkv" train --resume "half_$task.safetensors" --steps 20 >/dev/null 2>&1 || fail "$task: resume"
  "$compare" "$task.safetensors" "half_$task.safetensors" 0 >/dev/null || fail "$task: 10 + 10 resumed steps differ from 20"
  "$qkv" info "$task.safetensors" >info.txt || fail "$task: info"
  grep -q "task       $task" info.txt || { cat info.txt; fail "$task: info names no task"; }
done
ok "brackets, digits and sessions train, resume bit for bit and describe themselves"
grep -q "^qkv train: encoder on brackets" brackets.txt || fail "brackets does not train the encoder by default"
grep -q "^qkv train: vit on digits" digits.txt || fail "digits does not train the ViT by default"
grep -q "^qkv train: recommender on sessions" sessions.txt || fail "sessions does not train the recommender by default"
grep -q "context 17" digits.txt || { head -1 digits.txt; fail "the ViT's context is not its 16 patches and [CLS]"; }
# A ViT reads its patches and [CLS] whatever a context says, so another context is refused, not recorded.
"$qkv" train --task digits "${small[@]}" --steps 1 --context 100 --save ctx.safetensors >ctx.txt 2>&1 &&
  fail "a ViT trained with --context 100"
[ "$(cat ctx.txt)" = "qkv train: error: --context 100: a ViT reads 17 tokens (16 patches and [CLS]): leave --context out, or give 17" ] ||
  { cat ctx.txt; fail "--context 100 for a ViT: not the one-line error"; }
[ ! -e ctx.safetensors ] || fail "a refused ViT run wrote a checkpoint"

"$qkv" eval --checkpoint brackets.safetensors --examples 200 >eval.txt || fail "eval brackets"
grep -q "accuracy .* on 200 held-out examples" eval.txt && grep -q "confusion matrix" eval.txt &&
  grep -qE "^ +unbalanced +[0-9]+ +[0-9]+$" eval.txt || { cat eval.txt; fail "brackets: no accuracy or confusion matrix"; }
"$qkv" eval --checkpoint digits.safetensors >eval.txt || fail "eval digits"
grep -q "on 359 held-out examples" eval.txt && [ "$(grep -cE '^ +[0-9] +([0-9]+ +){9}[0-9]+$' eval.txt)" -eq 10 ] ||
  { cat eval.txt; fail "digits: no 10 x 10 confusion matrix over the 359 held-out images"; }
"$qkv" eval --checkpoint sessions.safetensors >eval.txt || fail "eval sessions"
grep -qE "model +HR@10 [0-9.]+ +NDCG@10" eval.txt && grep -qE "most popular 10 +HR@10" eval.txt ||
  { cat eval.txt; fail "sessions: no HR@10 against the baseline"; }
ok "eval: accuracy and confusion matrices, HR@10 and NDCG@10 against the most popular items"

"$qkv" sample --checkpoint brackets.safetensors --prompt "([)]" >s.txt || fail "sample brackets"
grep -qE "^\(\[\)\] -> (un)?balanced \(p [0-9.]+\); then (un)?balanced [0-9.]+; the right label is unbalanced$" s.txt ||
  { cat s.txt; fail "brackets sample"; }
"$qkv" sample --checkpoint digits.safetensors --prompt 7 >s.txt || fail "sample digits"
grep -qE "^image -> [0-9] \(p [0-9.]+\); then" s.txt || { cat s.txt; fail "digits sample"; }
"$qkv" sample --checkpoint sessions.safetensors --prompt "12 13 14" >s.txt || fail "sample sessions"
[ "$(grep -cE '^  item [0-9]+ \(genre [0-9]\) +p [0-9.]+$' s.txt)" -eq 10 ] || { cat s.txt; fail "sessions: not 10 items"; }
ok "sample: a class with its probabilities, or the 10 likeliest next items"

"$qkv" attention --checkpoint digits.safetensors --prompt 3 --out vit >/dev/null || fail "attention vit"
for f in vit/layer0_cls_head0.svg vit/layer0_cls_mean.svg vit/layer0_head1.svg; do
  [ -s "$f" ] || fail "attention vit: no $f"
done
[ "$(grep -c '<title>patch ' vit/layer0_cls_head0.svg)" -eq 16 ] || fail "the ViT overlay does not tint 16 patches"
[ "$(grep -o 'fill="rgb(' vit/layer0_cls_head0.svg | wc -l)" -eq 64 ] || fail "the ViT overlay does not draw the 64 pixels"
"$qkv" attention --checkpoint brackets.safetensors --prompt "(<>)" --out enc >/dev/null || fail "attention encoder"
grep -qF '[CLS] -> 4 ):' enc/layer0_cls_head0.svg || fail "the classifier's [CLS] row does not reach its last token"
"$qkv" attention --checkpoint sessions.safetensors --prompt "1 2 3" --out rec >/dev/null || fail "attention recommender"
if command -v xmllint >/dev/null; then
  xmllint --noout vit/*.svg || fail "attention SVGs are not well-formed XML"
  for page in vit enc rec; do page_data $page/index.html "d['attention']['heads']" >/dev/null || fail "$page/index.html holds no maps"; done
fi
ok "attention: the [CLS] row over the digit's patches and over the tokens, and the full maps"

# explore's study path for each label kind: dL/dP and head importances against central differences.
for run in "brackets (<>)" "digits 3" "sessions 1 2 3"; do
  task=${run%% *} prompt=${run#* }
  "$qkv" explore --checkpoint "$task.safetensors" --prompt "$prompt" --check --out "explore_$task.html" >x.txt 2>&1 ||
    { cat x.txt; fail "explore $task"; }
  grep -q "^check: .* all ok" x.txt || { cat x.txt; fail "explore $task: the check failed"; }
done
[ "$(page_data explore_digits.html "len(d['attention']['figures'])")" -ge 1 ] || fail "explore digits: no [CLS] picture over the image"
ok "explore: the encoder's, the ViT's and the recommender's dL/dP and importances equal central differences"

for task in brackets digits sessions; do
  prompt=$([ $task = brackets ] && echo "(()" || ([ $task = digits ] && echo 4 || echo "5 6 7"))
  "$qkv" grads --checkpoint "$task.safetensors" --prompt "$prompt" --out "g_$task.safetensors" >g.txt || fail "grads $task"
  grep -q "blocks.0.attn.q_proj.weight" g.txt || fail "grads $task: no per-head table"
  "$qkv" graph --checkpoint "$task.safetensors" --prompt "$prompt" --out "graph_$task.dot" >/dev/null ||
    fail "graph $task"
done
ok "grads and graph for every label kind"

# Hostile digits CSVs: each a one-line error naming the file, in bounded time and memory.
head -c 400 /dev/urandom >random.csv
printf '1,2,3\n' >narrow.csv
{ head -n 5 "$digits"; echo "0,0,1"; } >ragged.csv
{ head -n 5 "$digits"; sed -n 6p "$digits" |
  sed 's/,[0-9]*$/,12/'; } >label.csv
sed 's/^0,0,/0,99,/' "$digits" >pixel.csv
head -n 4 "$digits" >four.csv
: >empty.csv
truncate -s 1G huge.csv
mkfifo fifo.csv
refused "random bytes" "$qkv" train --task digits "${small[@]}" --data random.csv
refused "a narrow row" "$qkv" train --task digits "${small[@]}" --data narrow.csv
refused "a row of the wrong width" "$qkv" train --task digits "${small[@]}" --data ragged.csv
refused "a label out of range" "$qkv" train --task digits "${small[@]}" --data label.csv
refused "a pixel out of range" "$qkv" train --task digits "${small[@]}" --data pixel.csv
refused "too few images to hold any out" "$qkv" train --task digits "${small[@]}" --data four.csv
refused "an empty file" "$qkv" train --task digits "${small[@]}" --data empty.csv
refused "a 1 GB file" "$qkv" train --task digits "${small[@]}" --data huge.csv
refused "a FIFO" "$qkv" train --task digits "${small[@]}" --data fifo.csv
refused "eval on a malformed CSV" "$qkv" eval --checkpoint digits.safetensors --data ragged.csv
grep -q "ragged.csv: line 6 has 3 values" err.txt || fail "the error does not name the file and the line"
refused "a brackets prompt with a letter" "$qkv" sample --checkpoint brackets.safetensors --prompt "(a)"
refused "a history with an unknown item" "$qkv" sample --checkpoint sessions.safetensors --prompt "1 999"
refused "a held-out image past the split" "$qkv" sample --checkpoint digits.safetensors --prompt 359
# Weights near float's limit (finite, so the load takes them) made eval print an accuracy and sample 'p nan',
# exiting 0: every score is checked.
python3 - digits.safetensors huge.safetensors <<'PY' || fail "making huge.safetensors"
import json, struct, sys
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
header, data = json.loads(raw[8:8 + n]), bytearray(raw[8 + n:])
for name, t in header.items():
    if name.endswith(".weight") and t["dtype"] == "F32":
        a, b = t["data_offsets"]
        data[a:b] = struct.pack("<f", 3e38) * ((b - a) // 4)
open(sys.argv[2], "wb").write(raw[:8 + n] + bytes(data))
PY
refused "eval of overflowing weights" "$qkv" eval --checkpoint huge.safetensors
grep -q "huge.safetensors: its outputs reach" err.txt || fail "eval: unclear error for overflowing weights"
refused "sample of overflowing weights" "$qkv" sample --checkpoint huge.safetensors --prompt 5
# A spreadsheet's CSV: a UTF-8 byte-order mark and CRLF line ends read as the same images (the mark was
# refused, with an invisible character in the message).
{ printf '\xef\xbb\xbf'; sed 's/$/\r/' "$digits"; } >excel.csv
"$qkv" eval --checkpoint digits.safetensors --data excel.csv >excel.txt 2>&1 || { cat excel.txt; fail "a CSV with a BOM"; }
"$qkv" eval --checkpoint digits.safetensors --data "$digits" >plain.txt 2>&1 || fail "eval on the digits"
[ "$(sed 's/excel.csv//' excel.txt)" = "$(sed "s|$digits||" plain.txt)" ] || { cat excel.txt plain.txt; fail "BOM+CRLF changed the result"; }
# An old Mac's CR alone ends each line the same way (it was read as one long line).
tr '\n' '\r' <"$digits" >mac.csv
"$qkv" eval --checkpoint digits.safetensors --data mac.csv >mac.txt 2>&1 || { cat mac.txt; fail "a CSV with CR line ends"; }
[ "$(sed 's/mac.csv//' mac.txt)" = "$(sed "s|$digits||" plain.txt)" ] || { cat mac.txt plain.txt; fail "CR line ends changed the result"; }
# A model trained on its own CSV samples its held-out images by number when given that CSV again.
"$qkv" train --task digits "${small[@]}" --steps 2 --data "$digits" --save own.safetensors >/dev/null 2>&1 || fail "digits on --data"
refused "an image number without the CSV" "$qkv" sample --checkpoint own.safetensors --prompt 7
grep -q "or give that CSV with --data FILE" err.txt || fail "no hint at --data"
"$qkv" sample --checkpoint own.safetensors --prompt 7 --data "$digits" | grep -q "^image -> [0-9]" || fail "sample --data"
"$qkv" attention --checkpoint own.safetensors --prompt 7 --data "$digits" --out own_maps >/dev/null || fail "attention --data"
"$qkv" explore --checkpoint own.safetensors --prompt 7 --data "$digits" --out own.html >/dev/null || fail "explore --data"
refused "sample --data for a brackets model" "$qkv" sample --checkpoint brackets.safetensors --prompt "()" --data "$digits"
refused "--patch that does not tile" "$qkv" train --task digits "${small[@]}" --patch 3
refused "--pooling for a ViT" "$qkv" train --task digits "${small[@]}" --pooling mean
refused "a task the model does not learn" "$qkv" train --task digits --model gpt
ok "hostile CSVs and prompts: one-line errors in bounded time and memory"
