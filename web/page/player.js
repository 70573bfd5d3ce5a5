// The step player: the decode walked one token at a time. At each step the prefix written so far, the source
// words that step's cross-attention reads (one head, or the layer's mean), drawn as lines from the step to
// them, and the model's top candidates as bars. Sampling (temperature, top-k) draws from a seeded generator,
// so the same seed gives the same tokens, and a link keeps it; any candidate can be forced and the decode
// goes on greedily from there, as the app's "Continue from here" (model.engine.branching.continue_from).

import { topK, TOP_K } from "./engine.js";
import { toText } from "./text.js";

const Plotly = () => window.Plotly;
const WORD = "\u2581";
const SPECIAL = /^<.*>$/;
export const LINK = { temperature: "temperature", topK: "top_k", seed: "seed" };  // the link's keys

/** A seeded generator of uniform numbers in [0, 1) (mulberry32): the same seed, the same sequence. */
export function seeded(seed) {
  let a = (Number(seed) >>> 0) || 0;
  return () => {
    a = (a + 0x6D2B79F5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** Softmax probability of token ``i`` over the whole vocabulary (the model's own, whatever was chosen). */
function probOf(logits, i) {
  let max = -Infinity, sum = 0;
  for (const x of logits) if (x > max) max = x;
  for (const x of logits) sum += Math.exp(x - max);
  return Math.exp(logits[i] - max) / sum;
}

/** A token drawn from logits / temperature among the ``k`` best generable tokens (0: all of them). */
export function sample(logits, never, { temperature, topK: k }, rand) {
  const ids = [];
  for (let i = 0; i < logits.length; i++) if (!never.includes(i)) ids.push(i);
  ids.sort((a, b) => logits[b] - logits[a] || a - b);
  const kept = k > 0 ? ids.slice(0, k) : ids;
  const top = logits[kept[0]] / temperature;
  const w = kept.map((i) => Math.exp(logits[i] / temperature - top));
  let r = rand() * w.reduce((s, x) => s + x, 0);
  for (let j = 0; j < kept.length; j++) { r -= w[j]; if (r < 0) return kept[j]; }
  return kept[kept.length - 1];
}

/** (1, H, 1, S) -> H rows of S numbers: one step's cross-attention row in every head of a layer. */
function stepRows(t) {
  const [, H, , S] = t.dims;
  return Array.from({ length: H }, (_, h) => Array.from(t.data.subarray(h * S, (h + 1) * S)));
}

/** Decode source ids through the direction's graphs (Direction.encode / Direction.step, as greedy does):
 * ``prefix`` forced token for token, then greedy, or sampled when ``temperature`` > 0. Every step's top-k and
 * its cross-attention row in every layer and head. ``nReal``: the source's length without <pad> (the step
 * budget, as the engine counts it for a padded batch). The engine's budget, widened for a prefix. */
export async function decode(d, ids, { prefix = [], temperature = 0, topK: k = 0, seed = 0, sw = {}, nReal = ids.length } = {}) {
  const { src, out: enc } = await d.encode(ids, sw);
  let budget = Math.max(1, Math.min(100, d.meta.max_len - 1, 2 * nReal + 10));
  if (prefix.length) budget = Math.min(Math.max(budget, prefix.length + 1), d.meta.max_len - 1);
  const L = d.meta.decoder_layers, cached = sw.causal !== false, rand = seeded(seed);
  const past = d.meta.decoder_inputs.filter((x) => x.startsWith("past_"));
  const cross = Array.from({ length: L }, (_, l) => `cross_pattern_${l}`);
  const fetch = ["logits", ...cross, ...(cached ? past.map((n) => n.replace("past_", "present_")) : [])];
  const ys = [d.meta.decoder_start_id], steps = [];
  let cache = d.emptyCache();
  for (let t = 0; t < budget; t++) {
    const out = await d.step(cached ? ys.slice(-1) : ys, enc.memory, src, sw, cached ? cache : null, fetch);
    if (cached) cache = Object.fromEntries(past.map((n) => [n, out[n.replace("past_", "present_")]]));
    const logits = out.logits.data, top = topK(logits, d.meta.never_generated, TOP_K);
    const forced = t < prefix.length;
    const token = forced ? prefix[t] : temperature > 0
      ? sample(logits, d.meta.never_generated, { temperature, topK: k }, rand) : top.choice;
    // without the cache the whole prefix is recomputed: the step's row is the last one
    const rows = cross.map((n) => (cached ? stepRows(out[n]) : lastRows(out[n])));
    steps.push({ token, prob: probOf(logits, token), ids: top.ids, probs: top.probs, cross: rows, forced });
    ys.push(token);
    if (token === d.meta.eos_id) break;
  }
  return { ids: ys.slice(1), steps };
}

function lastRows(t) {  // (1, H, T, S) -> each head's last row
  const [, H, T, S] = t.dims;
  return Array.from({ length: H }, (_, h) => Array.from(t.data.subarray((h * T + T - 1) * S, (h * T + T) * S)));
}

/** The player's decode from a run the page already holds (its steps and cross-attention patterns). */
export function fromRun(run) {
  const L = run.patterns.cross.length;
  const steps = run.steps.map((s, t) => ({
    token: run.outIds[t], prob: s.prob, ids: s.ids, probs: s.probs, forced: false,
    cross: Array.from({ length: L }, (_, l) => run.patterns.cross[l].map((head) => head[t])),
  }));
  return { ids: run.outIds, steps };
}

/** Source pieces grouped into words (a piece that starts with ▁, or a special token, opens one). */
export function sourceWords(tokens) {
  const groups = [];
  tokens.forEach((p, i) => {
    const opens = SPECIAL.test(p) || p.startsWith(WORD) || !groups.length || SPECIAL.test(tokens[i - 1]);
    if (opens) groups.push({ label: p.replace(WORD, ""), idx: [i] });
    else { const g = groups[groups.length - 1]; g.label += p; g.idx.push(i); }
  });
  return groups;
}

/** A piece as a word reads: the ▁ dropped; a piece inside a word marked with "…" before it. */
function wordOf(p) {
  if (SPECIAL.test(p)) return p;
  return p.startsWith(WORD) ? p.slice(1) : `…${p}`;
}

/** The app's figure skeletons, written when the site was built (web/figures.py). */
export const FIGURES = fetch(new URL("figures.json", import.meta.url)).then((r) => {
  if (!r.ok) throw new Error(`figures.json: ${r.status}`);
  return r.json();
});
FIGURES.catch(() => {});

/** A token as a Plotly label, as viz.common.esc writes one. */
export function esc(t) {
  return String(t).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&#34;").replace(/'/g, "&#39;");
}

export const wide = (ch) => /[\p{Script=Han}\p{Script=Hiragana}\p{Script=Katakana}\p{Script=Hangul}\u3000-\u303f\uff01-\uff60]/u.test(ch);

/** viz.common.short: cut to ``n`` display columns (a wide character counts two) with "…". */
export function short(s, n) {
  s = String(s);
  let w = 0;
  for (const ch of s) w += wide(ch) ? 2 : 1;
  if (w <= n) return s;
  let out = "";
  w = 0;
  for (const ch of s) { w += wide(ch) ? 2 : 1; if (w > n - 1) break; out += ch; }
  return `${out}…`;
}

/** viz.common.token_labels: escaped, cut to ``n`` display columns, a blank token shown as ␣, and a token
 * that occurs twice numbered with its position as a subscript. */
export function tokenLabels(tokens, n) {
  const labels = tokens.map((t) => (String(t).trim() ? esc(short(t, n)) : "␣"));
  const count = new Map();
  labels.forEach((l) => count.set(l, (count.get(l) ?? 0) + 1));
  const sub = (i) => String(i).replace(/\d/g, (d) => "₀₁₂₃₄₅₆₇₈₉"[d]);
  return labels.map((l, i) => (count.get(l) > 1 ? l + sub(i) : l));
}

// ---------------------------------------------------------------- the section

const el = (tag, props = {}, ...kids) => { const e = Object.assign(document.createElement(tag), props); e.append(...kids); return e; };

export class Player {
  constructor(root, direction) {
    this.root = root;
    this.direction = direction;  // name -> Promise<Direction> (app.js's loader)
    this.run = null;
    this.decoded = null;
    this.at = 0;
    this.build();
  }

  build() {
    const num = (id, label, value, attrs) => {
      const input = el("input", { id, type: "number", value, ...attrs });
      return [el("label", { htmlFor: id, textContent: label }), input];
    };
    this.prev = el("button", { type: "button", id: "pl-prev", textContent: "◀", ariaLabel: "previous step" });
    this.next = el("button", { type: "button", id: "pl-next", textContent: "▶", ariaLabel: "next step" });
    this.slider = el("input", { type: "range", id: "pl-slider", min: 0, max: 0, value: 0, ariaLabel: "step" });
    this.label = el("span", { id: "pl-step" });
    this.head = el("select", { id: "pl-head", ariaLabel: "Cross-attention head" });
    this.pieces = el("input", { type: "checkbox", id: "pl-pieces" });
    this.prefix = el("p", { id: "pl-prefix", className: "out" });
    this.lines = el("div", { id: "pl-lines", className: "plot" });
    this.bars = el("div", { id: "pl-bars", className: "plot" });
    this.cands = el("div", { id: "pl-cands", className: "cands" });
    this.note = el("p", { id: "pl-note", className: "small" });
    const [tl, temp] = num("pl-temp", "temperature", 0, { min: 0, max: 5, step: 0.1 });
    const [kl, k] = num("pl-topk", "top-k", 0, { min: 0, max: 1000, step: 1 });
    const [sl, seed] = num("pl-seed", "seed", 1, { min: 0, step: 1 });
    Object.assign(this, { temp, k, seed });
    this.sampleBtn = el("button", { type: "button", id: "pl-sample", textContent: "Decode again" });
    this.prev.addEventListener("click", () => this.show(this.at - 1));
    this.next.addEventListener("click", () => this.show(this.at + 1));
    this.slider.addEventListener("input", () => this.show(+this.slider.value));
    this.head.addEventListener("change", () => this.show(this.at));
    this.pieces.addEventListener("change", () => this.show(this.at));
    this.sampleBtn.addEventListener("click", () => this.redecode());
    this.root.replaceChildren(
      el("div", { className: "controls" }, this.prev, this.slider, this.next, " ", this.label),
      el("div", { className: "controls" }, this.head, " ", el("label", {}, this.pieces, " pieces")),
      el("div", { className: "controls" }, tl, temp, " ", kl, k, " ", sl, seed, " ", this.sampleBtn,
        el("span", { className: "small", textContent: " temperature 0: greedy, as the app decodes; top-k 0: every token" })),
      this.prefix, this.lines, this.bars,
      el("p", { className: "small", textContent: "Pick a candidate to write it here and let the model go on greedily from there:" }),
      this.cands, this.note);
  }

  /** Sampling settings from a link's query (absent or bad: greedy). */
  readLink(q) {
    const t = Number(q.get(LINK.temperature)), k = Number(q.get(LINK.topK)), s = Number(q.get(LINK.seed));
    if (Number.isFinite(t) && t > 0) this.temp.value = String(t);
    if (Number.isInteger(k) && k > 0) this.k.value = String(k);
    if (Number.isInteger(s) && s >= 0 && q.has(LINK.seed)) this.seed.value = String(s);
  }

  settings() {
    const t = Math.max(0, Number(this.temp.value) || 0);
    return { temperature: t, topK: Math.max(0, Math.floor(Number(this.k.value) || 0)), seed: Math.max(0, Math.floor(Number(this.seed.value) || 0)) };
  }

  /** The link's sampling keys as set now (none while decoding is greedy). */
  writeLink(url) {
    const s = this.settings();
    for (const key of Object.values(LINK)) url.searchParams.delete(key);
    if (s.temperature > 0) {
      url.searchParams.set(LINK.temperature, String(s.temperature));
      if (s.topK) url.searchParams.set(LINK.topK, String(s.topK));
      url.searchParams.set(LINK.seed, String(s.seed));
    }
  }

  /** A new run: greedy steps as the page computed them, or sampled again when the settings ask for it. */
  async load(run) {
    this.run = run;
    this.dir = await this.direction(run.dir);
    this.fillHeads();
    if (this.settings().temperature > 0) return this.redecode();
    return this.set(fromRun(run), "greedy, as the app decodes");
  }

  fillHeads() {
    const keep = this.head.value, L = this.run.patterns.cross.length, H = this.run.patterns.cross[0].length;
    this.head.replaceChildren();
    for (let l = L - 1; l >= 0; l--) {
      this.head.append(new Option(`cross-attention layer ${l}, mean of heads`, `${l}:mean`));
      for (let h = 0; h < H; h++) this.head.append(new Option(`cross-attention layer ${l} head ${h}`, `${l}:${h}`));
    }
    this.head.value = [...this.head.options].some((o) => o.value === keep) ? keep : `${L - 1}:mean`;
  }

  set(decoded, how) {
    this.decoded = decoded;
    this.how = how;
    this.slider.max = String(decoded.steps.length - 1);
    const url = new URL(location.href);
    this.writeLink(url);
    history.replaceState(null, "", url);
    return this.show(0);
  }

  async redecode() {
    const s = this.settings();
    this.note.textContent = "decoding…";
    const how = s.temperature > 0 ? `sampled at temperature ${s.temperature}${s.topK ? ` from the ${s.topK} best` : ""}, seed ${s.seed}` : "greedy, as the app decodes";
    await this.set(await decode(this.dir, this.run.srcIds, s), how);
  }

  /** Force the tokens before ``step`` and candidate ``id`` at it; then greedy, as "Continue from here". */
  async continueWith(step, id) {
    const prefix = [...this.decoded.ids.slice(0, step), id];
    this.note.textContent = "decoding…";
    const got = await decode(this.dir, this.run.srcIds, { prefix });
    const name = this.dir.spm.pieces[id];
    await this.set(got, `forced prefix up to step ${step} (${wordOf(name)}), then greedy`);
    return this.show(Math.min(step, got.steps.length - 1));
  }

  tokens(ids) { return ids.map((i) => this.dir.spm.pieces[i]); }

  /** Step ``t``'s view: the prefix, the lines to the source words, the top-k bars and the candidates. */
  async show(t) {
    const steps = this.decoded.steps, n = steps.length;
    this.at = Math.max(0, Math.min(n - 1, t));
    this.slider.value = String(this.at);
    this.prev.disabled = this.at === 0;
    this.next.disabled = this.at === n - 1;
    const out = this.tokens(this.decoded.ids), s = steps[this.at];
    const input = this.at === 0 ? "<bos>" : out[this.at - 1], produced = out[this.at];
    const words = !this.pieces.checked, name = (p) => (words ? wordOf(p) : p);
    this.label.textContent = `step ${this.at} of ${n - 1}: ${name(input)} → ${name(produced)}${s.forced ? " (forced)" : ""}`;
    this.prefix.textContent = `${toText(out.slice(0, this.at + 1), this.dir.spm, this.dir.meta.tgt_lang)}  ·  ${this.how}`;
    this.prefix.dataset.tokens = out.slice(0, this.at + 1).join(" ");
    const full = toText(out, this.dir.spm, this.dir.meta.tgt_lang);
    this.note.textContent = `The whole output: “${full}”`;
    this.root.dataset.step = String(this.at);
    this.candidates(s, name);
    await Promise.all([this.drawLines(s, `${name(input)}→${name(produced)}`), this.drawBars(s, name)]);
    this.root.dataset.drawn = `${this.at}:${this.decoded.ids.join(",")}`;
  }

  /** The chosen head's (or the layer's mean) row of this step, summed over each word's pieces unless
   * pieces are asked for: (labels, weights). */
  sourceWeights(s) {
    const [l, h] = this.head.value.split(":");
    const heads = s.cross[+l], S = heads[0].length;
    const row = h === "mean" ? Array.from({ length: S }, (_, j) => heads.reduce((a, r) => a + r[j], 0) / heads.length) : heads[+h];
    if (this.pieces.checked) return [this.run.srcTokens, row];
    const groups = sourceWords(this.run.srcTokens);
    return [groups.map((g) => g.label), groups.map((g) => g.idx.reduce((a, j) => a + row[j], 0))];
  }

  async drawLines(s, rowLabel) {
    const fig = await FIGURES;
    const [labels, w] = this.sourceWeights(s);
    const max = Math.max(...w, 1e-9), y = labels.map((_, i) => i), mid = (labels.length - 1) / 2;
    const traces = labels.map((lab, i) => ({
      type: "scatter", mode: "lines", x: [0, 1], y: [i, mid], hoverinfo: "skip", showlegend: false,
      line: { color: `rgba(42,111,219,${(0.08 + 0.92 * w[i] / max).toFixed(3)})`, width: 1 + 9 * w[i] / max },
    }));
    traces.push({ type: "scatter", mode: "markers+text", x: labels.map(() => 0), y, text: labels.map((_, i) => w[i].toFixed(2)),
      textposition: "middle right", showlegend: false, customdata: labels,
      marker: { size: 14, color: w, cmin: 0, cmax: 1, colorscale: "Blues", reversescale: true, line: { color: "#2a6fdb", width: 1 } },
      hovertemplate: "%{customdata}: %{marker.color:.3f}<extra></extra>" });
    traces.push({ type: "scatter", mode: "markers", x: [1], y: [mid], showlegend: false, marker: { size: 16, color: "#e0a800" },
      hovertemplate: `${rowLabel}<extra></extra>` });
    const [l, h] = this.head.value.split(":");
    const what = h === "mean" ? `layer ${l}, mean of its heads` : `layer ${l} head ${h}`;
    return Plotly().react(this.lines, traces, {
      title: { text: `What step ${this.at} reads<br>cross-attention, ${what}`, font: { size: 14 } },
      height: Math.max(260, 26 * labels.length + 90), margin: { l: 110, r: 110, t: 60, b: 50 },
      xaxis: { range: [-0.05, 1.05], tickvals: [0, 1], ticktext: ["source", rowLabel], title: { text: fig.step_row_title }, fixedrange: true },
      yaxis: { tickvals: y, ticktext: labels, autorange: "reversed", title: { text: this.pieces.checked ? "source pieces" : "source words" }, fixedrange: true },
    }, { responsive: true, displaylogo: false });
  }

  /** The app's top-k bars (viz.steps.topk_bars, its skeleton written at build: web/figures.py) filled with
   * this step's candidates: each bar styled as the skeleton's chosen or other bar, inside or outside. */
  async drawBars(s, name) {
    const fig = await FIGURES, sk = fig.topk_bars;
    if (!s.ids.includes(s.token)) s = { ...s, ids: [...s.ids, s.token], probs: [...s.probs, s.prob] };  // as the app: the chosen one shown
    const chosen = s.ids.indexOf(s.token);
    const trace = structuredClone(sk.data[0]), layout = structuredClone(sk.layout);
    const pick = (arr, first) => (first ? arr[0] : arr[1]), inside = s.probs.map((p) => p >= fig.inside_from);
    const labels = tokenLabels(this.tokens(s.ids).map(name), fig.max_label);
    Object.assign(trace, { x: s.probs, y: s.ids.map((_, i) => i), text: s.probs.map((p, i) => `${(100 * p).toFixed(1)}%${i === chosen ? "  ← chosen" : ""}`),
      textposition: inside.map((x) => pick(sk.data[0].textposition, x)) });
    trace.marker = { ...trace.marker, color: s.ids.map((_, i) => pick(sk.data[0].marker.color, i === chosen)) };
    trace.textfont = { ...trace.textfont, color: inside.map((x) => pick(sk.data[0].textfont.color, x)) };
    layout.title.text = esc(`Top-${s.ids.length} next tokens at step ${this.at}`);  // the app's title
    layout.height = 90 + 26 * Math.max(s.ids.length, 3);
    Object.assign(layout.yaxis, { tickvals: labels.map((_, i) => i), ticktext: labels.map((l, i) => (i === chosen ? `<b>${l}</b>` : l)),
      title: { text: "candidate" } });
    return Plotly().react(this.bars, [trace], layout, { responsive: true, displaylogo: false });
  }

  candidates(s, name) {
    const buttons = s.ids.filter((id) => !this.dir.meta.never_generated.includes(id)).map((id) => {
      const b = el("button", { type: "button", className: id === s.token ? "cand chosen" : "cand",
        textContent: `${name(this.dir.spm.pieces[id])} ${(100 * s.probs[s.ids.indexOf(id)]).toFixed(1)}%` });
      b.dataset.id = String(id);
      b.addEventListener("click", () => this.continueWith(this.at, id));
      return b;
    });
    this.cands.replaceChildren(...buttons);
  }
}
