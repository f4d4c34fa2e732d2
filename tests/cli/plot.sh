#!/usr/bin/env bash
# qkv plot: a real --log of a text run (CSV and JSON lines) becomes the page's
# curves view, holding exactly the logged points; several logs are overlaid.
# usage: plot.sh QKV WORKDIR [sanitized]
set -u
qkv=$1 work=$2 sanitized=${3:-}  # sanitized: no address-space limit (the sanitizers reserve terabytes of it)
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
. "$(dirname "$0")/lib.sh"
run=(--task text --dim 32 --layers 1 --heads 2 --batch 4 --context 32 --steps 12 --eval-every 4 --threads 1)
"$qkv" train "${run[@]}" --save a.safetensors --log run.csv >train.txt 2>&1 || { cat train.txt; fail "training with a CSV log"; }
grep -q "qkv plot run.csv" train.txt || fail "the summary does not say how to draw the log"
"$qkv" train "${run[@]}" --save b.safetensors --log run.jsonl >/dev/null 2>&1 || fail "training with a JSON-lines log"
for log in run.csv run.jsonl; do
  "$qkv" plot "$log" >out.txt 2>&1 || { cat out.txt; fail "qkv plot $log"; }
  column() { page_data "$log.html" "j(d['curves']['runs'][0]['columns']['$1']['$2'])"; }
  [ "$(page_data "$log.html" "len(d['curves']['runs'][0]['columns'])")" -ge 5 ] || fail "$log.html: fewer than 5 curves"
  # Every logged loss, and every evaluation, is in its curve.
  [ "$(column loss steps)" = "$(seq -s ' ' 1 12)" ] || fail "$log: loss steps '$(column loss steps)'"
  [ "$(column eval_loss steps)" = "4 8 12" ] || fail "$log: held-out steps '$(column eval_loss steps)'"
  grep -q "dygraphs 2.2" "$log.html" || fail "$log.html: the charting library is not inlined"
  grep -q '<script src=\|<link ' "$log.html" && fail "$log.html: loads a file (it must work offline from one file)"
done
python3 - <<'PY' || fail "the curves' values differ from the CSV"
import csv, json, re
page = open("run.csv.html", encoding="utf-8").read()
d = json.loads(re.search(r'<script id="qkv-data" type="application/json">(.*?)</script>', page, re.S).group(1))
cols = d["curves"]["runs"][0]["columns"]
rows = list(csv.DictReader(open("run.csv")))
assert cols["loss"]["values"] == [float(r["loss"]) for r in rows], "loss"
assert cols["eval_loss"]["values"] == [float(r["eval_loss"]) for r in rows if r["eval_loss"]], "eval_loss"
PY
echo "ok: qkv plot draws CSV and JSON-lines logs; the page holds every logged point"
"$qkv" plot run.csv run.jsonl --out both.html >/dev/null || fail "plot of two logs"
[ "$(page_data both.html "j(r['name'] for r in d['curves']['runs'])")" = "run.csv run.jsonl" ] || fail "two logs are not two runs"
echo "ok: two logs are overlaid as two runs"
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

limit=60  # seconds, sanitizers included: each is refused in well under one
# Rows built to cost memory: a 20 MB line of '[' took 1.5 GB in a DOM parser with
# no depth limit, and a 250 MB object of 17M keys 2.8 GB. Rows are capped at 1 MiB and
# parsed as strictly as a checkpoint header (depth 64, no repeated key); a column
# named twice in a CSV header is refused too. A CRLF log is read as the same log.
head -c 20000000 /dev/zero | tr '\0' '[' >deep.jsonl && echo >>deep.jsonl
python3 -c "print('{\"step\":1,\"a\":' + '[' * 100 + ']' * 100 + '}')" >nested.jsonl
printf '{"step":1,"loss":2,"loss":3}\n' >twice.jsonl
printf 'step,loss,loss\n1,2,3\n' >twice.csv
for log in deep.jsonl nested.jsonl twice.jsonl twice.csv; do
  refused "qkv plot $log" "$qkv" plot "$log" --out "$log.html"
done
grep -q "holds at most 1048576" <(bounded "$qkv" plot deep.jsonl 2>&1) || fail "the long row's error"
printf 'step,loss\r\n1,2.5\r\n2,2\r\n' >crlf.csv
"$qkv" plot crlf.csv --out crlf.html >/dev/null || fail "a CRLF log"
[ "$(page_data crlf.html "d['curves']['runs'][0]['columns']['loss']['values']")" = "[2.5, 2.0]" ] || fail "CRLF values"
# A spreadsheet's export: a byte-order mark first ("no step column first", before), or CR-only line ends.
printf '\xef\xbb\xbfstep,loss\r\n1,2.5\r\n2,2\r\n' >bom.csv
printf 'step,loss\r1,2.5\r2,2\r' >cr.csv
for log in bom cr; do
  "$qkv" plot $log.csv --out $log.html >/dev/null || fail "a $log log"
  [ "$(page_data $log.html "d['curves']['runs'][0]['columns']['loss']['values']")" = "[2.5, 2.0]" ] || fail "$log values"
done
echo "ok: deep, repeated-key and over-long rows are one-line errors; CRLF, CR and BOM logs plot"

# A log wide and long (4,000 columns, 16,000 rows: 128 MiB) is read in two passes of 1 MiB chunks, never
# whole: within 1 GB of address space (ulimit -v) it draws in seconds, where it once took 1.29 GB of memory
# and 98 s. (Under the sanitizers, which set no limit, a shorter log checks the same code.)
rows=16000
[ -n "$sanitized" ] && rows=500  # 4 MiB: still 4 chunks a pass
python3 - "$rows" >wide.csv <<'PY'
import sys
cols, rows = 4000, int(sys.argv[1])
sys.stdout.write("step," + ",".join(f"c{i}" for i in range(cols - 1)) + "\n")
row = "," + ",".join("1" for _ in range(cols - 1)) + "\n"
for r in range(1, rows + 1):
    sys.stdout.write(str(r) + row)
PY
bounded "$qkv" plot wide.csv --out wide.html >out.txt 2>&1 || { cat out.txt; fail "a 128 MiB log within 1 GB"; }
grep -q "wrote 300 curves of 1 log ($rows steps)" out.txt || { cat out.txt; fail "the wide log's curves"; }
[ "$(page_data wide.html "d['curves']['runs'][0]['left_out']['count']")" = 3699 ] || fail "the columns past 300 are not named"
[ "$(page_data wide.html "d['curves']['runs'][0]['columns']['c0']['every']")" = $(( (rows + 1999) / 2000 )) ] ||
  fail "the thinning of a long curve"
echo "ok: a $(($(stat -c %s wide.csv) >> 20)) MiB log of 4,000 columns plots within 1 GB of address space"
