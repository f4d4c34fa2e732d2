#!/usr/bin/env bash
# qkv plot: a real --log of a text run (CSV and JSON lines) becomes an HTML
# page of well-formed SVG charts that hold exactly the logged points.
# usage: plot.sh QKV WORKDIR
set -u
qkv=$1 work=$2
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
. "$(dirname "$0")/lib.sh"
run=(--task text --dim 32 --layers 1 --heads 2 --batch 4 --context 32 --steps 12 --eval-every 4 --threads 1)
"$qkv" train "${run[@]}" --save a.safetensors --log run.csv >train.txt 2>&1 || { cat train.txt; fail "training with a CSV log"; }
grep -q "qkv plot run.csv" train.txt || fail "the summary does not say how to draw the log"
"$qkv" train "${run[@]}" --save b.safetensors --log run.jsonl >/dev/null 2>&1 || fail "training with a JSON-lines log"
for log in run.csv run.jsonl; do
  "$qkv" plot "$log" >out.txt 2>&1 || { cat out.txt; fail "qkv plot $log"; }
  xmllint --noout "$log.html" || fail "$log.html is not well-formed"
  [ "$(grep -c "<svg" "$log.html")" -ge 5 ] || fail "$log.html: fewer than 5 charts"
  value() { xmllint --xpath "string(//*[@data-name='$1']/@$2)" "$log.html"; }
  # Every logged loss, and every evaluation, is in its chart.
  want_steps=$(seq -s ' ' 1 12)
  [ "$(value loss data-steps)" = "$want_steps" ] || fail "$log: loss chart steps '$(value loss data-steps)'"
  [ "$(value eval_loss data-steps)" = "4 8 12" ] || fail "$log: held-out chart steps '$(value eval_loss data-steps)'"
done
csv_losses=$(tail -n +2 run.csv | cut -d, -f2 | tr '\n' ' ' | sed 's/ $//')
[ "$(xmllint --xpath "string(//*[@data-name='loss']/@data-values)" run.csv.html)" = "$csv_losses" ] || fail "the loss chart's values differ from the CSV"
csv_eval=$(tail -n +2 run.csv | cut -d, -f7 | grep . | tr '\n' ' ' | sed 's/ $//')
[ "$(xmllint --xpath "string(//*[@data-name='eval_loss']/@data-values)" run.csv.html)" = "$csv_eval" ] || fail "the held-out chart's values differ from the CSV"
echo "ok: qkv plot draws CSV and JSON-lines logs; the charts hold every logged point"
printf 'step,loss\n1,abc\n' >bad.csv
"$qkv" plot bad.csv >/dev/null 2>err.txt && fail "a malformed log was drawn"
[ "$(wc -l <err.txt)" -eq 1 ] || { cat err.txt; fail "not a one-line error"; }
echo "ok: a malformed log is a one-line error: $(cat err.txt)"

# Hostile paths: a FIFO nobody writes (would block), /dev/zero (never ends), a
# folder. Each is refused at once, in one line.
mkfifo pipe.csv && mkdir folder.csv
for path in pipe.csv /dev/zero folder.csv; do
  timeout 10 "$qkv" plot "$path" >/dev/null 2>err.txt
  rc=$?
  [ $rc -ne 0 ] && [ $rc -lt 124 ] || fail "qkv plot $path: exit $rc (0 or a timeout)"
  [ "$(wc -l <err.txt)" -eq 1 ] || { cat err.txt; fail "qkv plot $path: not a one-line error"; }
done
echo "ok: a FIFO, /dev/zero and a folder are refused at once, in one line"
