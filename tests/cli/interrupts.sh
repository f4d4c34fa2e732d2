#!/usr/bin/env bash
# Every command that writes a result, interrupted (SIGINT, SIGTERM) at several
# moments, leaves either the previous result or the whole new one, and no
# temporary beside it; what a SIGKILL leaves (a temporary, an output folder's
# swap cut in two) is cleaned, or put back, by the next run.
# usage: interrupts.sh QKV WORKDIR [sanitized]
set -u
qkv=$1
work=$2
sanitized=${3:-}
limit=60
here=$(dirname "$(readlink -f "$0")")
source "$here/lib.sh"
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1

# A text model wide enough that a page of a long prompt takes a while to build.
"$qkv" train --task text --context 192 --dim 64 --layers 2 --heads 4 --steps 2 --threads 1 --no-best \
  --save ck.safetensors >/dev/null 2>&1 || fail "a model"
prompt=$(head -c 180 "$here/../../cli/data/text.txt" | tr '\n' ' ')
log=ck.csv

# name | the command, writing OUT | how a whole result is told from a cut one (a reference run of the same command)
commands=(
  "explore|explore ck.safetensors --prompt \"\$prompt\" --out OUT --force"
  "plot|plot $log --out OUT --force"
  "grads|grads ck.safetensors --prompt \"\$prompt\" --out OUT --force"
  "graph|graph ck.safetensors --prompt \"\$prompt\" --out OUT --force"
  "attention|attention ck.safetensors --prompt \"\$prompt\" --out OUT --force"
)
leftovers() { ls -a | grep -E '\.(tmp|old)\.[0-9]+$' || true; }
for entry in "${commands[@]}"; do
  name=${entry%%|*} command=${entry#*|}
  case $name in graph) ext=.dot ;; grads) ext=.safetensors ;; attention) ext= ;; *) ext=.html ;; esac
  eval "\"\$qkv\" ${command//OUT/ref$ext}" >/dev/null 2>&1 || fail "$name: the reference run"
  for moment in 0.02:INT 0.1:TERM 0.25:INT 0.5:TERM; do
    delay=${moment%:*} sig=${moment#*:}
    {
      # The previous result: the reference's bytes (a command's result is the same on every run).
      rm -rf "old$ext" "out$ext" out.svg
      cp -r "ref$ext" "out$ext" && cp -r "ref$ext" "old$ext"
      eval "exec \"\$qkv\" ${command//OUT/out$ext}" >/dev/null 2>err.txt &  # exec: $! is qkv itself
      pid=$!
      sleep "$delay"
      kill -$sig $pid 2>/dev/null
      wait $pid
      [ -z "$(leftovers)" ] || { leftovers; fail "$name, SIG$sig after ${delay}s: temporaries left"; }
      diff -rq "out$ext" "old$ext" >/dev/null || diff -rq "out$ext" "ref$ext" >/dev/null ||
        fail "$name, SIG$sig after ${delay}s: neither the previous result nor the whole new one"
    }
  done
  ok "$name: interrupted at 4 moments by SIGINT or SIGTERM, the result is the old one or the new one, whole"
done

# What a SIGKILL leaves: a temporary of a process that is gone (never a result), an output folder's swap
# cut in two (the previous result moved aside, the new one not yet in).
dead=$(bash -c 'echo $$')  # a process that has ended
echo cut >"page.html.tmp.$dead"
mkdir "maps.tmp.$dead" && echo '<svg' >"maps.tmp.$dead/layer0_head0.svg"
"$qkv" attention ck.safetensors --prompt hello --out maps >/dev/null || fail "attention"
cp -r maps maps.before
mv maps "maps.old.$dead"  # killed between its two renames: no maps, the previous result beside it
"$qkv" explore ck.safetensors --prompt hello --out page.html >/dev/null || fail "explore beside a leftover"
[ -e "page.html.tmp.$dead" ] && fail "a dead process's temporary stayed"
[ -e "maps.tmp.$dead" ] && fail "a dead process's temporary folder stayed"
"$qkv" attention ck.safetensors --prompt world --out maps2 >/dev/null || fail "attention beside leftovers"
[ -e "maps.old.$dead" ] || fail "the swap was undone by a run for another target"
refused "attention onto the folder a swap left" "$qkv" attention ck.safetensors --prompt hello --out maps
diff -rq maps maps.before >/dev/null || fail "the previous result was not put back whole"
[ -e "maps.old.$dead" ] && fail "the cut swap stayed beside"
ok "a SIGKILL's temporaries are removed, and a cut swap puts the previous result back"
