#!/usr/bin/env bash
# Nothing lost, nothing unbounded (issue 24): one case per defect a hostile
# round found, each the reproducer itself, run with bounded time (and, outside
# the sanitizer build, memory: ulimit -v). ctest runs each item as its own test.
# usage: outputs_and_bounds.sh QKV HOSTILE_FILES WORKDIR ITEM [sanitized]
set -u
qkv=$1 hostile=$2 work=$3 item=$4 sanitized=${5:-}
. "$(dirname "$0")/lib.sh"  # bounded and refused; this script's own fail and ok follow
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
fail() { echo "FAIL (item $item): $*"; exit 1; }
ok() { echo "ok (item $item): $*"; }
small=(--dim 16 --layers 1 --heads 2 --batch 8 --eval-every 5 --threads 1)
limit=5; [ -n "$sanitized" ] && limit=60  # seconds; the sanitizers run 10-20x slower
trained() {  # trained FILE [args]: a small reverse model
  local file=$1; shift
  "$qkv" train "${small[@]}" --steps 5 --save "$file" "$@" >/dev/null 2>train_err.txt || { cat train_err.txt; fail "training $file"; }
}

case $item in
1)  # plot --out replaced any file, the log itself included, and followed symlinks
  trained ck.safetensors --log run.csv
  cp ck.safetensors ck.before && cp run.csv run.before
  refused "plot --out LOG" "$qkv" plot run.csv --out run.csv --force
  refused "plot --out CHECKPOINT" "$qkv" plot run.csv --out ck.safetensors
  echo victim >victim.txt && ln -s victim.txt link.html
  refused "plot --out SYMLINK --force" "$qkv" plot run.csv --out link.html --force
  cmp -s ck.safetensors ck.before && cmp -s run.csv run.before && [ "$(cat victim.txt)" = victim ] || fail "a file changed"
  refused "plot --out a folder's name" "$qkv" plot run.csv --out reports/
  [ -e reports ] && fail "plot --out reports/ created a folder"
  bounded "$qkv" plot run.csv --out page.html >/dev/null || fail "plot to a new file"
  refused "plot over its own earlier page" "$qkv" plot run.csv --out page.html
  bounded "$qkv" plot run.csv --out page.html --force >/dev/null || fail "plot --force over its page"
  ls | grep -q '\.tmp\.' && fail "a temporary was left behind"
  ok "plot writes only new files, or with --force a regular file that is not its input" ;;
2)  # graph --out ck.safetensors replaced a checkpoint with DOT
  trained ck.safetensors && cp ck.safetensors ck.before
  refused "graph --out CHECKPOINT" "$qkv" graph --out ck.safetensors
  cmp -s ck.safetensors ck.before || fail "the checkpoint changed"
  bounded "$qkv" graph --out g.dot >/dev/null || fail "graph to new files"
  refused "graph over its own output" "$qkv" graph --out g.dot
  bounded "$qkv" graph --out g.dot --force >/dev/null || fail "graph --force"
  ok "graph never replaces a file without --force" ;;
3)  # attention --out DIR wrote through a symlink inside DIR and left stale files
  trained ck.safetensors
  mkdir maps && echo victim >victim.txt && ln -s ../victim.txt maps/index.html
  refused "attention into a folder holding a symlink" "$qkv" attention --checkpoint ck.safetensors --prompt 123 --out maps --force
  [ "$(cat victim.txt)" = victim ] || fail "the symlink's target was written"
  rm maps/index.html && mkfifo maps/layer0_head0.svg
  refused "attention into a folder holding a FIFO" "$qkv" attention --checkpoint ck.safetensors --prompt 123 --out maps --force
  rm -r maps && echo notes >notes.txt && mkdir maps && cp notes.txt maps/
  refused "attention over a folder of someone's files" "$qkv" attention --checkpoint ck.safetensors --prompt 123 --out maps --force
  rm -r maps
  "$qkv" train --dim 16 --layers 3 --heads 2 --batch 8 --steps 2 --threads 1 --save three.safetensors >/dev/null 2>&1 || fail "3 layers"
  bounded "$qkv" attention --checkpoint three.safetensors --prompt 123 --out maps >/dev/null || fail "attention, 3 layers"
  [ -f maps/layer2_head0.svg ] || fail "no layer 2 map"
  refused "attention over an earlier result" "$qkv" attention --checkpoint ck.safetensors --prompt 123 --out maps
  bounded "$qkv" attention --checkpoint ck.safetensors --prompt 123 --out maps --force >/dev/null || fail "attention --force"
  [ -e maps/layer2_head0.svg ] && fail "a stale map of the other model stayed"
  [ -f maps/layer0_head0.svg ] && [ -f maps/index.html ] || fail "the new result is incomplete"
  ls | grep -q '\.tmp\.\|\.old\.' && fail "a temporary folder was left behind"
  # maps/. is maps, but renaming onto it failed with "Device or resource busy" after the work.
  refused "attention --out maps/." "$qkv" attention --checkpoint ck.safetensors --prompt 123 --out maps/. --force
  grep -q "give the folder by its own name" err.txt || fail "maps/.: unclear error"
  ok "an output folder holds exactly one result; symlinks and FIFOs inside are refused" ;;
4)  # training wrote --layers 129, which loading refused; --layers 1e8 ran unbounded
  refused "train --layers 129" "$qkv" train --steps 1 --layers 129 --dim 8 --heads 1 --save l.safetensors --threads 1
  refused "train --layers 100000000" "$qkv" train --steps 1 --layers 100000000 --dim 8 --heads 1 --save l.safetensors --threads 1
  refused "train --layers 128 --dim 65536" "$qkv" train --steps 1 --layers 128 --dim 65536 --heads 1 --save l.safetensors --threads 1
  grep -q "GB available" err.txt || fail "the memory check does not say what it needs"
  [ -e l.safetensors ] && fail "a checkpoint was written"
  "$qkv" train --steps 1 --layers 128 --dim 8 --heads 1 --save max.safetensors --threads 1 >/dev/null 2>&1 || fail "--layers 128"
  bounded "$qkv" info max.safetensors >/dev/null || fail "info refuses what train wrote"
  "$qkv" train --help | tr -s ' \n' ' ' | grep -q "layers N transformer layers, per side for seq2seq, in \[1, 128\]" \
    || fail "--help does not show the bound"
  ok "training and loading share one set of bounds, shown in --help" ;;
5)  # a checkpoint with NaN or inf weights tripped UBSan in the heatmaps, sampled garbage, scored 0%
  trained ck.safetensors && trained text.safetensors --task text --context 16
  "$hostile" ck.safetensors text.safetensors . || fail "hostile_files"
  for bad in nan inf; do
    for cmd in "attention --prompt 123 --out maps_$bad" "sample --prompt 123" "eval" "grads --prompt 123 --out g_$bad.safetensors"; do
      read -r -a words <<<"$cmd"
      refused "$bad: ${words[0]}" "$qkv" "${words[0]}" --checkpoint $bad.safetensors "${words[@]:1}"
      grep -q "blocks.0.attn.q_proj.weight" err.txt || fail "$bad ${words[0]}: the error does not name the tensor"
    done
    refused "$bad: train --resume" "$qkv" train --resume $bad.safetensors --steps 10
  done
  ok "non-finite parameters are refused at load, naming the tensor" ;;
6)  # a FIFO as plot --out, or inside an attention --out folder, blocked forever
  trained ck.safetensors --log run.csv
  mkfifo fifo.html
  refused "plot --out FIFO" "$qkv" plot run.csv --out fifo.html --force
  mkdir maps && mkfifo maps/index.html
  refused "attention, FIFO in --out" "$qkv" attention --checkpoint ck.safetensors --prompt 12 --out maps --force
  refused "graph --out FIFO" "$qkv" graph --out fifo.html --force
  ok "FIFOs are refused before any work" ;;
7)  # plot's output grew with the columns: 2M columns gave a 1.38 GB page
  python3 - <<'PY' || fail "writing the wide log"
cols = 2_000_000
with open("wide.csv", "w") as f:
    f.write("step," + ",".join(f"c{i}" for i in range(cols)) + "\n")
    f.write("1," + ",".join("1" for _ in range(cols)) + "\n")
PY
  refused "plot of a 2M-column log" "$qkv" plot wide.csv
  { echo "step,loss"; for i in $(seq 1 60000); do echo "$i,$((i % 97)).5"; done; } >long.csv
  { head -1 long.csv | sed 's/$/,a,b/'; } >/dev/null
  bounded "$qkv" plot long.csv >/dev/null || fail "plot of 60,000 steps"
  size=$(stat -c %s long.csv.html); [ "$size" -lt 2000000 ] || fail "a 60,000-step page of $size bytes"
  [ "$(page_data long.csv.html "j([d['curves']['runs'][0]['columns']['loss'][k] for k in ('every', 'points')])")" = "30 60000" ] \
    || fail "the page does not hold how the points were thinned"
  ok "plot pages stay bounded (columns refused past 4096, points thinned and said so): $size bytes for 60,000 steps" ;;
8)  # eval --examples and train --batch had no upper bound
  trained ck.safetensors
  refused "eval --examples 2147483648" "$qkv" eval --checkpoint ck.safetensors --examples 2147483648 --threads 1
  refused "train --batch 100000000000" "$qkv" train --batch 100000000000 --steps 1 --threads 1 --save b.safetensors
  refused "train --batch 65536 --dim 4096" "$qkv" train --batch 65536 --dim 4096 --steps 1 --threads 1 --save b.safetensors
  grep -q "GB available" err.txt || fail "the memory check does not say what it needs"
  ok "count flags are bounded, and runs are checked against memory first" ;;
9)  # --threads 32 under ulimit -v 4000000 spun forever inside OpenBLAS. (Past the cores, --threads runs with a
  # warning; it is the address-space limit, which the sanitizer build does not set, that refuses it here.)
  if [ -z "$sanitized" ]; then
    refused "train --threads 32" "$qkv" train --steps 1 --threads 32 --save t.safetensors
    grep -q "address space for OpenBLAS's buffers" err.txt || { cat err.txt; fail "--threads 32: not the address space"; }
    n=$(nproc)
    as_limit=$((600000 + $(cuda_libraries_kib "$qkv")))  # 600 MB for qkv itself
    (ulimit -v $as_limit; exec timeout -k 10 "$limit" "$qkv" train --steps 1 --threads "$n" --save t.safetensors) >out.txt 2>err.txt
    rc=$?
    [ $rc -ne 124 ] && [ $rc -ne 137 ] || fail "--threads $n under ulimit -v $as_limit ran past ${limit} s"
    [ $rc -eq 0 ] || grep -q "address space" err.txt || { cat err.txt; fail "no word about the address-space limit"; }
    echo "  --threads $n under ulimit -v $as_limit: exit $rc $(cat err.txt)"
  fi
  ok "thread counts are bounded by the cores and by the address-space limit" ;;
10) # prompts and --data paths reached the terminal raw: a prompt could forge lines and set the title
  trained ck.safetensors
  evil=$'12\nqkv train: finished\n\e]0;pwned\a'
  for cmd in sample attention grads graph; do
    case $cmd in
      sample) args=(sample --checkpoint ck.safetensors --prompt "$evil") ;;
      attention) args=(attention --checkpoint ck.safetensors --prompt "$evil" --out maps) ;;
      grads) args=(grads --checkpoint ck.safetensors --prompt "$evil" --out g.safetensors) ;;
      graph) args=(graph --checkpoint ck.safetensors --prompt "$evil" --out g.dot) ;;
    esac
    refused "$cmd with a hostile prompt" "$qkv" "${args[@]}"
    grep -q $'\a' err.txt && fail "$cmd: a raw BEL reached the terminal"
  done
  refused "train --data with a hostile path" "$qkv" train --task text --data "$evil" --steps 1 --save t.safetensors --threads 1
  refused "a hostile command name" "$qkv" "$evil"
  # A text model's sample is text: raw into a pipe, escaped on a terminal (script(1) gives it one).
  if command -v script >/dev/null; then
    "$qkv" train --task text --dim 16 --layers 1 --heads 2 --context 16 --batch 2 --steps 1 --threads 1 \
      --save text.safetensors >/dev/null 2>&1 || fail "a text model"
    SHELL=/bin/bash QKV=$qkv script -qec "\"\$QKV\" sample --checkpoint text.safetensors --max-new 4 --prompt \$'ab\\e]0;pwned\\acd'" \
      /dev/null >tty.txt 2>&1 || { cat tty.txt; fail "sample on a terminal"; }
    grep -q $'\e]0' tty.txt && fail "sample wrote a raw escape sequence to a terminal"
    grep -qF 'ab\x1b]0;pwned\x07cd' tty.txt || { cat -v tty.txt; fail "sample on a terminal: the escape is not shown escaped"; }
    "$qkv" sample --checkpoint text.safetensors --max-new 4 --prompt $'ab\e]0;x\acd' | grep -q $'\e]0;x' \
      || fail "sample into a pipe changed the bytes"
  fi
  ok "untrusted words reach the terminal escaped, on one line" ;;
11) # ranks started with different flags were accepted, or died in MPI internals
  command -v mpirun >/dev/null || { echo "skipped: no mpirun"; exit 0; }
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none \
    OMPI_MCA_rmaps_base_oversubscribe=1 OMP_NUM_THREADS=1
  [ -n "$sanitized" ] && export ASAN_OPTIONS=detect_leaks=0
  "$qkv" --version | grep -q "with MPI" || { echo "skipped: qkv without MPI"; exit 0; }
  base=(train "${small[@]}" --steps 3 --save m.safetensors)
  for flag in "--seed 2" "--task sort" "--dim 32" "--steps 4" "--model seq2seq" "--dropout 0.1"; do
    timeout 60 mpirun -np 1 "$qkv" "${base[@]}" : -np 1 "$qkv" "${base[@]}" $flag >out.txt 2>err.txt && fail "ranks with $flag accepted"
    name=${flag%% *}
    grep -q "the ranks were started with different $name" err.txt || { cat err.txt; fail "$flag: no error naming $name"; }
    grep -qi "MPI_ERR\|PMIX\|truncate" err.txt && fail "$flag: MPI internals in the error"
  done
  timeout 60 mpirun -np 2 "$qkv" "${base[@]}" >out.txt 2>&1 || { cat out.txt; fail "two agreeing ranks"; }
  trained ck.safetensors
  timeout 60 mpirun -np 2 "$qkv" eval --checkpoint ck.safetensors >out.txt 2>err.txt && fail "eval under mpirun ran"
  grep -q "runs in one process" err.txt || { cat err.txt; fail "eval under mpirun: no refusal"; }
  grep -q "exact match" out.txt && fail "eval ran under mpirun"
  ok "ranks agree on every flag before step 1; one-process commands refuse a launcher" ;;
12) # plot cut data-values at 1 MiB
  { echo "step,loss"; for i in $(seq 1 60000); do echo "$i,0.$((100000 + i))"; done; } >long.csv
  "$qkv" plot long.csv >/dev/null || fail "plot"
  steps=$(page_data long.csv.html "len(d['curves']['runs'][0]['columns']['loss']['steps'])") || fail "the page's data"
  values=$(page_data long.csv.html "len(d['curves']['runs'][0]['columns']['loss']['values'])")
  [ "$steps" -eq "$values" ] && [ "$steps" -eq 2001 ] || fail "steps $steps, values $values"
  [ "$(page_data long.csv.html "d['curves']['runs'][0]['columns']['loss']['values'][-1]")" = "0.16" ] || fail "the last point was cut"
  ok "the page's data holds every drawn point, never cut" ;;
13) # a full disk: truncated pages and no reason given; a full --log stopped training without saving. No
  # trap of SIGXFSZ here: qkv ignores it itself, so a file-size limit is an ordinary write error (it once
  # died by the signal, exit 153, with no message and its temporaries left).
  trained ck.safetensors --log run.csv
  "$qkv" plot run.csv --out page.html >/dev/null || fail "plot"
  cp page.html page.before
  { echo "step,loss"; for i in $(seq 1 3000); do echo "$i,0.$((100000 + i))"; done; } >big.csv
  (ulimit -f 16; exec "$qkv" plot big.csv --out page.html --force) >/dev/null 2>err.txt && fail "a page past the file-size limit"
  grep -q "File too large" err.txt || { cat err.txt; fail "the error gives no reason"; }
  cmp -s page.html page.before || fail "the previous page was destroyed"
  ls | grep -q '\.tmp\.' && fail "plot left a temporary past the file-size limit"
  (ulimit -f 2; exec "$qkv" graph --model gpt --out g.dot) >/dev/null 2>err.txt && fail "a graph past the limit"
  grep -q "File too large" err.txt || { cat err.txt; fail "graph: no reason"; }
  [ -e g.dot ] && fail "graph left a truncated file"
  "$qkv" attention --checkpoint ck.safetensors --prompt 123 --out maps >/dev/null || fail "attention"
  cp maps/index.html index.before
  (ulimit -f 4; exec "$qkv" attention --checkpoint ck.safetensors --prompt 1234 --out maps --force) \
    >/dev/null 2>err.txt && fail "attention past the file-size limit"
  grep -q "File too large" err.txt || { cat err.txt; fail "attention: no reason"; }
  cmp -s maps/index.html index.before || fail "attention destroyed the previous result"
  ls | grep -q 'maps\.tmp\.\|maps\.old\.' && fail "attention left a temporary folder"
  (ulimit -f 24; exec "$qkv" train --dim 8 --layers 1 --heads 1 --batch 4 --steps 5000 --eval-every 100000 \
    --threads 1 --save full.safetensors --log full.jsonl) >out.txt 2>err.txt && fail "training past the log's limit"
  grep -q "cannot write --log file full.jsonl: File too large; saved step" err.txt || { cat err.txt; fail "no save before stopping"; }
  ls | grep -q '\.tmp\.' && fail "train left a temporary past the file-size limit"
  step=$(grep -o 'saved step [0-9]*' err.txt | grep -o '[0-9]*$')
  "$qkv" info full.safetensors | grep -q "step       $step" || fail "the checkpoint does not hold step $step"
  "$qkv" train --resume full.safetensors --steps $((step + 3)) --log full.jsonl >out.txt 2>&1 || { cat out.txt; fail "resume"; }
  "$qkv" plot full.jsonl >/dev/null 2>err.txt || { cat err.txt; fail "plot after a full disk and --resume"; }
  # The other commands that write a file, each past a limit of 8 KiB: the reason named, no temporary left.
  for cmd in "explore ck.safetensors --prompt 1234 --out limited.html" \
             "grads ck.safetensors --prompt 1234 --out limited.safetensors" \
             "train --dim 8 --layers 1 --heads 1 --steps 2 --threads 1 --no-log --no-best --save limited.safetensors"; do
    (ulimit -f 8; exec "$qkv" $cmd) >/dev/null 2>err.txt && fail "$cmd: written past the file-size limit"
    grep -q "File too large" err.txt || { cat err.txt; fail "$cmd: no reason"; }
    ls | grep -q '\.tmp\.\|^limited' && fail "$cmd: a temporary or a cut file left"
  done
  ok "a full disk: reasons given, previous files whole, the model saved, the log readable after --resume" ;;
14) # after kill -9 the log kept rows past the checkpoint, and --resume appended after them
  # kill -9 while the log runs ahead of the last checkpoint; a kill that lands
  # right after a save (nothing past it to trim) is tried again.
  for attempt in 1 2 3 4 5; do
    rm -f k.safetensors k.csv
    "$qkv" train "${small[@]}" --steps 1000000 --target 0 --save-every 50 --save k.safetensors --log k.csv >out.txt 2>&1 &
    pid=$!
    for _ in $(seq 1 1200); do  # until a checkpoint exists and the log has run 10 rows past it
      s=$(grep -ao '"qkv.step":"[0-9]*' k.safetensors 2>/dev/null | grep -o '[0-9]*$' | tail -1)
      rows=$(($(wc -l 2>/dev/null <k.csv || echo 1) - 1))
      [ -n "$s" ] && [ "$rows" -gt $((s + 10)) ] && break
      sleep 0.05
    done
    kill -9 $pid; wait $pid 2>/dev/null
    saved=$("$qkv" info k.safetensors | awk '/^  step/ {print $2}')
    last=$(tail -n +2 k.csv | grep -E '^[0-9]+,' | tail -1 | cut -d, -f1)  # the last whole-looking row
    [ -n "$saved" ] && [ -n "$last" ] && [ "$last" -gt "$saved" ] && break
    echo "  attempt $attempt: the kill landed right after a save (log $last, checkpoint $saved); again"
  done
  [ "$last" -gt "$saved" ] || fail "five kills in a row landed right after a save"
  printf '%s' "$((last + 1)),0.5" >>k.csv  # and a line cut off mid-write
  "$qkv" train --resume k.safetensors --steps $((saved + 20)) --log k.csv >out.txt 2>&1 || { cat out.txt; fail "resume"; }
  grep -q "dropped [0-9]* lines\? past the checkpoint's step $saved (written after it was saved) and a row cut off mid-write" out.txt ||
    { cat out.txt; fail "resume did not say how it trimmed the log"; }
  tail -n +2 k.csv | cut -d, -f1 | awk 'NR != $1 {exit 1}' || fail "the log's steps are not 1, 2, ... once each"
  # The log is rewritten on --resume: never one of the run's other files, never a file that is not a log.
  cp k.safetensors k.before
  refused "--log is the resumed checkpoint" "$qkv" train --resume k.safetensors --steps $((saved + 30)) --log k.safetensors
  cmp -s k.safetensors k.before || fail "--log over the checkpoint changed it"
  printf 'my notes\n1,2\n' >notes.md && cp notes.md notes.before
  refused "--log is not a qkv log" "$qkv" train --resume k.safetensors --steps $((saved + 30)) --log notes.md
  cmp -s notes.md notes.before || fail "a file that is not a log was rewritten"
  # A log with repeated steps (from before this fix) is drawn with a note; a
  # restart forgets every column's later points, sparse evaluations too.
  { echo "step,loss,eval_loss"; for i in 1 2 3; do echo "$i,1.$i,"; done; echo "4,1.4,0.9"; echo "3,2.3,"; } >sparse.csv
  "$qkv" plot sparse.csv >/dev/null || fail "plot of a restart"
  [ "$(page_data sparse.csv.html "'eval_loss' in d['curves']['runs'][0]['columns']")" = False ] \
    || fail "the abandoned run's evaluation at step 4 is still drawn"
  # A log with repeated steps (from before this fix) is drawn with a note.
  { echo "step,loss"; for i in 1 2 3 4 5 3 4 5 6; do echo "$i,1.$i"; done; } >old.csv
  "$qkv" plot old.csv >/dev/null || fail "plot of repeated steps"
  [ "$(page_data old.csv.html "len(d['curves']['runs'][0]['restarts'])")" = 1 ] || fail "no note on the repeated steps"
  [ "$(page_data old.csv.html "j(d['curves']['runs'][0]['columns']['loss']['steps'])")" = "1 2 3 4 5 6" ] || fail "repeated steps drawn twice"
  # Steps that go back and forth are not a log: refused at the 1,001st restart
  # (each walks every column: 10 MB of them under 4,096 columns took 11 s).
  { echo "step,loss"; for _ in $(seq 1 1001); do echo "1,1"; echo "0,1"; done; } >back.csv
  bounded "$qkv" plot back.csv >/dev/null 2>err.txt && fail "a log whose steps go back 1,001 times was drawn"
  grep -q "line 2003: the steps go back more than 1000 times" err.txt || { cat err.txt; fail "no bound on restarts"; }
  ok "--resume trims the log to the checkpoint (saved $saved, logged $last); plot says where a log restarts, at most 1000 times" ;;
15) # messages that misled
  refused "--attn-entropy 1e308" "$qkv" train --attn-entropy 1e308 --steps 1 --threads 1 --save e.safetensors
  grep -q "must be in \[-100, 100\]" err.txt || fail "--attn-entropy: no bound given"
  "$qkv" train --task text --dim 16 --layers 1 --heads 2 --context 16 --batch 2 --steps 2 --threads 1 --save text.safetensors \
    >/dev/null 2>&1 || fail "a text model"
  bounded "$qkv" gradcheck --checkpoint text.safetensors --entries 2 >out.txt 2>err.txt || { cat out.txt err.txt; fail "gradcheck of a text model"; }
  grep -q "all ok" out.txt || fail "gradcheck of a text model did not pass"
  # eval --examples N scores N windows: 1 and 32 (and 33 and 64) once gave one loss, a batch of 32 each.
  loss() { "$qkv" eval --checkpoint text.safetensors --examples "$1" | grep -o "loss [0-9.]*"; }
  [ "$(loss 1)" != "$(loss 32)" ] && [ "$(loss 33)" != "$(loss 64)" ] || fail "eval --examples is rounded up to 32s"
  "$qkv" eval --checkpoint text.safetensors --examples 1 | grep -q "over 1 window of" || fail "eval: '1 windows'"
  "$qkv" info text.safetensors | grep -q -- "--target" && fail "info shows a text model a --target, which train refuses for text"
  # It says what it did: at most 2 entries a parameter (none holds a million), dropout only where the model has it.
  grep -q ", up to 2 entries each," out.txt || { tail -1 out.txt; fail "gradcheck: not 'up to 2 entries'"; }
  dropout=$("$qkv" info text.safetensors | grep -o "dropout [0-9.]*$")
  if [ "$dropout" = "dropout 0" ]; then want="float64, dropout 0,"; else want="dropout on (masks replayed)"; fi
  grep -q "$want" out.txt || { tail -1 out.txt; fail "gradcheck of a model with $dropout says otherwise"; }
  refused "gradcheck --entries -1" "$qkv" gradcheck --entries -1
  refused "gradcheck --model MHA" "$qkv" gradcheck --model MHA
  grep -q "(gpt, seq2seq, encoder, vit, recommender, mha)" err.txt || fail "gradcheck --model: the kinds omit mha"
  refused "graph --checkpoint without --prompt" "$qkv" graph --checkpoint text.safetensors --out t.dot
  grep -q -- "--checkpoint needs --prompt" err.txt || fail "graph: the error for a missing --prompt is the opposite mistake's"
  refused "graph --out g.png" "$qkv" graph --out g.png
  [ ! -e g.png ] && [ ! -e g.png.svg ] || fail "graph --out g.png wrote DOT text as a PNG"
  refused "train --log ''" "$qkv" train --log "" --steps 1 --threads 1
  grep -q -- "--log needs a file name" err.txt || fail "train --log '': not refused as --save '' is"
  "$qkv" train --task text --dim 16 --layers 1 --heads 2 --context 16 --batch 2 --steps 1 --threads 1 --log up.CSV \
    --save up.safetensors >/dev/null 2>&1 || fail "a run logging to up.CSV"
  head -c 5 up.CSV | grep -q "^step," || fail "--log up.CSV is not CSV"
  # Each error names the flag it is about.
  refused "--weight-decay -1" "$qkv" train --weight-decay -1 --steps 1
  grep -q -- "--weight-decay must be in \[0, 1000\], got -1" err.txt || fail "--weight-decay -1: the flag is not named"
  refused "--weight-decay 1e300" "$qkv" train --weight-decay 1e300 --steps 1
  refused "--attention window:0" "$qkv" train --attention window:0 --steps 1
  grep -q -- "^qkv train: error: --attention: " err.txt || fail "--attention window:0: the flag is not named"
  refused "sample --max-new -1" "$qkv" sample --checkpoint text.safetensors --prompt ab --max-new -1
  grep -q -- "--max-new must be in \[0, 100000\], got -1" err.txt || fail "--max-new -1: no 'got'"
  refused "sample --prompt ''" "$qkv" sample --checkpoint text.safetensors --prompt ""
  grep -q -- "--prompt is empty" err.txt || fail "sample --prompt '': said it was not given"
  trained ck.safetensors
  refused "grads --prompt with a bad symbol" "$qkv" grads --checkpoint ck.safetensors --prompt 12a --out g.safetensors
  grep -q -- "^qkv grads: error: --prompt: " err.txt || fail "grads --prompt 12a: the flag is not named"
  refused "--patch 3" "$qkv" train --task digits --patch 3 --steps 1
  grep -q "patch 3 does not tile images of 8 x 8" err.txt || fail "--patch 3: not said plainly"
  # A text longer than the context is cut to it, and the output says so.
  "$qkv" grads --checkpoint text.safetensors --prompt "$(printf 'x%.0s' $(seq 40))" --out g40.safetensors >out.txt ||
    fail "grads of a 40-byte text"
  grep -q "over 16 predictions (the first 17 of its 40 bytes: the model's context is 16)" out.txt ||
    { head -1 out.txt; fail "a text cut to the context, silently"; }
  printf 'step,loss\n1,1e308\n2,-1e308\n3,0\n' >huge.csv
  "$qkv" plot huge.csv >/dev/null || fail "plot of +-1e308"
  [ "$(page_data huge.csv.html "j(d['curves']['runs'][0]['columns']['loss']['values'])")" = "1e+308 -1e+308 0.0" ] \
    || fail "extreme values are not held as logged"
  # A run refused after its checks left the --save folders it had made (found by a hostile-files walk-through).
  refused "train, a missing --data" "$qkv" train --task text --data none.txt --save newA/sub/x.safetensors --steps 1
  echo x >taken.csv
  refused "train, a --log that exists" "$qkv" train --save newB/sub/x.safetensors --log taken.csv --steps 1
  [ -e newA ] || [ -e newB ] && fail "a refused run left the folders it made for --save"
  # A --log that is a folder or a FIFO: --force would not help, so the error does not offer it.
  mkdir -p logdir && mkfifo logfifo
  for bad in logdir logfifo; do
    refused "train --log $bad --force" "$qkv" train --steps 1 --log $bad --force
    grep -q -- "--log $bad is .*: give a log file name" err.txt || fail "--log $bad: not said plainly"
  done
  mkdir -p kept && refused "train into an existing folder" "$qkv" train --task text --data none.txt --save kept/x.safetensors
  [ -d kept ] || fail "a folder the run did not make was removed"
  # new/../kept is kept: it was taken for a folder the run made, and removed (a review's find).
  refused "train through new/../kept" "$qkv" train --task text --data none.txt --save new/../kept/x.safetensors
  [ -d kept ] || fail "a folder named through '..' was removed"
  [ -e new ] && fail "the folder made to reach '..' stayed"
  # explore reads the log its checkpoint names: --out over it with --force once replaced the log by the page.
  "$qkv" train --steps 2 --threads 1 --save own.safetensors --log own.jsonl >/dev/null 2>&1 || fail "a run with a log"
  cp own.jsonl own.before
  refused "explore --out over the log it reads" "$qkv" explore --checkpoint own.safetensors --prompt 12 --out own.jsonl --force
  cmp -s own.jsonl own.before || fail "explore wrote over its input log"
  # A legal 254-byte name had no room for its temporary's '.tmp.<pid>' ("File name too long", after the work).
  long=$(printf 'n%.0s' $(seq 1 242)).safetensors
  "$qkv" train --steps 1 --threads 1 --save "$long" >/dev/null 2>err.txt || { cat err.txt; fail "a 254-byte --save name"; }
  [ -f "$long" ] && ! ls | grep -q '\.tmp\.' || fail "the long-named checkpoint, or a temporary left behind"
  ok "the messages say what applies; extreme values draw" ;;
16) # bench reported --attention and --checkpoint-activations settings its config ignored
  refused "bench --config attention --attention linear" "$qkv" bench --config attention --attention linear --steps 1 --warmup 0
  refused "bench --config layer --checkpoint-activations" "$qkv" bench --config layer --checkpoint-activations --steps 1 --warmup 0
  bounded "$qkv" bench --config layer --attention window:8 --context 64 --steps 1 --warmup 0 --threads 1 >out.txt \
    || fail "bench layer with window attention"
  grep -q "window:8" out.txt || fail "bench layer does not report its attention"
  # A context past memory is refused before anything is built (it grew to 24 GB and was killed).
  refused "bench --context 1048576" "$qkv" bench --config tiny --context 1048576 --steps 1 --warmup 0
  grep -q "^qkv bench: error: --config tiny at context 1048576 (batch 16, kernel fused) needs about [0-9.]* GB; .*: use a smaller --context$" err.txt \
    || fail "bench --context 1048576: not the memory check"
  refused "bench --kernel composed --context 65536" "$qkv" bench --config attention --kernel composed --context 65536 --steps 1
  grep -q "needs about" err.txt || fail "bench's composed attention at n = 65536: not the memory check"
  refused "bench --profile 0" "$qkv" bench --profile 0 --steps 1 --warmup 0
  refused "bench --profile 1,x" "$qkv" bench --profile 1,x --steps 1 --warmup 0
  refused "bench --profile with --threads" "$qkv" bench --profile 1 --threads 1 --steps 1 --warmup 0
  # The region table: one column per thread count, products and loops by name, and the step.
  bounded "$qkv" bench --config layer --context 64 --profile 1,1 --steps 2 --warmup 0 >out.txt 2>err.txt \
    || { cat err.txt; fail "bench --profile"; }
  grep -q "speed-up" out.txt && grep -qE "sgemm [0-9]+x[0-9]+x[0-9]+ N[NT]" out.txt && grep -qE "loop [a-z_]+ \([a-z_]+\.cpp:[0-9]+\)" out.txt \
    && grep -qE "^ +[0-9.]+ +[0-9.]+ +[0-9.]+x +step$" out.txt || { cat out.txt; fail "bench --profile's table"; }
  grep -q "step 1 of" out.txt err.txt && fail "bench wrote its progress line into a file"
  # on_terminal ARGS...: qkv ARGS with stderr on a terminal (script(1) gives it one) and stdout
  # dropped, its stderr into tty.txt; erased: tty.txt ends by erasing its line.
  on_terminal() { SHELL=/bin/bash QKV=$qkv script -qec "\"\$QKV\" $* 2>&1 >/dev/null" /dev/null >tty.txt 2>&1; }
  erased() { [ "$(tail -c 4 tty.txt | od -An -c | tr -d ' ')" = '\r033[K' ]; }
  # On a terminal it counts its steps on stderr, and erases the line at the end.
  if command -v script >/dev/null; then
    on_terminal bench --config layer --context 64 --steps 2 --warmup 1 --threads 1 || { cat tty.txt; fail "bench on a terminal"; }
    grep -q "bench layer, 1 thread: step 1 of 3 (warm-up)" tty.txt && grep -q "step 3 of 3" tty.txt && erased ||
      { cat -v tty.txt; fail "bench on a terminal: no progress line, or it was left on the screen"; }
  fi
  # eval too: its first chunk of 1024 examples is always shown, then at most ten lines a second.
  trained ck.safetensors
  bounded "$qkv" eval --checkpoint ck.safetensors --examples 2000 >out.txt 2>err.txt || { cat err.txt; fail "eval"; }
  [ ! -s err.txt ] || { cat -v err.txt; fail "eval wrote progress to a file"; }
  if command -v script >/dev/null; then
    on_terminal eval --checkpoint ck.safetensors --examples 2000 || { cat tty.txt; fail "eval on a terminal"; }
    grep -q "eval: 1024 of 2000 examples" tty.txt && erased ||
      { cat -v tty.txt; fail "eval on a terminal: no progress line, or it was left on the screen"; }
  fi
  ok "bench refuses the flags its config does not use; --profile prints its region table; bench and eval show progress only on a terminal" ;;
*) fail "no such item" ;;
esac
