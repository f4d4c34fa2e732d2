#!/usr/bin/env bash
# The study page written by a program of its own (examples/custom_layer.cpp:
# a GPT of a norm the library does not have, trained with train::Trainer,
# its page through study::record and study::write_page, not the qkv
# program): the page holds both maps with dL/dP and importances, the neuron
# view, token attribution, the graph and both runs' curves; then a headless
# Chromium drives every view of it (tests/browser/explore_test.py).
# usage: library_page.sh EXAMPLE CHROMIUM_OR_EMPTY SCREENSHOT_DIR WORKDIR [sanitized]
set -u
example=$1 chromium=$2 shots=$3 work=$4 sanitized=${5:-}
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$work" "$shots" && mkdir -p "$work" "$shots" && cd "$work" || exit 1
. "$here/lib.sh"
OMP_NUM_THREADS=1 "$example" >example.txt 2>&1 || { cat example.txt; fail "the example"; }
grep "^wrote custom_layer.html" example.txt | sed 's/^/  /'
page=custom_layer.html
[ "$(page_data $page "d['title']")" = "a GPT with my_rmsnorm" ] || fail "the page's title"
[ "$(page_data $page "j(len(l['maps']) for g in d['attention']['groups'] for l in g['layers'])")" = "4 4" ] \
  || fail "two layers of 4 heads each"
[ "$(page_data $page "sum(map(sum, d['attention']['groups'][0]['masked']))")" = 496 ] \
  || fail "the 496 cells past the diagonal are marked hidden (study::record saw the causal mask)"
[ "$(page_data $page "all('g' in m for g in d['attention']['groups'] for l in g['layers'] for m in l['maps'])")" = True ] \
  || fail "every map has its dL/dP"
[ "$(page_data $page "len(d['attention']['neurons']['heads']) > 0 and len(d['attribution']['values']) == 32")" = True ] \
  || fail "the neuron view and 32 tokens' attribution"
[ "$(page_data $page "sum(n['op'] == 'my_rms_norm' and n['scope'].startswith('blocks.') for n in d['graph']['nodes'])")" = 4 ] \
  || fail "the graph shows the plugin's op in each block's two norms"
[ "$(page_data $page "j(len(r['columns']) > 0 for r in d['curves']['runs'])")" = "True True" ] || fail "both runs' curves"
ok "the example's page holds two causal maps with dL/dP, the neuron view, attribution, the graph and both runs' curves"
if [ -n "$sanitized" ]; then
  ok "the browser part runs in the Release pass"
  exit 0
fi
need_chromium "$chromium"
CHROMIUM=$chromium python3 "$here/../browser/explore_test.py" $page --shots "$shots" >browser.txt 2>&1 \
  || { cat browser.txt; fail "the browser test"; }
echo "  $(tail -1 browser.txt)"
ok "Chromium loads the library's page without a console error and drives every view"
