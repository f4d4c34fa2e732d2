#!/usr/bin/env bash
# The reference runs a refactor of the program must not change: every task
# and model kind trained briefly, resumed, and read back by every command
# that reads a checkpoint. Run it with the program before and after a change
# and compare the two folders:
#
#   bash tests/cli/reference_runs.sh OLD_QKV /tmp/before
#   bash tests/cli/reference_runs.sh NEW_QKV /tmp/after
#   bash tests/cli/reference_runs.sh --compare /tmp/before /tmp/after
#
# Written files must be byte-identical, and printed lines identical, once
# times and rates are masked (reference_compare.py says how). One thread, so
# the bits do not depend on the machine's idle cores. About 15 s on 2 cores.
set -euo pipefail

if [ "${1:-}" = --compare ]; then
  exec python3 "$(dirname "$0")/reference_compare.py" "$2" "$3"
fi

qkv=$(readlink -f "$1") out=$2
rm -rf "$out" && mkdir -p "$out" && cd "$out"
run() {  # run NAME command...: its stdout and stderr (and exit status) in NAME.out
  local name=$1; shift
  set +e
  "$qkv" "$@" > "$name.out" 2>&1
  echo "exit $?" >> "$name.out"
  set -e
}

# name | train flags | a prompt the model reads
while IFS='|' read -r name flags prompt; do
  run "$name.train" train $flags --threads 1 --save "$name.safetensors" --log "$name.csv"
  run "$name.resume" train --resume "$name.safetensors" --steps 60 --threads 1 --save "$name.resumed.safetensors" --force
  run "$name.info" info "$name.safetensors"
  run "$name.eval" eval --checkpoint "$name.safetensors" --examples 40 --threads 1
  run "$name.sample" sample --checkpoint "$name.safetensors" --prompt "$prompt" --threads 1
  run "$name.attention" attention --checkpoint "$name.safetensors" --prompt "$prompt" --out "$name.maps"
  run "$name.explore" explore --checkpoint "$name.safetensors" --prompt "$prompt" --out "$name.html"
  run "$name.grads" grads --checkpoint "$name.safetensors" --prompt "$prompt" --out "$name.grads.safetensors"
  run "$name.graph" graph --checkpoint "$name.safetensors" --prompt "$prompt" --out "$name.dot"
  run "$name.gradcheck" gradcheck --checkpoint "$name.safetensors" --entries 3
done <<'EOF'
reverse|--task reverse --steps 40 --eval-every 20 --dim 32 --heads 2|3141
copy-seq2seq|--task copy --model seq2seq --steps 40 --eval-every 20 --dim 32 --heads 2|2718
sort-window|--task sort --attention window:3 --steps 40 --eval-every 20 --dim 32|5310
add|--task add --digits 2 --steps 40 --eval-every 20 --dim 32 --dropout 0.1|12+34
text|--task text --steps 30 --eval-every 15 --dim 32 --context 32|the quick brown fox
brackets|--task brackets --steps 40 --eval-every 20 --dim 32 --layers 2|(()[])
brackets-mean|--task brackets --pooling mean --steps 30 --eval-every 15 --dim 32 --layers 1|([)]
digits|--task digits --steps 30 --eval-every 15 --dim 32|3
sessions|--task sessions --steps 30 --eval-every 15 --dim 32|12 13 14
EOF
# Linear attention draws no maps: trained, resumed, evaluated and sampled only.
run linear.train train --task reverse --attention linear --steps 40 --eval-every 20 --dim 32 --threads 1 \
  --save linear.safetensors --log linear.jsonl
run linear.sample sample --checkpoint linear.safetensors --prompt 4321 --threads 1
run linear.eval eval --checkpoint linear.safetensors --examples 40 --threads 1
for kind in gpt seq2seq encoder vit recommender mha; do
  run "fresh-$kind.gradcheck" gradcheck --model "$kind" --entries 4
  run "fresh-$kind.graph" graph --model "$kind" --out "fresh-$kind.dot"
done
run plot plot reverse.csv text.csv --out curves.html
run help train --help
rm -f ./*.svg.tmp* 2>/dev/null || true
