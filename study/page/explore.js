// The qkv page: draws every view from the JSON in #qkv-data (written by
// study/page.cpp and study/page_attention.cpp). Views: heads (bertviz's head
// view: lines from each query to the keys it attends to, a colour per head,
// the most important heads first), model (every layer x head, weights or
// dL/dP, sized to the window), matrix (one layer's maps, masked cells
// hatched), neurons (how one score is made from q and k, with dL/dq and
// dL/dk), graph (the autograd graph laid out by dagre, modules opened by
// clicking) and curves (dygraphs). Hovering a token highlights it in every
// view. tests/browser/explore_test.py drives it.
'use strict';
(function () {
  const data = JSON.parse(document.getElementById('qkv-data').textContent);
  const app = document.getElementById('app');
  // Twelve colours that stay apart (d3's ten, black and gold): heads, runs and layers all take them.
  const PALETTE = ['#1f77b4', '#d62728', '#2ca02c', '#ff7f0e', '#9467bd', '#8c564b', '#e377c2', '#17becf',
    '#bcbd22', '#7f7f7f', '#000000', '#f0b400'];
  const headColour = (h) => PALETTE[h % PALETTE.length];
  // 1st, 2nd, 3rd, 4th, ..., 11th, 12th, 13th, 21st.
  function ordinal(k) {
    const t = k % 100, suffix = t >= 11 && t <= 13 ? 'th' : k % 10 === 1 ? 'st' : k % 10 === 2 ? 'nd' : k % 10 === 3 ? 'rd' : 'th';
    return k + suffix;
  }
  // off: per "group:layer", the heads hidden in the head view (unset: all but the most important).
  const state = { view: null, group: 0, layer: 0, off: new Map(), quantity: 'weights', scale: 'map', hl: null };

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
  // A token as shown: a visible mark for a space and a line break, BPE's Ġ and Ċ as the same marks
  // (the label itself is escaped by qkv); cut to `most` characters, with the whole in the tooltip.
  function shown(t, most) {
    const s = t === '' ? '∅' : t.replace(/Ġ/g, '␣').replace(/Ċ/g, '↵').replace(/ /g, '␣').replace(/\n/g, '↵');
    return most && [...s].length > most ? [...s].slice(0, most - 1).join('') + '…' : s;
  }
  const fmt = (v, digits) => (v === null || v === undefined || Number.isNaN(v) ? 'n/a' : Number(v).toPrecision(digits));
  const tip = el('div', { id: 'tip' });
  function showTip(ev, text) {
    tip.textContent = text;
    tip.style.display = 'block';
    tip.style.left = Math.min(ev.clientX + 14, window.innerWidth - 260) + 'px';
    tip.style.top = ev.clientY + 14 + 'px';
  }
  const hideTip = () => { tip.style.display = 'none'; };
  function bytes(b64) {
    const bin = atob(b64), out = new Uint8Array(bin.length);
    for (let i = 0; i < bin.length; ++i) out[i] = bin.charCodeAt(i);
    return out;
  }
  const floats = (b64) => new Float32Array(bytes(b64).buffer);

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
  const neurons = att && att.neurons && att.neurons.heads.length ? att.neurons : null;
  const views = [];
  if (att) views.push(['heads', 'Head view'], ['model', 'Model view'], ['matrix', 'Matrix view']);
  if (neurons) views.push(['neurons', 'Neuron view']);
  if (data.attribution) views.push(['attribution', 'Token attribution']);
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
  const drawn = {};  // the attention views drawn since the group, layer or quantity last changed
  function show(id) {
    state.view = id;
    hideTip();
    for (const b of nav.querySelectorAll('.tab')) b.classList.toggle('active', b.dataset.view === id);
    for (const [v, s] of Object.entries(sections)) s.classList.toggle('shown', v === id);
    groupBar.style.display = ['heads', 'model', 'matrix', 'neurons'].includes(id) ? 'flex' : 'none';
    if ((att || id === 'attribution') && renderers[id] && !drawn[id]) { renderers[id](); drawn[id] = true; highlight(state.hl); }
    if (id === 'graph') graphView.fit();
    if (id === 'curves') curvesView.resize();
  }

  // ---- attention: groups (tabs of a Seq2Seq), layers, heads ----
  const group = () => att.groups[state.group];
  const tokId = (seq, i) => seq + ':' + i;
  // Per group: rows (queries) x cols (keys), which cells are masked, and how many keys each row sees.
  function shape(g) {
    if (g._shape) return g._shape;
    const rows = g.rows.length, cols = g.cols.length, masked = new Uint8Array(rows * cols), seen = new Int32Array(rows);
    for (let i = 0; i < rows; ++i) for (let j = 0; j < cols; ++j) {
      masked[i * cols + j] = g.masked.length ? g.masked[i][j] : 0;
      if (!masked[i * cols + j]) seen[i] += 1;
    }
    return (g._shape = { rows, cols, masked, seen });
  }
  // One head's map, decoded once: values over every cell (NaN where masked or not finite), and whether they
  // are the exact float32 values or the bytes that colour the cells (attention_json's codes).
  function mapOf(layer, h, quantity, g = group()) {
    const key = '_' + quantity + h;
    if (layer[key]) return layer[key];
    const sh = shape(g), m = layer.maps[h], grad = quantity === 'grad';
    const exact = grad ? m.g_exact : m.p_exact, top = grad ? m.g_top : m.p_top;
    const visible = exact ? floats(exact) : bytes(grad ? m.g : m.p);
    const values = new Float32Array(sh.rows * sh.cols).fill(NaN);
    for (let c = 0, k = 0; c < values.length; ++c) {
      if (sh.masked[c]) continue;
      const v = visible[k++];
      if (exact) values[c] = v;
      else if (v === 255) values[c] = NaN;
      else if (grad) values[c] = Math.sign(v - 127) * top * ((v - 127) / 127) ** 2;
      else values[c] = top * (v / 254) ** 2;
    }
    return (layer[key] = { values, exact: !!exact });
  }
  // The value that colours the darkest cell: the map's largest, leaving out rows with a single visible key
  // (a causal map's first query gives its one key a weight of 1, which paled every other cell); 'row': per row.
  function scaleOf(values, sh, kind) {
    const top = new Float64Array(sh.rows);
    let all = 0, any = 0;
    for (let i = 0; i < sh.rows; ++i) {
      for (let j = 0; j < sh.cols; ++j) {
        const v = Math.abs(values[i * sh.cols + j]);
        if (v === v) top[i] = Math.max(top[i], v);
      }
      any = Math.max(any, top[i]);
      if (sh.seen[i] > 1) all = Math.max(all, top[i]);
    }
    if (!(all > 0)) all = any;
    return kind === 'row' ? (i) => top[i] : () => all;
  }
  // The largest over every map of the group, found once per group and quantity (each map asked for it).
  function sharedTop(quantity) {
    const g = group(), key = '_shared_' + quantity;
    if (g[key] === undefined) {
      let top = 0;
      const sh = shape(g);
      for (const layer of g.layers) for (let h = 0; h < att.heads; ++h) top = Math.max(top, scaleOf(mapOf(layer, h, quantity).values, sh, 'map')(0));
      g[key] = top;
    }
    return g[key];
  }
  function scaleFor(layer, h, quantity) {
    const sh = shape(group());
    if (state.scale === 'shared') { const t = sharedTop(quantity); return () => t; }
    return scaleOf(mapOf(layer, h, quantity).values, sh, state.scale);
  }
  // Colours: weights white to blue on [0, top]; gradients blue-white-red, symmetric around 0. [r, g, b].
  function rgb(v, top, signed) {
    if (v !== v) return [204, 204, 204];
    const t = Math.max(-1, Math.min(1, top > 0 ? v / top : 0));
    if (!signed) { const u = Math.max(0, t); return [255 + (42 - 255) * u, 255 + (93 - 255) * u, 255 + (176 - 255) * u]; }
    const c = 255 * (1 - Math.abs(t));
    return t >= 0 ? [255, c, c] : [c, c, 255];
  }
  const colour = (v, top, signed) => 'rgb(' + rgb(v, top, signed).map(Math.round).join(',') + ')';
  const HATCH_LINE = [187, 187, 187], HATCH_GROUND = [240, 240, 240];
  // A map drawn k pixels a cell (at most its on-screen size; CSS scales the rest), masked cells hatched
  // with diagonal lines as in the matrix view.
  function mapCanvas(layer, h, quantity, side) {
    const sh = shape(group()), m = mapOf(layer, h, quantity), top = scaleFor(layer, h, quantity), signed = quantity === 'grad';
    const k = Math.max(1, Math.floor(side / Math.max(sh.rows, sh.cols))), w = sh.cols * k, ht = sh.rows * k;
    const c = el('canvas', { width: w, height: ht }), ctx = c.getContext('2d'), img = ctx.createImageData(w, ht);
    for (let i = 0; i < sh.rows; ++i) {
      const t = top(i);
      for (let j = 0; j < sh.cols; ++j) {
        const cell = i * sh.cols + j, p = sh.masked[cell] ? null : rgb(m.values[cell], t, signed);
        for (let y = i * k; y < (i + 1) * k; ++y) for (let x = j * k; x < (j + 1) * k; ++x) {
          const q = p || ((x + y) % 6 < 2 ? HATCH_LINE : HATCH_GROUND), at = 4 * (y * w + x);
          img.data[at] = q[0], img.data[at + 1] = q[1], img.data[at + 2] = q[2], img.data[at + 3] = 255;
        }
      }
    }
    ctx.putImageData(img, 0, 0);
    return c;
  }
  function renderAttention() {
    hideZoom();
    for (const s of ['heads', 'model', 'matrix', 'neurons']) if (sections[s]) sections[s].setAttribute('data-group', state.group);
    for (const k of Object.keys(drawn)) delete drawn[k];
    if (renderers[state.view]) { renderers[state.view](); drawn[state.view] = true; }
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
    if (group().layers[0].maps[0].g) s.append(el('option', { value: 'grad', text: 'dL/dP (gradient into the weights)' }));
    s.value = state.quantity;
    s.addEventListener('change', () => { state.quantity = s.value; renderAttention(); });
    return el('label', {}, 'show ', s);
  }
  function scaleSelect(id) {
    const s = el('select', { id: id });
    s.append(el('option', { value: 'map', text: 'each map its own' }), el('option', { value: 'row', text: 'each row its own' }),
      el('option', { value: 'shared', text: 'shared by all maps' }));
    s.value = state.scale;
    s.addEventListener('change', () => { state.scale = s.value; renderAttention(); });
    return el('label', { title: 'Rows with a single visible key (a causal map\'s first query) are left out of a map\'s scale' }, 'colour scale ', s);
  }
  // A layer's heads, the most important first (with dL/dP), else in order.
  function headsByImportance(layer) {
    const order = [...Array(att.heads).keys()];
    if (layer.importance) order.sort((a, b) => (layer.importance[b] || 0) - (layer.importance[a] || 0));
    return order;
  }
  const TOP_HEADS = 3;
  function hiddenHeads(layer) {
    const key = state.group + ':' + state.layer;
    if (!state.off.has(key)) state.off.set(key, new Set(att.heads > 4 ? headsByImportance(layer).slice(TOP_HEADS) : []));
    return state.off.get(key);
  }
  function headToggles(layer) {
    const off = hiddenHeads(layer);
    const box = el('div', { class: 'controls', id: 'head-toggles' }, 'heads, the most important first (click to hide or show):');
    for (const h of headsByImportance(layer)) {
      const imp = layer.importance ? ' · ' + fmt(layer.importance[h], 2) : '';
      const t = el('span', { class: 'head-toggle' + (off.has(h) ? ' off' : ''), 'data-head': h },
        el('span', { class: 'swatch', style: 'background:' + headColour(h) }), 'head ' + h + imp);
      t.addEventListener('click', () => {
        if (off.has(h)) off.delete(h); else off.add(h);
        t.classList.toggle('off', off.has(h));
        for (const line of sections.heads.querySelectorAll('.attn-line[data-head="' + h + '"]'))
          line.style.display = off.has(h) ? 'none' : '';
      });
      box.append(t);
    }
    const all = el('button', { id: 'all-heads', text: 'all heads' });
    all.addEventListener('click', () => { off.clear(); renderHeads(); highlight(state.hl); });
    box.append(all);
    return box;
  }

  // Head view: queries on the left, keys on the right, a line per (head, query, key) of weight >= 0.02.
  function renderHeads() {
    const s = sections.heads, g = group(), layer = g.layers[state.layer], sh = shape(g), off = hiddenHeads(layer);
    const many = att.heads > 4 ? 'The ' + TOP_HEADS + ' most important heads of the layer are shown first (importance: ' +
      'the model view\'s table); click a head to show it. ' : '';
    s.replaceChildren(el('div', { class: 'controls' }, layerSelect('layer')), headToggles(layer),
      el('p', { class: 'note', text: many + 'Each line joins a query (left) to a key (right); its opacity is the weight, and ' +
        'weights under 0.02 are not drawn. Hover a token to see only its lines and to mark it in every view.' }));
    const lineH = sh.rows > 64 || sh.cols > 64 ? 16 : 20, top = 24, width = 560;
    const height = top + Math.max(sh.rows, sh.cols) * lineH + 10;
    const pic = svg('svg', { class: 'head-view', width: width, height: height });
    const xl = 150, xr = width - 150;
    pic.append(svg('text', { x: xl - 8, y: 14, text: 'queries', 'font-size': 11, fill: '#666', 'text-anchor': 'end' }),
      svg('text', { x: xr + 8, y: 14, text: 'keys', 'font-size': 11, fill: '#666' }));
    const lines = svg('g');
    pic.append(lines);
    for (let h = 0; h < att.heads; ++h) {
      const w = mapOf(layer, h, 'weights').values;
      for (let i = 0; i < sh.rows; ++i) for (let j = 0; j < sh.cols; ++j) {
        const v = w[i * sh.cols + j];
        if (!(v >= 0.02)) continue;
        const y1 = top + i * lineH + 6, y2 = top + j * lineH + 6;
        const p = svg('path', { class: 'attn-line', 'data-head': h, 'data-q': i, 'data-k': j,
          d: 'M' + xl + ',' + y1 + ' C' + (xl + 80) + ',' + y1 + ' ' + (xr - 80) + ',' + y2 + ' ' + xr + ',' + y2,
          stroke: headColour(h), 'stroke-width': 1.5 + 2 * v, 'stroke-opacity': Math.min(1, 0.1 + v) });
        if (off.has(h)) p.style.display = 'none';
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
      const t = hoverable(svg('text', { x: x, y: y, 'text-anchor': anchor, 'font-family': 'monospace', 'font-size': lineH - 7,
        text: shown(text, 18) }), tokId(seq, i));
      t.append(svg('title', { text: 'token ' + i + ': ' + shown(text) }));
      t.addEventListener('mouseenter', () => focus(side, i));
      t.addEventListener('mouseleave', () => focus(side, null));
      return t;
    };
    g.rows.forEach((t, i) => pic.append(label(t, xl - 8, top + i * lineH + 10, 'end', g.row_seq, i, 'q')));
    g.cols.forEach((t, j) => pic.append(label(t, xr + 8, top + j * lineH + 10, 'start', g.col_seq, j, 'k')));
    s.append(pic);
  }

  // Model view: every layer x head as a picture sized so that the heads fill the window's width; click one
  // to open it large.
  function renderModel() {
    const s = sections.model, g = group(), sh = shape(g);
    const strip = el('div', { class: 'strip' });
    g.rows.forEach((t, i) => strip.append(hoverable(el('span', { text: shown(t, 12), title: shown(t) }), tokId(g.row_seq, i))));
    if (g.col_seq !== g.row_seq) {
      strip.append(el('span', { text: '  keys:', class: 'note' }));
      g.cols.forEach((t, j) => strip.append(hoverable(el('span', { text: shown(t, 12), title: shown(t) }), tokId(g.col_seq, j))));
    }
    s.replaceChildren(el('div', { class: 'controls' }, quantitySelect('quantity'), scaleSelect('model-scale')), strip);
    const width = (document.documentElement.clientWidth || 1200) - 36 - 90;
    const side = Math.max(48, Math.min(360, Math.floor(width / att.heads) - 18));
    const tall = Math.round(side * sh.rows / Math.max(sh.rows, sh.cols)), wide = Math.round(side * sh.cols / Math.max(sh.rows, sh.cols));
    const grid = el('div', { class: 'grid', id: 'model-grid', style: 'grid-template-columns: 90px repeat(' + att.heads + ', ' + (side + 10) + 'px)' });
    grid.append(el('div'));
    for (let h = 0; h < att.heads; ++h) grid.append(el('div', { class: 'rowhead', style: 'color:' + headColour(h), text: 'head ' + h }));
    g.layers.forEach((layer, l) => {
      grid.append(el('div', { class: 'rowhead', text: layer.name }));
      for (let h = 0; h < att.heads; ++h) {
        const c = mapCanvas(layer, h, state.quantity, side);
        c.style.width = wide + 'px', c.style.height = tall + 'px';
        // Drawn larger than its cells: sharp squares; smaller: the browser averages them.
        c.style.imageRendering = c.width <= wide ? 'pixelated' : 'auto';
        const cell = el('div', { class: 'cell', 'data-layer': l, 'data-head': h }, c, layer.importance
          ? el('div', { text: (side < 150 ? '' : 'importance ') + fmt(layer.importance[h], 3), title: 'importance' })
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
        'about −Σ P ⊙ dL/dP (Michel et al., 2019). qkv explore --check compares both with finite differences.' }),
      el('div', { class: 'scroll' }, t));
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

  // Labels no smaller than 9 px and never overlapping: cells of 10 px or more label every token (labelling
  // every 2nd character of a prompt read "A i e w s b g…"); smaller cells, every k-th.
  const FONT = (cellSize) => Math.min(12, Math.max(9, cellSize - 1));
  const labelEvery = (cellSize) => Math.max(1, Math.ceil(FONT(cellSize) / cellSize));
  const MIN_CELL = 10;
  // One map, large: a canvas of its cells (masked ones hatched) with token labels around it; hover a cell for
  // both tokens and its value (exact where the page holds it).
  function heatmap(layer, h, cellSize) {
    const g = group(), sh = shape(g), quantity = state.quantity, m = mapOf(layer, h, quantity), signed = quantity === 'grad';
    const fs = FONT(cellSize), every = labelEvery(cellSize), longest = Math.min(14, Math.max(...[...g.rows, ...g.cols].map((t) => [...shown(t)].length)));
    const left = 12 + Math.ceil(fs * 0.62 * longest), top = 12 + Math.ceil(fs * 0.62 * longest * 0.87);
    // The last key's label, rotated 60°, reaches half its length past its column: room for it on the right.
    const w = left + sh.cols * cellSize + 6 + Math.ceil(fs * 0.62 * longest * 0.5), hgt = top + sh.rows * cellSize + 6;
    const box = el('div', { class: 'heatmap', style: 'width:' + w + 'px;height:' + hgt + 'px', 'data-layer': state.layer, 'data-head': h });
    const c = el('canvas', { width: sh.cols * cellSize, height: sh.rows * cellSize, style: 'left:' + left + 'px;top:' + top + 'px' });
    const ctx = c.getContext('2d'), scale = scaleFor(layer, h, quantity);
    const hatch = document.createElement('canvas');
    hatch.width = hatch.height = 6;
    const hc = hatch.getContext('2d');
    hc.fillStyle = '#f0f0f0', hc.fillRect(0, 0, 6, 6), hc.strokeStyle = '#bbb', hc.lineWidth = 1.5;
    hc.beginPath(), hc.moveTo(0, 6), hc.lineTo(6, 0), hc.stroke();
    const pattern = ctx.createPattern(hatch, 'repeat');
    for (let i = 0; i < sh.rows; ++i) {
      const t = scale(i);
      for (let j = 0; j < sh.cols; ++j) {
        const k = i * sh.cols + j;
        ctx.fillStyle = sh.masked[k] ? pattern : colour(m.values[k], t, signed);
        ctx.fillRect(j * cellSize, i * cellSize, cellSize, cellSize);
      }
    }
    if (g.split > 0) {
      ctx.strokeStyle = '#c00', ctx.lineWidth = 1.5, ctx.beginPath();
      ctx.moveTo(g.split * cellSize, 0), ctx.lineTo(g.split * cellSize, sh.rows * cellSize);
      ctx.moveTo(0, g.split * cellSize), ctx.lineTo(sh.cols * cellSize, g.split * cellSize), ctx.stroke();
    }
    const what = signed ? 'dL/dP' : 'weight';
    c.addEventListener('mousemove', (ev) => {
      const r = c.getBoundingClientRect(), i = Math.floor((ev.clientY - r.top) / cellSize), j = Math.floor((ev.clientX - r.left) / cellSize);
      if (i < 0 || j < 0 || i >= sh.rows || j >= sh.cols) return;
      const k = i * sh.cols + j;
      showTip(ev, 'query ' + i + ' ‘' + shown(g.rows[i]) + '’ → key ' + j + ' ‘' + shown(g.cols[j]) + '’\n' +
        (sh.masked[k] ? 'masked (the query cannot see this key)' : what + ' ' + (m.exact ? '' : '≈ ') + fmt(m.values[k], m.exact ? 4 : 2)));
      highlight(null);
      for (const e of document.querySelectorAll('.tok[data-tok="' + tokId(g.row_seq, i) + '"], .tok[data-tok="' + tokId(g.col_seq, j) + '"]'))
        e.classList.add('hl');
    });
    c.addEventListener('mouseleave', () => { hideTip(); highlight(null); });
    const labels = svg('svg', { width: w, height: hgt });
    g.rows.forEach((tk, i) => {
      if (i % every) return;
      const t = hoverable(svg('text', { x: left - 4, y: top + i * cellSize + cellSize * 0.5 + fs * 0.35, 'text-anchor': 'end',
        'font-family': 'monospace', 'font-size': fs, text: shown(tk, 14) }), tokId(g.row_seq, i));
      labels.append(t);
    });
    g.cols.forEach((tk, j) => {
      if (j % every) return;
      const x = left + j * cellSize + cellSize * 0.5 + fs * 0.3, y = top - 4;
      labels.append(hoverable(svg('text', { x: x, y: y, transform: 'rotate(-60 ' + x + ' ' + y + ')', 'font-family': 'monospace',
        'font-size': fs, text: shown(tk, 14) }), tokId(g.col_seq, j)));
    });
    box.append(labels, c);
    box.dataset.top = scale(sh.rows - 1);
    box.dataset.every = every;
    return box;
  }
  function mapBox(layer, h, cellSize) {
    const imp = layer.importance ? ' · importance ' + fmt(layer.importance[h], 3) : '';
    const pic = heatmap(layer, h, cellSize), signed = state.quantity === 'grad', top = Number(pic.dataset.top);
    // What the darkest colour means on this map (each map may have its own scale; per row, it varies).
    const scale = state.scale === 'row' ? ' · each row its own scale' : top > 0 ? (signed ? ' · ±' : ' · darkest ') + fmt(top, 3) : '';
    return el('div', { class: 'map' }, el('h3', { style: 'color:' + headColour(h), text: layer.name + ', head ' + h + imp + scale }), pic);
  }
  function renderMatrix() {
    const s = sections.matrix, g = group(), layer = g.layers[state.layer], sh = shape(g);
    s.replaceChildren(el('div', { class: 'controls' }, layerSelect('matrix-layer'), quantitySelect('matrix-quantity'), scaleSelect('scale')),
      el('p', { class: 'note', text: 'Rows are queries, columns keys. Hatched cells are masked: the query cannot see that key' +
        (g.split > 0 ? '; the red lines mark where the answer starts' : '') + '. Weights are white (0) to blue (the scale\'s ' +
        'largest; rows with a single visible key, whose weight is 1 whatever the model, are left out of it); gradients ' +
        'blue (negative) to red (positive). Hover a cell for its value' + (att.exact_maps < att.maps_in_all
        ? ': exact for the ' + att.exact_maps + ' most important of the ' + att.maps_in_all + ' maps, to two digits (≈) for the rest.' : '.') }));
    const width = (document.documentElement.clientWidth || 1200) - 60, n = Math.max(sh.rows, sh.cols);
    // Two maps a row where they fit at 6 px a cell or more, else one as wide as the window.
    // Two maps a row where they fit with every token labelled, else one as wide as the window (and wider,
    // scrolled, past about 120 tokens).
    const cellSize = Math.max(MIN_CELL, Math.min(28, Math.floor((n * MIN_CELL * 2 + 300 < width ? width / 2 - 150 : width - 150) / n)));
    if (labelEvery(cellSize) > 1) s.append(el('p', { class: 'note', text: 'Every ' + ordinal(labelEvery(cellSize)) +
      ' token is labelled (the cells are ' + cellSize + ' px); hover a cell for its two tokens, or click a map in the model view.' }));
    const maps = el('div', { class: 'maps' });
    for (const h of headsByImportance(layer)) maps.append(mapBox(layer, h, cellSize));
    s.append(maps);
    if (att.note) s.append(el('p', { class: 'note', text: att.note + '.' }));
    // A classifier's [CLS] row drawn by qkv (over the image, for a ViT): SVG it wrote and escaped.
    for (const f of att.figures || []) if (f.title === layer.name) {
      const d = el('div', { class: 'figure' });
      d.innerHTML = f.svg;
      s.append(d);
    }
  }
  function hideZoom() { zoom.style.display = 'none'; hideTip(); }
  function openZoom(l, h) {
    const g = group(), n = Math.max(g.rows.length, g.cols.length);
    const close = el('span', { class: 'close', text: 'close ✕ (Esc)' });
    close.addEventListener('click', hideZoom);
    const room = Math.min(window.innerWidth - 120, window.innerHeight - 160);
    const cellSize = Math.max(MIN_CELL, Math.min(40, Math.floor((room - 120) / n))), every = labelEvery(cellSize);
    const parts = [close, mapBox(g.layers[l], h, cellSize)];
    if (every > 1) parts.splice(1, 0, el('p', { class: 'note', text: 'Every ' + ordinal(every) + ' token is labelled; hover a cell for its two tokens.' }));
    zoom.replaceChildren(...parts);
    zoom.style.display = 'block';
  }
  document.addEventListener('keydown', (ev) => { if (ev.key === 'Escape') hideZoom(); });
  // A click outside the open map closes it (the click that opened it lands on a model-view cell, not here).
  document.addEventListener('mousedown', (ev) => {
    if (zoom.style.display === 'block' && !zoom.contains(ev.target)) hideZoom();
  });

  // Neuron view: for one head, query and key, how the score is made: q and k by dimension, q ⊙ k, its sum
  // times the scale (the score), the row's softmax (the map's weight), and dL/dq, dL/dk beside them.
  const neuronState = { entry: 0, q: null, k: null };
  function neuronPlace(entry) {  // the group and layer of an entry's map
    for (let gi = 0; gi < att.groups.length; ++gi) {
      const li = att.groups[gi].layers.findIndex((l) => l.map === entry.map);
      if (li >= 0) return { gi, li };
    }
    return null;
  }
  function neuronData(entry) {
    if (!entry._q) entry._q = floats(entry.q), entry._k = floats(entry.k), entry._dq = floats(entry.dq), entry._dk = floats(entry.dk);
    return entry;
  }
  function renderNeurons() {
    const s = sections.neurons, entries = neurons.heads, entry = neuronData(entries[neuronState.entry]);
    const place = neuronPlace(entry), g = att.groups[place.gi], layer = g.layers[place.li], sh = shape(g), d = entry.d;
    if (neuronState.q === null || neuronState.q >= sh.rows) neuronState.q = sh.rows - 1;
    const qi = neuronState.q;
    // The key the query weighs most, unless one was chosen.
    const w = mapOf(layer, entry.head, 'weights', g).values;
    if (neuronState.k === null || neuronState.k >= sh.cols) {
      let best = 0;
      for (let j = 0; j < sh.cols; ++j) if (w[qi * sh.cols + j] > w[qi * sh.cols + best]) best = j;
      neuronState.k = best;
    }
    const kj = neuronState.k;
    const pick = el('select', { id: 'neuron-head' });
    entries.forEach((e, i) => {
      const p = neuronPlace(e), gr = att.groups[p.gi];
      pick.append(el('option', { value: i, text: gr.layers[p.li].name + ', head ' + e.head + (att.groups.length > 1 ? ' (' + gr.name + ')' : '') }));
    });
    pick.value = neuronState.entry;
    pick.addEventListener('change', () => { neuronState.entry = Number(pick.value); neuronState.k = null; renderNeurons(); });
    const tokens = (id, labels, chosen, set) => {
      const t = el('select', { id: id });
      labels.forEach((x, i) => t.append(el('option', { value: i, text: i + ': ' + shown(x, 16) })));
      t.value = chosen;
      t.addEventListener('change', () => { set(Number(t.value)); renderNeurons(); });
      return t;
    };
    const left = entries.length < neurons.heads_in_all ? ' The page holds these for the ' + entries.length + ' most important of the ' +
      neurons.heads_in_all + ' heads (their size grows with tokens × head width).' : '';
    s.replaceChildren(el('div', { class: 'controls' }, el('label', {}, 'head ', pick),
      el('label', {}, 'query ', tokens('neuron-query', g.rows, qi, (v) => { neuronState.q = v; neuronState.k = null; })),
      el('label', {}, 'key ', tokens('neuron-key', g.cols, kj, (v) => { neuronState.k = v; }))),
    el('p', { class: 'note', text: 'The score of a query and a key is scale · Σ q_d k_d over the head\'s ' + d + ' dimensions ' +
      '(scale = 1/√' + d + '); softmax over the keys the query sees turns the row of scores into the attention weights. ' +
      'Each strip shows one vector by dimension, blue negative to red positive; hover a cell for its value. dL/dq and dL/dk ' +
      'are the gradients of this prompt\'s loss, from qkv\'s own backward pass; qkv explore --check rebuilds the weights ' +
      'and these gradients from q, k and dL/dP.' + left }));
    const q = entry._q.subarray(qi * d, (qi + 1) * d), k = entry._k.subarray(kj * d, (kj + 1) * d);
    const prod = q.map((v, e) => v * k[e]);
    const rows = [['q (query ' + qi + ')', q], ['k (key ' + kj + ')', k], ['q ⊙ k', prod],
      ['dL/dq', entry._dq.subarray(qi * d, (qi + 1) * d)], ['dL/dk', entry._dk.subarray(kj * d, (kj + 1) * d)]];
    const cell = Math.max(6, Math.min(22, Math.floor(((document.documentElement.clientWidth || 1200) - 200) / d)));
    const pic = svg('svg', { id: 'neuron-strips', width: 110 + d * cell + 10, height: rows.length * (cell + 10) + 22 });
    rows.forEach(([name, v], r) => {
      let top = 0;
      for (const x of v) top = Math.max(top, Math.abs(x));
      const y = 18 + r * (cell + 10);
      pic.append(svg('text', { x: 104, y: y + cell * 0.7, 'text-anchor': 'end', 'font-size': 12, text: name }));
      v.forEach((x, e) => {
        const rect = svg('rect', { class: 'nv-cell', 'data-row': r, 'data-dim': e, x: 110 + e * cell, y: y, width: cell - 1, height: cell,
          fill: colour(x, top, true) });
        rect.addEventListener('mousemove', (ev) => showTip(ev, name + ', dimension ' + e + ': ' + fmt(x, 4)));
        rect.addEventListener('mouseleave', hideTip);
        pic.append(rect);
      });
    });
    for (let e = 0; e < d; e += Math.max(1, Math.ceil(24 / cell)))
      pic.append(svg('text', { x: 110 + e * cell + cell / 2, y: 12, 'text-anchor': 'middle', 'font-size': 9, fill: '#666', text: e }));
    // The row's scores from q and k, and their softmax over the visible keys: the weight this view explains.
    const scores = new Float64Array(sh.cols);
    let most = -Infinity;
    for (let j = 0; j < sh.cols; ++j) {
      if (sh.masked[qi * sh.cols + j]) { scores[j] = -Infinity; continue; }
      let dot = 0;
      for (let e = 0; e < d; ++e) dot += entry._q[qi * d + e] * entry._k[j * d + e];
      scores[j] = entry.scale * dot;
      most = Math.max(most, scores[j]);
    }
    let sum = 0;
    for (let j = 0; j < sh.cols; ++j) sum += scores[j] === -Infinity ? 0 : Math.exp(scores[j] - most);
    const masked = sh.masked[qi * sh.cols + kj], dot = prod.reduce((a, b) => a + b, 0);
    const weight = masked ? 0 : Math.exp(scores[kj] - most) / sum, map = mapOf(layer, entry.head, 'weights', g);
    const grad = layer.maps[entry.head].g ? mapOf(layer, entry.head, 'grad', g) : null;
    const facts = el('div', { id: 'neuron-facts', class: 'note', 'data-score': scores[kj], 'data-softmax': weight,
      'data-map': map.values[qi * sh.cols + kj], 'data-exact': map.exact ? 1 : 0, 'data-dot': dot });
    facts.append(el('p', { text: 'Σ q ⊙ k = ' + fmt(dot, 5) + '; × scale ' + fmt(entry.scale, 4) + ' = score ' + fmt(scores[kj], 5) + '.' }),
      el('p', { text: masked ? 'This key is masked for this query: its score does not count.' : 'softmax over the ' + sh.seen[qi] +
        ' keys query ' + qi + ' sees: weight ' + fmt(weight, 5) + ' (the map: ' + (map.exact ? '' : '≈ ') +
        fmt(map.values[qi * sh.cols + kj], map.exact ? 5 : 2) + ')' + (grad ? '; dL/dP = ' + (grad.exact ? '' : '≈ ') +
        fmt(grad.values[qi * sh.cols + kj], grad.exact ? 4 : 2) : '') + '.' }));
    s.append(pic, facts);
  }
  // For the browser test: a map's values as the page holds them, and its colour scale's top.
  window.qkvMaps = att ? { values: (gi, l, h, q) => Array.from(mapOf(att.groups[gi].layers[l], h, q, att.groups[gi]).values),
    shape: (gi) => { const sh = shape(att.groups[gi]); return { rows: sh.rows, cols: sh.cols, seen: Array.from(sh.seen) }; } } : null;
  // ---- token attribution: dL/de_t · e_t for each input token, as coloured text and as bars ----
  function renderAttribution() {
    const s = sections.attribution, a = data.attribution, n = a.values.length;
    let top = 0, sum = 0;
    for (const v of a.values) top = Math.max(top, Math.abs(v)), sum += v;
    const label = (i) => 'token ' + i + ' “' + shown(a.tokens[i], 24) + '”: dL/de · e = ' + fmt(a.values[i], 4);
    const text = el('p', { id: 'attribution-text' });
    a.tokens.forEach((t, i) => {
      const chip = el('span', { class: 'attr-token', 'data-index': i, text: shown(t, 24) });
      chip.style.background = colour(a.values[i], top, true);
      chip.style.color = top > 0 && Math.abs(a.values[i]) / top > 0.55 ? '#fff' : '#111';  // legible on the darkest
      chip.addEventListener('mousemove', (ev) => showTip(ev, label(i)));
      chip.addEventListener('mouseleave', hideTip);
      text.append(chip);
    });
    const row = 18, labelWidth = 150, barWidth = Math.max(240, Math.min(640, (document.documentElement.clientWidth || 1200) - 420));
    const mid = labelWidth + barWidth / 2;
    const bars = svg('svg', { id: 'attribution-bars', width: labelWidth + barWidth + 90, height: n * row + 24 });
    bars.append(svg('line', { x1: mid, x2: mid, y1: 0, y2: n * row + 4, stroke: '#999' }));
    a.values.forEach((v, i) => {
      const w = top > 0 ? Math.abs(v) / top * barWidth / 2 : 0, y = 4 + i * row;
      bars.append(svg('text', { x: labelWidth - 6, y: y + row * 0.7, 'text-anchor': 'end', 'font-size': 12, text: i + ' ' + shown(a.tokens[i], 16) }));
      const bar = svg('rect', { class: 'attr-bar', 'data-index': i, x: v < 0 ? mid - w : mid, y: y + 2, width: Math.max(w, 0.5), height: row - 4,
        fill: colour(v, top, true) });
      bar.addEventListener('mousemove', (ev) => showTip(ev, label(i)));
      bar.addEventListener('mouseleave', hideTip);
      bars.append(bar, svg('text', { x: labelWidth + barWidth + 6, y: y + row * 0.7, 'font-size': 11, fill: '#555', text: fmt(v, 3) }));
    });
    s.replaceChildren(el('p', { class: 'note', text: 'Token attribution (gradient × input) of each input token t: ' +
      'a_t = dL/de_t · e_t, where L is this prompt\'s ' + a.loss + ' and e_t the token\'s input embedding (its row of the ' +
      'token embedding, before positions are added). a_t = d/dα L(α·e_t) at α = 1: how fast the loss changes as that ' +
      'token\'s embedding is scaled. Red raises the loss, blue lowers it; the colours share one scale, its top the largest |a_t| (' +
      fmt(top, 3) + '). Σ a_t = ' + fmt(sum, 4) + '. qkv explore --check compares them (up to 64 tokens) with central differences of the loss.' }),
    text, bars);
  }
  const renderers = { heads: () => renderHeads(), model: () => renderModel(), matrix: () => renderMatrix(), neurons: () => renderNeurons(),
    attribution: () => renderAttribution() };

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
    let box = { x: 0, y: 0, w: 100, h: 100 }, clusters = {};
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
      hideTip();  // the tooltip of a module just opened or closed named what is no longer there
      port.replaceChildren();
      clusters = {};
      for (const id of g.nodes()) {
        const v = g.node(id);
        if (!v.cluster) continue;
        clusters[v.cluster] = { x: v.x - v.width / 2, y: v.y - v.height / 2, w: v.width, h: v.height };
        const c = svg('g', { class: 'cluster', 'data-scope': v.cluster });
        c.append(svg('rect', { x: v.x - v.width / 2, y: v.y - v.height / 2, width: v.width, height: v.height, rx: 6 }),
          svg('text', { x: v.x - v.width / 2 + 6, y: v.y - v.height / 2 + 12, text: v.cluster + ' ▾', fill: '#555' }));
        c.style.cursor = 'pointer';
        c.addEventListener('click', (ev) => { if (ev.target === c.firstChild) { expanded.delete(v.cluster); draw(); fit(); } });
        c.addEventListener('mousemove', (ev) => { if (ev.target === c.firstChild) showTip(ev, 'module ' + v.cluster + ', open: click its frame to close it'); else hideTip(); });
        c.addEventListener('mouseleave', hideTip);
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
          gEl.addEventListener('click', () => { expanded.add(v.module); draw(); focus(v.module); });
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
    // After a module opens: the view on that module alone, so its text keeps its size (refitting the whole
    // graph shrank the text to about 7 px once three modules were open). "fit to window" shows all.
    function focus(module) {
      const c = clusters[module];
      if (!c) return fit();
      const rect = pic.getBoundingClientRect(), pad = 20;
      fit();
      // No larger than the graph's own scale at 1.5x, so a small module is not blown up either.
      const w = Math.max(c.w + 2 * pad, rect.width / 1.5), h = Math.max(c.h + 2 * pad, Number(pic.getAttribute('height')) / 1.5);
      pic.setAttribute('viewBox', (c.x + c.w / 2 - w / 2) + ' ' + (c.y + c.h / 2 - h / 2) + ' ' + w + ' ' + h);
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
    // One note per reason, naming every parameter it holds for (a Seq2Seq's six key biases once gave six copies).
    const reasons = new Map();
    for (const p of data.graph.no_grad) reasons.set(p.why, [...(reasons.get(p.why) || []), p.name]);
    for (const [why, names] of reasons) notes.append(el('p', { class: 'no-grad' }, el('b', { text: names.join(', ') +
      (names.length === 1 ? ' has' : ' have') + ' no gradient path. ' }), why));
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
    // Chart specs: [title, key, [series...]] (a series: {label, run, column, colour, dash}). A run keeps its colour on every
    // chart (a series' colour once followed its place on each chart, so one colour meant different runs); on the
    // per-layer charts a layer keeps its colour and each run its dash.
    const names = new Set();
    for (const r of runs) for (const c of Object.keys(r.columns)) names.add(c);
    const runColour = (r) => PALETTE[runs.indexOf(r) % PALETTE.length];
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
    // A series: {label, run, column, colour, dash}.
    const byRun = (c) => runs.filter((r) => has(r, c)).map((r) => ({ label: label(r, c), run: r, column: c, colour: runColour(r), dash: null }));
    for (const [c, title] of order) if (names.has(c)) {
      specs.push([title, c, byRun(c)]);
      used.add(c);
    }
    // Held-out loss against training loss, per run: the curve that shows overfitting.
    if (names.has('eval_loss') && names.has('loss')) {
      const series = [];
      for (const r of runs) if (has(r, 'eval_loss') && has(r, 'loss'))
        series.push({ label: label(r, 'loss'), run: r, column: 'loss', colour: runColour(r), dash: [6, 3] },
          { label: label(r, 'eval_loss'), run: r, column: 'eval_loss', colour: runColour(r), dash: null });
      specs.push(['training (dashed) against held-out loss', 'loss-vs-eval', series]);
    }
    for (const [prefix, title] of [['grad_norm.', 'gradient norm per layer (one axis, layers overlaid)'],
      ['update_ratio.', 'update ratio |Δw|/|w| per layer (one axis, layers overlaid)']]) {
      const cols = [...names].filter((c) => c.startsWith(prefix)).sort(layerOrder);
      if (!cols.length) continue;
      const series = [];
      for (const r of runs) cols.forEach((c, k) => {
        if (has(r, c)) series.push({ label: label(r, c.slice(prefix.length)), run: r, column: c, colour: PALETTE[k % PALETTE.length], dash: runDash(r) });
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
    // Smoothing is for dense series (a value every step or few): evaluations, a point every few hundred steps,
    // are drawn as they are (a rolling mean once averaged two evaluations 250 steps apart), as points on a line.
    const SPARSE = 20;
    const dense = (x) => !x.column.startsWith('eval_') && x.run.columns[x.column].steps.length >= SPARSE;
    function trailingMean(values, k) {
      const out = new Array(values.length);
      let sum = 0, n = 0;
      for (let i = 0; i < values.length; ++i) {
        if (values[i] !== null && Number.isFinite(values[i])) sum += values[i], n += 1;
        const j = i - k;
        if (j >= 0 && values[j] !== null && Number.isFinite(values[j])) sum -= values[j], n -= 1;
        out[i] = values[i] === null ? null : n ? sum / n : null;
      }
      return out;
    }
    const faint = (hex) => { const n = parseInt(hex.slice(1), 16); return 'rgba(' + (n >> 16) + ',' + ((n >> 8) & 255) + ',' + (n & 255) + ',0.25)'; };
    // Rows [step, value of each drawn line or null] and the lines' options; with smoothing k > 1, a dense
    // series is drawn smoothed, over its raw values kept faint underneath (as TensorBoard does).
    function chartData(series, k) {
      const lines = [];
      for (const x of series) {
        const col = x.run.columns[x.column];
        if (k > 1 && dense(x)) lines.push({ name: x.label + ' (raw)', steps: col.steps, values: col.values, colour: faint(x.colour), raw: true, dash: x.dash },
          { name: x.label, steps: col.steps, values: trailingMean(col.values, k), colour: x.colour, dash: x.dash });
        else lines.push({ name: x.label, steps: col.steps, values: col.values, colour: x.colour, dash: x.dash, points: !dense(x) });
      }
      const steps = new Map();
      lines.forEach((line, n) => line.steps.forEach((st, i) => {
        if (!steps.has(st)) steps.set(st, new Array(lines.length).fill(null));
        steps.get(st)[n] = line.values[i];
      }));
      const rows = [...steps.keys()].sort((a, b) => a - b).map((st) => [st, ...steps.get(st)]);
      const options = {};
      for (const line of lines) {
        const o = {};
        if (line.dash) o.strokePattern = line.dash;
        if (line.points) o.drawPoints = true, o.pointSize = 3;
        if (line.raw) o.strokeWidth = 1, o.highlightCircleSize = 0;
        options[line.name] = o;
      }
      return { file: rows, labels: ['step', ...lines.map((l) => l.name)], colors: lines.map((l) => l.colour), series: options };
    }
    // On a log scale, the axis spans every run's positive values (dygraphs' own range once left a run's
    // held-out line off the axis); values <= 0 have no place on it and are left out.
    function logRange(rows) {
      let lo = Infinity, hi = 0;
      for (const row of rows) for (let i = 1; i < row.length; ++i) if (row[i] > 0) lo = Math.min(lo, row[i]), hi = Math.max(hi, row[i]);
      return hi > 0 ? [lo / 1.25, hi * 1.25] : null;
    }
    const built = [];  // [chart, series]
    function build() {
      for (const [title, key, series] of specs) {
        const div = el('div', { class: 'chart', 'data-name': key });
        const thinned = series.map((x) => x.run.columns[x.column]).filter((col) => col.every > 1);
        const note = thinned.length ? 'every ' + ordinal(thinned[0].every) + ' of ' + thinned[0].points + ' points drawn' : '';
        // A legend always shown (dygraphs' own appears only on hover): each series' colour and dash, and its name.
        const key_ = el('div', { class: 'chart-legend' }, ...series.map((x) => {
          const swatch = svg('svg', { width: 22, height: 6, class: 'swatch' });
          swatch.append(svg('line', { x1: 0, y1: 3, x2: 22, y2: 3, stroke: x.colour, 'stroke-width': 2,
            'stroke-dasharray': x.dash ? x.dash.join(' ') : 'none' }));
          return el('span', {}, swatch, x.label);
        }));
        box.append(el('div', { class: 'chart-box' }, el('h3', { text: title }), div, key_,
          el('div', { class: 'chart-note', text: note })));
        const d = chartData(series, Number(smooth.value));
        const chart = new Dygraph(div, d.file, {
          labels: d.labels, connectSeparatedPoints: true, strokeWidth: 1.5, legend: 'follow', labelsSeparateLines: true,
          xlabel: 'step', highlightCircleSize: 3, colors: d.colors, series: d.series, dateWindow: first < last ? [first, last] : null,
          axes: { y: { valueFormatter: (v) => fmt(v, 4), axisLabelFormatter: (v) => String(Number(Number(v).toPrecision(3))), axisLabelWidth: 64 },
            x: { valueFormatter: (v) => 'step ' + v } },
        });
        charts.push(chart);
        built.push([chart, series]);
      }
    }
    function redraw() {
      const k = Number(smooth.value);
      for (const [chart, series] of built) {
        const d = chartData(series, k);
        chart.updateOptions({ file: d.file, labels: d.labels, colors: d.colors, series: d.series, logscale: logscale.checked,
          valueRange: logscale.checked ? logRange(d.file) : null });
      }
    }
    smooth.addEventListener('input', () => {
      const k = Number(smooth.value);
      smoothText.textContent = k === 1 ? 'none' : k + ' points (dense series only; the raw line stays, faint)';
      redraw();
    });
    logscale.addEventListener('change', redraw);
    window.qkvCharts = charts;
    return { resize() { if (!charts.length) build(); for (const c of charts) c.resize(); } };
  })();

  // The attention views are drawn when first shown (a 12 x 12 model's 144 maps cost the first view seconds).
  // The model and matrix views fit the window's width: drawn again when that width changes.
  let drawnWidth = document.documentElement.clientWidth, resizing = 0;
  window.addEventListener('resize', () => {
    clearTimeout(resizing);
    resizing = setTimeout(() => {
      if (!att || document.documentElement.clientWidth === drawnWidth) return;
      drawnWidth = document.documentElement.clientWidth;
      delete drawn.model, delete drawn.matrix, delete drawn.neurons;
      if (renderers[state.view] && !drawn[state.view]) { renderers[state.view](); drawn[state.view] = true; highlight(state.hl); }
    }, 200);
  });
  // The first view, or the one the address names (page.html#graph).
  const asked = location.hash.slice(1);
  if (views.length) show(sections[asked] ? asked : views[0][0]);
  window.qkvReadyAt = performance.now();  // ms from the start of navigation to the first view drawn
  window.qkvReady = true;
})();
