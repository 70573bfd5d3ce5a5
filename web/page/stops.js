// The tour stops' figures for any sentence: the app's figure for the direction's example sentence, drawn by
// its viz/ code when the site was built (models/<name>/tour.json), is the skeleton (layout, colours, titles,
// axis words); this module fills it with the numbers this page computed for the sentence on screen, as the
// viz/ function it came from fills it (each filler names that function).

import { FIGURES, esc, short, tokenLabels, wide } from "./player.js";
import { crossHead, words } from "./tour.js";

const SIG = 4;  // viz.computation.SIG: significant digits a figure keeps
const MAX_TICK_LABELS = 24, MIN_LABEL_FONT = 10;  // viz.common's
const SPECIAL = new Set(["<bos>", "<eos>", "<pad>", "<unk>", "<s>", "</s>"]);

/** viz.computation.rounded: float32 of ``x`` rounded to SIG significant digits. */
export function rounded(x) {
  if (!Number.isFinite(x) || x === 0) return Number.isFinite(x) ? x : null;
  const scale = 10 ** (SIG - 1 - Math.floor(Math.log10(Math.abs(x))));
  return Math.fround(Math.round(x * scale) / scale);
}

/** viz.common.step_row_labels: "input→produced" for each decoder row. */
export const stepRowLabels = (inputs, outputs) => inputs.map((a, i) => `${short(a, 12)}→${short(outputs[i], 12)}`);

const labelFontSize = (n) => (n <= 12 ? 12 : MIN_LABEL_FONT);

/** viz.common.token_axis. */
function tokenAxis(tokens, maxLabel, { fontSize = null, angle = null, number = true } = {}) {
  const labels = number ? tokenLabels(tokens, maxLabel) : tokens.map((t) => (String(t).trim() ? esc(short(t, maxLabel)) : "␣"));
  const axis = { tickmode: "array", tickvals: labels.map((_, i) => i), ticktext: labels, showticklabels: true,
    showgrid: false, zeroline: false, ticks: "" };
  if (fontSize) axis.tickfont = { size: fontSize };
  if (angle !== null) axis.tickangle = angle;
  return axis;
}

/** viz.common.thin_axes: a long token axis keeps every tick (hover) and a twin shows every k-th label;
 * ``step``: an axis key's forced step, ``block``: the length of its repeating label block. */
function thinAxes(layout, data, { step = {}, block = {} } = {}) {
  let kMax = 1;
  for (const key of Object.keys(layout).filter((k) => /^[xy]axis\d*$/.test(k))) {
    const ax = layout[key], vals = ax.tickvals, text = ax.ticktext;
    if (ax.showticklabels === false || !vals || !text || "overlaying" in ax) continue;
    const nBlock = block[key] || vals.length, k = step[key] || Math.max(1, Math.ceil(nBlock / MAX_TICK_LABELS));
    if (k <= 1) continue;
    kMax = Math.max(kMax, k);
    const letter = key[0], ref = letter + key.slice(5);
    const keep = vals.map((_, i) => i).filter((i) => (i % nBlock) % k === 0);
    const twin = Object.fromEntries(Object.entries(ax).filter(([kk]) => !["domain", "tickvals", "ticktext"].includes(kk)));
    Object.assign(twin, { overlaying: ref, matches: ref, tickvals: keep.map((i) => vals[i]), ticktext: keep.map((i) => text[i]),
      showticklabels: true, tickfont: { size: Math.max(MIN_LABEL_FONT, ax.tickfont?.size ?? 0) } });
    ax.showticklabels = false;
    delete ax.title;
    const used = Object.keys(layout).filter((k2) => k2.startsWith(`${letter}axis`)).map((k2) => Number(k2.slice(5)) || 1);
    const number = Math.max(1, ...used) + 1;
    layout[`${letter}axis${number}`] = twin;
    const other = letter === "x" ? "y" : "x";
    data.push({ type: "scatter", x: [], y: [], hoverinfo: "skip", showlegend: false, [`${letter}axis`]: `${letter}${number}`,
      [`${other}axis`]: ax.anchor ?? other });
  }
  return kMax;
}

/** A skeleton's copy with the twins of an earlier thinning (and their empty traces) taken out. */
function fresh(skeleton) {
  const fig = structuredClone(skeleton);
  for (const [k, ax] of Object.entries(fig.layout)) if (/^[xy]axis\d*$/.test(k) && ax.overlaying) delete fig.layout[k];
  fig.data = fig.data.filter((t) => !(t.type === "scatter" && t.hoverinfo === "skip" && !t.x?.length));
  for (const ax of Object.values(fig.layout)) if (ax && typeof ax === "object" && "tickvals" in ax) ax.showticklabels = ax.showticklabels ?? true;
  return fig;
}

/** An array's shape, plain or in Plotly's typed form ({dtype, bdata, shape: "4, 16"}). */
const shape = (a) => (Array.isArray(a) ? [a.length, a[0]?.length] : String(a.shape).split(",").map(Number));

const norm = (v) => Math.sqrt(v.reduce((s, x) => s + x * x, 0));

/** (1, A, B) tensor row ``a``. */
function row(t, a) {
  const B = t.dims.at(-1);
  return Array.from(t.data.subarray(a * B, (a + 1) * B));
}

/** Stops 1 and 2 (viz.computation.embedding_steps, as ui.present.inside.embedding_figure calls it): each
 * position's four L2 norms and one position's first 16 dimensions; ``positional`` false: nothing added. */
function embeddingSteps(sk, run, meta, position, positional = true, maxLabel) {
  const fig = fresh(sk), toks = run.srcTokens, T = toks.length, s = meta.token_scale;
  const scaled = toks.map((_, i) => row(run.enc.enc_embed, i));
  const pos = toks.map((_, i) => (positional ? row(run.enc.enc_pos, i) : scaled[i].map(() => 0)));
  const token = scaled.map((v) => v.map((x) => x / s)), total = scaled.map((v, i) => v.map((x, k) => x + pos[i][k]));
  [token, scaled, pos, total].forEach((vs, k) => Object.assign(fig.data[k], { x: toks.map((_, i) => i), y: vs.map((v) => rounded(norm(v))) }));
  const nDims = shape(fig.data[4].z)[1];
  const z = [token, scaled, pos, total].map((vs) => vs[position].slice(0, nDims).map(rounded));
  const m = Math.max(...z.flat().map(Math.abs)) || 1e-6;
  Object.assign(fig.data[4], { z, zmin: -m, zmax: m });
  const fs = labelFontSize(T);
  fig.layout.xaxis = { ...tokenAxis(toks, maxLabel, { fontSize: fs, angle: T > 8 ? -60 : null }), anchor: "y" };
  fig.layout.margin.b = 50 + 30;
  const label = tokenLabels(toks, maxLabel)[position];
  const ann = fig.layout.annotations?.[0];
  if (ann) ann.text = ann.text.replace(/\d+ \(.*\)$/, `${position} (${label})`);
  thin(fig);
  return fig;
}

/** Stop 6 (viz.computation.residual_norms, as ui.present.inside.residual_figure calls it for the decoder):
 * at ``position``, the stream's norm between layers and what each sublayer adds; beside it, every position. */
function residualNorms(sk, run, position, maxLabel) {
  const fig = fresh(sk), r = run.dec.dec_norms, [L, R, T] = r.dims, at = (l, k, i) => r.data[(l * R + k) * T + i];
  const resid = [Array.from({ length: T }, (_, i) => at(0, 0, i)), ...Array.from({ length: L }, (_, l) => Array.from({ length: T }, (_, i) => at(l, R - 1, i)))];
  const tokens = stepRowLabels(run.decoderInput, run.outTokens);
  fig.data[0].y = resid.map((x) => rounded(x[position]));
  [1, 2, 3].forEach((k) => { fig.data[k].y = Array.from({ length: L }, (_, l) => rounded(at(l, k, position))); });
  const z = resid.map((x) => x.map(rounded));
  Object.assign(fig.data[4], { z, zmax: Math.max(...z.flat()) || 1 });
  const x2 = fig.layout.xaxis2;
  fig.layout.xaxis2 = { ...tokenAxis(tokens, maxLabel, { fontSize: labelFontSize(T), angle: T > 8 ? -60 : null }), domain: x2.domain, anchor: "y2" };
  fig.layout.margin.b = T > 8 ? 140 : 110;
  if (fig.layout.shapes?.[0]) Object.assign(fig.layout.shapes[0], { x0: position - 0.5, x1: position + 0.5 });
  const ann = fig.layout.annotations?.[0];
  if (ann) ann.text = ann.text.replace(/\d+ \(.*\)$/, esc(`${position} (${tokens[position]})`));
  thin(fig);
  return fig;
}

/** Stop 8 (viz.steps.topk_bars, as ui.present.views.step_figures draws a step): the step's candidates, each
 * bar styled as figures.json's chosen (first) or other (second) bar, inside or outside (web/figures.py). */
function topkBars(sk, styles, run, step, maxLabel, insideFrom) {
  const fig = fresh(sk), st = styles.data[0], t = fig.data[0];
  let s = run.steps[step];
  if (!s.ids.includes(s.choice)) s = { ...s, ids: [...s.ids, s.choice], probs: [...s.probs, s.prob], tokens: [...s.tokens, run.outTokens[step]] };
  const chosen = s.ids.indexOf(s.choice), inside = s.probs.map((p) => p >= insideFrom);
  const pick = (arr, first) => (first ? arr[0] : arr[1]);
  Object.assign(t, { x: s.probs.map(Math.fround), y: s.ids.map((_, i) => i),
    text: s.probs.map((p, i) => `${(100 * p).toFixed(1)}%${i === chosen ? st.text[0].replace(/^[\d.]+%/, "") : ""}`),
    textposition: inside.map((x) => pick(st.textposition, x)) });
  t.marker = { ...t.marker, color: s.ids.map((_, i) => pick(st.marker.color, i === chosen)) };
  t.textfont = { ...t.textfont, color: inside.map((x) => pick(st.textfont.color, x)) };
  const labels = tokenLabels(s.tokens, maxLabel);
  Object.assign(fig.layout.yaxis, { tickvals: labels.map((_, i) => i), ticktext: labels.map((l, i) => (i === chosen ? `<b>${l}</b>` : l)) });
  fig.layout.title.text = fig.layout.title.text.replace(/\d+$/, String(step));
  fig.layout.height = 90 + 26 * Math.max(s.ids.length, 3);
  return fig;
}

/** viz.common.wrap_words. */
function wrapWords(text, width) {
  const lines = [];
  let line = "";
  for (const word of String(text).split(/\s+/).filter(Boolean)) {
    if (line && line.length + 1 + word.length > width) { lines.push(line); line = word; } else line = `${line} ${word}`.trim();
  }
  return [...lines, line];
}

/** Stop 5 (viz.masks.mask_panels, as ui.present.views.model_masks_figure draws the masks the model builds):
 * the padding, look-ahead, combined and cross-attention masks of this run, the look-ahead one ``off`` or on. */
function maskPanels(sk, run, meta, off, widthPx, maxLabel) {
  const fig = fresh(sk), src = run.srcTokens, decIn = run.decoderInput, T = decIn.length;
  const rows = stepRowLabels(decIn, run.outTokens), seen = run.srcIds.map((id) => id !== meta.pad_id);
  const decSeen = decIn.map((x, i) => x !== "<pad>" || i === 0);
  const causal = rows.map((_, a) => decIn.map((_, b) => (off || b <= a ? 1 : 0)));
  const panels = [[seen.map(() => seen.map(Number)), src, src], [causal, rows, decIn],
    [causal.map((r) => r.map((x, b) => x & decSeen[b])), rows, decIn], [rows.map(() => seen.map(Number)), rows, src]];
  const longest = Math.max(...panels.map(([, q, k]) => Math.max(q.length, k.length)));
  const fs = Math.max(6, labelFontSize(longest) - 2);
  const shown = panels.map((p, i) => i === 0 || p[1].join("\u0000") !== panels[i - 1][1].join("\u0000"));
  const gaps = panels.map((p, i) => (shown[i] ? (0.6 * fs * Math.max(...p[1].map((t) => [...String(t)].length), 1) + 8) / widthPx : 0.015));
  const w = Math.max(0.05, (0.92 - 0.02 - gaps.reduce((a, b) => a + b, 0)) / panels.length);
  let x = 0.02, extra = 0;
  panels.forEach(([z, q, k], i) => {
    x += gaps[i];
    const xd = [x, Math.min(1, x + w)], ax = i ? String(i + 1) : "";
    x += w;
    fig.data[i].z = z;
    fig.layout[`xaxis${ax}`] = { ...tokenAxis(k, maxLabel, { fontSize: fs, angle: -90 }), domain: xd, anchor: `y${ax}` };
    fig.layout[`yaxis${ax}`] = { ...tokenAxis(q, maxLabel, { fontSize: fs }), showticklabels: shown[i], domain: [0, 0.88], anchor: `x${ax}`, autorange: "reversed" };
    const ann = fig.layout.annotations[i], name = ann.text.split("<br>").join(" ");
    ann.text = wrapWords(name, Math.max(6, Math.floor(((xd[1] - xd[0]) * widthPx) / (0.6 * 11)))).join("<br>");
    ann.x = (xd[0] + xd[1]) / 2;
    extra = Math.max(extra, 14 * (ann.text.split("<br>").length - 1));
  });
  fig.layout.height = 170 + extra + Math.min(420, Math.max(220, 18 * longest));
  fig.layout.margin.t = (fig.layout.title ? 70 : 40) + extra;
  return fig;
}

const THIN_NOTE = / · every \S+ label shown \(hover names every token\)/;

/** thin_axes on a filled figure, its subtitle's note (viz.common.thin_note) said for this figure's step. */
function thin(fig, opts) {
  const k = thinAxes(fig.layout, fig.data, opts);
  const sub = fig.layout.title?.subtitle;
  if (!sub) return;
  sub.text = sub.text.replace(THIN_NOTE, "");
  if (k > 1) sub.text += ` · every ${({ 2: "2nd", 3: "3rd" })[k] ?? `${k}th`} label shown (hover names every token)`;
}

// ---------------------------------------------------------------- attention maps in words

const displayWidth = (t) => [...String(t)].reduce((w, ch) => w + (wide(ch) ? 2 : 1), 0);

/** viz.attention.label_margin: a left margin (px) wide enough for the longest label. */
const labelMargin = (tokens, fontSize = 10, least = 90, most = 220, maxLabel = 24) =>
  Math.trunc(Math.max(least, Math.min(most, 12 + 0.62 * fontSize * Math.max(0, ...tokens.map((t) => displayWidth(short(t, maxLabel)))))));

/** viz.common.grid_domains: [[x0, x1], [y0, y1]] of a rows × cols grid, row-major, row 0 at the top. */
function gridDomains(rows, cols, hgap, vgap) {
  const w = (1 - hgap * (cols - 1)) / cols, h = (1 - vgap * (rows - 1)) / rows, out = [];
  for (let r = 0; r < rows; r++) {
    const y1 = 1 - r * (h + vgap);
    for (let c = 0; c < cols; c++) {
      const x0 = c * (w + hgap);
      out.push([[Math.max(0, x0), Math.min(1, x0 + w)], [Math.max(0, y1 - h), Math.min(1, y1)]]);
    }
  }
  return out;
}

/** model.engine.results.pool_words on one head's rows (queries × keys): a word's weight as a key is the sum
 * over its pieces, as a query the mean over its pieces; rows of invalid queries (padding) blanked. */
function pooled(m, qSpans, kSpans, valid = null) {
  const keys = m.map((r) => kSpans.map((s) => s.reduce((a, j) => a + r[j], 0)));
  return qSpans.map((s, i) => (valid && !valid[i] ? kSpans.map(() => null)
    : kSpans.map((_, k) => s.reduce((a, q) => a + keys[q][k], 0) / s.length)));
}

/** viz.common.layer_head from the build's templates (figures.json). */
const layerHead = (f, l, h) => f.layer_head[`${+(l === 0)}${+(h === 0)}`].replace("{layer}", l).replace("{head}", h);

const notPad = (labels) => labels.map((x) => x !== "<pad>");

// The figures are filled as the app's are, whatever the width: on a phone the app's own phone script (phone.js,
// from ui/style.py) stacks their panels and drops crowded cells' numbers once drawn, here as in the app.
const isHeatmap = (t) => t.type === "heatmap" && t.name !== "masked";

/** Stop 4 (viz.attention.layer_heads, as ui.present.tour._layer_figure calls it): the skeleton's layer's
 * encoder heads, each its own panel, two to a row, in words. */
function layerHeads(sk, run, d, widthPx, maxLabel) {
  const fig = fresh(sk), src = words(run.srcTokens, d.spm), labels = src.labels, Q = labels.length;
  fig.data = fig.data.filter((t) => t.type !== "heatmap" || isHeatmap(t));  // one sentence: no padding to mask
  const heads = run.patterns.enc[fig.data[0].meta.layer], H = heads.length, cols = H === 1 ? 1 : 2, rows = Math.ceil(H / cols);
  const fs = labelFontSize(Q), labelPx = labelMargin(labels, fs, 90, 220, maxLabel), panelPx = Math.max(120, Math.min(320, 20 * Q));
  const underPx = labelMargin(labels, fs, 60, 180, maxLabel), titlePx = 24, area = Math.max(200, widthPx - labelPx - 70);
  const plotH = rows * panelPx + (rows - 1) * (underPx + titlePx);
  const doms = gridDomains(rows, cols, Math.min(0.45, (labelPx + 10) / area), (underPx + titlePx) / plotH);
  for (const t of fig.data.filter(isHeatmap)) t.z = pooled(heads[t.meta.head], src.spans, src.spans, notPad(labels));
  heads.forEach((_, h) => {
    const ax = h ? String(h + 1) : "", [xd, yd] = doms[h];
    fig.layout[`xaxis${ax}`] = { ...tokenAxis(labels, maxLabel, { fontSize: fs, angle: -90 }), domain: xd, anchor: `y${ax}` };
    fig.layout[`yaxis${ax}`] = { ...tokenAxis(labels, maxLabel, { fontSize: fs }), domain: yd, anchor: `x${ax}`, autorange: "reversed" };
    Object.assign(fig.layout.annotations[h], { x: (xd[0] + xd[1]) / 2, y: yd[1] });
  });
  Object.assign(fig.layout.margin, { l: labelPx, r: 70, b: underPx });
  thin(fig);
  fig.layout.height = Math.max(plotH + fig.layout.margin.t + underPx, fig.layout.margin.t + underPx + PLOT_ROOM);
  fig.layout.coloraxis.colorbar.len = Math.min(1, 300 / plotH);
  return fig;
}

const PLOT_ROOM = 120;  // viz.common.PLOT_ROOM: px a fixed-height figure keeps between its margins
const SHOW_VALUES_CELLS = 300;  // viz.attention.single_head: cells up to which each shows its weight

/** Stop 7 (viz.attention.single_head, as ui.present.views.attention_figure draws a head): the cross-attention
 * head the tour picks (crossHead), rows "input → produced", in words. */
function crossHeadFigure(sk, run, d, pick, f) {
  const fig = fresh(sk), { l, h } = crossHead(run, d, pick), maxLabel = f.max_label;
  fig.data = fig.data.filter(isHeatmap);  // one sentence: no padding to mask
  const src = words(run.srcTokens, d.spm), out = words(run.outTokens, d.spm), decIn = words(run.decoderInput, d.spm);
  const q = decIn.labels.length === out.labels.length ? stepRowLabels(decIn.labels, out.labels) : decIn.labels, k = src.labels;
  const t = fig.data[0], was = layerHead(f, t.meta.layer, t.meta.head), now = layerHead(f, l, h);
  const n = Math.max(q.length, k.length), fs = labelFontSize(n);
  t.z = pooled(run.patterns.cross[l][h], decIn.spans, src.spans, notPad(decIn.labels));
  t.meta = { ...t.meta, layer: l, head: h };
  t.hovertemplate = t.hovertemplate.replace(was, now);
  fig.layout.title.text = fig.layout.title.text.replace(was, now);
  if (q.length * k.length <= SHOW_VALUES_CELLS) Object.assign(t, { texttemplate: "%{z:.2f}", textfont: { size: Math.max(7, fs - 3) } });
  else { delete t.texttemplate; delete t.textfont; }
  const cut = [...q, ...k].some((x) => short(x, maxLabel) !== String(x));
  if (cut) t.customdata = q.map((a) => k.map((b) => [esc(a), esc(b)])); else delete t.customdata;
  const { xaxis: x0, yaxis: y0 } = fig.layout;
  fig.layout.xaxis = { ...tokenAxis(k, maxLabel, { fontSize: fs, angle: n > 8 ? -60 : null }), title: x0.title };
  fig.layout.yaxis = { ...tokenAxis(q, maxLabel, { fontSize: fs }), autorange: "reversed", title: y0.title };
  fig.layout.height = 140 + Math.min(640, Math.max(260, 26 * q.length));
  thin(fig);
  return fig;
}

const MINI_ROW_PX = 12, MINI_SRC_LABEL = 9, MINI_ROW_LABEL = 14;  // viz.steps.heads_mini: label spacing, lengths

/** Stop 11 (viz.steps.heads_mini, as ui.present.views.watch_heads draws it in words): every head's cross-
 * attention over the output words decoded up to step ``pick`` (every step where none is picked). */
function headsMini(sk, run, d, pick, f) {
  const fig = fresh(sk), src = words(run.srcTokens, d.spm), out = words(run.outTokens, d.spm), n = run.outTokens.length;
  const upTo = pick === undefined || pick === null || pick === "" ? n : Math.max(1, Math.min(+pick + 1, n));
  const spans = out.spans.map((s) => s.filter((i) => i < upTo)).filter((s) => s.length);
  const cross = run.patterns.cross, L = cross.length, H = cross[0].length, S = src.labels.length;
  const T = spans.length, Q = Math.max(T, out.labels.length, 1);
  const rowLabels = stepRowLabels([d.spm.pieces[d.meta.decoder_start_id], ...out.labels.slice(0, -1)], out.labels);
  const percent = (x) => Math.round(Math.min(1, Math.max(0, Number.isFinite(x) ? x : 0)) * 100);
  for (const t of fig.data.filter(isHeatmap)) {
    const { layer: l, head: h } = t.meta;
    Object.assign(t, { z: pooled(cross[l][h], spans, src.spans).map((r) => r.map(percent)), x0: h * (S + 1), y0: l * (Q + 1) });
  }
  const height = fig.layout.height - 70, step = Math.max(1, Math.ceil((MINI_ROW_PX * L * (Q + 1)) / Math.max(1, height - 90)));
  const srcText = tokenLabels(src.labels.map((x) => short(x, MINI_SRC_LABEL)), f.max_label);
  const labels = [...rowLabels.slice(0, Q), ...Array(Math.max(0, Q - rowLabels.length)).fill("")];
  const rows = tokenLabels(labels.map((x) => short(x, MINI_ROW_LABEL)), f.max_label), kept = [];
  for (let i = 0; i < Q; i += step) kept.push(i);
  const { xaxis, yaxis } = fig.layout;
  fig.layout.xaxis = { ...xaxis, tickvals: Array.from({ length: H * S }, (_, i) => Math.floor(i / S) * (S + 1) + (i % S)),
    ticktext: Array.from({ length: H }, () => srcText).flat(), showticklabels: true, range: [-0.5, H * (S + 1) - 1.5] };
  fig.layout.yaxis = { ...yaxis, tickvals: kept, ticktext: kept.map((i) => rows[i]), range: [L * (Q + 1) - 1.5, -0.5] };
  fig.layout.shapes.forEach((r, i) => {
    const l = Math.floor(i / H), h = i % H;
    Object.assign(r, { x0: h * (S + 1) - 0.5, x1: h * (S + 1) + S - 0.5, y0: l * (Q + 1) - 0.5, y1: l * (Q + 1) + Q - 0.5 });
  });
  fig.layout.annotations.forEach((a, i) => {
    if (i < H) a.x = i * (S + 1) + (S - 1) / 2; else a.y = (i - H) * (Q + 1) + (Q - 1) / 2;
  });
  const sub = fig.layout.title.subtitle;
  if (sub) sub.text = sub.text.replace(/^\d+ of \d+ rows/, `${T} of ${Q} rows`);
  thin(fig, { step: { xaxis: Math.ceil((MINI_ROW_PX * H * (S + 1)) / f.mini_width_px), yaxis: 1 }, block: { xaxis: S } });
  return fig;
}

// ---------------------------------------------------------------- one head, one query

const STRIP_PX = 28, TITLE_PX = 26, DIM_LABELS_PX = 22, ALPHA_TEXT_MAX = 16, KEY_ROW_LABEL = 12;  // viz.computation's
const absMax = (xs, dflt = 1e-6) => { const m = Math.max(...xs.filter(Number.isFinite).map(Math.abs)); return m > 0 ? m : dflt; };

/** (1, H, A, B) tensor: head ``h``'s A rows. */
const headRows = (t, h) => { const [, , A, B] = t.dims; return Array.from({ length: A }, (_, a) => Array.from(t.data.subarray((h * A + a) * B, (h * A + a + 1) * B))); };

/** viz.computation._column_domains: the panels' y domains, stacked per column under their titles; the height. */
function columnDomains(panels, keysPx) {
  const tops = [], heights = [], used = {}, above = {};
  for (const { col, keys, showX } of panels) {
    tops.push((used[col] ?? 0) + TITLE_PX + (above[col] ?? 0));
    heights.push(keys ? keysPx : STRIP_PX);
    used[col] = tops.at(-1) + heights.at(-1);
    above[col] = showX ? DIM_LABELS_PX : 0;
  }
  const total = Math.max(...Object.values(used));
  return { doms: tops.map((t, i) => [1 - (t + heights[i]) / total, 1 - t / total]), total };
}

/** Stop 3 (viz.computation.head_computation, as ui.present.inside.head_figure draws export.TOUR_HEAD): one
 * query's q, the keys, the scores, the mask, α, the values, z = αV and the head's output after W_O. */
function headComputation(sk, run, query, maxLabel) {
  const fig = fresh(sk), toks = run.srcTokens, Tk = toks.length, head = 0;
  const names = Object.keys(run.enc), v = names.find((n) => n.startsWith("enc_v_")), res = names.find((n) => n.startsWith("enc_result_"));
  const q = headRows(run.enc.enc_q_0, head)[query], K = headRows(run.enc.enc_k_0, head), V = headRows(run.enc[v], head);
  const scores = headRows(run.enc.enc_scores_0, head)[query], alpha = headRows(run.enc.enc_pattern_0, head)[query];
  const z = q.map((_, c) => alpha.reduce((a, w, j) => a + w * V[j][c], 0));
  const out = row(run.enc[res], query);
  const qk = absMax([...q, ...K.flat()]), vz = absMax([...V.flat(), ...z]), sLo = absMax(scores);
  const r = (m) => m.map((x) => x.map(rounded));
  const panels = [[[q], qk, 0, false, false], [K, qk, 0, true, true], [[scores], sLo, 0, false, false], [[scores], sLo, 0, false, false],
    [[alpha], 1, 0, false, true], [V, vz, 1, true, true], [[z], vz, 1, false, false], [[out], absMax(out), 1, false, true]]
    .map(([m, top, col, keys, showX]) => ({ m, top, col, keys, showX }));
  fig.data = fig.data.filter(isHeatmap);  // one sentence: no key hidden
  panels.forEach((p, i) => Object.assign(fig.data[i], { z: r(p.m), zmax: p.top, zmin: i === 4 ? 0 : -p.top }));
  if (Tk <= ALPHA_TEXT_MAX) {
    const text = [alpha.map((x) => rounded(x)).map((x) => (x >= 0.995 ? "1" : x.toFixed(2).replace(/^0/, "")))];
    Object.assign(fig.data[4], { text, texttemplate: "%{text}", textfont: fig.data[4].textfont ?? { size: 9 } });
  } else { delete fig.data[4].text; delete fig.data[4].texttemplate; }
  const { doms, total } = columnDomains(panels, Math.max(60, Math.min(420, 18 * Tk)));
  const fs = labelFontSize(Tk), keyAxis = (n, show, extra = {}) => ({ ...tokenAxis(toks.map((t) => short(t, n)), maxLabel, { fontSize: fs, ...extra }), showticklabels: show });
  panels.forEach((p, i) => {
    const ax = i ? String(i + 1) : "", ya = fig.layout[`yaxis${ax}`];
    const xa = fig.layout[`xaxis${ax}`];
    if ([2, 3, 4].includes(i)) fig.layout[`xaxis${ax}`] = { ...keyAxis(maxLabel, Boolean(p.showX), { angle: -60 }), domain: xa.domain, anchor: xa.anchor, ...(xa.matches ? { matches: xa.matches } : {}) };
    else fig.layout[`xaxis${ax}`] = { ...xa, showticklabels: Boolean(p.showX) };
    fig.layout[`yaxis${ax}`] = p.keys ? { ...keyAxis(KEY_ROW_LABEL, true), autorange: "reversed", domain: doms[i], anchor: ya.anchor } : { ...ya, domain: doms[i] };
    Object.assign(fig.layout.annotations[i], { x: (xa.domain[0] + xa.domain[1]) / 2, y: doms[i][1] });
  });
  const label = `${query}: ${toks[query]}`;
  fig.layout.title.text = fig.layout.title.text.replace(/query \d+: .*$/, esc(`query ${label}`));
  fig.layout.annotations[0].text = fig.layout.annotations[0].text.replace(/ of “.*”$/, String(toks[query]) ? ` of “${esc(short(toks[query], maxLabel))}”` : "");
  fig.layout.height = total + 60 + 90;
  thin(fig);
  return fig;
}

/** Stop 9 (viz.tour.contribution_bars, as ui.present.tour.stop_moved calls it): each source word's ALTI+ share
 * and the output prefix's (last, grey), the word the text names dark (``m``: tour.js moved's bars). */
function contributionBars(sk, m, colors, maxLabel) {
  const fig = fresh(sk), t = fig.data[0], n = m.labels.length;
  Object.assign(t, { x: m.shares.map(Math.fround), y: m.labels.map((_, i) => i), text: m.shares.map((x) => `${(100 * x).toFixed(1)}%`) });
  t.marker = { ...t.marker, color: m.labels.map((_, i) => (i === n - 1 ? colors.prefix : i === m.top ? colors.top : colors.other)) };
  fig.layout.height = 90 + 24 * Math.max(n, 3);
  fig.layout.xaxis = { ...fig.layout.xaxis, range: [0, Math.max(1e-6, ...m.shares) * 1.25] };
  fig.layout.yaxis = { ...tokenAxis(m.labels, maxLabel), autorange: "reversed" };
  fig.layout.title.text = esc(m.title);
  return fig;
}

/** The stops whose figure this page fills (the others: the app's, stored for the example sentence). */
export const FILLED = new Set([1, 2, 3, 4, 5, 6, 7, 8, 9, 11]);
export const POS_STOP = 2, STEP_STOP = 8;  // positional encoding (its pick: "off"), one decoding step

/** The content token the app's tour starts on (TourRun.content_src). */
export const contentSrc = (run) => Math.max(0, run.srcTokens.findIndex((t) => !SPECIAL.has(t)));

const posChoices = (labels, skipSpecial = true) => {
  const all = labels.map((t, i) => [`${i}: ${t}`, String(i)]);
  const kept = skipSpecial ? all.filter(([, v]) => !SPECIAL.has(labels[+v])) : all;
  return kept.length ? kept : all;
};

/** The app's trial at stop ``number`` for this run ({label, choices [[label, value]], value}); ``stored``: the
 * stop as the build stored it for the example sentence (its label and fixed choices); ``first``: the value the
 * stop opens on where the run decides it (tour.js). Null: no trial here. */
export function trialOf(number, run, stored, pick, example, first = undefined, own = null) {
  const trial = stored?.trial;
  if (!trial) return null;
  let choices = own ?? trial.choices, value = pick;
  if (number === 1 || number === 3) { choices = posChoices(run.srcTokens); value ??= String(contentSrc(run)); }
  if (number === 11) { choices = run.outTokens.map((x, k) => [`step ${k}: ${x}`, String(k)]); value ??= String(choices.length - 1); }
  if (number === 9 && !example && !own) return null;  // its pick names the word ALTI+ found (``own``: the page's)
  if (number === 6) { choices = posChoices(run.decoderInput, false); value ??= String(Math.min(1, run.decoderInput.length - 1)); }
  value ??= first ?? choices[0][1];
  return { label: trial.label, choices, value };
}

/** Stop ``number``'s figure for ``run``, the skeleton filled (null: the page does not compute this one). ``pick``:
 * the stop's pick, or what the stop's figure shows where tour.js computed it (stop 8's step, stop 9's bars). */
export async function stopFigure(number, run, d, skeleton, pick, plotPx) {
  if (!FILLED.has(number) || !skeleton) return null;
  if (number === 6 && d.meta.norm_first === false) return null;  // post-norm shares need the server
  const f = await FIGURES, maxLabel = f.max_label;
  if (number === 1) return embeddingSteps(skeleton, run, d.meta, +(pick ?? contentSrc(run)), true, maxLabel);
  if (number === 2) {
    const i = Math.min(contentSrc(run) + 1, run.srcTokens.length - 1);
    return embeddingSteps(skeleton, run, d.meta, i, pick !== "off", maxLabel);
  }
  if (number === 5) return maskPanels(skeleton, run, d.meta, pick === "off", plotPx, maxLabel);
  if (number === 6) return residualNorms(skeleton, run, +(pick ?? Math.min(1, run.decoderInput.length - 1)), maxLabel);
  if (number === 8) return topkBars(skeleton, f.topk_bars, run, +pick, maxLabel, f.inside_from);
  if (number === 3) return headComputation(skeleton, run, +(pick ?? contentSrc(run)), maxLabel);
  if (number === 4) return layerHeads(skeleton, run, d, plotPx, maxLabel);
  if (number === 7) return crossHeadFigure(skeleton, run, d, pick, f);
  if (number === 11) return headsMini(skeleton, run, d, pick, f);
  if (number === 9) return pick?.labels ? contributionBars(skeleton, pick, f.contribution_colors, maxLabel) : null;
  return null;
}
