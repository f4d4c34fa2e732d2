#!/usr/bin/env bash
# Ctrl-C during qkv train: the run stops with exit 130 and leaves a checkpoint
# that qkv eval can read. usage: interrupt.sh QKV WORKDIR
set -u
qkv=$1
work=$2
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
"$qkv" train --steps 1000000 --eval-every 10 --save run.safetensors >log.txt 2>&1 &
pid=$!
for _ in $(seq 600); do  # up to 60 s for the first evaluation line
  grep -q "step 10/" log.txt && break
  sleep 0.1
done
kill -INT $pid
wait $pid
rc=$?
cat log.txt
[ $rc -eq 130 ] || { echo "FAIL: exit $rc after SIGINT, expected 130"; exit 1; }
grep -q "interrupted at step" log.txt || { echo "FAIL: no interruption message"; exit 1; }
"$qkv" eval --checkpoint run.safetensors --examples 20 || { echo "FAIL: the saved checkpoint does not load"; exit 1; }
echo "ok: interrupted run saved a loadable checkpoint"
