// Masks compared: one switch off at a time (the look-ahead mask, the padding mask, the positional encoding),
// the attention it changes as trained and switched, side by side with their difference, and the output words
// the switch changed marked. The padding mask is shown on a batch of two sentences, so that <pad> exists.

import { decode, FIGURES, tokenLabels } from "./player.js";
import { toText } from "./text.js";

const Plotly = () => window.Plotly;
const el = (tag, props = {}, ...kids) => { const e = Object.assign(document.createElement(tag), props); e.append(...kids); return e; };
const pct = (x) => `${(100 * x).toFixed(1)}%`;

/** Each switch: its engine switch (model.engine.config.Interventions), the attention kind it changes, words. */
export const SWITCHES = {
  causal: { sw: { causal: false }, kind: "self", name: "look-ahead mask", title: "decoder self-attention" },
  padding: { sw: { padding: false }, kind: "enc", name: "padding mask", title: "encoder self-attention" },
  pos: { sw: { pos: false }, kind: "enc", name: "positional encoding", title: "encoder self-attention" },
};

/** A longer second sentence per source language, for the padded batch (any other can be typed). */
const SECOND = {
  de: "Ein Mann in einem blauen Hemd steht auf einer Leiter und putzt die Fenster eines hohen Gebäudes.",
  en: "A man in a blue shirt is standing on a ladder and cleaning the windows of a tall building.",
  fr: "Un homme en chemise bleue est debout sur une échelle et nettoie les fenêtres d'un grand immeuble.",
  cs: "Muž v modré košili stojí na žebříku a myje okna vysoké budovy.",
};

function heads(t) {  // (1, H, A, B) tensor -> H arrays of A rows of B numbers
  const [, H, A, B] = t.dims, out = [];
  for (let h = 0; h < H; h++) out.push(Array.from({ length: A }, (_, a) => Array.from(t.data.subarray((h * A + a) * B, (h * A + a + 1) * B))));
  return out;
}

/** Output words of ``changed`` not in a longest common subsequence with ``base``: [word, marked] pairs. */
export function markChanged(base, changed) {
  const a = base.split(" "), b = changed.split(" "), n = a.length, m = b.length;
  const L = Array.from({ length: n + 1 }, () => new Array(m + 1).fill(0));
  for (let i = n - 1; i >= 0; i--) for (let j = m - 1; j >= 0; j--) L[i][j] = a[i] === b[j] ? L[i + 1][j + 1] + 1 : Math.max(L[i + 1][j], L[i][j + 1]);
  const out = [];
  let i = 0, j = 0;
  while (j < m) {
    if (i < n && a[i] === b[j]) { out.push([b[j], false]); i++; j++; } else if (i < n && L[i + 1][j] >= L[i][j + 1]) i++;
    else { out.push([b[j], true]); j++; }
  }
  return out;
}

export class Masks {
  constructor(root, direction) {
    this.root = root;
    this.direction = direction;
    this.run = null;
    this.last = null;
    this.buttons = Object.entries(SWITCHES).map(([key, s]) => {
      const b = el("button", { type: "button", id: `mask-${key}`, textContent: `${s.name} off` });
      b.addEventListener("click", () => this.compare(key).catch((e) => this.fail(e)));
      return b;
    });
    this.head = el("select", { id: "mask-head", ariaLabel: "Layer and head" });
    this.head.addEventListener("change", () => this.last && this.draw());
    this.second = el("textarea", { id: "mask-second", rows: 2, ariaLabel: "A second sentence for the padded batch" });
    this.result = el("div", { id: "mask-result" });
    this.why = el("p", { id: "mask-why", className: "notice", hidden: true });
    this.plot = el("div", { id: "mask-plot", className: "plot" });
    root.replaceChildren(
      el("p", { className: "small", textContent: "Switch one off: the maps as trained and switched, their difference, and the output words that changed." }),
      el("div", { className: "controls" }, ...this.buttons, " ", this.head),
      el("label", { htmlFor: "mask-second", className: "wrap", textContent: "Second sentence of the batch (the padding mask needs a <pad>: the shorter sentence is filled with them)" }),
      this.second, this.result, this.why, this.plot);
  }

  /** A new sentence: the old comparison goes. */
  reset(run) {
    this.run = run;
    this.last = null;
    this.result.replaceChildren();
    this.why.hidden = true;
    this.plot.dataset.drawn = "";
    if (window.Plotly && this.plot.data) Plotly().purge(this.plot);
    this.plot.replaceChildren();
    const L = run.patterns.enc.length, H = run.patterns.enc[0].length;
    this.head.replaceChildren();
    for (let l = L - 1; l >= 0; l--) {
      this.head.append(new Option(`layer ${l}, mean of heads`, `${l}:mean`));
      for (let h = 0; h < H; h++) this.head.append(new Option(`layer ${l} head ${h}`, `${l}:${h}`));
    }
    this.head.value = `${L - 1}:mean`;
    this.direction(run.dir).then((d) => { if (!this.second.value || this.second.dataset.auto) { this.second.value = SECOND[d.meta.src_lang] ?? ""; this.second.dataset.auto = "1"; } });
  }

  fail(e) {
    this.why.textContent = `That did not work in this browser: ${e.message}. The page still works: try again.`;
    this.why.hidden = false;
  }

  /** Switch ``key`` off: both maps (same tokens on the axes), both outputs, and why nothing changed if so. */
  async compare(key) {
    const run = this.run, d = await this.direction(run.dir), s = SWITCHES[key];
    this.buttons.forEach((b) => { b.disabled = true; });
    try {
      const got = key === "padding" ? await this.padded(d) : key === "causal" ? await this.causal(d, run) : await this.positions(d, run);
      if (!got) return;
      const text = (ids) => toText(ids.map((i) => d.spm.pieces[i]), d.spm, d.meta.tgt_lang);
      got.base.text = text(got.base.ids);
      got.off.text = text(got.off.ids);
      this.last = { key, ...s, ...got };
      this.words();
      await this.draw();
    } finally {
      this.buttons.forEach((b) => { b.disabled = false; });
    }
  }

  async causal(d, run) {
    const sw = SWITCHES.causal.sw, { src, out: enc } = await d.encode(run.srcIds, sw);
    const forced = await d.step([d.meta.decoder_start_id, ...run.outIds.slice(0, -1)], enc.memory, src, sw);
    const off = await decode(d, run.srcIds, { sw });
    const outs = run.outIds.map((i) => d.spm.pieces[i]);
    const rows = run.decoderInput.map((inp, t) => `${inp}→${outs[t]}`);  // the app's step_row_labels
    return { baseMaps: run.patterns.self, offMaps: Array.from({ length: run.patterns.self.length }, (_, l) => heads(forced[`self_pattern_${l}`])),
      rows, cols: run.decoderInput, base: { ids: run.outIds }, off: { ids: off.ids }, sentence: run.srcText };
  }

  async positions(d, run) {
    const sw = SWITCHES.pos.sw, { out: enc } = await d.encode(run.srcIds, sw);
    const off = await decode(d, run.srcIds, { sw });
    return { baseMaps: run.patterns.enc, offMaps: Array.from({ length: run.patterns.enc.length }, (_, l) => heads(enc[`enc_pattern_${l}`])),
      rows: run.srcTokens, cols: run.srcTokens, base: { ids: run.outIds }, off: { ids: off.ids }, sentence: run.srcText };
  }

  /** The run's sentence and the second one as a batch: the shorter filled with <pad> to the longer's length;
   * its encoder maps and output with the padding mask on (as trained) and off. */
  async padded(d) {
    const run = this.run, other = d.source(this.second.value);
    if (other.ids.length === run.srcIds.length) {
      this.show(`Both sentences have ${run.srcIds.length} tokens: the batch needs no <pad>, so the padding mask has nothing to hide. Type a longer or shorter second sentence.`);
      return null;
    }
    const short = other.ids.length < run.srcIds.length ? { ...other, text: this.second.value } : { tokens: run.srcTokens, ids: run.srcIds, text: run.srcText };
    const S = Math.max(other.ids.length, run.srcIds.length), nPad = S - short.ids.length;
    const ids = [...short.ids, ...new Array(nPad).fill(d.meta.pad_id)], tokens = [...short.tokens, ...new Array(nPad).fill("<pad>")];
    const sw = SWITCHES.padding.sw, nReal = short.ids.length;
    const [on, offEnc, base, off] = [await d.encode(ids, {}), await d.encode(ids, sw), await decode(d, ids, { nReal }), await decode(d, ids, { sw, nReal })];
    const maps = (enc) => Array.from({ length: d.meta.encoder_layers }, (_, l) => heads(enc.out[`enc_pattern_${l}`]));
    return { baseMaps: maps(on), offMaps: maps(offEnc), rows: tokens, cols: tokens, base: { ids: base.ids }, off: { ids: off.ids },
      sentence: short.text, nPad, padded: ids };
  }

  show(line) {
    this.why.textContent = line;
    this.why.hidden = false;
  }

  /** The output with the switch off, the words it changed marked, and why when none did. */
  words() {
    const c = this.last, marked = markChanged(c.base.text, c.off.text);
    c.marked = marked.filter(([, m]) => m).map(([w]) => w);
    const line = el("p", { className: "out" }, el("span", { className: "small", textContent: `${c.name} off: ` }));
    marked.forEach(([w, m], i) => line.append(i ? " " : "", m ? el("mark", { textContent: w }) : w));
    const head = c.key === "padding" ? `The padded sentence (${c.nPad} × <pad>): “${c.sentence}”` : `“${c.sentence}”`;
    this.result.replaceChildren(el("p", { className: "small", textContent: head }),
      el("p", { className: "out", textContent: "" }, el("span", { className: "small", textContent: "as trained: " }), c.base.text), line);
    this.why.hidden = true;
    if (c.base.ids.join() === c.off.ids.join()) this.show(`The output did not change. ${this.reason()}`);
  }

  /** Why an output stayed the same, from what the switch did to the maps (every layer and head). */
  reason() {
    const c = this.last, mean = (f) => { let s = 0, n = 0; c.offMaps.forEach((hs) => hs.forEach((m) => m.forEach((r, i) => { s += f(r, i); n++; }))); return s / n; };
    if (c.key === "causal") {
      const ahead = mean((r, i) => r.slice(i + 1).reduce((a, x) => a + x, 0));
      return `With the look-ahead mask off, earlier positions read later ones (${pct(ahead)} of the decoder's self-attention lands on tokens after the one being written), ` +
        "but the position that chooses each next token is always the newest: it has nothing later to read. Only the earlier positions' states changed, and not enough to change any choice.";
    }
    if (c.key === "padding") {
      const real = c.padded.length - c.nPad;  // the <pad> keys are the last ones
      const onPad = mean((r) => r.slice(real).reduce((a, x) => a + x, 0));
      return `With the padding mask off, the ${c.nPad} <pad> keys took ${pct(onPad)} of the encoder's self-attention, ` +
        "which mixes a little of the filler into every word; not enough to change any step's first choice. The longer sentence has no <pad>, so it is the same either way.";
    }
    let worst = 0;
    c.offMaps.forEach((hs, l) => hs.forEach((m, h) => m.forEach((r, i) => r.forEach((x, j) => { worst = Math.max(worst, Math.abs(x - c.baseMaps[l][h][i][j])); }))));
    return `Without the positional encoding the encoder sees the source as a set of words, not a sequence (its attention weights moved by up to ${worst.toFixed(2)}); ` +
      "the decoder still tells its own positions apart through the look-ahead mask. Here the source's word order carried nothing the output needed: every step's first choice stayed first.";
  }

  /** The chosen layer's head (or mean of heads) as trained, switched off, and their difference. */
  mapsOf(maps) {
    const [l, h] = this.head.value.split(":"), hs = maps[+l];
    if (h !== "mean") return hs[+h];
    return hs[0].map((r, i) => r.map((_, j) => hs.reduce((a, m) => a + m[i][j], 0) / hs.length));
  }

  async draw() {
    const fig = await FIGURES, rowTitle = fig.step_row_title, c = this.last, a = this.mapsOf(c.baseMaps), b = this.mapsOf(c.offMaps);
    const diff = b.map((r, i) => r.map((x, j) => x - a[i][j])), narrow = this.plot.clientWidth < 700;
    const [l, h] = this.head.value.split(":"), which = h === "mean" ? `layer ${l}, mean of heads` : `layer ${l} head ${h}`;
    const heat = (z, n, extra) => ({ type: "heatmap", z, x: c.cols.map((_, i) => i), y: c.rows.map((_, i) => i), xaxis: `x${n}`, yaxis: `y${n}`,
      customdata: c.rows.map((q) => c.cols.map((k) => [q, k])), hovertemplate: "%{customdata[0]} ← %{customdata[1]}: %{z:.3f}<extra></extra>", ...extra });
    const traces = [heat(a, "", { zmin: 0, zmax: 1, colorscale: "Blues", reversescale: true, showscale: false }),
      heat(b, "2", { zmin: 0, zmax: 1, colorscale: "Blues", reversescale: true, showscale: false }),
      heat(diff, "3", { zmid: 0, colorscale: "RdBu", reversescale: true, colorbar: { title: { text: "off − on" }, thickness: 10 } })];
    const titles = ["as trained", `${c.name} off`, "difference (off − on)"];
    const small = c.cols.length > 20 ? 8 : 10, every = Math.max(1, Math.ceil(c.cols.length / (narrow ? 12 : 24)));
    const tick = (tokens) => {  // the app's labels (repeats numbered), every ``every``-th where they would not fit
      const labels = tokenLabels(tokens, fig.max_label);
      return { tickvals: labels.map((_, i) => i).filter((i) => i % every === 0), ticktext: labels.filter((_, i) => i % every === 0), tickfont: { size: small } };
    };
    const layout = { title: { text: `${c.title}, ${which}: ${c.name} on and off`, font: { size: 14 } },
      grid: narrow ? { rows: 3, columns: 1, pattern: "independent", ygap: 0.18 } : { rows: 1, columns: 3, pattern: "independent", xgap: 0.12 },
      height: narrow ? 1100 : 460, margin: { l: 110, r: 20, t: 50, b: 100 }, annotations: [] };
    ["", "2", "3"].forEach((n, i) => {
      layout[`xaxis${n}`] = { ...tick(c.cols), tickangle: -60, title: { text: "key", font: { size: 11 } } };
      layout[`yaxis${n}`] = { ...tick(c.rows), autorange: "reversed", showticklabels: narrow || i === 0,
        title: { text: narrow || i === 0 ? (c.kind === "self" ? rowTitle : "query") : "", font: { size: 11 } } };
      layout.annotations.push({ text: titles[i], xref: `x${n} domain`, yref: `y${n} domain`, x: 0.5, y: 1.08, showarrow: false, font: { size: 12 } });
    });
    return Plotly().react(this.plot, traces, layout, { responsive: true, displaylogo: false }).then(() => { this.plot.dataset.drawn = c.key; });
  }
}
