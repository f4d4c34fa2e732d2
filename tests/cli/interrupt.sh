#!/usr/bin/env bash
# Ctrl-C during qkv train: the run stops with exit 130 and leaves a checkpoint
# that qkv eval can read. usage: interrupt.sh QKV WORKDIR
set -u
qkv=$1
work=$2
. "$(dirname "$0")/lib.sh"
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
"$qkv" train --steps 1000000 --eval-every 10 --save run.safetensors >log.txt 2>&1 &
pid=$!
wait_for "step 10/" log.txt 60  # the first evaluation line
kill -INT $pid
wait $pid
rc=$?
cat log.txt
[ $rc -eq 130 ] || { echo "FAIL: exit $rc after SIGINT, expected 130"; exit 1; }
grep -q "interrupted at step" log.txt || { echo "FAIL: no interruption message"; exit 1; }
grep -q "continue with: qkv train --resume run.safetensors" log.txt || fail "the message does not say how to continue"
"$qkv" eval --checkpoint run.safetensors --examples 20 || { echo "FAIL: the saved checkpoint does not load"; exit 1; }
echo "ok: interrupted run saved a loadable checkpoint"
