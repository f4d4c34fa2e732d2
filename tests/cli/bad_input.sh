#!/usr/bin/env bash
# Runs the qkv program on bad input: each case must end within 60 s with a
# non-zero exit that is not a signal, and say what is wrong in one line.
# usage: bad_input.sh QKV WORKDIR
set -u
qkv=$1
work=$2
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
failures=0

expect_error() {  # expect_error "what" args...
  local what=$1; shift
  timeout 60 "$qkv" "$@" >out.txt 2>err.txt </dev/null
  local rc=$? lines
  lines=$(wc -l <err.txt)
  if [ $rc -eq 0 ] || [ $rc -ge 124 ] || [ "$lines" -ne 1 ]; then
    echo "FAIL $what: exit $rc, $lines stderr lines: qkv $*"
    cat err.txt
    failures=$((failures + 1))
  else
    echo "ok   $what: $(cat err.txt)"
  fi
}

# A fresh model to point the commands at (--steps 0 saves the initialised model).
"$qkv" train --steps 0 --save reverse.safetensors >/dev/null || { echo "FAIL: cannot create a checkpoint"; exit 1; }
"$qkv" train --model seq2seq --task sort --steps 0 --save sort.safetensors >/dev/null || exit 1
head -c 100 reverse.safetensors >truncated.safetensors
printf 'not a checkpoint at all' >garbage.safetensors
header='{"t":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}'
printf "$(printf '\\x%02x' ${#header})\x00\x00\x00\x00\x00\x00\x00%s\x00\x00\x00\x00" "$header" >plain.safetensors
: >empty.txt
head -c 300 /dev/urandom | base64 >short.txt  # about 400 bytes: less than a 64-byte context in its held-out tenth

expect_error "unknown command" frobnicate
expect_error "unknown flag" train --bogus
expect_error "flag without value" train --steps
expect_error "non-numeric value" train --steps many
expect_error "missing file" eval --checkpoint missing.safetensors
expect_error "truncated file" eval --checkpoint truncated.safetensors
expect_error "garbage file" sample --checkpoint garbage.safetensors --prompt 123
expect_error "missing --checkpoint" eval
expect_error "zero batch" train --batch 0
expect_error "negative steps" train --steps -5
expect_error "negative width" train --dim -8
expect_error "zero layers" train --layers 0
expect_error "too many layers" train --layers 129
expect_error "zero heads" train --heads 0
expect_error "heads not dividing dim" train --heads 3 --dim 64
expect_error "context too short" train --context 4
expect_error "bad dropout" train --dropout 1.5
expect_error "unknown task" train --task juggle
expect_error "unknown model" train --model rnn
expect_error "unknown optimizer" train --optimizer lion
expect_error "text task with seq2seq" train --task text --model seq2seq
expect_error "prompt outside the vocabulary" sample --checkpoint reverse.safetensors --prompt 12a4
expect_error "prompt too long" sample --checkpoint reverse.safetensors --prompt 1234567890123
expect_error "empty prompt" sample --checkpoint reverse.safetensors --prompt ""
expect_error "negative temperature" sample --checkpoint reverse.safetensors --prompt 12 --temperature -1
expect_error "negative thread count" sample --checkpoint reverse.safetensors --prompt 12 --threads -1
expect_error "not a device" train --device gpu --steps 1
expect_error "not a device (eval)" eval --checkpoint reverse.safetensors --device cuda:x
# CUDA: this build has none, this machine has no GPU, or no such GPU; each says which.
expect_error "a CUDA device qkv cannot use" sample --checkpoint reverse.safetensors --prompt 12 --device cuda:7
grep -qE "this build of qkv has no CUDA|no CUDA device is visible|this machine has [0-9]+ CUDA device" err.txt \
  || { echo "FAIL --device cuda:7 did not say what is missing: $(cat err.txt)"; failures=$((failures + 1)); }
expect_error "a CUDA device for bench" bench --device cuda:7 --steps 1
expect_error "seq2seq attention: a prompt longer than the model reads" attention --checkpoint sort.safetensors --prompt 1234567890123 --out maps
expect_error "grads: an input outside the task alphabet" grads --checkpoint reverse.safetensors --prompt hello --out g.safetensors
expect_error "a valid safetensors file that is no qkv model" eval --checkpoint plain.safetensors
expect_error "resume with another optimizer" train --resume reverse.safetensors --optimizer sgd --steps 1
expect_error "empty --data" train --task text --data empty.txt
expect_error "--data shorter than the context" train --task text --data short.txt
expect_error "missing --data" train --task text --data no-such.txt
expect_error "unknown bench config" bench --config huge
expect_error "gradcheck of a missing file" gradcheck --checkpoint missing.safetensors

printf 'step,loss\n1,2.5\n' >log.csv
# Messages that say what applies (the one output rule's messages).
expect_said() {  # expect_said "what" PATTERN args...: a one-line error that matches PATTERN
  local what=$1 pattern=$2; shift 2
  expect_error "$what" "$@"
  grep -q -- "$pattern" err.txt || { echo "FAIL $what: the error does not say '$pattern'"; failures=$((failures + 1)); }
}
expect_said "a bad number names its flag" "--lr: " train --lr abc --steps 1
expect_said "a CSV given to info is not a checkpoint" "not a safetensors checkpoint" info log.csv
mkdir -p folder.safetensors
expect_said "--save FOLDER offers no --force" "is a folder: give a checkpoint file name" train --steps 1 --save folder.safetensors
grep -q -- "--force" err.txt && { echo "FAIL --save FOLDER: the error suggests --force"; failures=$((failures + 1)); }
expect_said "no 'file file'" "is a folder, not a checkpoint file" eval --checkpoint folder.safetensors
grep -q "file file" err.txt && { echo "FAIL: 'file file'"; failures=$((failures + 1)); }

echo "$failures failures"
[ $failures -eq 0 ]
