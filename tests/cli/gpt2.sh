#!/usr/bin/env bash
# A Hugging Face GPT-2 folder wherever a checkpoint is accepted: the fixture
# folder tests/fixtures/gpt2 (a tiny random GPT-2 over the real vocabulary,
# with an independent PyTorch model's numbers: make_gpt2_fixture.py) through
# info, sample (PyTorch's greedy continuation), grads (PyTorch's loss and
# gradients under GPT-2's own names), eval, attention, graph, gradcheck and
# explore; and hostile folders refused in one line.
# usage: gpt2.sh QKV COMPARE_GRADS_PY WORKDIR [sanitized]
set -u
qkv=$1 compare=$2 work=$3 sanitized=${4:-}
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
bounded "$qkv" gradcheck --checkpoint "$gpt2" >gradcheck.txt || { tail -3 gradcheck.txt; fail "gradcheck"; }
grep -q "all ok" gradcheck.txt || fail "gradcheck's verdict"
bounded "$qkv" explore "$gpt2" --prompt "The quick brown fox" --out page.html >/dev/null || fail "explore"
ok "eval, attention, graph, gradcheck and explore read the folder"

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
ok "hostile folders are refused in one line"
