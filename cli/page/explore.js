// The qkv page: draws every view from the JSON in #qkv-data (written by
// cli/page.cpp). Views: heads (bertviz's head view: lines from each
// query to the keys it attends to, a colour per head), model (every layer x
// head, weights or dL/dP, with each head's importance), matrix (one layer's
// heatmaps, masked cells hatched), graph (the autograd graph laid out by
// dagre, modules expanded by clicking) and curves (dygraphs). Hovering a token
// highlights it in every view. tests/browser/explore_test.py drives it.
'use strict';
(function () {
  const data = JSON.parse(document.getElementById('qkv-data').textContent);
  const app = document.getElementById('app');
  const PALETTE = ['#1f77b4', '#d62728', '#2ca02c', '#ff7f0e', '#9467bd', '#8c564b', '#e377c2', '#17becf',
    '#bcbd22', '#7f7f7f', '#393b79', '#637939', '#8c6d31', '#843c39', '#7b4173', '#3182bd'];
  const headColour = (h) => PALETTE[h % PALETTE.length];
  // 1st, 2nd, 3rd, 4th, ..., 11th, 12th, 13th, 21st.
  function ordinal(k) {
    const t = k % 100, suffix = t >= 11 && t <= 13 ? 'th' : k % 10 === 1 ? 'st' : k % 10 === 2 ? 'nd' : k % 10 === 3 ? 'rd' : 'th';
    return k + suffix;
  }
  const state = { view: null, group: 0, layer: 0, off: new Set(), quantity: 'weights', scale: 'map', hl: null };

  // ---- small helpers ----
  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === 'class') e.className = v; else if (k === 'text') e.textContent = v; else e.setAttribute(k, v);
    }
    for (const c of children) if (c !== null && c !== undefined) e.append(c);
    return e;
  }
  const SVGNS = 'http://www.w3.org/2000/svg';
  function svg(tag, attrs) {
    const e = document.createElementNS(SVGNS, tag);
    for (const [k, v] of Object.entries(attrs || {})) if (k === 'text') e.textContent = v; else e.setAttribute(k, v);
    return e;
  }
  // A token as shown: a visible mark for a space (the label itself is escaped by qkv).
  const shown = (t) => (t === '' ? '∅' : t.replace(/ /g, '␣'));
  const fmt = (v, digits) => (v === null || v === undefined ? 'n/a' : Number(v).toPrecision(digits));
  const tip = el('div', { id: 'tip' });
  function showTip(ev, text) {
    tip.textContent = text;
    tip.style.display = 'block';
    tip.style.left = Math.min(ev.clientX + 14, window.innerWidth - 260) + 'px';
    tip.style.top = ev.clientY + 14 + 'px';
  }
  const hideTip = () => { tip.style.display = 'none'; };

  // ---- the token highlight shared by every view ----
  function highlight(id) {
    state.hl = id;
    for (const e of document.querySelectorAll('.tok.hl')) e.classList.remove('hl');
    if (id !== null) for (const e of document.querySelectorAll('.tok[data-tok="' + id + '"]')) e.classList.add('hl');
  }
  function hoverable(e, id) {
    e.classList.add('tok');
    e.setAttribute('data-tok', id);
    e.addEventListener('mouseenter', () => highlight(id));
    e.addEventListener('mouseleave', () => highlight(null));
    return e;
  }

  // ---- the page's frame: title, tabs, views ----
  const att = data.attention && data.attention.groups && data.attention.groups.length ? data.attention : null;
  const views = [];
  if (att) views.push(['heads', 'Head view'], ['model', 'Model view'], ['matrix', 'Matrix view']);
  if (data.graph) views.push(['graph', 'Graph']);
  if (data.curves) views.push(['curves', 'Training curves']);
  document.body.append(tip);
  app.append(el('header', {}, el('h1', { text: data.title || 'qkv' }), el('p', { text: data.subtitle || '' })));
  const nav = el('nav');
  app.append(nav);
  const groupBar = el('div', { id: 'groups' });
  if (att && att.groups.length > 1) app.append(groupBar);
  const sections = {};
  for (const [id, name] of views) {
    const b = el('button', { class: 'tab', 'data-view': id, text: name });
    b.addEventListener('click', () => show(id));
    nav.append(b);
    sections[id] = el('section', { class: 'view', id: 'view-' + id });
    app.append(sections[id]);
  }
  const zoom = el('div', { id: 'zoom' });
  app.append(zoom);
  function show(id) {
    state.view = id;
    for (const b of nav.querySelectorAll('.tab')) b.classList.toggle('active', b.dataset.view === id);
    for (const [v, s] of Object.entries(sections)) s.classList.toggle('shown', v === id);
    groupBar.style.display = ['heads', 'model', 'matrix'].includes(id) ? 'flex' : 'none';
    if (id === 'graph') graphView.fit();
    if (id === 'curves') curvesView.resize();
  }

  // ---- attention: groups (tabs of a Seq2Seq), layers, heads ----
  const group = () => att.groups[state.group];
  const tokId = (seq, i) => seq + ':' + i;
  function renderAttention() {
    zoom.style.display = 'none';  // it showed a map of the views as they were
    for (const s of ['heads', 'model', 'matrix']) sections[s].setAttribute('data-group', state.group);
    renderHeads();
    renderModel();
    renderMatrix();
    highlight(state.hl);
  }
  if (att && att.groups.length > 1) {
    groupBar.append(el('span', { text: 'attention: ' }));
    att.groups.forEach((g, i) => {
      const b = el('button', { class: 'group', 'data-group': i, text: g.name });
      b.addEventListener('click', () => {
        state.group = i;
        state.layer = Math.min(state.layer, g.layers.length - 1);
        for (const x of groupBar.querySelectorAll('.group')) x.classList.toggle('active', x === b);
        renderAttention();
      });
      groupBar.append(b);
    });
    groupBar.querySelector('.group').classList.add('active');
  }
  function layerSelect(id) {
    const s = el('select', { id: id });
    group().layers.forEach((l, i) => s.append(el('option', { value: i, text: l.name })));
    s.value = state.layer;
    s.addEventListener('change', () => { state.layer = Number(s.value); renderAttention(); });
    return el('label', {}, 'layer ', s);
  }
  function quantitySelect(id) {
    const s = el('select', { id: id });
    s.append(el('option', { value: 'weights', text: 'attention weights P' }));
    if (group().layers[0].grad) s.append(el('option', { value: 'grad', text: 'dL/dP (gradient into the weights)' }));
    s.value = state.quantity;
    s.addEventListener('change', () => { state.quantity = s.value; renderAttention(); });
    return el('label', {}, 'show ', s);
  }
  function headToggles() {
    const box = el('div', { class: 'controls' }, 'heads (click to hide or show):');
    for (let h = 0; h < att.heads; ++h) {
      const t = el('span', { class: 'head-toggle' + (state.off.has(h) ? ' off' : ''), 'data-head': h },
        el('span', { class: 'swatch', style: 'background:' + headColour(h) }), 'head ' + h);
      t.addEventListener('click', () => {
        if (state.off.has(h)) state.off.delete(h); else state.off.add(h);
        t.classList.toggle('off', state.off.has(h));
        for (const line of sections.heads.querySelectorAll('.attn-line[data-head="' + h + '"]'))
          line.style.display = state.off.has(h) ? 'none' : '';
      });
      box.append(t);
    }
    return box;
  }

  // Head view: queries on the left, keys on the right, a line per (head, query, key) of weight >= 0.02.
  function renderHeads() {
    const s = sections.heads, g = group(), layer = g.layers[state.layer];
    s.replaceChildren(el('div', { class: 'controls' }, layerSelect('layer')), headToggles(),
      el('p', { class: 'note', text: 'Each line joins a query (left) to a key (right); its opacity is the weight, and ' +
        'weights under 0.02 are not drawn. Hover a token to see only its lines and to mark it in every view.' }));
    const rows = g.rows.length, cols = g.cols.length, lineH = 20, top = 24, width = 560;
    const height = top + Math.max(rows, cols) * lineH + 10;
    const pic = svg('svg', { class: 'head-view', width: width, height: height });
    const xl = 150, xr = width - 150;
    // The captions over the token columns they name (they once sat at the picture's edges).
    pic.append(svg('text', { x: xl - 8, y: 14, text: 'queries', 'font-size': 11, fill: '#666', 'text-anchor': 'end' }),
      svg('text', { x: xr + 8, y: 14, text: 'keys', 'font-size': 11, fill: '#666' }));
    const lines = svg('g');
    pic.append(lines);
    for (let h = 0; h < att.heads; ++h) {
      const w = layer.weights[h];
      for (let i = 0; i < rows; ++i) for (let j = 0; j < cols; ++j) {
        const v = w[i][j];
        if (v === null || v < 0.02) continue;
        const y1 = top + i * lineH + 6, y2 = top + j * lineH + 6;
        const p = svg('path', { class: 'attn-line', 'data-head': h, 'data-q': i, 'data-k': j,
          d: 'M' + xl + ',' + y1 + ' C' + (xl + 80) + ',' + y1 + ' ' + (xr - 80) + ',' + y2 + ' ' + xr + ',' + y2,
          stroke: headColour(h), 'stroke-width': 1.5 + 2 * v, 'stroke-opacity': Math.min(1, 0.1 + v) });
        if (state.off.has(h)) p.style.display = 'none';
        lines.append(p);
      }
    }
    const focus = (side, i) => {
      for (const p of lines.children) {
        const mine = i === null || Number(p.getAttribute(side === 'q' ? 'data-q' : 'data-k')) === i;
        p.style.visibility = mine ? '' : 'hidden';
      }
    };
    const label = (text, x, y, anchor, seq, i, side) => {
      const t = hoverable(svg('text', { x: x, y: y, 'text-anchor': anchor, 'font-family': 'monospace', 'font-size': 13,
        text: shown(text) }), tokId(seq, i));
      t.addEventListener('mouseenter', () => focus(side, i));
      t.addEventListener('mouseleave', () => focus(side, null));
      return t;
    };
    g.rows.forEach((t, i) => pic.append(label(t, xl - 8, top + i * lineH + 10, 'end', g.row_seq, i, 'q')));
    g.cols.forEach((t, j) => pic.append(label(t, xr + 8, top + j * lineH + 10, 'start', g.col_seq, j, 'k')));
    s.append(pic);
  }

  // Colours: weights white to blue on [0, top]; gradients blue-white-red, symmetric around 0.
  function colour(v, top, signed) {
    if (v === null) return '#ccc';
    const t = Math.max(-1, Math.min(1, top > 0 ? v / top : 0));
    if (!signed) {  // white to #2a5db0
      const u = Math.max(0, t), mix = (a) => Math.round(255 + (a - 255) * u);
      return 'rgb(' + mix(42) + ',' + mix(93) + ',' + mix(176) + ')';
    }
    const c = Math.round(255 * (1 - Math.abs(t)));
    return t >= 0 ? 'rgb(255,' + c + ',' + c + ')' : 'rgb(' + c + ',' + c + ',255)';
  }
  const mapOf = (layer, h) => (state.quantity === 'grad' ? layer.grad[h] : layer.weights[h]);
  function largest(m, masked) {
    let top = 0;
    m.forEach((row, i) => row.forEach((v, j) => {
      if (v !== null && !(masked.length && masked[i][j])) top = Math.max(top, Math.abs(v));
    }));
    return top;
  }
  function sharedTop() {
    let top = 0;
    for (const layer of group().layers) for (let h = 0; h < att.heads; ++h) top = Math.max(top, largest(mapOf(layer, h), group().masked));
    return top;
  }

  // Model view: every layer x head as a small picture; click one to open it large.
  function renderModel() {
    const s = sections.model, g = group(), signed = state.quantity === 'grad';
    const strip = el('div', { class: 'strip' });
    g.rows.forEach((t, i) => strip.append(hoverable(el('span', { text: shown(t) }), tokId(g.row_seq, i))));
    if (g.col_seq !== g.row_seq) {
      strip.append(el('span', { text: '  keys:', class: 'note' }));
      g.cols.forEach((t, j) => strip.append(hoverable(el('span', { text: shown(t) }), tokId(g.col_seq, j))));
    }
    s.replaceChildren(el('div', { class: 'controls' }, quantitySelect('quantity')), strip);
    const grid = el('div', { class: 'grid', style: 'grid-template-columns: 90px repeat(' + att.heads + ', max-content)' });
    grid.append(el('div'));
    for (let h = 0; h < att.heads; ++h) grid.append(el('div', { class: 'rowhead', style: 'color:' + headColour(h), text: 'head ' + h }));
    const n = Math.max(g.rows.length, g.cols.length);
    const top = sharedTop(), px = Math.max(1, Math.min(8, Math.floor(120 / n)));
    // Every head in the window's width (8 heads of a 170-token prompt once ran 2,800 px wide): a map wider
    // than its share is drawn smaller; click it for the full map.
    const share = Math.max(60, Math.floor(((document.documentElement.clientWidth || 1200) - 150) / att.heads) - 24);
    g.layers.forEach((layer, l) => {
      grid.append(el('div', { class: 'rowhead', text: layer.name }));
      for (let h = 0; h < att.heads; ++h) {
        const m = mapOf(layer, h), c = el('canvas', { width: g.cols.length * px, height: g.rows.length * px });
        if (c.width > share) c.style.width = share + 'px', c.style.height = Math.round(share * c.height / c.width) + 'px';
        const ctx = c.getContext('2d'), t = state.scale === 'shared' ? top : largest(m, g.masked);
        m.forEach((row, i) => row.forEach((v, j) => {
          ctx.fillStyle = g.masked.length && g.masked[i][j] ? '#e6e6e6' : colour(v, t, signed);
          ctx.fillRect(j * px, i * px, px, px);
        }));
        const cell = el('div', { class: 'cell', 'data-layer': l, 'data-head': h }, c, layer.importance
          ? el('div', { text: (share < 150 ? '' : 'importance ') + fmt(layer.importance[h], 3), title: 'importance' })
          : null);
        cell.addEventListener('click', () => openZoom(l, h));
        grid.append(cell);
      }
    });
    s.append(grid);
    if (g.layers[0].importance) s.append(importanceTable(), projectionTable());
  }
  function importanceTable() {
    const g = group(), t = el('table', { class: 'nums', id: 'importance' });
    const head = el('tr', {}, el('th', { text: 'layer' }));
    for (let h = 0; h < att.heads; ++h) head.append(el('th', { text: 'head ' + h }));
    t.append(head);
    let top = 0;
    for (const layer of g.layers) for (const v of layer.importance) top = Math.max(top, v || 0);
    for (const layer of g.layers) {
      const tr = el('tr', {}, el('th', { text: layer.name }));
      layer.importance.forEach((v, h) => {
        const gate = layer.gate_grad[h];
        const td = el('td', { text: fmt(v, 3), title: gate === null ? 'not finite' : 'Σ P ⊙ dL/dP = ' + fmt(gate, 4) +
          ': removing this head changes the loss by about ' + fmt(-gate, 3) });
        td.style.background = colour(v, top, false);
        if (top > 0 && v > 0.55 * top) td.style.color = '#fff';  // black on the darker blues was hard to read
        tr.append(td);
      });
      t.append(tr);
    }
    const loss = att.loss ? att.loss.what + ' = ' + fmt(att.loss.value, 4) + '. ' : '';
    return el('div', {}, el('h3', { text: 'Head importance' }),
      el('p', { class: 'note', text: loss + 'A head\'s importance is |Σ P ⊙ dL/dP|, summed over its map: P are its attention ' +
        'weights and dL/dP their gradient from this prompt\'s loss, both from qkv\'s own backward pass. Σ P ⊙ dL/dP is ' +
        'dL/dξ for a gate ξ multiplying the head\'s output (ξ·P·V at ξ = 1), so removing the head changes the loss by ' +
        'about −Σ P ⊙ dL/dP (Michel et al., 2019). qkv explore --check compares both with finite differences.' }), t);
  }
  function projectionTable() {
    const rows = att.projections || [];
    const t = el('table', { class: 'nums', id: 'projections' });
    const head = el('tr', {}, el('th', { text: 'module' }));
    for (let h = 0; h < att.heads; ++h) for (const k of ['q', 'k', 'v', 'out']) head.append(el('th', { text: 'h' + h + ' ' + k }));
    t.append(head);
    for (const r of rows) {
      const tr = el('tr', {}, el('th', { text: r.module }));
      for (let h = 0; h < att.heads; ++h) for (const k of ['q', 'k', 'v', 'out']) tr.append(el('td', { text: fmt(r[k][h], 3) }));
      t.append(tr);
    }
    return el('div', {}, el('h3', { text: 'Gradient norm of each head\'s projections' }),
      el('p', { class: 'note', text: 'Head h owns rows h·d to (h+1)·d of q_proj, k_proj and v_proj (weight and bias) and ' +
        'those input columns of out_proj (whose bias belongs to no head). k is the key weight alone: the key bias\'s ' +
        'gradient is exactly zero (see the graph view).' }),
      el('div', { class: 'scroll' }, t));  // 4 columns a head: 8 heads are wider than a window, and scroll alone
  }

  // One map as an SVG heatmap with labels, masked cells hatched, and tooltips.
  function heatmap(layer, h, cellSize) {
    const g = group(), m = mapOf(layer, h), signed = state.quantity === 'grad';
    const rows = g.rows.length, cols = g.cols.length, left = 60, top = 56;
    const t = state.scale === 'shared' ? sharedTop() : largest(m, g.masked);
    const pic = svg('svg', { width: left + cols * cellSize + 10, height: top + rows * cellSize + 10, class: 'heatmap' });
    const defs = svg('defs'), pat = svg('pattern', { id: 'hatch', width: 6, height: 6, patternUnits: 'userSpaceOnUse',
      patternTransform: 'rotate(45)' });
    pat.append(svg('rect', { width: 6, height: 6, fill: '#f0f0f0' }), svg('line', { x1: 0, y1: 0, x2: 0, y2: 6, stroke: '#bbb', 'stroke-width': 2 }));
    defs.append(pat);
    pic.append(defs);
    const what = signed ? 'dL/dP' : 'weight';
    m.forEach((row, i) => row.forEach((v, j) => {
      const masked = g.masked.length && g.masked[i][j];
      const r = svg('rect', { x: left + j * cellSize, y: top + i * cellSize, width: cellSize, height: cellSize,
        fill: masked ? 'url(#hatch)' : colour(v, t, signed), class: masked ? 'masked' : 'w' });
      r.addEventListener('mousemove', (ev) => showTip(ev, 'query ' + i + ' ‘' + shown(g.rows[i]) + '’ → key ' + j + ' ‘' +
        shown(g.cols[j]) + '’\n' + (masked ? 'masked (the query cannot see this key)' : what + ' ' + fmt(v, 3))));
      r.addEventListener('mouseenter', () => {
        highlight(null);
        for (const e of document.querySelectorAll('.tok[data-tok="' + tokId(g.row_seq, i) + '"], .tok[data-tok="' +
          tokId(g.col_seq, j) + '"]')) e.classList.add('hl');
      });
      r.addEventListener('mouseleave', () => { hideTip(); highlight(null); });
      pic.append(r);
    }));
    if (g.split > 0) {
      const x = left + g.split * cellSize, y = top + g.split * cellSize;
      pic.append(svg('line', { x1: x, y1: top, x2: x, y2: top + rows * cellSize, stroke: '#c00', 'stroke-width': 1.5 }),
        svg('line', { x1: left, y1: y, x2: left + cols * cellSize, y2: y, stroke: '#c00', 'stroke-width': 1.5 }));
    }
    // Labels no smaller than 9 px: where cells are smaller (a long prompt), every k-th token is labelled
    // (6 px labels on 6 px cells could not be read); each cell's tooltip still names both tokens.
    const every = labelEvery(cellSize), fs = Math.min(12, Math.max(9, cellSize));
    g.rows.forEach((tk, i) => { if (i % every === 0) pic.append(hoverable(svg('text', { x: left - 4,
      y: top + i * cellSize + cellSize * 0.5 + fs * 0.35, 'text-anchor': 'end', 'font-family': 'monospace', 'font-size': fs,
      text: shown(tk) }), tokId(g.row_seq, i))); });
    g.cols.forEach((tk, j) => {
      if (j % every) return;
      const x = left + j * cellSize + cellSize * 0.5 + fs * 0.2, y = top - 4;
      pic.append(hoverable(svg('text', { x: x, y: y, transform: 'rotate(-60 ' + x + ' ' + y + ')', 'font-family': 'monospace',
        'font-size': fs, text: shown(tk) }), tokId(g.col_seq, j)));
    });
    pic.dataset.top = t;  // the colour scale's largest value, for the map's title
    return pic;
  }
  const labelEvery = (cellSize) => (cellSize >= 9 ? 1 : Math.ceil(9 / cellSize));
  function mapBox(layer, h, cellSize) {
    const imp = layer.importance ? ' · importance ' + fmt(layer.importance[h], 3) : '';
    const pic = heatmap(layer, h, cellSize), signed = state.quantity === 'grad', top = Number(pic.dataset.top);
    // What the darkest colour means on this map (each map may have its own scale).
    const scale = top > 0 ? (signed ? ' · ±' : ' · darkest ') + fmt(top, 3) : '';
    return el('div', { class: 'map' }, el('h3', { style: 'color:' + headColour(h), text: layer.name + ', head ' + h + imp + scale }),
      pic);
  }
  function renderMatrix() {
    const s = sections.matrix, g = group(), layer = g.layers[state.layer];
    const scale = el('select', { id: 'scale' });
    scale.append(el('option', { value: 'map', text: 'each map its own' }), el('option', { value: 'shared', text: 'shared by all maps' }));
    scale.value = state.scale;
    scale.addEventListener('change', () => { state.scale = scale.value; renderAttention(); });
    s.replaceChildren(el('div', { class: 'controls' }, layerSelect('matrix-layer'), quantitySelect('matrix-quantity'),
      el('label', {}, 'colour scale ', scale)),
    el('p', { class: 'note', text: 'Rows are queries, columns keys. Hatched cells are masked: the query cannot see that key' +
      (g.split > 0 ? '; the red lines mark where the answer starts' : '') + '. Weights are white (0) to blue (the scale\'s ' +
      'largest); gradients blue (negative) to red (positive). Hover a cell for its value.' }));
    const n = Math.max(g.rows.length, g.cols.length), cellSize = Math.max(6, Math.min(28, Math.floor(420 / n)));
    if (labelEvery(cellSize) > 1) s.append(el('p', { class: 'note', text: 'Every ' + ordinal(labelEvery(cellSize)) +
      ' token is labelled (the cells are ' + cellSize + ' px); hover a cell for its two tokens.' }));
    const maps = el('div', { class: 'maps' });
    for (let h = 0; h < att.heads; ++h) maps.append(mapBox(layer, h, cellSize));
    s.append(maps);
    if (att.note) s.append(el('p', { class: 'note', text: att.note + '.' }));
    // A classifier's [CLS] row drawn by qkv (over the image, for a ViT): SVG it wrote and escaped.
    for (const f of att.figures || []) if (f.title === layer.name) {
      const d = el('div', { class: 'figure' });
      d.innerHTML = f.svg;
      s.append(d);
    }
  }
  function openZoom(l, h) {
    const g = group(), n = Math.max(g.rows.length, g.cols.length);
    const close = el('span', { class: 'close', text: 'close ✕' });
    close.addEventListener('click', () => { zoom.style.display = 'none'; });
    const cellSize = Math.max(8, Math.min(40, Math.floor(700 / n))), every = labelEvery(cellSize);
    zoom.replaceChildren(close, every > 1 ? el('p', { class: 'note', text: 'Every ' + ordinal(every) +
      ' token is labelled; hover a cell for its two tokens.' }) : null, mapBox(g.layers[l], h, cellSize));
    zoom.style.display = 'block';
  }

  // ---- the graph: dagre lays out what is expanded; modules open by clicking ----
  const graphView = (function () {
    if (!data.graph) return { fit() {} };
    const nodes = data.graph.nodes, s = sections.graph;
    const expanded = new Set();
    // A module path and its ancestors: "blocks.0.attn" -> ["blocks", "blocks.0", "blocks.0.attn"].
    const ancestors = (scope) => { const p = scope ? scope.split('.') : []; return p.map((_, i) => p.slice(0, i + 1).join('.')); };
    const childCount = {};
    nodes.forEach((n) => { for (const a of ancestors(n.scope)) childCount[a] = (childCount[a] || 0) + 1; });
    // What stands for node i: the outermost collapsed module around it, or itself.
    function standIn(i) {
      for (const a of ancestors(nodes[i].scope)) if (!expanded.has(a)) return 'm:' + a;
      return 'n:' + i;
    }
    const pic = svg('svg', { id: 'graph-svg' });
    const defs = svg('defs'), marker = svg('marker', { id: 'arrow', viewBox: '0 0 10 10', refX: 10, refY: 5, markerWidth: 6,
      markerHeight: 6, orient: 'auto-start-reverse' });
    marker.append(svg('path', { d: 'M 0 0 L 10 5 L 0 10 z', fill: '#888' }));
    defs.append(marker);
    const port = svg('g', { class: 'viewport' });
    pic.append(defs, port);
    let box = { x: 0, y: 0, w: 100, h: 100 };
    const root = nodes.length - 1;
    function draw() {
      const g = new dagre.graphlib.Graph({ compound: true });
      g.setGraph({ rankdir: 'TB', nodesep: 14, ranksep: 26, marginx: 10, marginy: 10 });
      g.setDefaultEdgeLabel(() => ({}));
      const seen = new Set();
      nodes.forEach((n, i) => {
        const id = standIn(i);
        if (seen.has(id)) return;
        seen.add(id);
        if (id.startsWith('m:')) {
          const m = id.slice(2);
          g.setNode(id, { label: m + ' ▸', sub: childCount[m] + ' nodes', width: Math.max(90, 7 * m.length + 30), height: 34, module: m });
        } else {
          const label = n.label;
          g.setNode(id, { label: label, sub: '[' + n.shape.join(', ') + ']', width: Math.max(70, 7 * Math.max(label.length, 2 + 4 * n.shape.length)),
            height: 34, node: i });
        }
        // The open modules around it, from the outside in, up to the first closed one: its clusters.
        const parents = [];
        for (const a of ancestors(n.scope)) { if (!expanded.has(a)) break; parents.push(a); }
        parents.forEach((a, k) => {
          const cid = 'c:' + a;
          if (!g.hasNode(cid)) g.setNode(cid, { cluster: a });
          if (k > 0) g.setParent(cid, 'c:' + parents[k - 1]);
        });
        if (parents.length) g.setParent(id, 'c:' + parents[parents.length - 1]);
      });
      nodes.forEach((n, i) => n.inputs.forEach((j) => {
        const a = standIn(j), b = standIn(i);
        if (a !== b && !g.hasEdge(a, b)) g.setEdge(a, b);
      }));
      dagre.layout(g);
      port.replaceChildren();
      for (const id of g.nodes()) {
        const v = g.node(id);
        if (!v.cluster) continue;
        const c = svg('g', { class: 'cluster' });
        c.append(svg('rect', { x: v.x - v.width / 2, y: v.y - v.height / 2, width: v.width, height: v.height, rx: 6 }),
          svg('text', { x: v.x - v.width / 2 + 6, y: v.y - v.height / 2 + 12, text: v.cluster + ' ▾', fill: '#555' }));
        c.style.cursor = 'pointer';
        c.addEventListener('click', (ev) => { if (ev.target === c.firstChild) { expanded.delete(v.cluster); draw(); fit(); } });
        port.append(c);
      }
      for (const e of g.edges()) {
        const pts = g.edge(e).points;
        port.append(svg('path', { class: 'edge', d: 'M' + pts.map((p) => p.x + ',' + p.y).join(' L') }));
      }
      for (const id of g.nodes()) {
        const v = g.node(id);
        if (v.cluster) continue;
        const x = v.x - v.width / 2, y = v.y - v.height / 2;
        let shape, tipText, gEl;
        if (v.module !== undefined) {
          gEl = svg('g', { class: 'module collapsed', 'data-scope': v.module });
          shape = svg('rect', { x: x, y: y, width: v.width, height: v.height, rx: 8 });
          tipText = 'module ' + v.module + ': ' + childCount[v.module] + ' nodes. Click to open it.';
          gEl.addEventListener('click', () => { expanded.add(v.module); draw(); fit(); });
        } else {
          const n = nodes[v.node];
          gEl = svg('g', { class: 'node', 'data-node': v.node });
          const leaf = !n.op;
          shape = leaf ? svg('ellipse', { cx: v.x, cy: v.y, rx: v.width / 2, ry: v.height / 2, fill: n.name ? '#e6f2e6' : '#f3f3f3' })
            : svg('rect', { x: x, y: y, width: v.width, height: v.height, rx: 3, fill: v.node === root ? '#ffe3b3' : '#fff' });
          tipText = (leaf ? (n.name ? 'parameter ' + n.name : 'input') : n.label + '  (engine op: ' + n.op + ')') +
            '\nshape [' + n.shape.join(', ') + ']\n|grad| ' + fmt(n.grad, 3) + (n.scope ? '\nmodule ' + n.scope : '');
        }
        gEl.append(shape, svg('text', { x: v.x, y: v.y - 2, 'text-anchor': 'middle', text: v.label }),
          svg('text', { x: v.x, y: v.y + 11, 'text-anchor': 'middle', fill: '#666', text: v.sub }));
        gEl.addEventListener('mousemove', (ev) => showTip(ev, tipText));
        gEl.addEventListener('mouseleave', hideTip);
        port.append(gEl);
      }
      const size = g.graph();
      box = { x: 0, y: 0, w: Math.max(size.width || 100, 50), h: Math.max(size.height || 100, 50) };
    }
    // The first view, and every view after an expansion: the whole graph, fitted to the window.
    function fit() {
      const rect = pic.getBoundingClientRect();
      const height = Math.max(240, window.innerHeight - (rect.top > 0 ? rect.top : 160) - 12);
      pic.setAttribute('height', height);
      pic.setAttribute('viewBox', box.x + ' ' + box.y + ' ' + box.w + ' ' + box.h);
      pic.setAttribute('preserveAspectRatio', 'xMidYMid meet');
    }
    // Wheel zooms around the pointer; dragging pans.
    pic.addEventListener('wheel', (ev) => {
      ev.preventDefault();
      const vb = pic.viewBox.baseVal, r = pic.getBoundingClientRect(), k = ev.deltaY > 0 ? 1.15 : 1 / 1.15;
      const px = vb.x + ((ev.clientX - r.left) / r.width) * vb.width, py = vb.y + ((ev.clientY - r.top) / r.height) * vb.height;
      pic.setAttribute('viewBox', (px - (px - vb.x) * k) + ' ' + (py - (py - vb.y) * k) + ' ' + vb.width * k + ' ' + vb.height * k);
    }, { passive: false });
    let drag = null;
    pic.addEventListener('mousedown', (ev) => { drag = { x: ev.clientX, y: ev.clientY, vb: pic.viewBox.baseVal }; });
    window.addEventListener('mouseup', () => { drag = null; });
    pic.addEventListener('mousemove', (ev) => {
      if (!drag || ev.buttons !== 1) return;
      const r = pic.getBoundingClientRect(), vb = drag.vb, k = vb.width / r.width;
      pic.setAttribute('viewBox', (vb.x - (ev.clientX - drag.x) * k) + ' ' + (vb.y - (ev.clientY - drag.y) * k) + ' ' + vb.width + ' ' + vb.height);
      drag = { x: ev.clientX, y: ev.clientY, vb: pic.viewBox.baseVal };
    });
    const legend = el('div', { class: 'legend' },
      el('span', {}, el('span', { class: 'box', style: 'background:#fff' }), 'an op (readable name; hover: the engine\'s, shape, |grad|)'),
      el('span', {}, el('span', { class: 'box', style: 'background:#e6f2e6;border-radius:8px' }), 'a parameter'),
      el('span', {}, el('span', { class: 'box', style: 'background:#dfe8f7;border-color:#2a5db0' }), 'a module, closed: click to open'),
      el('span', {}, el('span', { class: 'box', style: 'border-style:dashed' }), 'an open module: click its frame to close'),
      el('span', {}, el('span', { class: 'box', style: 'background:#ffe3b3' }), 'the loss'));
    const reset = el('button', { text: 'fit to window' });
    reset.addEventListener('click', fit);
    const notes = el('div', { class: 'note' });
    for (const p of data.graph.no_grad) notes.append(el('p', {}, el('b', { text: p.name + ' has no gradient path. ' }), p.why));
    s.append(el('p', { class: 'note', text: 'The autograd graph of this prompt\'s forward and backward, as qkv\'s engine ' +
      'recorded it: ' + nodes.length + ' nodes. Modules start closed; click one to open it. Wheel to zoom, drag to pan.' }),
    el('div', { class: 'controls' }, legend, reset), pic, notes);
    draw();
    return { fit: fit };
  })();

  // ---- training curves: dygraphs, runs overlaid, one shared axis for the per-layer norms ----
  const curvesView = (function () {
    if (!data.curves) return { resize() {} };
    const s = sections.curves, runs = data.curves.runs, charts = [];
    const smooth = el('input', { id: 'smooth', type: 'range', min: 1, max: 50, value: 1 });
    const smoothText = el('span', { text: 'none' });
    const logscale = el('input', { id: 'logscale', type: 'checkbox' });
    s.append(el('div', { class: 'controls' }, el('label', {}, 'smoothing (rolling mean over steps) ', smooth, ' ', smoothText),
      el('label', {}, logscale, ' log scale'), el('span', { class: 'note', text: 'Drag to zoom, double-click to zoom out; hover for values.' })));
    for (const r of runs) {
      if (r.restarts.length) s.append(el('p', { class: 'note', 'data-restarts': r.restarts.length, text: r.name + ': the log starts again ' +
        (r.restarts.length === 1 ? 'once' : r.restarts.length + ' times') + ' (first at step ' + r.restarts[0] + '): a run resumed ' +
        'from an earlier checkpoint. Where steps repeat, the later rows are drawn.' }));
      if (r.left_out) s.append(el('p', { class: 'note', 'data-left-out': r.left_out.count, text: r.name + ': ' + r.left_out.count +
        ' more columns are not drawn (at most ' + r.left_out.limit + '): ' + r.left_out.first + ' to ' + r.left_out.last + '.' }));
    }
    if (data.curves_note) s.append(el('p', { class: 'note', text: data.curves_note }));
    const box = el('div', { class: 'charts' });
    s.append(box);
    // Chart specs: [title, key, [[series label, run, column, colour, dash]...]]. A run keeps its colour on every
    // chart (a series' colour once followed its place on each chart, so one colour meant different runs); on the
    // per-layer charts a layer keeps its colour and each run its dash.
    const names = new Set();
    for (const r of runs) for (const c of Object.keys(r.columns)) names.add(c);
    const runColour = (r) => PALETTE[runs.indexOf(r) % PALETTE.length];
    // Layers take colours of their own (darker tones), so none reads as a run's colour from the other charts.
    const LAYERS = ['#393b79', '#637939', '#8c6d31', '#843c39', '#7b4173', '#3182bd', '#31a354', '#756bb1', '#636363',
      '#e6550d', '#9c9ede', '#bd9e39'];
    const DASHES = [null, [8, 3], [2, 3], [8, 3, 2, 3], [14, 4]];
    const runDash = (r) => DASHES[runs.indexOf(r) % DASHES.length];
    // Layer groups in reading order (the page's columns come sorted by name): blocks.2 before blocks.10, the
    // encoder before the decoder, "other" (embeddings, final norms) last.
    const groupRank = (c) => (c.endsWith('.other') ? 2 : c.includes('.decoder.') ? 1 : 0);
    const layerOrder = (a, b) => (groupRank(a) - groupRank(b)) || a.localeCompare(b, undefined, { numeric: true });
    const order = [['loss', 'training loss'], ['eval_loss', 'held-out loss'], ['eval_accuracy', 'held-out exact match'],
      ['eval_metric', 'held-out metric'], ['lr', 'learning rate'], ['grad_norm', 'gradient norm (before clipping)'],
      ['attn_entropy', 'mean attention entropy'], ['tokens_per_s', 'tokens per second']];
    const specs = [], used = new Set();
    const has = (r, c) => Object.prototype.hasOwnProperty.call(r.columns, c);  // a column may be named "constructor"
    const label = (r, c) => (runs.length > 1 ? 'run ' + (runs.indexOf(r) + 1) + ' (' + r.name + '): ' : '') + c;
    const byRun = (c) => runs.filter((r) => has(r, c)).map((r) => [label(r, c), r, c, runColour(r), null]);
    for (const [c, title] of order) if (names.has(c)) {
      specs.push([title, c, byRun(c)]);
      used.add(c);
    }
    for (const [prefix, title] of [['grad_norm.', 'gradient norm per layer (one axis, layers overlaid)'],
      ['update_ratio.', 'update ratio |Δw|/|w| per layer (one axis, layers overlaid)']]) {
      const cols = [...names].filter((c) => c.startsWith(prefix)).sort(layerOrder);
      if (!cols.length) continue;
      const series = [];
      for (const r of runs) cols.forEach((c, k) => {
        if (has(r, c)) series.push([label(r, c.slice(prefix.length)), r, c, LAYERS[k % LAYERS.length], runDash(r)]);
      });
      specs.push([title, prefix, series]);
      cols.forEach((c) => used.add(c));
    }
    for (const c of names) if (!used.has(c)) specs.push([c, c, byRun(c)]);
    // One step range for every chart, so a held-out curve of a few points lines up with the training loss.
    let first = Infinity, last = -Infinity;
    for (const r of runs) for (const c of Object.values(r.columns)) if (c.steps.length) {
      first = Math.min(first, c.steps[0]);
      last = Math.max(last, c.steps[c.steps.length - 1]);
    }
    // Built when first shown: dygraphs sizes a chart from its visible box.
    function build() {
      for (const [title, key, series] of specs) {
        // Rows [step, value of each series or null], over every step any series has.
        const steps = new Map();
        series.forEach(([, r, c], k) => {
          const col = r.columns[c];
          col.steps.forEach((st, i) => {
            if (!steps.has(st)) steps.set(st, new Array(series.length).fill(null));
            steps.get(st)[k] = col.values[i];
          });
        });
        const rows = [...steps.keys()].sort((a, b) => a - b).map((st) => [st, ...steps.get(st)]);
        const div = el('div', { class: 'chart', 'data-name': key });
        const thinned = series.map(([l, r, c]) => r.columns[c]).filter((col) => col.every > 1);
        const note = thinned.length ? 'every ' + ordinal(thinned[0].every) + ' of ' + thinned[0].points + ' points drawn' : '';
        // A legend always shown (dygraphs' own appears only on hover): each series' colour and dash, and its name.
        const key_ = el('div', { class: 'chart-legend' }, ...series.map(([l, , , colour, dash]) => {
          const swatch = svg('svg', { width: 22, height: 6, class: 'swatch' });
          swatch.append(svg('line', { x1: 0, y1: 3, x2: 22, y2: 3, stroke: colour, 'stroke-width': 2,
            'stroke-dasharray': dash ? dash.join(' ') : 'none' }));
          return el('span', {}, swatch, l);
        }));
        box.append(el('div', { class: 'chart-box' }, el('h3', { text: title }), div, key_,
          el('div', { class: 'chart-note', text: note })));
        const perSeries = {};
        series.forEach(([l, , , , dash]) => { if (dash) perSeries[l] = { strokePattern: dash }; });
        charts.push(new Dygraph(div, rows, {
          labels: ['step', ...series.map((x) => x[0])], connectSeparatedPoints: true, drawPoints: rows.length <= 200,
          strokeWidth: 1.5, legend: 'follow', labelsSeparateLines: true, xlabel: 'step', highlightCircleSize: 3,
          colors: series.map((x) => x[3]), series: perSeries, dateWindow: first < last ? [first, last] : null,
          axes: { y: { valueFormatter: (v) => fmt(v, 4), axisLabelFormatter: (v) => String(Number(Number(v).toPrecision(3))), axisLabelWidth: 64 },
            x: { valueFormatter: (v) => 'step ' + v } },
        }));
      }
    }
    smooth.addEventListener('input', () => {
      const k = Number(smooth.value);
      smoothText.textContent = k === 1 ? 'none' : k + ' points';
      for (const c of charts) c.updateOptions({ rollPeriod: k });
    });
    logscale.addEventListener('change', () => { for (const c of charts) c.updateOptions({ logscale: logscale.checked }); });
    window.qkvCharts = charts;
    return { resize() { if (!charts.length) build(); for (const c of charts) c.resize(); } };
  })();

  if (att) renderAttention();
  // The model view fits its heads to the window's width: drawn again when that width changes.
  let drawnWidth = document.documentElement.clientWidth, resizing = 0;
  window.addEventListener('resize', () => {
    clearTimeout(resizing);
    resizing = setTimeout(() => {
      if (!att || document.documentElement.clientWidth === drawnWidth) return;
      drawnWidth = document.documentElement.clientWidth;
      renderModel();
      highlight(state.hl);
    }, 200);
  });
  // The first view, or the one the address names (page.html#graph).
  const asked = location.hash.slice(1);
  if (views.length) show(sections[asked] ? asked : views[0][0]);
  window.qkvReady = true;
})();
