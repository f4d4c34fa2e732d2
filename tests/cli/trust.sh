#!/usr/bin/env bash
# Runs a user can trust (issue 12): each case reproduces a way qkv used to
# lose work, ignore what it was told or trust a hostile file, and checks the
# new behaviour. usage: trust.sh QKV HOSTILE_FILES WORKDIR [sanitized]
# In a sanitizer build the 1 GB address-space limit is left out: AddressSanitizer
# reserves terabytes of address space for its shadow memory and cannot start under it.
set -u
qkv=$1 hostile=$2 work=$3 sanitized=${4:-}
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
. "$(dirname "$0")/lib.sh"
small=(--dim 32 --layers 1 --heads 2 --batch 8 --eval-every 5 --threads 1)
one_line_error() {  # one_line_error FILE: a single stderr line
  [ "$(wc -l <"$1")" -eq 1 ] || { cat "$1"; fail "expected a one-line error"; }
}

# -- No lost work --------------------------------------------------------
# The save path is checked (and its folder created) before the first step.
"$qkv" train "${small[@]}" --steps 3 --save runs/exp1/a.safetensors >out.txt 2>&1 || { cat out.txt; fail "--save into a new folder"; }
[ -f runs/exp1/a.safetensors ] || fail "no checkpoint in the created folder"
: >plainfile
for bad in plainfile/x.safetensors /proc/qkv-no/x.safetensors; do
  "$qkv" train "${small[@]}" --steps 1000000 --save "$bad" >out.txt 2>err.txt && fail "--save $bad was accepted"
  grep -q "step " out.txt && fail "--save $bad: training started before the path was checked"
  one_line_error err.txt
done
ok "an unwritable --save fails before the first step"

# Never over another run's checkpoint without --force; a fresh run gets a new name.
"$qkv" train "${small[@]}" --steps 2 >/dev/null 2>&1 || fail "default save"
"$qkv" train "${small[@]}" --steps 2 >/dev/null 2>&1 || fail "second default save"
[ -f reverse.safetensors ] && [ -f reverse-2.safetensors ] || fail "the second run did not get a new name"
cp reverse.safetensors keep.safetensors
"$qkv" train "${small[@]}" --steps 2 --save reverse.safetensors >/dev/null 2>err.txt && fail "overwrote an existing checkpoint"
grep -q -- "--force" err.txt || fail "the refusal does not mention --force"
cmp -s reverse.safetensors keep.safetensors || fail "the refused run changed the file"
"$qkv" train "${small[@]}" --steps 2 --save reverse.safetensors --force >/dev/null 2>&1 || fail "--force"
ok "existing checkpoints are kept unless --force"

# --resume continues into the resumed file, with the run's own settings.
"$qkv" train --no-log --dim 32 --layers 1 --heads 2 --batch 12 --lr 0.002 --schedule constant --threads 1 --steps 10 --save full.safetensors >/dev/null 2>&1 || fail "full run"
"$qkv" train --no-log --dim 32 --layers 1 --heads 2 --batch 12 --lr 0.002 --schedule constant --threads 1 --steps 5 --save half.safetensors >/dev/null 2>&1 || fail "half run"
"$qkv" train --resume half.safetensors --steps 10 >/dev/null 2>&1 || fail "resume"
cmp -s full.safetensors half.safetensors || fail "resuming without flags did not restore the run's settings (or did not save into the resumed file)"
ok "resume restores batch, lr and schedule and continues into its own file (bit-identical)"
for flag in "--lr 0.1" "--dim 64" "--task sort" "--batch 4" "--dropout 0.1"; do
  "$qkv" train --resume half.safetensors $flag >/dev/null 2>err.txt && fail "resume accepted $flag"
  grep -q -- "${flag%% *} cannot change" err.txt || { cat err.txt; fail "resume: the error does not name ${flag%% *}"; }
  one_line_error err.txt
done
ok "a conflicting flag on --resume exits non-zero naming it"

# One step at lr 1e30 leaves finite weights near 1e30 whose outputs overflow: it once evaluated them (0%),
# saved them and exited 0. Its evaluation now stops it, saving nothing.
"$qkv" train "${small[@]}" --lr 1e30 --clip 0 --steps 1 --save nan.safetensors >/dev/null 2>err.txt &&
  fail "one step at lr 1e30 exited 0"
grep -q "evaluating step 1: the model's outputs reach .*training stopped without saving, and this run has saved nothing yet" \
  err.txt || { cat err.txt; fail "lr 1e30: unclear error"; }
[ -e nan.safetensors ] && fail "lr 1e30: the overflowing weights were saved"
# A non-finite loss stops training, keeps the last checkpoint, exits non-zero; the log holds no NaN. The
# checkpoint: one sane step, its recorded rate then set to 1e30, so the resumed run's first step diverges.
"$qkv" train "${small[@]}" --clip 0 --steps 1 --save nan.safetensors >/dev/null 2>&1 || fail "one step"
python3 - nan.safetensors <<'PY' || fail "setting the recorded rate"
import json, struct, sys
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
header = json.loads(raw[8:8 + n])
settings = json.loads(header["__metadata__"]["qkv.train"])
settings["lr"] = "1e+30"
header["__metadata__"]["qkv.train"] = json.dumps(settings, separators=(",", ":"))
text = json.dumps(header, separators=(",", ":")).encode()
text += b" " * (-len(text) % 8)
open(sys.argv[1], "wb").write(struct.pack("<Q", len(text)) + text + raw[8 + n:])
PY
cp nan.safetensors nan_before.safetensors
"$qkv" train --resume nan.safetensors --steps 100 --log nan.jsonl >out.txt 2>err.txt && fail "a diverged run exited 0"
grep -q "training stopped without saving" err.txt || { cat err.txt; fail "no clear message for a non-finite loss"; }
grep -q "Start a new run with a lower --lr" err.txt || { cat err.txt; fail "the advice names --lr, which --resume refuses"; }
cmp -s nan.safetensors nan_before.safetensors || fail "the last good checkpoint changed"
grep -qi "nan\|inf" nan.jsonl && fail "the log holds a non-finite number"
# Saving elsewhere: the resumed file holds the last good step, not --save (it named --save, which held nothing).
"$qkv" train --resume nan.safetensors --steps 100 --save other.safetensors >out.txt 2>err.txt && fail "a diverged run exited 0"
grep -q "training stopped without saving; nan.safetensors still holds step 1" err.txt || { cat err.txt; fail "the message names the wrong file"; }
[ -e other.safetensors ] && fail "a diverged run wrote --save"
ok "a diverging run stops, exits non-zero and leaves the checkpoint byte-identical"

# SIGTERM (and SIGHUP) save like Ctrl-C; the checkpoint resumes bit-identically.
for sig in TERM HUP; do
  "$qkv" train "${small[@]}" --no-log --schedule constant --steps 1000000 --target 0 --save sig$sig.safetensors >sig.txt 2>&1 &
  pid=$!
  wait_for "step 5/" sig.txt 30 || { cat sig.txt; fail "SIG$sig: no progress line within 30 s"; }
  kill -$sig $pid
  wait $pid
  rc=$?
  [ $rc -eq 130 ] || { cat sig.txt; fail "SIG$sig: exit $rc, expected 130"; }
  at=$(grep -o "interrupted at step [0-9]*" sig.txt | grep -o "[0-9]*$")
  [ -n "$at" ] || fail "SIG$sig: no save message"
  [ $sig = TERM ] && at_term=$at
done
at=$at_term
"$qkv" train --resume sigTERM.safetensors --steps $((at + 5)) >/dev/null 2>err.txt || { cat err.txt; fail "resuming the SIGTERM checkpoint"; }
"$qkv" train "${small[@]}" --no-log --schedule constant --target 0 --steps $((at + 5)) --save straight.safetensors >/dev/null 2>&1 || fail "straight run"
cmp -s sigTERM.safetensors straight.safetensors || fail "SIGTERM checkpoint + resume differs from a straight run"
ok "SIGTERM and SIGHUP save; the SIGTERM checkpoint resumes bit-identically"

# A second signal a second later exits at once, without saving (a step of
# this size takes seconds, so both signals land inside the first step).
"$qkv" train --dim 256 --layers 4 --heads 4 --batch 2048 --threads 1 --steps 5 --save second.safetensors >second.txt 2>&1 &
pid=$!
# The banner is flushed before the first step (it once waited in the buffer, and this test waited 30 s for it).
wait_for "^qkv train" second.txt 30 || { cat second.txt; fail "no banner within 30 s"; }
kill -TERM $pid
sleep 1.2
kill -TERM $pid
wait $pid
rc=$?
grep -q "second signal" second.txt || { cat second.txt; fail "no force-quit on a second signal"; }
[ $rc -eq 130 ] || fail "second signal: exit $rc"
ok "a second signal exits at once"

# --log: a fresh run never appends to an old log.
"$qkv" train "${small[@]}" --steps 2 --save l1.safetensors --log run.csv >/dev/null 2>&1 || fail "log"
"$qkv" train "${small[@]}" --steps 2 --save l2.safetensors --log run.csv >/dev/null 2>err.txt && fail "appended a new run to an old log"
"$qkv" train --resume l1.safetensors --steps 4 --log run.csv >/dev/null 2>&1 || fail "resume with its log"
[ "$(cut -d, -f1 run.csv | tr '\n' ' ')" = "step 1 2 3 4 " ] || { cat run.csv; fail "the resumed log does not continue the steps"; }
ok "logs are not mixed across runs; resuming continues its log"
# Resuming never cuts or appends to a log that is not its run's (the checkpoint records what its log held),
# continues its own log unasked (it once stopped logging), and refuses a budget it has spent (it rewrote the file).
"$qkv" train "${small[@]}" --steps 6 --save other.safetensors --log other.csv >/dev/null 2>&1 || fail "other run"
cp other.csv other_before.csv
"$qkv" train --resume l1.safetensors --steps 5 --log other.csv >/dev/null 2>err.txt && fail "resumed into another run's log"
grep -q "^qkv train: error: --log other.csv is not the log of the run that saved l1.safetensors (or it changed since): give --log a new file, or continue it anyway with --force$" err.txt ||
  { cat err.txt; fail "another run's log: not the one-line error"; }
cmp -s other.csv other_before.csv || fail "another run's log changed"
"$qkv" train --resume l1.safetensors --steps 6 >/dev/null 2>&1 || fail "resume without --log"
[ "$(cut -d, -f1 run.csv | tr '\n' ' ')" = "step 1 2 3 4 5 6 " ] || { cat run.csv; fail "resuming without --log did not continue the run's log"; }
sed -i '3s/^2,/2,9/' run.csv
cp run.csv run_changed.csv
"$qkv" train --resume l1.safetensors --steps 7 --log run.csv >/dev/null 2>err.txt && fail "resumed into a log changed since"
grep -q "^qkv train: error: --log run.csv is not the log of the run" err.txt || { cat err.txt; fail "a changed log: no error"; }
# Unasked, a log that is not the run's own is left alone and the run goes on without it.
"$qkv" train --resume l1.safetensors --steps 7 >out.txt 2>&1 || { cat out.txt; fail "resuming beside a changed log"; }
grep -q "note: the run's log is not continued: run.csv is not the log of the run" out.txt || { cat out.txt; fail "no note"; }
cmp -s run.csv run_changed.csv || fail "a log that is not the run's own was written to unasked"
"$qkv" train --resume l1.safetensors --steps 8 --log run.csv --force >/dev/null 2>&1 || fail "--force continues a changed log"
[ "$(tail -1 run.csv | cut -d, -f1)" = 8 ] || { cat run.csv; fail "--force did not continue the log"; }
cp l1.safetensors l1_before.safetensors
"$qkv" train --resume l1.safetensors --steps 3 >/dev/null 2>err.txt && fail "resumed to a budget already spent"
grep -q "l1.safetensors is already at step 8, and --steps is 3: give a larger --steps to train on" err.txt ||
  { cat err.txt; fail "a spent budget: no error"; }
cmp -s l1.safetensors l1_before.safetensors || fail "a spent budget rewrote the checkpoint"
# A branch (--save elsewhere) does not continue the log unasked: it would cut the rows of the run it branched from.
cp run.csv run_before.csv
"$qkv" train --resume l1.safetensors --steps 10 --save branch.safetensors >out.txt 2>&1 || { cat out.txt; fail "a branch"; }
grep -q "note: the run's log is not continued: this run saves into branch.safetensors" out.txt || { cat out.txt; fail "a branch: no note"; }
cmp -s run.csv run_before.csv || fail "a branch changed the log of the run it branched from"
# A checkpoint's log name is followed only to a regular file beside it that is the run's own: never created.
python3 - <<'PY'
import json, struct
b = open("l1.safetensors", "rb").read(); n = struct.unpack("<Q", b[:8])[0]; h = json.loads(b[8:8 + n])
h["__metadata__"]["qkv.log"] = ".bash_login"
t = json.dumps(h, separators=(",", ":")).encode(); t += b" " * (-len(t) % 8)
open("named.safetensors", "wb").write(struct.pack("<Q", len(t)) + t + b[8 + n:])
PY
"$qkv" train --resume named.safetensors --steps 10 >out.txt 2>&1 || { cat out.txt; fail "resuming a checkpoint naming .bash_login"; }
[ ! -e .bash_login ] || fail "train created the file a checkpoint named"
grep -q "note: the run's log .bash_login is not beside the checkpoint" out.txt || { cat out.txt; fail "no note for a log not there"; }
# Nor is a file it names cut or written to on the strength of a digest the same checkpoint gives: a user's CSV
# whose rows all start past the step would be cut to nothing, whose digest anyone knows.
printf '10,1.5,2.5\n20,1.5,2.5\n30,1.5,2.5\n' >measurements.csv
cp measurements.csv measurements_before.csv
python3 - <<'PY'
import json, struct
b = open("l1.safetensors", "rb").read(); n = struct.unpack("<Q", b[:8])[0]; h = json.loads(b[8:8 + n])
h["__metadata__"]["qkv.log"] = "measurements.csv"
h["__metadata__"]["qkv.log.digest"] = "0:cbf29ce484222325"
t = json.dumps(h, separators=(",", ":")).encode(); t += b" " * (-len(t) % 8)
open("forged.safetensors", "wb").write(struct.pack("<Q", len(t)) + t + b[8 + n:])
PY
"$qkv" train --resume forged.safetensors --steps 10 >out.txt 2>&1 || { cat out.txt; fail "resuming a forged checkpoint"; }
cmp -s measurements.csv measurements_before.csv || fail "a checkpoint's forged digest let train cut a user's CSV"
grep -q "note: the run's log is not continued: measurements.csv does not begin as a qkv log does" out.txt ||
  { cat out.txt; fail "no note for a named file that is not a qkv log"; }
# A larger --steps on --resume does not warm the run up again (lr at step 21 fell to about half of step 20's).
"$qkv" train "${small[@]}" --steps 20 --save warm.safetensors --log warm.csv >/dev/null 2>&1 || fail "a 20-step run"
"$qkv" train --resume warm.safetensors --steps 40 >/dev/null 2>&1 || fail "extending it to 40 steps"
awk -F, '$1 == 20 { a = $3 } $1 == 21 { b = $3 } END { exit !(b >= 0.99 * a) }' warm.csv ||
  { sed -n '20,23p' warm.csv | cut -d, -f1,3; fail "the resumed run warmed up again"; }
# A checkpoint from before targets were bounded (2 meant "never stop") still resumes, as no target.
python3 - <<'PY'
import json, struct
b = open("l1.safetensors", "rb").read(); n = struct.unpack("<Q", b[:8])[0]; h = json.loads(b[8:8 + n])
settings = json.loads(h["__metadata__"]["qkv.train"]); settings["target"] = "2"
h["__metadata__"]["qkv.train"] = json.dumps(settings)
t = json.dumps(h, separators=(",", ":")).encode(); t += b" " * (-len(t) % 8)
open("target2.safetensors", "wb").write(struct.pack("<Q", len(t)) + t + b[8 + n:])
PY
"$qkv" train --resume target2.safetensors --steps 10 >out.txt 2>&1 || { cat out.txt; fail "a checkpoint recording --target 2"; }
"$qkv" info target2.safetensors | grep -q -- "--target 0 " || { "$qkv" info target2.safetensors; fail "target 2 did not resume as none (0)"; }
ok "resuming keeps to its own log, continues it unasked, and refuses a spent budget; a branch or a named file is left alone"

# -- A text checkpoint does not follow its data path ---------------------
head -c 20000 /dev/urandom | base64 >mytext.txt
"$qkv" train --task text --data mytext.txt "${small[@]}" --steps 2 --save text.safetensors >/dev/null 2>&1 || fail "text run"
mkdir elsewhere && cd elsewhere
"$qkv" sample --checkpoint ../text.safetensors --prompt "ab" --max-new 5 >/dev/null 2>err.txt || { cat err.txt; fail "sample needs the data file"; }
"$qkv" eval --checkpoint ../text.safetensors >/dev/null 2>err.txt && fail "eval read a data path from the checkpoint"
grep -q -- "--data" err.txt || fail "eval does not say it needs --data"
"$qkv" eval --checkpoint ../text.safetensors --data ../mytext.txt --examples 4 >/dev/null 2>&1 || fail "eval --data"
cd ..
ok "text checkpoints sample anywhere; eval reads only the --data file it is given"

# -- Strict flags ---------------------------------------------------------
for args in "train stray" "train --data x.txt" "train --task text --max-len 5" "train --task text --target 0.5" \
            "train --task reverse --digits 4" "train --context 0" "sample --checkpoint full.safetensors --prompt 12 --top-k 3" \
            "train --target -1" "train --target 2"; do
  "$qkv" $args >/dev/null 2>err.txt && fail "accepted: qkv $args"
  one_line_error err.txt
done
"$qkv" --version | grep -q "^qkv [0-9]" || fail "qkv --version"
"$qkv" help | grep -q "^usage: qkv <command>" || fail "qkv help is not the usage"
"$qkv" help info | grep -q "qkv info \[OPTION...\] FILE" || fail "qkv help info is not info's --help"
"$qkv" train "${small[@]}" --steps 1 --save one_step.safetensors | grep -q "^finished after 1 step in " ||
  fail "'after 1 steps'"
ok "stray words and flags that do not apply are errors"

# -- A checkpoint describes its run: qkv info ---------------------------
"$qkv" info full.safetensors >info.txt 2>&1 || { cat info.txt; fail "qkv info"; }
for want in "gpt, 13760 parameters" "reverse" "step       10" "--batch 12" "--lr 0.002" "--schedule constant"; do
  grep -q -- "$want" info.txt || { cat info.txt; fail "qkv info does not show '$want'"; }
done
ok "qkv info shows the model, task, step and settings"
# The size check's parameter formula agrees with the models as built.
for model in gpt seq2seq; do
  "$qkv" train --model $model --task sort --dim 48 --layers 3 --heads 4 --steps 0 --save pc_$model.safetensors >banner.txt 2>&1 || fail "$model"
  built=$(grep -o "[0-9]* parameters" banner.txt | head -1)
  "$qkv" info pc_$model.safetensors | grep -q "$model, $built" || { "$qkv" info pc_$model.safetensors; fail "$model: formula and model disagree ($built built)"; }
done
ok "the parameter-count formula matches the built GPT and Seq2Seq"

# -- Errors on output, folders given as files ----------------------------
if [ -w /dev/full ]; then
  "$qkv" sample --checkpoint full.safetensors --prompt 12 >/dev/full 2>err.txt && fail "a write error on stdout exited 0"
  grep -q "cannot write the output" err.txt || { cat err.txt; fail "no message for the write error"; }
  "$qkv" train "${small[@]}" --steps 2 --save full2.safetensors >/dev/full 2>err.txt && fail "train: a write error on stdout exited 0"
fi
mkdir -p afolder
"$qkv" eval --checkpoint afolder >/dev/null 2>err.txt && fail "a folder loaded as a checkpoint"
grep -q "is a folder" err.txt || { cat err.txt; fail "a folder as a checkpoint: unclear error"; }
one_line_error err.txt
ok "write errors on stdout exit non-zero; a folder given as a file is named as one"

# -- Hostile files: rejected in under a second of CPU within 1 GB ---------
"$hostile" full.safetensors text.safetensors . || fail "making the hostile files"
# The bound is the CPU time qkv spends (user + system, bash's `time`), not the wall clock: a busy machine
# (a build beside the suite) once failed a 1-second wall-clock bound at 1007 ms. 10 s of wall clock remain
# as the limit for a hang.
timed() {  # timed CMD...: runs qkv within 1 GB and 10 s; sets rc and ms (CPU milliseconds)
  local TIMEFORMAT='%3U %3S' cpu
  cpu=$( { time { ( [ -z "$sanitized" ] && ulimit -v $((1048576 + $(cuda_libraries_kib "$qkv")))
                    exec timeout -k 5 10 "$qkv" "$@" ) >/dev/null 2>err.txt; echo $? >rc.txt; }; } 2>&1 )
  rc=$(cat rc.txt)
  ms=$(echo "$cpu" | awk '{printf "%d", ($1 + $2) * 1000}')
}
for f in keys160k layers1e8 layersmax width1m context1m devzero; do
  for cmd in "eval --checkpoint" "train --resume"; do
    timed $cmd $f.safetensors
    [ $rc -ne 0 ] && [ $rc -lt 124 ] || { cat err.txt; fail "$f ($cmd): exit $rc"; }
    [ $ms -lt 1000 ] || fail "$f ($cmd): took $ms ms of CPU"
    one_line_error err.txt
  done
  ok "$f: rejected in $ms ms of CPU within 1 GB: $(cat err.txt)"
done
# Strings from a file are escaped: no forged line, no escape byte reaches the terminal.
"$qkv" eval --checkpoint evil.safetensors >/dev/null 2>err.txt && fail "a bad task name was accepted"
one_line_error err.txt
grep -q $'\x1b' err.txt && fail "an escape sequence from the file reached stderr"
grep -q 'rev\\nqkv: all ok\\x1b' err.txt || { cat err.txt; fail "the bad name is not shown escaped"; }
ok "strings from a file are printed escaped: $(cat err.txt)"
"$qkv" info evilkey.safetensors >out.txt 2>err.txt || { cat err.txt; fail "info of a strange setting's name"; }
grep -q $'\x1b' out.txt && fail "an escape sequence from a setting's name reached stdout"
grep -q '^qkv: all ok' out.txt && fail "a setting's name forged a line"
ok "info prints settings' names escaped too"
refused_by() {  # refused_by PATTERN CMD...: qkv CMD within 1 GB and 10 s exits 1 with a one-line error matching PATTERN
  local pattern=$1; shift
  timed "$@"
  [ $rc -eq 1 ] || { cat err.txt; fail "$*: exit $rc"; }
  one_line_error err.txt
  grep -q "$pattern" err.txt || { cat err.txt; fail "$*: the error does not match '$pattern'"; }
}
# (They once printed 0.00% or garbage and exited 0.)
refused_by "huge.safetensors: its outputs reach" eval --checkpoint huge.safetensors
refused_by "huge.safetensors: its outputs reach" sample --checkpoint huge.safetensors --prompt 123
ok "weights near float's limit: $(cat err.txt)"
for f in seed20 moment; do
  refused_by "$f.safetensors" train --resume $f.safetensors --steps 400
  ok "$f: $(cat err.txt)"
done
# A context that is the file's say-so: eval and sample size their key/value cache by
# what decoding needs (ctx64k's once took 2 GB); a text eval or gradcheck that would
# not fit is refused by estimate, naming the file.
# (gradcheck too: its estimate counted the context for a task model, whose examples are 17 tokens: 413 GB.)
for cmd in "eval --checkpoint ctx64k.safetensors" "sample --checkpoint ctx64k.safetensors --prompt 123" \
           "gradcheck --checkpoint ctx64k.safetensors --entries 1"; do
  timed $cmd
  [ $rc -eq 0 ] && [ $ms -lt 10000 ] || { cat err.txt; fail "$cmd: exit $rc, $ms ms"; }
done
# Training's estimate counts what an example feeds: it refused reverse at --context 65536 (4.4e3 GB).
timed train --context 65536 --steps 1 --threads 1 --save ctxtrain.safetensors
[ $rc -eq 0 ] && [ $ms -lt 10000 ] || { cat err.txt; fail "training reverse at --context 65536: exit $rc, $ms ms"; }
python3 -c "import random; random.seed(1); print(''.join(random.choice('ab cd') for _ in range(1400000)))" >long.txt
# (Under the sanitizers there is no memory limit: a large machine could really run the eval.)
if [ -z "$sanitized" ]; then
  refused_by "textctx.safetensors: .* needs about" eval --checkpoint textctx.safetensors --data long.txt
  refused_by "textctx.safetensors: .* needs about" gradcheck --checkpoint textctx.safetensors --data long.txt --entries 1
fi
ok "a file's large context: eval and sample within 1 GB, a text eval refused by estimate: $(cat err.txt)"
# The /dev/zero text model still samples: sampling reads no data at all.
timed sample --checkpoint devzero.safetensors --prompt ab --max-new 5
[ $rc -eq 0 ] && [ $ms -lt 1000 ] || { cat err.txt; fail "sampling the /dev/zero model: exit $rc, $ms ms of CPU"; }
# --save refuses anything but a regular file.
ln -s full.safetensors link.safetensors
for target in /dev/null link.safetensors; do
  "$qkv" train "${small[@]}" --steps 1 --save $target --force >/dev/null 2>err.txt && fail "--save $target was replaced"
  one_line_error err.txt
done
[ -c /dev/null ] || fail "/dev/null is no longer a device"
ls *.tmp* 2>/dev/null && fail "a temporary file was left behind"
ok "--save refuses symlinks and devices; no temporary is left behind"
