#!/usr/bin/env bash
# A hostile audit's smaller findings, one check each: threads as the OpenMP
# runtime really gives them (a limit or dynamic adjustment once hung the run
# in OpenBLAS), --threads parsed strictly and allowed past the cores with a
# warning, info refusing what the loaders refuse, a /proc file as --data, an
# ignored OPENBLAS_CORETYPE said to be ignored, notes of a failed --resume
# held back, and messages that read as English ("an encoder").
# usage: reliability.sh QKV WORKDIR [sanitized]
set -u
qkv=$1
work=$2
sanitized=${3:-}
here=$(dirname "$(readlink -f "$0")")
source "$here/lib.sh"
limit=120
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
small=(--dim 16 --layers 1 --heads 2 --batch 8 --threads 1 --no-best)

# The OpenMP runtime's limits: the run uses what it really gets, says so, and ends (it spun forever).
for env in OMP_THREAD_LIMIT=1 OMP_DYNAMIC=true; do
  env "$env" timeout 60 "$qkv" train --dim 16 --layers 1 --heads 2 --threads 2 --steps 20 --no-log --no-best \
    --save "omp_${env%%=*}.safetensors" >out.txt 2>"err_${env%%=*}.txt" ||
    { cat out.txt "err_${env%%=*}.txt"; fail "$env: the run did not end well"; }
done
grep -q "2 threads asked, but the OpenMP runtime here gives at most 1 (OMP_THREAD_LIMIT): 1" err_OMP_THREAD_LIMIT.txt ||
  { cat err_OMP_THREAD_LIMIT.txt; fail "the limit is not said"; }
ok "OMP_THREAD_LIMIT=1 and OMP_DYNAMIC=true: the run ends, and the limit is said"

# --threads: a decimal count; past the cores a warning, and the same bits.
refused "--threads 0x1" "$qkv" train "${small[@]}" --steps 1 --threads 0x1 --no-log
grep -q "'0x1' is not a whole number" err.txt || fail "0x1 was not refused plainly"
cores=$(getconf _NPROCESSORS_ONLN)  # not nproc: it counts OMP_NUM_THREADS, which ctest sets
many=$((cores * 2))
"$qkv" train --dim 16 --layers 1 --heads 2 --batch 8 --steps 3 --no-log --no-best --threads 1 --save t1.safetensors \
  >/dev/null 2>&1 || fail "one thread"
"$qkv" train --dim 16 --layers 1 --heads 2 --batch 8 --steps 3 --no-log --no-best --threads $many --save tm.safetensors \
  >out.txt 2>err.txt || { cat err.txt; fail "--threads $many on $cores cores"; }
grep -q "warning: --threads $many on $cores cores: threads share cores" err.txt || { cat err.txt; fail "no warning"; }
cmp -s t1.safetensors tm.safetensors || fail "--threads $many gives other bits than --threads 1"
refused "--threads 65" "$qkv" train "${small[@]}" --steps 1 --threads 65 --no-log
ok "--threads is decimal, runs past the cores with a warning and the same bits, and stops at 64"

# info refuses what eval, sample and --resume refuse.
"$qkv" train --task digits --dim 16 --layers 1 --heads 2 --batch 8 --steps 1 --threads 1 --no-log --no-best \
  --save vit.safetensors >/dev/null 2>&1 || fail "a ViT"
"$qkv" train "${small[@]}" --task brackets --steps 1 --no-log --save enc.safetensors >/dev/null 2>&1 || fail "an encoder"
edit() {  # edit IN OUT KEY FIELD VALUE: a copy of IN whose metadata KEY (JSON, or a plain string when FIELD is -) changed
  python3 - "$@" <<'PY'
import json, struct, sys
src, dst, key, field, value = sys.argv[1:6]
raw = open(src, "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
header = json.loads(raw[8:8 + n])
meta = header["__metadata__"]
if field == "-":
    meta[key] = value
else:
    inner = json.loads(meta[key])
    if value == "DELETE":
        inner.pop(field)
    else:
        inner[field] = value
    meta[key] = json.dumps(inner, separators=(",", ":"))
text = json.dumps(header, separators=(",", ":")).encode()
text += b" " * ((8 - len(text) % 8) % 8)
open(dst, "wb").write(struct.pack("<Q", len(text)) + text + raw[8 + n:])
PY
}
edit vit.safetensors vocab.safetensors qkv.config vocab 1000000
refused "info of a ViT whose vocab no tensor counts" "$qkv" info vocab.safetensors
grep -q "vocab 1000000 for the digits task, whose vocabulary is 17" err.txt || fail "vocab: unclear"
refused "eval of the same" "$qkv" eval vocab.safetensors --examples 2
edit vit.safetensors step.safetensors qkv.step - -5
refused "info of step -5" "$qkv" info step.safetensors
grep -q "bad training step '-5'" err.txt || fail "step: unclear"
edit vit.safetensors postln.safetensors qkv.config post_ln 17
refused "info of post_ln 17" "$qkv" info postln.safetensors
grep -q "post_ln = '17', expected 0 or 1" err.txt || fail "post_ln: unclear"
refused "eval of post_ln 17" "$qkv" eval postln.safetensors --examples 2
edit vit.safetensors noimage.safetensors qkv.config image DELETE
refused "info of a ViT without its image field" "$qkv" info noimage.safetensors
grep -q "patch 0 does not tile" err.txt && fail "a missing image read as patch 0"
edit enc.safetensors text.safetensors qkv.task name text
refused "an encoder's file that says text" "$qkv" info text.safetensors
grep -q "an encoder model does not learn the text task" err.txt || fail "'a encoder'"
ok "info refuses a ViT's uncounted vocab, step -5, post_ln 17 and a missing image, as the loaders do"

# A /proc file whose size reads 0 is not an empty text.
refused "/proc/self/mem as --data" "$qkv" train "${small[@]}" --task text --steps 1 --no-log --data /proc/self/mem
grep -q "cannot read" err.txt || fail "/proc/self/mem was not unreadable"
ok "a /proc file as --data: unreadable, not empty"

# An OPENBLAS_CORETYPE OpenBLAS does not know is ignored, and said to be.
OPENBLAS_CORETYPE=garbage "$qkv" info --system >sys.txt 2>&1 || fail "info --system"
grep -q "OPENBLAS_CORETYPE=garbage names no core it knows: ignored" sys.txt || { cat sys.txt; fail "garbage taken as the source"; }
ok "an unknown OPENBLAS_CORETYPE is said to be ignored"

# A --resume that fails after its checks says why in one line, without the notes of a run that never started.
"$qkv" train "${small[@]}" --task text --context 16 --steps 2 --save txt.safetensors >/dev/null 2>&1 || fail "text"
printf '%0100d' 0 >short.txt  # 100 bytes: a held-out tenth of 10, under the context
"$qkv" train --resume txt.safetensors --steps 4 --save branch.safetensors --data short.txt >out.txt 2>err.txt &&
  fail "a resume on too short a text"
[ "$(wc -l <err.txt)" = 1 ] && ! grep -q "^note:" out.txt || { cat out.txt err.txt; fail "notes of a run that never started"; }
ok "a failed --resume gives its error alone"

# A result is never lost to a file that appears while the run works: the commit refuses to replace it
# (renameat2 RENAME_NOREPLACE) and keeps the run's result beside it. (Both runs once said "saved".)
"$qkv" train --dim 32 --layers 1 --heads 2 --threads 1 --no-log --no-best --target 0 --steps 100000 \
  --save late.safetensors >late.txt 2>late_err.txt &
pid=$!
wait_for "^step " late.txt 60 || { kill $pid; cat late.txt late_err.txt; fail "the late run shows no step"; }
echo precious >late.safetensors
kill -TERM $pid  # it stops at the end of the step and saves
wait $pid && fail "the late run said it saved over a file made meanwhile"
[ "$(cat late.safetensors)" = precious ] || fail "the file made meanwhile was replaced"
grep -q "late.safetensors appeared while this command worked and was not replaced: its result is in late.safetensors.unsaved" \
  late_err.txt || { cat late.txt late_err.txt; fail "the run does not say where its model is"; }
"$qkv" info late.safetensors.unsaved >/dev/null || fail "the kept model does not load"
ok "a checkpoint made meanwhile stays; the run's model is kept beside it and named"

# The same for a page: --force replaces, as asked.
"$qkv" explore omp_OMP_DYNAMIC.safetensors --prompt 123 --out page.html >/dev/null || fail "a page"
cp page.html before.html
"$qkv" explore omp_OMP_DYNAMIC.safetensors --prompt 321 --out page.html --force >/dev/null || fail "--force"
cmp -s page.html before.html && fail "--force did not replace the page"
ok "--force replaces a page"

# Two runs on one --save: the first to finish saves; the other keeps its model beside it and says so.
for task in reverse sort; do
  "$qkv" train --task $task --dim 16 --layers 1 --heads 2 --threads 1 --steps 30 --no-log --no-best \
    --save same.safetensors >"same_$task.txt" 2>&1 &
done
wait
saved=$(grep -l "saved same.safetensors" same_*.txt | wc -l)
kept=$(grep -l "same.safetensors appeared while this command worked and was not replaced: its result is in same.safetensors.unsaved" same_*.txt | wc -l)
[ "$saved" = 1 ] && [ "$kept" = 1 ] || { cat same_*.txt; fail "two runs on one --save: $saved saved, $kept kept beside"; }
"$qkv" info same.safetensors.unsaved >/dev/null && "$qkv" info same.safetensors >/dev/null || fail "a model lost"
ok "two runs on one --save: one saves, the other keeps its model beside and names it"
