#!/usr/bin/env bash
# qkv train under mpirun: 2 ranks with global batch 16 train like one process
# with batch 16 (checkpoints agree to 1e-5 relative after 20 float32 steps,
# an Adam parameter smaller than lr * steps against that: see
# compare_checkpoints.cpp; a 0.1% larger lr, or one small tensor 0.3% off,
# fails);
# the 2-rank checkpoint evaluates, samples and resumes in one process, and a
# one-process checkpoint resumes on 2 ranks; stopping mpirun (what Ctrl-C
# does) saves once and exits every rank; a killed rank ends the job.
# usage: mpi_train.sh QKV COMPARE_CHECKPOINTS MPIEXEC WORKDIR
set -u
qkv=$1 compare=$2 mpiexec=$3 work=$4
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
. "$(dirname "$0")/lib.sh"
# Root in CI containers; oversubscribe: 2 ranks on however many cores there are.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
export OMPI_MCA_rmaps_base_oversubscribe=1
mpi() { "$mpiexec" -n 2 "$@"; }
common=(--steps 20 --batch 16 --eval-every 10 --threads 1)

"$qkv" train "${common[@]}" --save one.safetensors >one.txt 2>&1 || { cat one.txt; fail "one process"; }
mpi "$qkv" train "${common[@]}" --save two.safetensors >two.txt 2>&1 || { cat two.txt; fail "two ranks"; }
grep -q "2 ranks (MPI) of 8 examples each" two.txt || { cat two.txt; fail "the banner does not say how the batch splits"; }
[ "$(grep -c '^qkv train' two.txt)" -eq 1 ] || fail "more than one rank printed"
"$compare" one.safetensors two.safetensors 1e-5 || fail "2 ranks x 8 differ from 1 process x 16 after 20 steps"
echo "ok: 2 ranks x 8 examples = 1 process x 16 after 20 steps (1e-5 relative; see compare_checkpoints.cpp)"
# The controls: a learning rate 0.1% larger, and one small tensor 0.3% off, are differences it sees.
"$qkv" train "${common[@]}" --lr 0.001001 --save nudged.safetensors >/dev/null 2>&1 || fail "one process, nudged lr"
"$compare" one.safetensors nudged.safetensors 1e-5 >nudged.txt
[ $? -eq 1 ] || { cat nudged.txt; fail "the comparison misses a 0.1% change of lr"; }
python3 - one.safetensors scaled.safetensors blocks.1.attn.q_proj.bias 1.003 <<'PY' || fail "scaling one tensor"
import json, struct, sys
raw = bytearray(open(sys.argv[1], "rb").read())
n = struct.unpack("<Q", raw[:8])[0]
start, end = json.loads(raw[8:8 + n])[sys.argv[3]]["data_offsets"]
at = 8 + n + start
values = struct.unpack("<%df" % ((end - start) // 4), raw[at:8 + n + end])
raw[at:8 + n + end] = struct.pack("<%df" % len(values), *(v * float(sys.argv[4]) for v in values))
open(sys.argv[2], "wb").write(raw)
PY
"$compare" one.safetensors scaled.safetensors 1e-5 >scaled.txt
[ $? -eq 1 ] || { cat scaled.txt; fail "the comparison misses one small tensor 0.3% off"; }

# An odd global batch splits 4 + 3: still the same training.
"$qkv" train "${common[@]}" --batch 7 --save one7.safetensors >/dev/null 2>&1 || fail "one process, batch 7"
mpi "$qkv" train "${common[@]}" --batch 7 --save two7.safetensors >/dev/null 2>&1 || fail "two ranks, batch 7"
"$compare" one7.safetensors two7.safetensors 1e-5 || fail "an uneven split (4 + 3) differs from one process"

# The text task's windows split the same way (without dropout: each rank draws its own masks).
text=(--task text --steps 10 --batch 6 --context 32 --dim 32 --eval-every 5 --threads 1 --dropout 0)
"$qkv" train "${text[@]}" --save text1.safetensors >/dev/null 2>&1 || fail "text, one process"
mpi "$qkv" train "${text[@]}" --save text2.safetensors >/dev/null 2>&1 || fail "text, two ranks"
"$compare" text1.safetensors text2.safetensors 1e-5 || fail "text: 2 ranks differ from one process"

# The label tasks split by their loss positions too (one label each, or a
# history's next items): the encoder, the ViT and the recommender train alike.
for task in brackets digits sessions; do
  label=(--task "$task" --steps 10 --batch 7 --dim 16 --eval-every 5 --threads 1 --dropout 0)
  "$qkv" train "${label[@]}" --save "${task}1.safetensors" >/dev/null 2>&1 || fail "$task, one process"
  mpi "$qkv" train "${label[@]}" --save "${task}2.safetensors" >/dev/null 2>&1 || fail "$task, two ranks"
  "$compare" "${task}1.safetensors" "${task}2.safetensors" 1e-5 || fail "$task: 2 ranks differ from one process"
done

# The 2-rank checkpoint in one process; a one-process checkpoint on 2 ranks.
"$qkv" eval --checkpoint two.safetensors --examples 50 >/dev/null || fail "eval of the 2-rank checkpoint"
"$qkv" sample --checkpoint two.safetensors --prompt 123 >/dev/null || fail "sample from the 2-rank checkpoint"
cp one.safetensors resumed1.safetensors && cp two.safetensors resumed2.safetensors
"$qkv" train --resume resumed2.safetensors --steps 30 --threads 1 >/dev/null 2>&1 || fail "one process resuming a 2-rank checkpoint"
mpi "$qkv" train --resume resumed1.safetensors --steps 30 --threads 1 >/dev/null 2>&1 || fail "2 ranks resuming a one-process checkpoint"
"$compare" resumed1.safetensors resumed2.safetensors 1e-5 || fail "resuming across rank counts diverged"
echo "ok: checkpoints move between 1 and 2 processes"

# A rank's error ends the job with its message, not a hang.
timeout 60 "$mpiexec" -n 2 "$qkv" train --batch 1 >err.txt 2>&1
rc=$?
[ $rc -ne 0 ] && [ $rc -ne 124 ] || fail "a batch smaller than the rank count: exit $rc"
grep -q "global batch" err.txt || { cat err.txt; fail "the error does not say why"; }

# Ctrl-C: SIGINT to mpirun's process group (job control gives the background
# job a group of its own, as a terminal's foreground job has, and leaves its
# SIGINT unignored). mpirun passes SIGTERM on; rank 0 saves once, all exit.
set -m
"$mpiexec" -n 2 "$qkv" train --steps 1000000 --batch 16 --threads 1 --eval-every 1000 --target 0 --save stop.safetensors >stop.txt 2>&1 &
job=$!
wait_for "^qkv train" stop.txt 10 || { kill -9 -- -$job; cat stop.txt; fail "no banner within 10 s"; }
sleep 1
kill -INT -- -$job
wait_exit $job 30 || { kill -9 -- -$job; fail "mpirun still runs 30 s after SIGINT"; }
grep -q "interrupted at step" stop.txt || { tr '\r' '\n' <stop.txt | tail; fail "no save on interrupt"; }
[ "$(grep -o 'interrupted at step' stop.txt | wc -l)" -eq 1 ] || fail "saved more than once"
"$qkv" eval --checkpoint stop.safetensors --examples 10 >/dev/null || fail "the interrupted run's checkpoint does not load"
pgrep -f "save stop.safetensors" >/dev/null && fail "a rank outlived the job"
echo "ok: SIGINT on mpirun saves once and ends every rank"

# A rank killed outright: the job ends within a bounded time, naming it.
"$mpiexec" -n 2 "$qkv" train --steps 1000000 --batch 16 --threads 1 --eval-every 1000 --target 0 --save killed.safetensors >killed.txt 2>&1 &
job=$!
victim=
for _ in $(seq 100); do
  for p in $(pgrep -f "save killed.safetensors"); do
    tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=1" && victim=$p
  done
  [ -n "$victim" ] && grep -q "^qkv train" killed.txt && break
  sleep 0.1
done
[ -n "$victim" ] || { kill -9 -- -$job; fail "rank 1 not found"; }
grep -q "^qkv train" killed.txt || { kill -9 -- -$job; cat killed.txt; fail "no banner within 10 s"; }
start=$(date +%s)
kill -9 "$victim"
wait_exit $job 30 || { kill -9 -- -$job; fail "the job still runs 30 s after a rank died"; }
wait $job && fail "the job exited 0 after a rank died"
grep -q "rank 1" killed.txt || { cat killed.txt; fail "the job's end does not name the dead rank"; }
echo "ok: a killed rank ends the job in $(( $(date +%s) - start )) s"
