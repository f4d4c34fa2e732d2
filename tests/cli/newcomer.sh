#!/usr/bin/env bash
# The path from training to studying, as a newcomer takes it: a plain
# `qkv train` logs beside its checkpoint and keeps its best evaluation's
# model, ends with the next commands to paste (and they run), every command
# that reads a checkpoint takes it as its first argument, a second page of one
# checkpoint gets a name of its own, --steps on --resume says what it does to
# the schedule, and gradcheck says how close each row came to its tolerance.
# usage: newcomer.sh QKV WORKDIR [sanitized]
set -u
qkv=$1
work=$2
sanitized=${3:-}
here=$(dirname "$(readlink -f "$0")")
source "$here/lib.sh"
limit=120
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
small=(--dim 32 --layers 1 --heads 2 --batch 16 --threads 1)

# A plain run: the log beside the checkpoint, the best model beside both, and what to run next.
"$qkv" train "${small[@]}" --steps 60 --eval-every 20 >train.txt 2>&1 || { cat train.txt; fail "a plain train"; }
for f in reverse.safetensors reverse.csv reverse.best.safetensors; do [ -f $f ] || fail "a plain train wrote no $f"; done
grep -q "^log: reverse.csv " train.txt || fail "the run does not name its log"
grep -q "^finished after 60 steps in .*: saved reverse.safetensors (the last step's model)$" train.txt ||
  { cat train.txt; fail "the last step's checkpoint is not said to be the last step's"; }
grep -Eq "^best held-out exact match [0-9.]+ at step (20|40|60) \(last [0-9.]+\): its model is reverse.best.safetensors$" \
  train.txt || { cat train.txt; fail "the best model's file is not named"; }
best_step=$(grep -o "at step [0-9]*" train.txt | grep -o "[0-9]*$")
"$qkv" info reverse.best.safetensors >info.txt || fail "info of the best model"
grep -q "^  step       $best_step$" info.txt || { cat info.txt; fail "the best file does not hold step $best_step"; }
ok "a plain train logs beside its checkpoint and keeps the best evaluation's model (step $best_step)"

# The next commands, pasted as printed, run; explore draws the run's curves from the default log.
grep -q "^next: qkv sample reverse.safetensors --prompt [0-9]*$" train.txt || { cat train.txt; fail "no sample to try"; }
sed -n 's/^next: qkv /qkv /p; s/^      qkv explore \(.*\)   (.*$/qkv explore \1/p' train.txt >next.txt
[ "$(wc -l <next.txt)" = 2 ] || { cat train.txt; fail "not two next commands"; }
while read -r _ command args; do
  eval "\"\$qkv\" $command $args" >"$command.txt" 2>&1 || { cat "$command.txt"; fail "the printed $command command failed"; }
done <next.txt
grep -q "the curves of 1 log" explore.txt || { cat explore.txt; fail "explore found no curves for a plain run"; }
"$qkv" train --task text "${small[@]}" --steps 4 --eval-every 2 --context 16 >text.txt 2>&1 || fail "a text run"
prompt=$(sed -n "s/^next: qkv sample text.safetensors --prompt //p" text.txt)
[ -n "$prompt" ] || { cat text.txt; fail "no text prompt to try"; }
eval "\"\$qkv\" sample text.safetensors --max-new 4 --prompt $prompt" >/dev/null || fail "the printed text prompt: $prompt"
ok "the printed next commands run as pasted (sample, and explore with the run's curves)"

# --no-log and --no-best write neither; a second plain run takes the next free name for all three.
"$qkv" train "${small[@]}" --steps 2 --no-log --no-best --save quiet.safetensors >/dev/null || fail "--no-log --no-best"
[ -e quiet.csv ] || [ -e quiet.best.safetensors ] && fail "--no-log or --no-best wrote one"
"$qkv" train "${small[@]}" --steps 2 --eval-every 1 >/dev/null || fail "a second plain run"
for f in reverse-2.safetensors reverse-2.csv reverse-2.best.safetensors; do [ -f $f ] || fail "the second run wrote no $f"; done
# A best file that is not this run's is never replaced unasked.
"$qkv" train "${small[@]}" --steps 2 --no-log --save other.safetensors >/dev/null || fail "other run"
rm other.safetensors
cp other.best.safetensors other.before
refused "a run over another run's best file" "$qkv" train "${small[@]}" --steps 2 --no-log --save other.safetensors
grep -q "other.best.safetensors already exists" err.txt || fail "the best file is not named"
cmp -s other.best.safetensors other.before || fail "another run's best file changed"
ok "--no-log and --no-best; a second run's names; another run's best file is kept"

# --resume continues the run's own best; a larger --steps says what it does to the schedule.
"$qkv" train --resume reverse.safetensors --steps 100 >resume.txt 2>&1 || { cat resume.txt; fail "resume"; }
grep -q "^note: --steps 100 changes this run's budget from 60 steps: its cosine schedule now ends at step 100" resume.txt ||
  { cat resume.txt; fail "the new budget is not said"; }
grep -q "its model is reverse.best.safetensors" resume.txt || { cat resume.txt; fail "resume lost the best file"; }
ok "resume keeps the best file and says how a new --steps changes the schedule"

# The checkpoint as the first argument, in every command that reads one; one checkpoint at a time.
"$qkv" eval reverse.safetensors --examples 20 --threads 1 >/dev/null || fail "eval FILE"
"$qkv" sample reverse.safetensors --prompt 123 --threads 1 >/dev/null || fail "sample FILE"
"$qkv" attention reverse.safetensors --prompt 123 --out maps >/dev/null || fail "attention FILE"
"$qkv" grads reverse.safetensors --prompt 123 --out g.safetensors >/dev/null || fail "grads FILE --prompt"
"$qkv" graph reverse.safetensors --prompt 123 --out g.dot >/dev/null || fail "graph FILE"
"$qkv" gradcheck reverse.safetensors --entries 2 >gradcheck.txt || fail "gradcheck FILE"
"$qkv" info reverse.safetensors >/dev/null || fail "info FILE"
refused "two checkpoints" "$qkv" eval reverse.safetensors --checkpoint reverse-2.safetensors
grep -q "one checkpoint at a time" err.txt || fail "two checkpoints: unclear"
refused "no checkpoint" "$qkv" sample --prompt 12
grep -q "give the checkpoint file, as the first argument or as --checkpoint FILE" err.txt || fail "no checkpoint: unclear"
ok "every command that reads a checkpoint takes it first"

# gradcheck says how close each row came to its tolerance.
grep -q "max rel err   of tol  ok$" gradcheck.txt || { cat gradcheck.txt; fail "gradcheck has no 'of tol' column"; }
grep -q "within atol 1e-06 + rtol 1e-05 x |numeric| (of tol <= 1): all ok" gradcheck.txt ||
  { cat gradcheck.txt; fail "gradcheck does not say what passes"; }
ok "gradcheck's rows say the share of their tolerance they used"

# A second page of the same checkpoint gets its own name (the first explore above wrote reverse.html).
"$qkv" explore reverse.safetensors --prompt 321 >page.txt || fail "a second explore"
grep -q "^wrote reverse-2.html " page.txt || { cat page.txt; fail "the second page did not take a new name"; }
ok "a second page of one checkpoint is reverse-2.html"
