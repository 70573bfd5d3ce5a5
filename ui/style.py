"""The page's own CSS and head: Gradio scopes CSS inside its content box, so a few rules go in the head."""

CSS = """
/* Chinese renders wherever one of these CJK fonts is installed (the theme's own font has no such glyphs) */
.gradio-container {--font: 'Montserrat', ui-sans-serif, system-ui, 'Noto Sans CJK SC', 'Noto Sans SC', 'PingFang SC',
  'Hiragino Sans GB', 'Microsoft YaHei', 'Source Han Sans SC', sans-serif; font-family: var(--font);}
#header h1 {margin: 0 0 0.1em 0; font-size: 1.5em;}
.explain {color: #555; font-size: 0.9em;}
.proxy {display: none !important;}
.link-box textarea {font-size: 0.75em;}
/* Sticky needs no scrolling ancestor: Gradio's container hides its overflow, which makes it one. */
.gradio-container {overflow-x: clip !important; overflow-y: visible !important;}
#run-bar-box {position: sticky; top: 0; z-index: 100; background: var(--background-fill-primary); gap: 2px;
  padding: 2px 0 4px 0; border-bottom: 1px solid var(--border-color-primary);}
#run-bar {padding: 0 !important; border: 0 !important;}
#run-bar-row {flex-wrap: nowrap !important; align-items: center; gap: 4px;}
#run-bar-row > #run-bar {flex: 1 1 0% !important; min-width: 0 !important; overflow: hidden !important;}
#run-bar-row > #hist-md {flex: 0 0 auto !important; width: auto !important; padding: 0 !important; border: 0 !important;}
#hist-md p {margin: 0; font-size: 0.8em; white-space: nowrap;}
#run-bar-row > button {flex: 0 0 auto !important; padding: 0 8px;}
#run-bar p {margin: 0; font-size: 0.85em; white-space: nowrap; overflow: hidden; text-overflow: ellipsis;}
/* the selection bar: one compact row; each control says what it is by its values (labels kept for readers) */
#selection-bar {flex-wrap: nowrap !important; align-items: center; gap: 6px; overflow-x: auto;}
#selection-bar > * {min-width: 0 !important; flex-wrap: nowrap !important; gap: 6px !important;
  border: 0 !important; background: none !important;}
#selection-bar .block {padding: 0 !important; border: 0 !important; min-width: 0 !important; flex: 0 0 auto !important;
  width: auto !important;
  overflow: visible !important; background: none !important; box-shadow: none !important;}
#selection-bar [data-testid=block-info], #selection-bar .info-text {position: absolute !important; width: 1px;
  height: 1px; overflow: hidden; clip: rect(0 0 0 0);}
#selection-bar .wrap {flex-wrap: nowrap; gap: 4px;}
#selection-bar label:has(input[type=radio]) {padding: 3px 8px; font-size: 0.8em; white-space: nowrap;}
#selection-bar #attn-layer, #selection-bar #attn-head {flex: 0 0 140px !important;}
#selection-bar #attn-kind {flex: 0 0 250px !important;}
#selection-bar #attn-units {flex: 0 0 130px !important;}
#attn-layer input, #attn-head input, #attn-kind input, #attn-units input {font-size: 0.85em;}
#selection-bar .secondary-wrap {padding: 2px 6px;}
#selection-bar > .column {flex-direction: row !important; align-items: center; flex-grow: 1 !important;}
#link-btn {white-space: nowrap; flex: 0 0 auto;}
/* the link box fills what the dropdowns leave of the row (it sat past the right edge, scrolled out of sight) */
#selection-bar > .form {flex: 0 1 auto !important;}
#selection-bar .column:has(#link-btn) {flex: 1 1 auto !important; min-width: 0 !important;}
#selection-bar #link-btn {flex: 0 0 auto !important; width: auto !important;}
#selection-bar #link-box {flex: 1 1 0% !important; min-width: 120px !important; width: auto !important;}
@media (max-width: 600px) {
  /* a phone's cells are too small for their numbers: the hover keeps them */
  #attn-plot .heatmap-label {display: none;}
  /* one column: plots side by side on a desktop stack on a phone */
  .row > .block:has(.js-plotly-plot), .row > .column:has(.js-plotly-plot) {min-width: 100% !important;}
  #header details, #input-text .info-text, #input-text [data-testid=block-info] + div {display: none;}
  #run-bar-box {position: static;}
  #run-bar p {white-space: normal; font-size: 0.8em;}
  /* the selection wraps into rows a thumb can reach (a sideways strip hid kind, layer, head and the link) */
  #selection-bar {flex-wrap: wrap !important; overflow: visible !important;}
  #selection-bar > * {flex-wrap: wrap !important;}
  #selection-bar #attn-kind, #selection-bar #attn-layer, #selection-bar #attn-head, #selection-bar #attn-units
    {flex: 1 1 45% !important; min-width: 150px !important;}
  #selection-bar input {min-height: 36px; font-size: 16px !important;}
  #selection-bar > .column, #selection-bar .column:has(#link-btn), #selection-bar > .form
    {flex: 1 1 100% !important;}
  /* the plot toolbar covered the charts' titles; pinch and the hover still work */
  .js-plotly-plot .modebar-container {display: none !important;}
  /* a thumb's tap target: about 44 px tall, every button and box */
  button:not([role=tab]), input:not([type=checkbox]):not([type=radio]), textarea {min-height: 44px !important;}
  /* a dropdown's whole value shows: the kind on its own row, the tour's boxes one under another */
  #selection-bar #attn-kind {flex: 1 1 100% !important;}
  #tour-input, #tour-input > .form {flex-wrap: wrap !important;}
  #tour-input > *, #tour-input > .form > * {flex: 1 1 100% !important; min-width: 100% !important;}
  /* the stop's title and ◀ ▶ stay on screen while its figure scrolls under them */
  #tour-top {position: sticky; top: 0; z-index: 90; background: var(--background-fill-primary);
    padding: 2px 0 6px 0; border-bottom: 1px solid var(--border-color-primary);}
  #tour-nav > button {flex: 1 1 0% !important;}
  #tour-heading h3 {font-size: 1.05em;}
  /* a slider's number box keeps its tap height: the box around it was 24 px tall and cut it */
  .tab-like-container:has(input[type=number]) {height: auto !important; overflow: visible !important;}
  /* the step slider takes the row; its buttons share the row under it */
  #step-row {flex-wrap: wrap !important;}
  #step-row > #step-slider, #step-row > .form:has(#step-slider) {flex: 1 1 100% !important; min-width: 100% !important;}
  #step-row > button {flex: 1 1 0% !important; min-width: 0 !important;}
}
#tagline {display: none;}
@media (max-width: 600px) {
  /* a phone's first screen: what the app is, the sentence, Translate and the first map; the run bar, the
     selection and the tour's start follow the sections (an open tour hides the sections and keeps its place) */
  #tagline {display: block; padding: 0 !important;}
  #tagline p {margin: 0; font-size: 0.9em; color: #444;}
  #header, #tagline {order: -2;}
  #sections {order: -1;}
  #sections [role=tablist] {flex-wrap: nowrap !important; overflow-x: auto; scrollbar-width: none;}
  #sections [role=tablist] button {white-space: nowrap; flex: 0 0 auto !important;}
  #input-text [data-testid=block-info], #direction [data-testid=block-info] {display: none;}
  /* the sentence, the direction and Translate, then the map; decoding settings and the rest after it */
  #translate-top, #translate-top > .column {display: contents;}
  #translate-top ~ * {order: 4;}
  #translate-top ~ #run-status {order: 0;}
  #translate-top ~ #watch-row {order: 1;}
  #decoding-box {order: 3;}
  #watch-row > .column:has(#watch-heads) {order: -1;}
}
#tour-top {gap: 4px;}
#tour-nav {flex-wrap: nowrap !important; gap: 8px;}
/* an open list paints over the controls after it, on an opaque background (it was see-through on a phone) */
#selection-bar .block:focus-within {position: relative; z-index: 60 !important;}
#selection-bar ul:has(> [data-testid=dropdown-option]) {background: var(--background-fill-primary) !important;
  z-index: 61 !important; box-shadow: 0 4px 12px rgba(0, 0, 0, 0.18);}
/* the guided tour shows only what its stop needs: the selection bar waits until the tour is left */
.gradio-container:has(#tour) #selection-bar {display: none !important;}
#tour-heading h3 {margin: 0.2em 0;}
#tour-changed p {background: #eef5ff; padding: 6px 10px; border-radius: 6px;}
#tour-start {align-self: flex-start; width: auto !important; margin: 2px 0;}
/* ◀ ▶ through the session's runs only once there is a run to go back to */
#run-bar-row:has(#hist-prev:disabled):has(#hist-next:disabled) #hist-prev,
#run-bar-row:has(#hist-prev:disabled):has(#hist-next:disabled) #hist-next {display: none !important;}
/* a run far from the model's domain: a warning box, not a grey line */
#notice blockquote {background: #fff4e5; border-left: 4px solid #e8a317; padding: 8px 12px; margin: 0 0 8px 0;
  color: #4a3000; font-size: 1.02em;}
"""
# Gradio scopes the CSS above inside its content box; the page's own side padding lies outside it.
PHONE_CSS = "<style>@media (max-width: 600px) {.gradio-container > .main {padding-left: 6px !important; " \
            "padding-right: 6px !important;}}</style>"

# On a phone (the page's own width, known only in the browser) every figure is fitted to it once it is drawn:
# the title and its note wrap (SVG text never wraps, so they ran off the right edge), colour bars get thin (one
# took a fifth of the width), a legend goes below the plot, one entry a line (it covered the title or the axis),
# the right gutter goes where no axis needs it, and panels side by side stack one under another. The figures
# stay the server's (viz/ knows no width): Plotly's own react redraws each one once, fitted, and a wrapped title
# is then measured clear of the top edge.
PHONE_JS = """<script>
(() => {
  const PHONE = 600, TITLE_LINE = 18, NOTE_LINE = 14;
  const plain = (t) => String(t || '').replace(/<br>/g, ' ');
  const pen = document.createElement('canvas').getContext('2d');
  function wrap(text, width, font) {  // the lines of ``text`` as wide as ``width`` at most, in the figure's font
    pen.font = `${font.size || 12}px ${font.family || 'sans-serif'}`;
    const lines = [];
    let line = '';
    for (const word of plain(text).split(' ')) {
      const next = line ? line + ' ' + word : word;
      if (line && pen.measureText(next.replace(/<[^>]*>/g, '')).width > width) { lines.push(line); line = word; }
      else { line = next; }
    }
    if (line) lines.push(line);
    return lines;
  }
  function put(obj, path, value) {  // obj.a.b.c = value, making the objects on the way
    const keys = path.split('.');
    let o = obj;
    for (const k of keys.slice(0, -1)) o = (o[k] = (o[k] && typeof o[k] === 'object') ? o[k] : {});
    o[keys[keys.length - 1]] = value;
  }
  function titleFit(L, F, width) {
    const t = L.title || {}, note = (t.subtitle || {}).text, ft = F.title || {};
    if (!t.text) return 0;
    const head = wrap(t.text, width, ft.font || {}), sub = note ? wrap(note, width, (ft.subtitle || {}).font || {}) : [];
    put(L, 'title.text', head.join('<br>'));
    if (note) put(L, 'title.subtitle.text', sub.join('<br>'));
    Object.assign(L.title, {yref: 'container', yanchor: 'top'});  // from the top down; settle() checks the edge
    return (head.length - 1) * TITLE_LINE + Math.max(0, sub.length - 1) * NOTE_LINE;
  }
  function thin(bar) {
    return Object.assign({}, bar, {thickness: Math.min((bar || {}).thickness || 30, 7), xpad: 2, tickfont: {size: 9},
                                   title: Object.assign({}, (bar || {}).title, {font: {size: 9}})});
  }
  function barsFit(gd, data, L) {  // thinner, in smaller type: a vertical bar took a fifth of the width
    for (const f of (gd._fullData || []).filter(d => d.showscale && d.colorbar)) {
      data[f.index].colorbar = thin(data[f.index].colorbar);
    }
    for (const k of Object.keys(L).filter(k => /^coloraxis\\d*$/.test(k))) L[k].colorbar = thin(L[k].colorbar);
  }
  function panelsFit(L, F, width) {  // panels side by side: each panel's title wraps to its own column
    const doms = Object.keys(F).filter(k => /^xaxis\\d*$/.test(k)).map(k => F[k].domain);
    if (!doms.some(d => d[1] - d[0] < 0.6) || !Array.isArray(L.annotations)) return;
    L.annotations = L.annotations.map(a => {
      if (a.xref !== 'paper' || typeof a.text !== 'string') return a;
      const font = Object.assign({family: (F.font || {}).family}, a.font, {size: Math.min((a.font || {}).size || 12, 9)});
      const dom = doms.filter(d => d[0] <= a.x + 1e-6 && a.x <= d[1] + 1e-6).sort((p, q) => (p[1] - p[0]) - (q[1] - q[0]))[0];
      const area = (F._size || {}).w || width;  // the plot area, inside the margins: the domains divide it
      const lines = wrap(a.text, Math.max(60, (dom ? dom[1] - dom[0] : 1) * area - 4), font);
      return Object.assign({}, a, {text: lines.join('<br>'), font});
    });
  }
  function groups(items, lo, hi) {  // items whose [lo, hi) overlap, merged, in increasing order
    const out = [];
    for (const it of [...items].sort((a, b) => lo(a) - lo(b))) {
      const g = out[out.length - 1];
      if (g && lo(it) < g.hi - 1e-6) { g.hi = Math.max(g.hi, hi(it)); g.items.push(it); }
      else out.push({lo: lo(it), hi: hi(it), items: [it]});
    }
    return out;
  }
  // Panels side by side go one under another, each as wide as the phone (two columns left each ~150 px).
  // A grid (every column's panels at the same heights) is read row by row; columns of their own (a flow down
  // each column) one column after the other. Panels inside a piece keep their places.
  function stackFit(gd, data, L, F, width) {
    const H = (F._size || {}).h, W = (F._size || {}).w || width, GAP = 40, MIN_COLUMN = 200;
    const yKey = (ref) => 'yaxis' + String(ref).slice(1);
    const panels = Object.keys(F).filter(k => /^xaxis\d*$/.test(k) && !F[k].overlaying && F[yKey(F[k].anchor)])
      .map(k => ({x: k, y: yKey(F[k].anchor), xd: F[k].domain, yd: F[yKey(F[k].anchor)].domain}));
    const cols = groups(panels, p => p.xd[0], p => p.xd[1]);
    const rows = (c) => c.items.map(p => p.yd.map(v => v.toFixed(3)).join()).sort().join(';');
    const band = (items) => ({top: Math.max(...items.map(p => p.yd[1])), bottom: Math.min(...items.map(p => p.yd[0]))});
    const pieces = cols.every(c => rows(c) === rows(cols[0]))
      ? groups(panels, p => -p.yd[1], p => -p.yd[0])
          .flatMap(b => groups(b.items, p => p.xd[0], p => p.xd[1]).map(c => ({b: band(b.items), c})))
      : cols.map(c => ({b: band(c.items), c}));
    if (!H || cols.length < 2 || cols.every(c => (c.hi - c.lo) * W >= MIN_COLUMN) || pieces.length > 16) return 0;
    // below a piece that sat on the figure's floor go the labels that had the bottom margin to themselves;
    // below one with tick labels of its own, room for them (as drawn) and the next piece's title
    const tickText = (x) => `.${x.replace('axis', '')}tick text`;  // 'xaxis2' -> '.x2tick text'
    const twins = (x) => Object.keys(F)
      .filter(k => /^xaxis\\d*$/.test(k) && F[k] && F[k].overlaying === x.replace('axis', ''));
    const ticks = (p) => Math.max(0, ...[...gd.querySelectorAll([p.x, ...twins(p.x)].map(tickText).join(', '))]
      .map(t => t.getBoundingClientRect().height));
    pieces.forEach(q => {
      const own = Math.max(...q.c.items.map(ticks));
      q.gap = Math.max(own ? own + 30 : GAP, q.b.bottom < 0.05 ? ((F._size || {}).b || 0) + 24 : GAP);
    });
    const total = pieces.reduce((s, q, i) => s + (q.b.top - q.b.bottom) * H + (i ? pieces[i - 1].gap : 0), 0);
    // each piece as wide as the columns were together: the room left of them (labels) and right (bars) stays
    const left = Math.min(...cols.map(c => c.lo)), right = Math.max(...cols.map(c => c.hi));
    let cursor = 1;
    for (const q of pieces) {
      q.top = cursor;
      q.bottom = cursor - (q.b.top - q.b.bottom) * H / total;
      cursor = q.bottom - q.gap / total;
      q.fx = (x) => Math.min(1, Math.max(0, left + (x - q.c.lo) / (q.c.hi - q.c.lo) * (right - left)));
      q.fy = (y) => Math.min(1, Math.max(0, q.bottom + (y - q.b.bottom) / (q.b.top - q.b.bottom) * (q.top - q.bottom)));
      for (const p of q.c.items) {
        put(L, p.x + '.domain', p.xd.map(q.fx));
        put(L, p.y + '.domain', p.yd.map(q.fy));
      }
    }
    const near = (q, x, y) => x >= q.c.lo - 0.02 && x <= q.c.hi + 0.02 && y >= q.b.bottom - 0.02 && y <= q.b.top + 0.1;
    if (Array.isArray(L.annotations)) {  // panel titles and notes move with their panel
      L.annotations = L.annotations.map(a => {
        const q = (a.xref === 'paper' && a.yref === 'paper') ? pieces.find(q => near(q, a.x, a.y)) : null;
        return q ? Object.assign({}, a, {x: q.fx(a.x), y: q.fy(Math.min(a.y, q.b.top)) + (a.y > q.b.top ? 0.5 * GAP / total : 0)}) : a;
      });
    }
    // a colour bar spans the panels its traces are drawn on
    const span = (traces) => {
      const on = pieces.filter(q => traces.some(d => q.c.items.some(p => p.x === 'xaxis' + String(d.xaxis).slice(1))));
      if (!on.length) return null;
      const top = Math.max(...on.map(q => q.top)), bottom = Math.min(...on.map(q => q.bottom));
      return {y: top, yanchor: 'top', len: top - bottom, lenmode: 'fraction'};
    };
    const full = gd._fullData || [];
    for (const f of full.filter(d => d.showscale && d.colorbar && !d.coloraxis)) {
      const at = span([f]);
      if (at) data[f.index].colorbar = Object.assign({}, data[f.index].colorbar, at);
    }
    for (const k of Object.keys(L).filter(k => /^coloraxis\d*$/.test(k) && L[k].colorbar)) {
      const at = span(full.filter(d => d.coloraxis === k));
      if (at) L[k].colorbar = Object.assign({}, L[k].colorbar, at);
    }
    return Math.round(total - H);
  }
  // Every layer × head on one axis pair (a mosaic, its geometry in layout.meta): on a phone each panel got a few
  // pixels a token and the labels ran together. Laid out again a few panels to a row, wide enough for labels
  // 12 px apart, in reading order, each panel titled; the key labels above and below, the query labels by each.
  function mosaicFit(data, L, width) {
    const m = (L.meta || {}).mosaic;
    if (!m) return 0;
    const ROW = 13, LABEL = 12, GAP = 2;  // px a query row; px between key labels; blank rows above a panel
    const area = Math.max(120, width - ((L.margin || {}).l ?? 90) - 30);
    const cols = Math.max(1, Math.min(m.heads, Math.floor(area / (LABEL * (m.k + 1)))));
    const every = Math.max(1, Math.ceil(LABEL / (area / (cols * (m.k + 1)))));
    const at = (b) => ({x: (b % cols) * (m.k + 1), y: Math.floor(b / cols) * (m.q + GAP) + GAP});
    const block = (l, h) => (l - m.offset) * m.heads + h;
    for (const d of data) {
      if (!d.meta || d.meta.layer === undefined || d.x0 === undefined) continue;
      const p = at(block(d.meta.layer, d.meta.head));
      Object.assign(d, {x0: p.x, y0: p.y});
    }
    const n = m.layers * m.heads, rows = Math.ceil(n / cols), xs = [], xt = [], ys = [], yt = [], notes = [];
    for (let c = 0; c < cols; c++) {
      for (let j = 0; j < m.k; j += every) { xs.push(c * (m.k + 1) + j); xt.push(m.keys[j]); }
    }
    for (let b = 0; b < n; b++) {
      const p = at(b), l = Math.floor(b / m.heads) + m.offset, h = b % m.heads;
      if (b % cols === 0) m.queries.forEach((t, i) => { ys.push(p.y + i); yt.push(t); });
      notes.push({text: `L${l} H${h}`, x: p.x + (m.k - 1) / 2, y: p.y - GAP / 2 - 0.5, xref: 'x', yref: 'y',
                  showarrow: false, font: {size: 10}});
    }
    const keep = (L.annotations || []).filter(a => a.xref !== 'x' && a.yref !== 'y');  // the old head/layer names
    const maxima = (L.annotations || []).filter(a => a.xref === 'x' && a.yref === 'y').map(a => {
      const h = Math.floor(a.x / (m.k + 1)), l = Math.round((a.y + 0.5) / (m.q + 1)) + m.offset, p = at(block(l, h));
      return Object.assign({}, a, {x: p.x + m.k - 0.5, y: p.y - 0.5});
    });
    L.annotations = [...keep, ...notes, ...maxima];
    const ticks = {tickmode: 'array', tickvals: xs, ticktext: xt, tickangle: -90, tickfont: {size: 9}};
    Object.assign(L.xaxis, ticks, {range: [-0.5, cols * (m.k + 1) - 1.5]});
    L.xaxis2 = Object.assign({}, ticks, {overlaying: 'x', side: 'top', matches: 'x', showgrid: false,
                                         zeroline: false, ticks: ''});
    // an axis is drawn only for a trace on it: an invisible point puts the key labels above the panels too
    data.push({type: 'scatter', x: [0], y: [GAP], xaxis: 'x2', yaxis: 'y', mode: 'markers',
               marker: {opacity: 0}, hoverinfo: 'skip', showlegend: false});
    Object.assign(L.yaxis, {tickvals: ys, ticktext: yt, tickfont: {size: 10}});
    const top = Math.min(160, 8 + 6 * Math.max(...m.keys.map(t => String(t).length)));  // the labels above
    L.margin = Object.assign({}, L.margin, {t: ((L.margin || {}).t ?? 50) + top});
    for (const k of Object.keys(L).filter(k => /^coloraxis/.test(k))) {
      L[k].colorbar = Object.assign({}, L[k].colorbar, {len: 260, lenmode: 'pixels', y: 1, yanchor: 'top'});
    }
    const was = L.height - ((L.margin || {}).b ?? 90) - ((L.margin || {}).t ?? 50) + top;
    return Math.round(top + rows * (m.q + GAP) * ROW - was);
  }
  function legendFit(gd, L) {  // one entry a line below the plot (a row of them wrapped unpredictably)
    if (!(gd._fullLayout || {}).showlegend) return 0;
    const rows = (gd._fullData || []).filter(d => d.showlegend && d.visible !== false).length;
    L.legend = Object.assign({}, L.legend, {orientation: 'h', entrywidth: 1, entrywidthmode: 'fraction', x: 0,
                                            xanchor: 'left', xref: 'container', y: 0, yanchor: 'bottom',
                                            yref: 'container', font: {size: 10}});
    return rows * 19 + 8;
  }
  function textFit(gd, data, L, F, width) {  // numbers in cells too narrow for them go (the hover keeps them)
    const area = width - ((L.margin || {}).l ?? 60) - ((L.margin || {}).r ?? 10);
    for (const f of (gd._fullData || []).filter(d => d.type === 'heatmap' && d.texttemplate)) {
      const key = 'xaxis' + String(f.xaxis || 'x').slice(1);
      const dom = (L[key] || {}).domain || (F[key] || {}).domain || [0, 1];
      const cols = ((f.z || [])[0] || []).length || 1;
      if ((dom[1] - dom[0]) * area / cols < 18) data[f.index] = Object.assign({}, data[f.index], {texttemplate: ''});
    }
  }
  function settle(gd) {  // Plotly versions anchor a wrapped title differently: measured, it moves below the edge
    const t = gd.querySelector('.gtitle'), F = gd._fullLayout || {}, box = gd.getBoundingClientRect();
    if (!t || !F.title || !box.height || gd.__settled === gd.layout) return;
    gd.__settled = gd.layout;
    const over = box.top + 6 - t.getBoundingClientRect().top;
    if (over > 0.5) window.Plotly.relayout(gd, {'title.y': F.title.y - over / F.height});
  }
  // Wider screens: a title or note wider than its figure wraps once (SVG text never wraps; it was cut at the
  // right edge), the top margin grown by the lines it gained.
  function wideFit(gd) {
    const t = gd.querySelector('.gtitle'), note = gd.querySelector('.gtitle-subtitle'), F = gd._fullLayout || {};
    const box = gd.getBoundingClientRect();
    if (gd.layout.__wide || !box.width || !t) return;
    if (![t, note].some(e => e && e.getBoundingClientRect().right > box.right - 2)) return;
    const L = JSON.parse(JSON.stringify(gd.layout)), m = Object.assign({}, L.margin);
    const top = titleFit(L, F, box.width - ((F.title || {}).x || 0) * box.width - 16);
    L.margin = Object.assign(m, {t: (m.t ?? F.margin?.t ?? 80) + top});
    L.height = (L.height || F.height || 400) + top;
    L.title.y = 1 - 16 / L.height;
    L.__wide = true;
    gd.__fitting = true;
    Promise.resolve(window.Plotly.react(gd, gd.data, L)).finally(() => { gd.__fitting = false; });
  }
  function fit(gd) {
    if (!window.Plotly || !gd.layout || gd.__fitting) return;
    if (window.innerWidth > PHONE) return wideFit(gd);
    if (gd.layout.__phone) return settle(gd);
    const L = JSON.parse(JSON.stringify(gd.layout)), data = gd.data.map(d => Object.assign({}, d));
    const width = (gd.clientWidth || window.innerWidth) - 12, m = Object.assign({}, L.margin), F = gd._fullLayout || {};
    put(L, 'font.size', Math.min((L.font || {}).size || 12, 11));
    const grown = mosaicFit(data, L, width) || stackFit(gd, data, L, F, width);
    Object.assign(m, L.margin);  // a mosaic's labels above took room at the top
    barsFit(gd, data, L);
    if (!grown) panelsFit(L, F, width);
    const top = titleFit(L, F, width), below = legendFit(gd, L);
    // the right gutter goes unless an axis's labels live there: a colour bar still there pushes it out as it needs
    const right = Object.keys(F).some(k => /^yaxis\\d*$/.test(k) && F[k].side === 'right');
    L.margin = Object.assign(m, {r: right ? (m.r ?? 80) : Math.min(m.r ?? 80, 10), t: (m.t ?? 20) + top,
                                 b: (m.b ?? 40) + below, autoexpand: true});
    textFit(gd, data, L, F, width);
    L.height = (L.height || F.height || 400) + top + below + grown;
    if (L.title && L.title.text) L.title.y = 1 - 16 / L.height;
    L.__phone = true;
    gd.__fitting = true;
    Promise.resolve(window.Plotly.react(gd, data, L, {responsive: true}))
      .finally(() => { gd.__fitting = false; fit(gd); });  // a newer figure that came meanwhile is fitted too
  }
  function watch(gd) {
    if (gd.__phoneWatch || typeof gd.on !== 'function') return;
    gd.__phoneWatch = true;
    gd.on('plotly_afterplot', () => fit(gd));
    fit(gd);
  }
  let queued = false;  // one look per frame, however many nodes a streamed run changes
  const scan = () => {
    if (queued) return;
    queued = true;
    requestAnimationFrame(() => { queued = false; document.querySelectorAll('.js-plotly-plot').forEach(watch); });
  };
  new MutationObserver(scan).observe(document.documentElement, {childList: true, subtree: true});
  document.addEventListener('DOMContentLoaded', scan);
})();
</script>"""
HEAD = PHONE_CSS + PHONE_JS
