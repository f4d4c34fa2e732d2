#!/usr/bin/env bash
# The program on a device: in a build without CUDA on a stand-in GPU
# (tests/cli/stand_in_main.cpp: cuda:0 is host memory and every op runs its
# device kernel there), so that a machine without a GPU checks what
# --device cuda does; in a CUDA build on the real GPU (exit 77, skipped, where
# none is visible):
# - gradcheck passes for every model kind with its parameters on the device;
# - train on the device follows the CPU's run (float32 rounding apart), and
#   its checkpoint evaluates and samples on the CPU as on the device;
# - a device's run resumes on the CPU and a CPU's run on the device, each
#   equal to the other (the same files whichever device wrote them);
# - text, and the label kinds (encoder, ViT, recommender), train, evaluate and
#   sample there (the KV cache on the device included);
# - bench reports tokens/s, peak device memory and kernel launches a step;
# - the program built without CUDA refuses --device cuda in one line.
# usage: device.sh DEVICE_QKV QKV COMPARE_CHECKPOINTS WORKDIR [sanitized]
#   DEVICE_QKV: the stand-in build, or (CUDA builds) the program itself
set -u
gpu=$1 qkv=$2 compare=$3 work=$4 sanitized=${5:-}
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
. "$here/lib.sh"
limit=20; [ -n "$sanitized" ] && limit=300  # seconds; the sanitizers run 10-20x slower
# A real GPU: each op is a launch and each gradcheck probe copies back (slower than host loops at these sizes).
[ "$(cuda_libraries_kib "$gpu")" -gt 0 ] && limit=120
if "$gpu" info --system | grep -q "no CUDA device visible"; then
  echo "skipped: this CUDA build sees no GPU"
  exit 77
fi

# Under the sanitizers, 4 entries per parameter (every kernel still runs, forward and
# backward): all of them took 30 of this test's 42 s there. The Release pass checks all.
entries=(); [ -n "$sanitized" ] && entries=(--entries 4)
for kind in gpt seq2seq encoder vit recommender mha; do
  bounded "$gpu" gradcheck --model "$kind" --device cuda "${entries[@]}" >grad.txt 2>&1 ||
    { cat grad.txt; fail "gradcheck $kind on the device"; }
  grep -q "float64 on cuda:0, .*: all ok" grad.txt || { cat grad.txt; fail "gradcheck $kind: not on cuda:0"; }
done
ok "gradcheck passes for every model kind with its parameters on the device"

# The same run on the device and on the CPU: float32 kernels round in their
# own order, so the weights after 40 Adam steps agree to rounding (2.4e-6
# measured), not bit for bit.
# Under the sanitizers the stand-in's tiled attention (every block's threads in
# turn, instrumented) made these runs 20 of the test's 39 s: 10 steps there,
# then 5 more on resuming (the Release pass runs 40 and 20).
small=(--dim 32 --heads 2 --layers 2 --batch 16 --eval-every 20 --threads 1 --seed 5)
steps=(40 60); [ -n "$sanitized" ] && steps=(10 15)
bounded "$gpu" train --task reverse "${small[@]}" --steps "${steps[0]}" --device cuda --save dev.safetensors >dev.txt 2>&1 ||
  { cat dev.txt; fail "train on the device"; }
grep -q "the model trains on cuda:0: " dev.txt || { cat dev.txt; fail "no device in the banner"; }
bounded "$gpu" train --task reverse "${small[@]}" --steps "${steps[0]}" --device cpu --save cpu.safetensors >/dev/null 2>&1 ||
  fail "train on the CPU"
"$compare" dev.safetensors cpu.safetensors 1e-4 >cmp.txt || { cat cmp.txt; fail "the device's run left the CPU's"; }
ok "${steps[0]} steps on the device give the CPU's weights and optimizer state: $(cat cmp.txt)"

# The device's checkpoint on the CPU, and the other way round.
for where in cpu cuda; do
  bounded "$gpu" eval --checkpoint dev.safetensors --device "$where" --examples 300 >"eval_$where.txt" 2>&1 ||
    { cat "eval_$where.txt"; fail "eval on $where"; }
  bounded "$gpu" sample --checkpoint dev.safetensors --device "$where" --prompt 12345 >"sample_$where.txt" 2>&1 ||
    { cat "sample_$where.txt"; fail "sample on $where"; }
done
cmp -s eval_cpu.txt eval_cuda.txt || { cat eval_cpu.txt eval_cuda.txt; fail "eval differs between the devices"; }
cmp -s sample_cpu.txt sample_cuda.txt || { cat sample_cpu.txt sample_cuda.txt; fail "sample differs between the devices"; }
ok "the device's checkpoint evaluates and answers alike on both: $(cat eval_cpu.txt)"

cp dev.safetensors dev_then_cpu.safetensors && cp cpu.safetensors cpu_then_dev.safetensors
bounded "$gpu" train --resume dev_then_cpu.safetensors --steps "${steps[1]}" --device cpu >/dev/null 2>&1 ||
  fail "a device's run resumed on the CPU"
bounded "$gpu" train --resume cpu_then_dev.safetensors --steps "${steps[1]}" --device cuda >/dev/null 2>&1 ||
  fail "a CPU's run resumed on the device"
"$compare" dev_then_cpu.safetensors cpu_then_dev.safetensors 1e-4 >cmp.txt || { cat cmp.txt; fail "the resumed runs differ"; }
ok "a run moves between the devices when it resumes: $(cat cmp.txt)"

# Text: the byte model trains there, and generates through a key/value cache there.
bounded "$gpu" train --task text --dim 32 --heads 2 --layers 1 --context 32 --batch 4 --steps 10 --eval-every 10 \
  --threads 1 --device cuda --save text.safetensors >text.txt 2>&1 || { cat text.txt; fail "text on the device"; }
for where in cpu cuda; do
  bounded "$gpu" sample --checkpoint text.safetensors --prompt "The " --max-new 20 --device "$where" >"text_$where.txt" 2>&1 ||
    { cat "text_$where.txt"; fail "text sample on $where"; }
done
cmp -s text_cpu.txt text_cuda.txt || { cat text_cpu.txt text_cuda.txt; fail "the text sample differs between the devices"; }
ok "text trains and samples with its cache on the device"

for task in brackets digits sessions; do
  bounded "$gpu" train --task "$task" --dim 16 --heads 2 --layers 1 --batch 8 --steps 10 --eval-every 10 --threads 1 \
    --device cuda --save "$task.safetensors" >"$task.txt" 2>&1 || { cat "$task.txt"; fail "$task on the device"; }
  for where in cpu cuda; do
    bounded "$gpu" eval --checkpoint "$task.safetensors" --examples 100 --device "$where" >"${task}_$where.txt" 2>&1 ||
      { cat "${task}_$where.txt"; fail "$task: eval on $where"; }
  done
  cmp -s "${task}_cpu.txt" "${task}_cuda.txt" || { cat "${task}"_*.txt; fail "$task: eval differs between the devices"; }
done
ok "the encoder, the ViT and the recommender train and evaluate on the device"

timed=2; [ -n "$sanitized" ] && timed=1  # a step of tiny takes 3 s on the sanitized stand-in
bounded "$gpu" bench --config tiny --steps "$timed" --warmup 1 --threads 1 --device cuda >bench.txt 2>&1 || { cat bench.txt; fail "bench"; }
grep -qE "tokens/s" bench.txt && grep -qE "peak device memory [0-9.]+ MiB" bench.txt && grep -q "on cuda:0" bench.txt &&
  grep -qE "^  [1-9][0-9]* kernel launches a step" bench.txt ||
  { cat bench.txt; fail "bench on the device reports no tokens/s, peak device memory or launches"; }
ok "bench on the device: $(grep -E 'tokens/s|peak device|launches' bench.txt | tr -s ' ' | tr '\n' ';')"

# A program built without CUDA says so in one line, for each command that takes --device.
"$qkv" info --system | grep -qE "cuda +not in this build" || exit 0
refused "train --device cuda without CUDA" "$qkv" train --device cuda --steps 1 --save none.safetensors
grep -q "this build of qkv has no CUDA" err.txt || fail "train --device cuda: does not say the build has no CUDA"
refused "eval --device cuda:1 without CUDA" "$qkv" eval --checkpoint dev.safetensors --device cuda:1
refused "gradcheck --device cuda without CUDA" "$qkv" gradcheck --device cuda
[ ! -e none.safetensors ] || fail "a refused run wrote a checkpoint"
ok "without CUDA, --device cuda is a one-line error"
