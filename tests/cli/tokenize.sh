#!/usr/bin/env bash
# qkv tokenize with GPT-2's own vocabulary (tests/fixtures/gpt2): tiktoken's
# ids for a sentence, the text back with --decode, any bytes (invalid UTF-8
# included) through ids and back, and one-line errors for what it refuses.
# usage: tokenize.sh QKV WORKDIR [sanitized]
set -u
qkv=$1 work=$2 sanitized=${3:-}
here=$(cd "$(dirname "$0")" && pwd)
gpt2=$here/../fixtures/gpt2
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
. "$here/lib.sh"
limit=60

[ "$("$qkv" tokenize --tokenizer "$gpt2" --text "Hello world, it's 2024!")" = "15496 995 11 340 338 48609 0" ] \
  || fail "GPT-2's ids for a sentence (tiktoken: 15496 995 11 340 338 48609 0)"
[ "$("$qkv" tokenize --tokenizer "$gpt2" --decode --text "15496 995 11 340 338 48609 0")" = "Hello world, it's 2024!" ] \
  || fail "--decode"
[ "$("$qkv" tokenize --tokenizer "$gpt2" --text "a<|endoftext|>b" --special)" = "64 50256 65" ] || fail "--special"
ok "tokenize: GPT-2's ids for a sentence, --decode and --special"

# Any bytes: ids, and the same bytes back.
python3 -c "import random, sys; random.seed(3); sys.stdout.buffer.write(bytes(random.randrange(256) for _ in range(20000)))" >bytes.bin
"$qkv" tokenize --tokenizer "$gpt2" --data bytes.bin >ids.txt || fail "tokenize --data of random bytes"
"$qkv" tokenize --tokenizer "$gpt2" --decode --text "$(cat ids.txt)" >back.bin || fail "--decode of their ids"
head -c -1 back.bin | cmp -s - bytes.bin || fail "random bytes did not come back from their ids"
ok "tokenize: 20,000 random bytes to $(wc -w <ids.txt) ids and back, byte for byte"

refused "a non-id in --decode" "$qkv" tokenize --tokenizer "$gpt2" --decode --text "15496 x"
refused "an id past the vocabulary" "$qkv" tokenize --tokenizer "$gpt2" --decode --text "50257"
refused "no tokenizer folder" "$qkv" tokenize --tokenizer nothere --text hi
refused "--text and --data" "$qkv" tokenize --tokenizer "$gpt2" --text hi --data bytes.bin
refused "--data that is a folder" "$qkv" tokenize --tokenizer "$gpt2" --data .
ok "tokenize refuses bad ids, folders and flags in one line"

# --train: a tokenizer learned from the bundled text, read back as any folder; the same files twice.
text=$here/../../cli/data/text.txt
"$qkv" tokenize --train --data "$text" --vocab-size 600 --out learned >train.txt || fail "tokenize --train"
grep -q "600 tokens" train.txt || { cat train.txt; fail "--train's summary"; }
"$qkv" tokenize --train --data "$text" --vocab-size 600 --out again >/dev/null || fail "tokenize --train again"
cmp -s learned/merges.txt again/merges.txt && cmp -s learned/vocab.json again/vocab.json || fail "--train is not deterministic"
"$qkv" tokenize --tokenizer learned --data bytes.bin >ids.txt || fail "the learned tokenizer on random bytes"
"$qkv" tokenize --tokenizer learned --decode --text "$(cat ids.txt)" >back.bin || fail "--decode with it"
head -c -1 back.bin | cmp -s - bytes.bin || fail "random bytes did not come back through the learned tokenizer"
refused "a vocabulary under 257" "$qkv" tokenize --train --data "$text" --vocab-size 100 --out small
refused "--train without --out" "$qkv" tokenize --train --data "$text" --vocab-size 300
mkdir -p mine && echo keep >mine/notes.md
refused "--train over a folder it did not write" "$qkv" tokenize --train --data "$text" --vocab-size 300 --out mine --force
ok "tokenize --train: $(sed 's/^wrote learned: //' train.txt)"
