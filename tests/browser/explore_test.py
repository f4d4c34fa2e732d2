#!/usr/bin/env python3
"""Headless-Chromium checks for a qkv explorer page.

    python3 explore_test.py PAGE.html... --shots DIR [--max-mb MB]

Prints one "ok: ..." / "FAIL: ..." line per check ("skip: ..." for a part
the page does not have), and a "size:" line per page (its bytes and the
time to its first view), and exits 1 if any check failed. Screenshots of
each view go to DIR/<page stem>-<view>.png. One browser opens every page.
"""
import argparse
import json
import os
import signal
import sys
import time

sys.dont_write_bytecode = True  # keep __pycache__ out of the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cdp import Browser, CDPError, JSError  # noqa: E402

BASE_VIEWS = ["heads", "model", "matrix", "graph"]

# Helpers for every js() expression. shown(el, root): el is in the document,
# visible, and neither it nor an ancestor below root (null: up to <html>) is
# display:none. inside(a, b): box a lies within box b, with 1 px of slack.
JS_HELPERS = r"""
const $ = s => document.querySelector(s), $$ = s => [...document.querySelectorAll(s)];
const shown = (el, root = null) => {
  if (!el || !el.isConnected || getComputedStyle(el).visibility !== 'visible') return false;
  for (let e = el; e && e !== root; e = e.parentElement)
    if (getComputedStyle(e).display === 'none') return false;
  return true;
};
const nShown = (sel, root = null) => $$(sel).filter(e => shown(e, root)).length;
const box = el => { const r = el.getBoundingClientRect();
  return {l: r.left, t: r.top, r: r.right, b: r.bottom, w: r.width, h: r.height}; };
const inside = (a, b) => a.l >= b.l - 1 && a.t >= b.t - 1 && a.r <= b.r + 1 && a.b <= b.b + 1;
"""

failures = []


class Missing(Exception):
    """A selector that a check needs matches nothing."""


def report(ok, what):
    print(("ok: " if ok else "FAIL: ") + what, flush=True)
    if not ok:
        failures.append(what)
    return ok


def q(selector):  # a selector as a JS string literal
    return json.dumps(selector)


def js(b, expr):
    return b.eval("(() => {%s\nreturn (%s);})()" % (JS_HELPERS, expr))


def count(b, selector):
    return js(b, "$$(%s).length" % q(selector))


def require(b, *selectors):
    for s in selectors:
        if count(b, s) == 0:
            raise Missing("no element matches %s" % s)


def show_tab(b, view):
    tab = 'button.tab[data-view="%s"]' % view
    require(b, tab)
    b.click(tab)
    b.settle()


def errors_text(b):  # on one line: stack traces are joined with " | "
    text = "; ".join(" | ".join(l.strip() for l in e.splitlines()) for e in b.errors)
    return " (errors: %s)" % text[:2000] if b.errors else ""


# ---- checks ---------------------------------------------------------------
def check_head_toggle(b):
    show_tab(b, "heads")
    require(b, ".head-toggle")
    first = js(b, "$('.head-toggle').dataset.head")  # the layer's most important head
    toggle = '.head-toggle[data-head="%s"]' % first
    line0 = '#view-heads .attn-line[data-head="%s"]' % first
    others = '#view-heads .attn-line:not([data-head="%s"])' % first
    require(b, toggle, line0)
    state = ("[nShown(%s, $('#view-heads')), nShown(%s, $('#view-heads')),"
             " $(%s).classList.contains('off')]" % (q(line0), q(others), q(toggle)))
    n0, n_other, off = js(b, state)
    if not report(n0 > 0 and not off, "head %s starts on with %d displayed lines" % (first, n0)):
        return
    b.click(toggle)
    after0, after_other, off = js(b, state)
    report(off, "clicking %s adds class 'off'" % toggle)
    report(after0 == 0, "head %s off hides its lines (%d of %d still displayed)" % (first, after0, n0))
    if count(b, ".head-toggle") >= 2:
        report(n_other > 0 and after_other == n_other, "other heads' lines stay displayed"
               " (%d before, %d after)" % (n_other, after_other))
    b.click(toggle)
    back0, _, off = js(b, state)
    report(not off and back0 == n0, "clicking again restores head %s (%d of %d lines, off=%s)"
           % (first, back0, n0, off))


def check_hover(b):
    for view in ("model", "matrix", "heads"):  # each attention view is drawn when first shown
        show_tab(b, view)
    require(b, "#view-heads .tok")
    b.hover("#view-heads .tok")
    tok = js(b, "$('#view-heads .tok').getAttribute('data-tok')")
    if tok is None:
        raise Missing("the first #view-heads .tok has no data-tok attribute")
    same = ".tok[data-tok=%s]" % q(tok)
    lit, total = js(b, "[$$(%s).filter(e => e.classList.contains('hl')).length,"
                       " $$(%s).length]" % (q(same), q(same)))
    report(lit == total, "hovering token %s: %d of %d %s have class hl" % (tok, lit, total, same))
    for view in ("heads", "model", "matrix"):
        n = count(b, "#view-%s %s" % (view, same))
        report(n > 0, "#view-%s holds %d %s" % (view, n, same))
    b.mouse_move(1, 1)
    b.settle()
    left = count(b, ".tok.hl")
    report(left == 0, "moving the mouse away clears hl (%d .tok.hl left)" % left)


def check_tabs(b, views, shots, stem, light=False):
    """Each tab shows only its view. The model's zoom and the graph's layout
    are checked right after their tab's screenshot (the graph's first view),
    unless `light` (the screenshots alone)."""
    for view in views:
        try:
            target = "#view-" + view
            show_tab(b, view)
            require(b, target)
            on, others = js(b, "[shown($(%s)), $$('.view').filter(v => v !== $(%s) && shown(v))"
                               ".map(v => '#' + v.id)]" % (q(target), q(target)))
            name = "%s-%s.png" % (stem, view)
            b.screenshot(os.path.join(shots, name))
            report(on and not others, "tab %s shows %s only (displayed: %s; screenshot %s)"
                   % (view, target, ([target] if on else []) + others, name))
            if view == "model" and not light:
                check_zoom(b, os.path.join(shots, stem + "-model-zoom.png"))
            if view == "graph" and not light:
                check_graph(b)
        except Missing as e:
            report(False, "%s view: %s" % (view, e))


def check_zoom(b, png):
    """The enlarged map: a real title, masked cells hatched, labels that do
    not overlap, and Esc or a click outside closes it."""
    require(b, "#view-model .cell", "#zoom")
    b.click("#view-model .cell")
    b.settle()
    opened = js(b, "shown($('#zoom'))")
    b.screenshot(png)
    report(opened, "clicking the first #view-model .cell displays #zoom (screenshot %s)"
           % os.path.basename(png))
    title = js(b, "$('#zoom h3') ? $('#zoom h3').textContent : ''")
    report(title.startswith(js(b, "JSON.parse($('#qkv-data').textContent).attention.groups[0].layers[0].name"))
           and "null" not in js(b, "$('#zoom').textContent"), "the zoom's title names its map: %r" % title)
    # A masked cell is hatched, not white (white is a weight of 0).
    masked = js(b, """(() => { const d = JSON.parse($('#qkv-data').textContent).attention.groups[0];
        for (let i = 0; i < d.masked.length; ++i) for (let j = 0; j < d.masked[i].length; ++j)
          if (d.masked[i][j]) return [i, j];
        return null; })()""")
    if masked:
        px = js(b, """(() => { const c = $('#zoom canvas'), n = %d, k = c.width / n, ctx = c.getContext('2d');
            const xs = []; for (let dx = 0; dx < k; ++dx) for (let dy = 0; dy < k; ++dy)
              xs.push([...ctx.getImageData(%d * k + dx, %d * k + dy, 1, 1).data].slice(0, 3).join(','));
            return [...new Set(xs)]; })()""" % (js(b, "JSON.parse($('#qkv-data').textContent).attention.groups[0].cols.length"),
                                               masked[1], masked[0]))
        report("255,255,255" not in px and len(px) >= 2, "masked cell %r is hatched in the zoom (colours %s)" % (masked, px[:4]))
    else:
        print("skip: no masked cells on this page's first group")
    overlaps = js(b, """(() => { const t = $$('#zoom svg text'), rows = [], cols = [];
        for (const e of t) (e.getAttribute('transform') ? cols : rows).push(e);
        let bad = 0;
        // Row labels: baselines at least a font size (the glyphs' em box) apart.
        for (let i = 1; i < rows.length; ++i) if (+rows[i].getAttribute('y') - +rows[i - 1].getAttribute('y') < +rows[i].getAttribute('font-size')) bad += 1;
        // Rotated column labels: baselines at least a font size apart across their slant.
        for (let i = 1; i < cols.length; ++i) {
          const dx = +cols[i].getAttribute('x') - +cols[i - 1].getAttribute('x'), fs = +cols[i].getAttribute('font-size');
          if (dx * Math.sin(Math.PI / 3) < 0.85 * fs) bad += 1;
        }
        const g = JSON.parse($('#qkv-data').textContent).attention.groups[0];
        return [bad, rows.length, cols.length, t.length ? Math.min(...t.map(e => +e.getAttribute('font-size'))) : 0,
                g.rows.length, g.cols.length]; })()""")
    report(overlaps[0] == 0 and overlaps[3] >= 9, "zoom labels: %d overlaps among %d row and %d column labels, smallest font %g px"
           % tuple(overlaps[:4]))
    # Every token labelled (labelling every 2nd character read "A i e w s b g…").
    report(overlaps[1] == overlaps[4] and overlaps[2] == overlaps[5], "zoom: all %d query and %d key tokens labelled"
           % tuple(overlaps[4:]))
    b.key("Escape", "Escape", 27)
    b.settle()
    report(not js(b, "shown($('#zoom'))"), "Esc closes #zoom")
    b.click("#view-model .cell")
    b.settle()
    b.click_at(5, 5)  # the window's corner, outside the open map
    b.settle()
    report(not js(b, "shown($('#zoom'))"), "a click outside closes #zoom")
    b.click("#view-model .cell")
    b.settle()
    require(b, "#zoom .close")
    b.click("#zoom .close")
    b.settle()
    report(not js(b, "shown($('#zoom'))"), "#zoom .close hides #zoom")


def check_model_fill(b):
    """The model view's maps use the window's width for any model shape."""
    show_tab(b, "model")
    got = js(b, """(() => { const g = box($('#model-grid')), c = $$('#model-grid canvas').map(e => box(e).w);
        return [g.w, innerWidth, Math.min(...c), Math.max(...c)]; })()""")
    report(got[0] >= 0.75 * got[1] or got[3] >= 359, "model view: grid %.0f px of a %d px window, maps %.0f-%.0f px wide"
           % tuple(got))


def check_heads_first(b):
    """With more than 4 heads, the head view starts from the layer's 3 most important."""
    show_tab(b, "heads")
    heads, on, best = js(b, """(() => { const d = JSON.parse($('#qkv-data').textContent).attention, l = d.groups[0].layers[0];
        const on = $$('.head-toggle:not(.off)').map(e => +e.dataset.head).sort((a, b) => a - b);
        const best = l.importance ? [...l.importance.keys()].sort((a, b) => l.importance[b] - l.importance[a]) : [];
        return [d.heads, on, best]; })()""")
    if heads <= 4:
        report(len(on) == heads, "%d heads: all shown (%s)" % (heads, on))
        return
    want = sorted(best[:3])
    report(on == want, "%d heads: the head view starts with the 3 most important %s (on: %s)" % (heads, want, on))
    b.click("#all-heads")
    b.settle()
    report(count(b, ".head-toggle.off") == 0, "'all heads' shows every head")


def check_colour_scale(b):
    """A map's scale leaves out rows with a single visible key; 'each row its own' makes every row's largest the darkest."""
    show_tab(b, "matrix")
    got = js(b, """(() => { const sh = qkvMaps.shape(0), hm = $('#view-matrix .heatmap'), h = +hm.dataset.head,
        l = +hm.dataset.layer, v = qkvMaps.values(0, l, h, 'weights');
        let top = 0, single = 0;
        for (let i = 0; i < sh.rows; ++i) for (let j = 0; j < sh.cols; ++j) {
          const x = v[i * sh.cols + j]; if (!(x === x)) continue;
          if (sh.seen[i] > 1) top = Math.max(top, x); else single = Math.max(single, x);
        }
        return [+hm.dataset.top, top, single, sh.seen.some(n => n === 1)]; })()""")
    report(abs(got[0] - got[1]) <= 1e-6 * max(1, got[1]), "matrix scale %.4g is the largest weight of rows with 2 keys or more (%.4g;"
           " single-key rows reach %.4g, present: %s)" % tuple(got))
    b.eval("(s => { s.value = 'row'; s.dispatchEvent(new Event('change')); })(document.querySelector('#scale'))")
    b.settle()
    darkest = js(b, """(() => { const sh = qkvMaps.shape(0), hm = $('#view-matrix .heatmap'), c = hm.querySelector('canvas'),
        v = qkvMaps.values(0, +hm.dataset.layer, +hm.dataset.head, 'weights'), k = c.width / sh.cols, ctx = c.getContext('2d');
        let ok = 0, rows = 0;
        for (let i = 0; i < sh.rows; ++i) {
          let best = -1; for (let j = 0; j < sh.cols; ++j) if (v[i * sh.cols + j] > (best < 0 ? -1 : v[i * sh.cols + best])) best = j;
          if (best < 0) continue;
          const p = ctx.getImageData(best * k + k / 2, i * k + k / 2, 1, 1).data;
          rows += 1; if (p[0] === 42 && p[1] === 93 && p[2] === 176) ok += 1;
        }
        return [ok, rows, $('#view-matrix h3').textContent.includes('each row its own')]; })()""")
    report(darkest[0] == darkest[1] and darkest[2], "'each row its own': %d of %d rows have their largest at the darkest blue" % tuple(darkest[:2]))
    b.eval("(s => { s.value = 'map'; s.dispatchEvent(new Event('change')); })(document.querySelector('#scale'))")


def check_neurons(b):
    """The neuron view's softmax of scale·q·k over the row gives the map's own weight, for each head it holds."""
    if count(b, 'button.tab[data-view="neurons"]') == 0:
        report(False, "no neuron view")
        return
    show_tab(b, "neurons")
    entries = js(b, "$$('#neuron-head option').length")
    worst, exact = 0.0, 0
    for e in range(min(entries, 4)):
        b.eval("(s => { s.value = '%d'; s.dispatchEvent(new Event('change')); })(document.querySelector('#neuron-head'))" % e)
        for q in ("0", "last"):
            if q == "0":
                b.eval("(s => { s.value = '0'; s.dispatchEvent(new Event('change')); })(document.querySelector('#neuron-query'))")
            f = js(b, "(f => [+f.dataset.softmax, +f.dataset.map, +f.dataset.exact, $$('#neuron-strips .nv-cell').length])($('#neuron-facts'))")
            if f[2]:
                exact += 1
                worst = max(worst, abs(f[0] - f[1]))
            if f[3] == 0:
                report(False, "neuron view %d draws no strips" % e)
    report(exact > 0 and worst <= 1e-4, "neuron view: softmax(scale·q·kᵀ) matches the map's weight in %d views of %d heads"
           " (worst difference %.2g)" % (exact, entries, worst))


def check_attribution(b):
    """Token attribution: a chip and a bar per input token, the largest |value| the widest bar, the page's numbers."""
    if count(b, 'button.tab[data-view="attribution"]') == 0:
        report(True, "no token attribution view (the model looks up no token embedding)")
        return
    show_tab(b, "attribution")
    got = js(b, "[$$('#view-attribution .attr-token').filter(e => shown(e)).length,"
                " $$('#view-attribution .attr-bar').map(e => +e.getAttribute('width')),"
                " document.querySelector('#view-attribution .note').textContent]")
    values = js(b, "JSON.parse(document.getElementById('qkv-data').textContent).attribution.values")
    chips, widths, note = got
    widest = max(range(len(widths)), key=lambda i: widths[i]) if widths else -1
    largest = max(range(len(values)), key=lambda i: abs(values[i])) if values else -1
    report(chips == len(values) == len(widths) > 0 and widest == largest and "dL/de" in note,
           "token attribution: %d tokens, %d chips and %d bars, the widest for the largest |a_t| (token %d, %d), "
           "its definition on the page" % (len(values), chips, len(widths), widest, largest))


def check_palette(b):
    """Colours stay apart: the heads' (up to 12), and the layers' on a run's
    per-layer chart; every pair differs by 20 or more in CIELAB (ΔE76)."""
    show_tab(b, "heads")
    heads = js(b, "$$('.head-toggle .swatch').map(e => getComputedStyle(e).backgroundColor)")
    layers = []
    if count(b, "#view-curves"):
        show_tab(b, "curves")
        layers = js(b, """(() => { const box = $$('.chart-box').find(e => e.querySelector('.chart[data-name="grad_norm."]'));
            if (!box) return [];
            return $$('.chart-box').filter(e => e === box)[0].querySelectorAll('.chart-legend line').length ?
              [...new Set([...box.querySelectorAll('.chart-legend line')].filter(l => l.getAttribute('stroke-dasharray') === 'none')
                .map(l => getComputedStyle(l).stroke))] : []; })()""")
    for what, colours in (("head", heads), ("per-layer chart", layers)):
        if len(colours) >= 2:
            palette_apart(what, colours)


def palette_apart(what, colours):

    def lab(c):
        r, g, b_ = [int(x) / 255 for x in c[c.index("(") + 1:c.index(")")].split(",")[:3]]
        lin = [((v + 0.055) / 1.055) ** 2.4 if v > 0.04045 else v / 12.92 for v in (r, g, b_)]
        x = (0.4124 * lin[0] + 0.3576 * lin[1] + 0.1805 * lin[2]) / 0.95047
        y = 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]
        z = (0.0193 * lin[0] + 0.1192 * lin[1] + 0.9505 * lin[2]) / 1.08883
        f = [t ** (1 / 3) if t > 0.008856 else 7.787 * t + 16 / 116 for t in (x, y, z)]
        return 116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])
    labs = [lab(c) for c in colours]
    d = min(sum((p - q) ** 2 for p, q in zip(labs[i], labs[j])) ** 0.5 for i in range(len(labs)) for j in range(i))
    report(d >= 20, "%d %s colours: the closest pair is ΔE %.1f apart" % (len(colours), what, d))


def graph_fit(b, timeout=2.0):
    """Wait (for a possibly animated refit) until #graph-svg lies in the
    viewport and its non-empty g.viewport in it; return (ok, description)."""
    deadline = time.monotonic() + timeout
    while True:
        g = js(b, "(() => { const s = box($('#graph-svg')), c = box($('#graph-svg g.viewport'));"
                  " const v = {l: 0, t: 0, r: innerWidth, b: innerHeight};"
                  " return {s, c, v, svg_ok: inside(s, v),"
                  " c_ok: c.w > 0 && c.h > 0 && inside(c, s)}; })()")
        if (g["svg_ok"] and g["c_ok"]) or time.monotonic() > deadline:
            break
        time.sleep(0.1)

    def rect(r):
        return "(%.0f,%.0f)-(%.0f,%.0f)" % (r["l"], r["t"], r["r"], r["b"])
    return g["svg_ok"] and g["c_ok"], "svg %s in viewport %s: %s; content %s in svg: %s" % (
        rect(g["s"]), rect(g["v"]), g["svg_ok"], rect(g["c"]), g["c_ok"])


def check_graph(b):  # with the graph tab showing
    """The first view fits; an opened module is shown at a readable size
    (three opened one after another once shrank the text to 7 px), no
    tooltip outlives its module, each reason for a missing gradient is one
    note, and the engine's ops have the names qkv graph gives them."""
    module = "#graph-svg g.module.collapsed"
    require(b, "#graph-svg", "#graph-svg g.viewport")
    fits, desc = graph_fit(b)
    report(fits, "first graph view fits: " + desc)
    for k in range(3):
        if count(b, module) == 0:
            break
        before = count(b, "#graph-svg g.node, #graph-svg g.module")
        # A closed module in view (the view now shows the last one opened).
        k_in = js(b, "$$(%s).findIndex(e => inside(box(e), box($('#graph-svg'))))" % q(module))
        if k_in < 0:
            report(False, "no closed module in view after opening %d" % k)
            break
        b.hover(module, k_in)  # its tooltip shows, then the click opens it
        b.click(module, k_in)
        b.wait_for("document.querySelectorAll('#graph-svg g.node, #graph-svg g.module').length > %d" % before, 2.0)
        after = count(b, "#graph-svg g.node, #graph-svg g.module")
        report(after > before, "opening module %d: boxes %d -> %d" % (k + 1, before, after))
        report(not js(b, "shown($('#tip')) && $('#tip').textContent.includes('Click to open')"),
               "no stale 'click to open' tooltip after opening module %d" % (k + 1))
    small = js(b, """(() => { const t = $$('#graph-svg g.node text, #graph-svg g.module text').filter(e => { const r = box(e), s = box($('#graph-svg'));
        return r.h > 0 && inside(r, s); }); return [t.length, t.length ? Math.min(...t.map(e => box(e).h)) : 0]; })()""")
    report(small[0] > 0 and small[1] >= 9, "after 3 modules open: %d node labels in view, the smallest %.1f px tall" % tuple(small))
    notes = js(b, """(() => { const d = JSON.parse($('#qkv-data').textContent).graph;
        return [$$('#view-graph .no-grad').length, new Set(d.no_grad.map(p => p.why)).size, d.no_grad.length]; })()""")
    report(notes[0] == notes[1], "graph notes: %d paragraphs for %d reasons (%d parameters)" % tuple(notes))
    names = js(b, """(() => { const d = JSON.parse($('#qkv-data').textContent).graph.nodes;
        return [d.filter(n => n.op === 'masked_fill' && !/ mask$/.test(n.label)).length, d.filter(n => n.op === 'mul_scalar' && n.label !== 'scale').length]; })()""")
    report(names == [0, 0], "the graph names masked_fill a mask and mul_scalar 'scale', as qkv graph does (%d, %d left)" % tuple(names))


def check_curves(b):
    canvas = "#view-curves .chart canvas"
    if count(b, "#view-curves") == 0:
        print("skip: no #view-curves on this page; curve checks not applicable")
        return
    show_tab(b, "curves")
    require(b, canvas, "#smooth")
    dense = js(b, """JSON.parse($('#qkv-data').textContent).curves.runs.some(r =>
        Object.entries(r.columns).some(([c, col]) => !c.startsWith('eval_') && col.steps.length >= 20))""")
    if not dense:
        print("skip: no series of 20 points or more: nothing to smooth")
        return
    image = "$(%s).toDataURL()" % q(canvas)
    before = js(b, image)
    lo, hi, value = js(b, "['min', 'max', 'value'].map(k => +$('#smooth')[k])")
    target = 25
    b.set_range("#smooth", target)
    time.sleep(0.3)
    b.settle()
    report(js(b, image) != before, "#smooth %g -> %g redraws %s" % (value, target, canvas))
    # Evaluations are never smoothed: every drawn held-out value is one the log holds; dense series keep a faint raw line.
    got = js(b, """(() => { const runs = JSON.parse($('#qkv-data').textContent).curves.runs, logged = new Set();
        for (const r of runs) for (const [c, col] of Object.entries(r.columns)) if (c.startsWith('eval_')) col.values.forEach(v => logged.add(v));
        let evals = 0, off = 0, points = 0, raw = 0;
        for (const ch of qkvCharts) { const labels = ch.getLabels();
          labels.forEach((l, k) => { if (!k) return;
            if (/ \\(raw\\)$/.test(l)) { raw += 1; return; }
            if (!/eval_/.test(l)) return;
            evals += 1; if (ch.getOption('drawPoints', l)) points += 1;
            for (let i = 0; i < ch.numRows(); ++i) { const v = ch.getValue(i, k); if (v !== null && !logged.has(v)) off += 1; } }); }
        return [evals, off, points, raw]; })()""")
    if got[0]:
        report(got[1] == 0 and got[2] == got[0], "smoothing 25: %d held-out series drawn as logged (%d values differ), %d with points"
               % tuple(got[:3]))
    report(got[3] > 0, "smoothing 25: %d faint raw lines under the smoothed ones" % got[3])
    b.eval("(c => { c.checked = true; c.dispatchEvent(new Event('change')); })(document.querySelector('#logscale'))")
    b.settle()
    off = js(b, """(() => { let off = 0, n = 0;
        for (const ch of qkvCharts) { const [lo, hi] = ch.yAxisRange();
          for (let k = 1; k < ch.getLabels().length; ++k) for (let i = 0; i < ch.numRows(); ++i) {
            const v = ch.getValue(i, k); if (v > 0) { n += 1; if (v < lo * 0.999 || v > hi * 1.001) off += 1; } } }
        return [off, n]; })()""")
    report(off[0] == 0, "log scale: %d of %d positive values off their chart's axis" % tuple(off))
    b.eval("(c => { c.checked = false; c.dispatchEvent(new Event('change')); })(document.querySelector('#logscale'))")


def check_groups(b):
    n = count(b, "button.group")
    if n == 0:
        print("skip: no button.group on this page; group checks not applicable")
        return
    if not report(n >= 2, "%d button.group elements (need >= 2 to switch)" % n):
        return
    show_tab(b, "heads")
    state = ("[$('#view-heads').getAttribute('data-group'),"
             " $$('#view-heads .tok').map(e => e.textContent).join('|')]")
    active = js(b, "$$('button.group').findIndex(e => e.classList.contains('active')"
                   " || e.getAttribute('aria-pressed') === 'true')")
    for i in [(max(active, 0) + k) % n for k in range(1, n + 1)]:  # ends on the first
        group, labels = js(b, state)
        name = js(b, "$$('button.group')[%d].textContent.trim()" % i)
        b.click("button.group", index=i)
        b.settle()
        new_group, new_labels = js(b, state)
        what = []
        if new_group != group:
            what.append("#view-heads data-group %r -> %r" % (group, new_group))
        if new_labels != labels:
            what.append("head-view token labels changed")
        report(bool(what), "group button %d (%s): %s"
               % (i, name, "; ".join(what) or "nothing changed"))
        # The head view now shows that group's tokens: its queries and keys, from the page's own data.
        want = js(b, "(() => { const g = JSON.parse($('#qkv-data').textContent).attention.groups[%d];"
                     " return [[...new Set([g.row_seq, g.col_seq])].sort().join(' '), g.rows.length + g.cols.length]; })()" % i)
        got = js(b, "[[...new Set($$('#view-heads .tok').map(e => e.dataset.tok.split(':')[0]))].sort().join(' '),"
                    " $$('#view-heads .tok').length]")
        report(got == want, "group %d's head view shows its tokens: %r (want %r)" % (i, got, want))


def run_checks(b, page, shots, max_mb, light):
    size = os.path.getsize(page)
    start = time.monotonic()
    try:
        b.open(page)
    except (CDPError, JSError) as e:
        report(False, "page loads: %s%s" % (e, errors_text(b)))
        return
    ready_ms = js(b, "window.qkvReadyAt") or 0
    print("size: %s %.2f MB, first view drawn %.2f s after navigation (%.2f s to ready, polled)"
          % (os.path.basename(page), size / 1e6, ready_ms / 1000, time.monotonic() - start), flush=True)
    if max_mb:
        report(size <= max_mb * 1e6, "%s is %.2f MB, at most %g" % (os.path.basename(page), size / 1e6, max_mb))
    report(not b.errors, "page loads without console errors" + errors_text(b))
    stem = os.path.splitext(os.path.basename(page))[0]
    attribution = ["attribution"] if count(b, "#view-attribution") else []
    views = BASE_VIEWS + (["neurons"] if count(b, "#view-neurons") else []) + attribution + \
        (["curves"] if count(b, "#view-curves") else [])
    if light:  # the attention views are what changes with the model's shape and the prompt's length
        views = ["heads", "model", "matrix"] + attribution
    checks = [("tabs", check_tabs, (views, shots, stem, light)), ("heads first", check_heads_first, ()),
              ("model fill", check_model_fill, ())]
    if not light:
        checks += [("head toggle", check_head_toggle, ()), ("hover", check_hover, ()), ("curves", check_curves, ()),
                   ("groups", check_groups, ()), ("palette", check_palette, ()), ("colour scale", check_colour_scale, ()),
                   ("neurons", check_neurons, ()), ("attribution", check_attribution, ())]
    for name, check, extra in checks:
        try:
            check(b, *extra)
        except (Missing, CDPError, JSError) as e:
            report(False, "%s: %s" % (name, e))
    report(not b.errors, "no console errors after all interactions" + errors_text(b))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("pages", nargs="+", metavar="page")
    ap.add_argument("--shots", required=True, metavar="DIR", help="where the screenshots go")
    ap.add_argument("--max-mb", type=float, default=0, help="fail a page larger than this")
    ap.add_argument("--light", action="append", default=[], metavar="PAGE",
                    help="also check PAGE: its size, first view, attention tabs (screenshots), model view and head view only")
    args = ap.parse_intermixed_args()
    os.makedirs(args.shots, exist_ok=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("terminated"))  # clean up chromium
    start = time.monotonic()
    try:
        with Browser() as b:
            for page in args.pages + args.light:
                print("page: %s" % page, flush=True)
                run_checks(b, page, args.shots, args.max_mb, page in args.light and page not in args.pages)
    except CDPError as e:  # chromium failed to start, or died or hung
        report(False, "browser: %s" % e)
    print("%d check(s) failed; %.1f s" % (len(failures), time.monotonic() - start))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
