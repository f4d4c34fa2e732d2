#!/usr/bin/env bash
# A Hugging Face GPT-2 folder wherever a checkpoint is accepted: the fixture
# folder tests/fixtures/gpt2 (a tiny random GPT-2 over the real vocabulary,
# with an independent PyTorch model's numbers: make_gpt2_fixture.py) through
# info, sample (PyTorch's greedy continuation), grads (PyTorch's loss and
# gradients under GPT-2's own names), eval, attention, graph, gradcheck and
# explore; and hostile folders refused in one line.
# Then a fine-tune of it (train --init) that lowers the held-out loss and
# resumes bit for bit, and export --format hf read back the same.
# usage: gpt2.sh QKV COMPARE_GRADS_PY COMPARE_CHECKPOINTS WORKDIR [sanitized]
set -u
qkv=$1 compare=$2 compare_checkpoints=$3 work=$4 sanitized=${5:-}
here=$(cd "$(dirname "$0")" && pwd)
gpt2=$here/../fixtures/gpt2
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
. "$here/lib.sh"
limit=120

bounded "$qkv" info "$gpt2" >info.txt || fail "info of a GPT-2 folder"
grep -q "gpt (GPT-2), 403944 parameters: width 8, 2 layers, 2 heads, context 16, vocab 50257" info.txt \
  || { cat info.txt; fail "info's model line"; }
grep -q "model.safetensors holds 30 tensors (F32)" info.txt || { cat info.txt; fail "info's file line"; }
ok "info: $(sed -n 2p info.txt | sed 's/^ *//')"

# PyTorch's greedy continuation of the prompt's 8 tokens (tiktoken's ids of it are the fixture's).
bounded "$qkv" sample "$gpt2" --prompt "The quick brown fox jumps over the lazy" --max-new 8 >sample.txt \
  || fail "sample"
[ "$(cat sample.txt)" = "The quick brown fox jumps over the lazy Hin Hin Hin Hinemphasis clust clust clust" ] \
  || { cat sample.txt; fail "sample's greedy continuation is not PyTorch's"; }
ok "sample: PyTorch's greedy continuation, token for token"

# The loss and every gradient, under GPT-2's names, against PyTorch's float64 ones.
bounded "$qkv" grads "$gpt2" --prompt "The quick brown fox jumps over the lazy dog. It is 2026 and" \
  --out grads.safetensors >grads.txt || fail "grads"
grep -q "GPT-2's names" grads.txt || fail "grads does not say its names are GPT-2's"
python3 - "$compare" grads.safetensors "$gpt2/pytorch_expected.safetensors" <<'EOF' || fail "grads differ from PyTorch's"
import importlib.util, sys
spec = importlib.util.spec_from_file_location("compare_grads", sys.argv[1])
compare = importlib.util.module_from_spec(spec)
spec.loader.exec_module(compare)
qkv, torch = compare.read(sys.argv[2]), compare.read(sys.argv[3])
names = sorted(n for n in torch if n == "loss" or n.startswith("grad."))
assert len(names) == 29 and set(names) == set(qkv), sorted(set(names) ^ set(qkv))
worst = 0
for n in names:
    scale = max(abs(v) for v in torch[n])
    worst = max(worst, max(abs(a - b) for a, b in zip(qkv[n], torch[n])) / scale)
print("  worst relative difference of the loss and 28 gradients: %.2e" % worst)
sys.exit(0 if worst < 1e-5 else 1)
EOF
ok "grads: PyTorch's loss and gradients under GPT-2's names, within 1e-5 relative in float32"

bounded "$qkv" eval "$gpt2" --examples 4 >eval.txt || fail "eval"
grep -qE "nats/token .* over 4 windows of 16 tokens \(perplexity [0-9.]+\)" eval.txt || { cat eval.txt; fail "eval's line"; }
bounded "$qkv" attention "$gpt2" --prompt "The quick brown fox" --out maps >/dev/null || fail "attention"
[ "$(ls maps/*.svg | wc -l)" -eq 6 ] || fail "attention: 2 layers x 2 heads and 2 means"
bounded "$qkv" graph "$gpt2" --prompt "The quick brown fox" --out graph.dot >/dev/null 2>&1 || fail "graph"
# Two entries a parameter: every perturbed loss runs 50,257 logits (all entries: 9 s here, minutes under the sanitizers).
bounded "$qkv" gradcheck --checkpoint "$gpt2" --entries 2 >gradcheck.txt || { tail -3 gradcheck.txt; fail "gradcheck"; }
grep -q "all ok" gradcheck.txt || fail "gradcheck's verdict"
ok "eval, attention, graph and gradcheck read the folder"
# Under the sanitizers, what follows up to the llm.c part runs once, briefly: the same code runs there in
# the Release pass, and explore, train, resume and export under the sanitizers in their own tests.
if [ -n "$sanitized" ]; then
  bounded "$qkv" train --init "$gpt2" --batch 2 --steps 2 --threads 1 --save tuned.safetensors >tune.txt 2>&1 \
    || { cat tune.txt; fail "train --init"; }
  bounded "$qkv" sample tuned.safetensors --prompt "The quick" --max-new 2 >/dev/null || fail "sample the fine-tune"
  bounded "$qkv" export tuned.safetensors --format hf --out tuned-hf >/dev/null || fail "export"
  ok "train --init, its checkpoint's tokenizer, and export run under the sanitizers"
else
# Token attribution (dL/de_t · e_t) against central differences, with the page's other numbers (--check).
bounded "$qkv" explore "$gpt2" --prompt "The quick brown fox jumps over the lazy dog" --out page.html --check >explore.txt \
  || { cat explore.txt; fail "explore --check"; }
grep -qE "^check: .* and 8 tokens' attributions; .*: all ok" explore.txt || { cat explore.txt; fail "token attribution's check"; }
grep -q '"attribution":{' page.html || fail "the page holds no token attribution"
ok "explore: token attribution of 8 tokens matches central differences (--check)"

# A fine-tune on the bundled text: the held-out loss falls; 10 + 10 resumed steps are 20 steps, bit for bit.
tune=(--batch 8 --eval-every 10 --threads 1 --schedule constant --warmup 0 --lr 3e-3)
bounded "$qkv" train --init "$gpt2" "${tune[@]}" --steps 20 --save tuned.safetensors >tune.txt 2>&1 \
  || { cat tune.txt; fail "train --init"; }
bounded "$qkv" train --init "$gpt2" "${tune[@]}" --steps 10 --save half.safetensors >/dev/null 2>&1 || fail "the first half"
bounded "$qkv" train --resume half.safetensors --steps 20 >/dev/null 2>&1 || fail "resume"
"$compare_checkpoints" tuned.safetensors half.safetensors 0 >/dev/null || fail "10 + 10 resumed steps differ from 20"
before=$("$qkv" eval "$gpt2" --examples 64 | sed -E 's/.*loss ([0-9.]+) nats.*/\1/')
after=$("$qkv" eval tuned.safetensors --examples 64 | sed -E 's/.*loss ([0-9.]+) nats.*/\1/')
awk -v a="$after" -v b="$before" 'BEGIN { exit !(a < b - 0.5) }' || fail "fine-tuning: held-out loss $before -> $after"
# The checkpoint carries its tokenizer: it samples with no folder.
bounded "$qkv" sample tuned.safetensors --prompt "The quick brown fox" --max-new 4 >/dev/null || fail "sample the fine-tune"
ok "train --init: held-out loss $before -> $after nats/token in 20 steps; resumed bit for bit; samples on its own"

# export --format hf: the same model read back (its loss, to the last digit), and export of that the same bytes.
bounded "$qkv" export tuned.safetensors --format hf --out tuned-hf >/dev/null || fail "export"
[ "$(ls tuned-hf | tr '\n' ' ')" = "config.json merges.txt model.safetensors vocab.json " ] || fail "export's files"
bounded "$qkv" export tuned-hf --format hf --out again >/dev/null || fail "export of an export"
cmp -s tuned-hf/model.safetensors again/model.safetensors || fail "export, import and export changed the weights"
prompt="The quick brown fox jumps over the lazy dog. It is 2026 and"
[ "$("$qkv" grads tuned.safetensors --prompt "$prompt" --out a.safetensors | head -1)" = \
  "$("$qkv" grads tuned-hf --prompt "$prompt" --out b.safetensors | head -1)" ] || fail "the exported model's loss differs"
refused "an unknown --format" "$qkv" export tuned.safetensors --format onnx --out x
"$qkv" train --task reverse --model seq2seq --dim 8 --heads 2 --layers 1 --steps 1 --save s2s.safetensors >/dev/null 2>&1 \
  || fail "a seq2seq to export"
refused "a model GPT-2 cannot be" "$qkv" export s2s.safetensors --format hf --out x
[ ! -e x ] || fail "a refused export left its folder"
ok "export --format hf: the fine-tune as a GPT-2 folder, read back with the same loss; exported again, the same bytes"
fi

# llm.c's gpt2_124M.bin layout (version 3: float32, the vocabulary padded to 50,304 rows), made from the
# fixture's weights by its own rules here; GPT-2's tokenizer beside it. The same greedy continuation.
mkdir llmc && cp "$gpt2/vocab.json" "$gpt2/merges.txt" llmc/
python3 - "$compare" "$gpt2/model.safetensors" llmc/gpt2_tiny.bin <<'EOF2' || fail "writing an llm.c checkpoint"
import importlib.util, struct, sys
spec = importlib.util.spec_from_file_location("compare_grads", sys.argv[1])
compare = importlib.util.module_from_spec(spec)
spec.loader.exec_module(compare)
w = compare.read(sys.argv[2])  # the hub's names, Conv1D weights [in, out]
L, C, V, T, VP = 2, 8, 50257, 16, 50304
def linear(name, n_in):  # [in, out] -> nn.Linear's [out, in], as llm.c stores it
    v = w[name]; n_out = len(v) // n_in
    return [v[i * n_out + o] for o in range(n_out) for i in range(n_in)]
out = list(w["wte.weight"]) + [0.0] * ((VP - V) * C) + list(w["wpe.weight"])
for kind, n_in in [("ln_1.weight", 0), ("ln_1.bias", 0), ("attn.c_attn.weight", C), ("attn.c_attn.bias", 0),
                   ("attn.c_proj.weight", C), ("attn.c_proj.bias", 0), ("ln_2.weight", 0), ("ln_2.bias", 0),
                   ("mlp.c_fc.weight", C), ("mlp.c_fc.bias", 0), ("mlp.c_proj.weight", 4 * C), ("mlp.c_proj.bias", 0)]:
    for i in range(L):
        name = "h.%d.%s" % (i, kind)
        out += linear(name, n_in) if n_in else list(w[name])
out += list(w["ln_f.weight"]) + list(w["ln_f.bias"])
header = [20240326, 3, T, V, L, 2, C, VP] + [0] * 248
with open(sys.argv[3], "wb") as f:
    f.write(struct.pack("<256i", *header) + struct.pack("<%df" % len(out), *out))
EOF2
bounded "$qkv" info llmc/gpt2_tiny.bin >info.txt || { cat info.txt; fail "info of an llm.c checkpoint"; }
grep -q "an llm.c GPT-2 checkpoint" info.txt || { cat info.txt; fail "info's file line for llm.c"; }
[ "$("$qkv" sample llmc/gpt2_tiny.bin --prompt "The quick brown fox jumps over the lazy" --max-new 8)" = \
  "The quick brown fox jumps over the lazy Hin Hin Hin Hinemphasis clust clust clust" ] || fail "llm.c: not PyTorch's greedy continuation"
mkdir lonely && cp llmc/gpt2_tiny.bin lonely/
refused "an llm.c checkpoint with no tokenizer beside it" "$qkv" sample lonely/gpt2_tiny.bin --prompt hi
ok "llm.c's gpt2_124M.bin layout: the same model, PyTorch's greedy continuation"

# Hostile folders: each a one-line error.
mkdir empty bin_only
refused "a folder without config.json" "$qkv" sample empty --prompt hi
cp "$gpt2/config.json" "$gpt2/vocab.json" "$gpt2/merges.txt" bin_only/ && printf 'PK\3\4' >bin_only/pytorch_model.bin
for command in info sample; do
  refused "$command: a pickle and no safetensors" "$qkv" $command bin_only $([ $command = sample ] && echo --prompt hi)
  grep -q "a pickle can run code" err.txt || fail "the pickle's refusal does not say why"
done
mkdir notok && cp "$gpt2/config.json" "$gpt2/model.safetensors" notok/
refused "a model without a tokenizer" "$qkv" sample notok --prompt hi
# A model this machine cannot hold (GPT-2's shape at 128 layers of width 16,384: 412 billion parameters) is
# refused by its config.json alone, before its weights are opened: here the file holds the tiny model's.
mkdir huge && cp "$gpt2"/{config.json,model.safetensors,vocab.json,merges.txt} huge/
sed -i 's/"n_embd": 8/"n_embd": 16384/; s/"n_layer": 2/"n_layer": 128/; s/"n_head": 2/"n_head": 128/' huge/config.json
refused "a GPT-2 too large for this machine" "$qkv" sample huge --prompt hi
grep -q "parameters" err.txt && ! grep -q "model.safetensors" err.txt || fail "the refusal is not the memory check's"
ok "hostile folders are refused in one line"
