#!/usr/bin/env python3
"""Headless-Chromium checks for a qkv explorer page.

    python3 explore_test.py PAGE.html SCREENSHOT_DIR [--kind gpt|seq2seq|text]

Prints one "ok: ..." / "FAIL: ..." line per check ("skip: ..." for a part
the page does not have) and exits 1 if any check failed. Screenshots of each
view go to SCREENSHOT_DIR/<page stem>-<view>.png. --kind is informational:
the checks follow what the page holds.
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
    toggle = '.head-toggle[data-head="0"]'
    line0 = '#view-heads .attn-line[data-head="0"]'
    others = '#view-heads .attn-line:not([data-head="0"])'
    show_tab(b, "heads")
    require(b, toggle, line0)
    state = ("[nShown(%s, $('#view-heads')), nShown(%s, $('#view-heads')),"
             " $(%s).classList.contains('off')]" % (q(line0), q(others), q(toggle)))
    n0, n_other, off = js(b, state)
    if not report(n0 > 0 and not off, "head 0 starts on with %d displayed lines" % n0):
        return
    b.click(toggle)
    after0, after_other, off = js(b, state)
    report(off, "clicking %s adds class 'off'" % toggle)
    report(after0 == 0, "head 0 off hides its lines (%d of %d still displayed)" % (after0, n0))
    if count(b, ".head-toggle") >= 2:
        report(n_other > 0 and after_other == n_other, "other heads' lines stay displayed"
               " (%d before, %d after)" % (n_other, after_other))
    b.click(toggle)
    back0, _, off = js(b, state)
    report(not off and back0 == n0, "clicking again restores head 0 (%d of %d lines, off=%s)"
           % (back0, n0, off))


def check_hover(b):
    show_tab(b, "heads")
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


def check_tabs(b, views, shots, stem):
    """Each tab shows only its view. The model's zoom and the graph's layout
    are checked right after their tab's screenshot (the graph's first view)."""
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
            if view == "model":
                check_zoom(b, os.path.join(shots, stem + "-model-zoom.png"))
            if view == "graph":
                check_graph(b)
        except Missing as e:
            report(False, "%s view: %s" % (view, e))


def check_zoom(b, png):
    require(b, "#view-model .cell", "#zoom")
    b.click("#view-model .cell")
    b.settle()
    opened = js(b, "shown($('#zoom'))")
    b.screenshot(png)
    report(opened, "clicking the first #view-model .cell displays #zoom (screenshot %s)"
           % os.path.basename(png))
    require(b, "#zoom .close")
    b.click("#zoom .close")
    b.settle()
    report(not js(b, "shown($('#zoom'))"), "#zoom .close hides #zoom")


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
    module = "#graph-svg g.module.collapsed"
    require(b, "#graph-svg", "#graph-svg g.viewport")
    fits, desc = graph_fit(b)
    report(fits, "first graph view fits: " + desc)
    require(b, module)
    before = count(b, "#graph-svg g.node")
    b.click(module)
    b.wait_for("document.querySelectorAll('#graph-svg g.node').length > %d" % before, 2.0)
    after = count(b, "#graph-svg g.node")
    report(after > before, "expanding the first %s: g.node count %d -> %d"
           % (module, before, after))
    fits, desc = graph_fit(b)
    report(fits, "graph after expansion fits: " + desc)


def check_curves(b):
    canvas = "#view-curves .chart canvas"
    if count(b, "#view-curves") == 0:
        print("skip: no #view-curves on this page; curve checks not applicable")
        return
    show_tab(b, "curves")
    require(b, canvas, "#smooth")
    image = "$(%s).toDataURL()" % q(canvas)
    before = js(b, image)
    lo, hi, value = js(b, "['min', 'max', 'value'].map(k => +$('#smooth')[k])")
    target = hi if value != hi else lo
    b.set_range("#smooth", target)
    time.sleep(0.3)
    b.settle()
    report(js(b, image) != before, "#smooth %g -> %g redraws %s" % (value, target, canvas))
    report(count(b, "#logscale") > 0, "#logscale exists")


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


def run_checks(b, page, shots):
    try:
        b.open(page)
    except (CDPError, JSError) as e:
        report(False, "page loads: %s%s" % (e, errors_text(b)))
        return
    report(not b.errors, "page loads without console errors" + errors_text(b))
    stem = os.path.splitext(os.path.basename(page))[0]
    views = BASE_VIEWS + (["curves"] if count(b, "#view-curves") else [])
    checks = [("head toggle", check_head_toggle, ()), ("hover", check_hover, ()),
              ("tabs", check_tabs, (views, shots, stem)), ("curves", check_curves, ()),
              ("groups", check_groups, ())]
    for name, check, extra in checks:
        try:
            check(b, *extra)
        except (Missing, CDPError, JSError) as e:
            report(False, "%s: %s" % (name, e))
    report(not b.errors, "no console errors after all interactions" + errors_text(b))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("page")
    ap.add_argument("shots", metavar="screenshot_dir")
    ap.add_argument("--kind", choices=["gpt", "seq2seq", "text"], help="informational")
    args = ap.parse_args()
    os.makedirs(args.shots, exist_ok=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("terminated"))  # clean up chromium
    start = time.monotonic()
    print("page: %s (kind: %s)" % (args.page, args.kind or "unspecified"))
    try:
        with Browser() as b:
            run_checks(b, args.page, args.shots)
    except CDPError as e:  # chromium failed to start, or died or hung
        report(False, "browser: %s" % e)
    print("%d check(s) failed; %.1f s" % (len(failures), time.monotonic() - start))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
