// The guided tour's stops that need no server, worded and computed as the app's tour (ui/tour.py) words
// and computes them, from this run's own tensors: the same numbers to the shown digits (a test compares).
// Stops keep the app's numbering (1 to 11); the others need the server and are named with a link.

export const N_STOPS = 11;
const SPECIAL = new Set(["<bos>", "<eos>", "<pad>", "<unk>", "<s>", "</s>"]);
const PIECE_SPECIALS = new Set(["<unk>", "<pad>", "<bos>", "<eos>"]);
const WORD_START = "\u2581";
const UNSPACED = [[0x0E00, 0x0EFF], [0x0F00, 0x0FFF], [0x1000, 0x109F], [0x1780, 0x17FF], [0x2E80, 0x2FDF],
  [0x3000, 0x30FF], [0x31F0, 0x31FF], [0x3400, 0x4DBF], [0x4E00, 0x9FFF], [0xF900, 0xFAFF], [0xFE30, 0xFE4F],
  [0xFF00, 0xFF9F], [0x20000, 0x3134F]];
export const SERVER_STOPS = { 9: "What moved the output", 10: "Watch it learn" };
export const MASK_STOP = 5;  // its "Try it": the look-ahead mask switched off (app.js runs the model)

const pct = (x) => `${(100 * x).toFixed(1)} %`;
const f2 = (x) => x.toFixed(2);
const norm = (v) => Math.sqrt(v.reduce((s, x) => s + x * x, 0));
const argmax = (xs) => xs.reduce((b, x, i) => (x > xs[b] ? i : b), 0);
const argmin = (xs) => xs.reduce((b, x, i) => (x < xs[b] ? i : b), 0);
const unspaced = (ch) => { const c = ch.codePointAt(0); return UNSPACED.some(([lo, hi]) => lo <= c && c <= hi); };

/** Token indices of each word, as model.engine.vocab.piece_word_spans. */
export function wordSpans(tokens) {
  const spans = [];
  let afterSpecial = true, prev = "";
  tokens.forEach((t, i) => {
    const special = PIECE_SPECIALS.has(t);
    const body = t.replace(/^\u2581+/u, "");
    const first = [...body][0] ?? "", last = [...prev].at(-1) ?? "";
    const joinsNot = !special && prev !== WORD_START && ((first && unspaced(first)) || (last && unspaced(last)));
    if (special || afterSpecial || t.startsWith(WORD_START) || joinsNot) spans.push([i]);
    else spans.at(-1).push(i);
    afterSpecial = special;
    prev = special ? "" : t;
  });
  return spans;
}

function words(tokens, spm) {
  const spans = wordSpans(tokens);
  const labels = spans.map((s) => (PIECE_SPECIALS.has(tokens[s[0]]) ? tokens[s[0]] : spm.decode(s.map((i) => tokens[i])).trim()));
  return { labels, spans };
}

/** (1, A, B) or (1, H, A, B) tensor row ``a`` (of head ``h``). */
function row(t, a, h = 0) {
  const B = t.dims.at(-1), A = t.dims.at(-2);
  return Array.from(t.data.subarray((h * A + a) * B, (h * A + a + 1) * B));
}

class TourRun {
  constructor(run, d) {
    Object.assign(this, { run, d, meta: d.meta });
    this.src = words(run.srcTokens, d.spm);
    this.out = words(run.outTokens, d.spm);
    this.i0 = Math.max(0, run.srcTokens.findIndex((t) => !SPECIAL.has(t)));  // content_src
  }

  embedding(i) {
    const scaled = row(this.run.enc.enc_embed, i), pos = row(this.run.enc.enc_pos, i);
    const s = this.meta.token_scale;
    return { token: norm(scaled.map((x) => x / s)), scaled: norm(scaled), pos: norm(pos),
      total: norm(scaled.map((x, k) => x + pos[k])) };
  }

  /** ui.tour.peak_cross: (layer, head, output word, source word, weight), queries averaged, keys summed. */
  peakCross() {
    const cross = this.run.patterns.cross;
    const w = cross.map((heads) => heads.map((rows) => this.out.spans.map((os, o) => this.src.spans.map((ks, k) => {
      if (SPECIAL.has(this.out.labels[o]) || SPECIAL.has(this.src.labels[k])) return -1;
      return ks.reduce((sum, j) => sum + os.reduce((m, r) => m + rows[r][j], 0) / os.length, 0);
    }))));
    let best = [0, 0], sharpest = -Infinity;
    w.forEach((heads, l) => heads.forEach((m, h) => {
      const peaks = m.map((r) => Math.max(...r)).filter((x) => x >= 0);
      const mean = peaks.length ? peaks.reduce((a, b) => a + b, 0) / peaks.length : -Infinity;
      if (mean > sharpest) { sharpest = mean; best = [l, h]; }
    }));
    const [l, h] = best, m = w[l][h];
    let o = 0, k = 0;
    m.forEach((r, a) => r.forEach((x, b) => { if (x > m[o][k]) { o = a; k = b; } }));
    return { l, h, o, k, weight: m[o][k] };
  }
}

function stopTokens(t) {
  const toks = t.run.srcTokens, i = t.i0, d = t.meta.d_model, n = t.embedding(i);
  const scale = t.meta.token_scale;
  const how = Math.abs(scale - Math.sqrt(d)) <= 1e-4 * Math.sqrt(d) ? `multiplies it by √${d} = ${f2(scale)}` : `multiplies it by ${f2(scale)}`;
  const shown = toks.slice(0, 24).join(" ") + (toks.length > 24 ? " …" : "");
  return [`“${t.run.srcText.slice(0, 120)}” enters the encoder as ${toks.length} tokens: ${shown}.`,
    toks.some((x) => x.startsWith(WORD_START)) ? "▁ marks a piece that starts a new word; a piece without it continues the word before it." : "",
    `Each token looks up a row of ${d} numbers in the embedding table, and the model ${how}.`,
    `So ${toks[i]} (position ${i}) grows from length ${f2(n.token)} to ${f2(n.scaled)}.`].filter(Boolean);
}

function stopPositions(t) {
  const toks = t.run.srcTokens, i = Math.min(t.i0 + 1, toks.length - 1), j = Math.min(i + 1, toks.length - 1);
  const n = t.embedding(i);
  return ["Attention alone does not see order, so the model adds a position vector to each scaled embedding.",
    `At position ${i}, ${toks[i]}'s vector (length ${f2(n.scaled)}) gets a position vector of length ${f2(n.pos)}; the sum, the first layer's input, has length ${f2(n.total)}.`,
    `Position ${j} gets another position vector: the same word there would enter the encoder differently.`];
}

function stopOneHead(t) {
  const toks = t.run.srcTokens, q = t.i0, dk = t.meta.d_model / t.meta.encoder_heads;
  const scores = row(t.run.enc.enc_scores_0, q, 0), pattern = row(t.run.enc.enc_pattern_0, q, 0);
  const ok = t.run.srcIds.map((id, k) => (id !== t.meta.pad_id ? k : -1)).filter((k) => k >= 0);
  const top = ok[argmax(ok.map((k) => scores[k]))], low = ok[argmin(ok.map((k) => scores[k]))];
  return [`Head 0 of encoder layer 0 (both counted from 0) lets ${toks[q]} compare its query with every token's key: the score is q·k / √${dk} = q·k / ${f2(Math.sqrt(dk))}.`,
    `The highest score, ${f2(scores[top])}, goes to ${toks[top]}; the lowest, ${f2(scores[low])}, to ${toks[low]}.`,
    `Softmax turns the scores into weights that sum to 1: ${toks[top]} gets ${pct(pattern[top])}.`,
    "The head's output is the weighted mean of the values, one vector per query."];
}

function stopManyHeads(t) {
  const q = t.i0, heads = t.run.patterns.enc[0], dk = t.meta.d_model / t.meta.encoder_heads;
  const rows = heads.map((m, h) => {
    const pooled = t.src.spans.map((s) => s.reduce((a, j) => a + m[q][j], 0));
    const k = argmax(pooled);
    return [h, t.src.labels[k], pooled[k]];
  });
  const listed = rows.slice(0, 4).map(([h, k, w]) => `head ${h} on ${k} (${pct(w)})`).join("; ");
  const more = rows.length > 4 ? `, and ${rows.length - 4} more heads` : "";
  return [`Encoder layer 0 (counted from 0) runs ${rows.length} heads side by side, each on its own slice of ${dk} numbers with its own queries and keys.`,
    `Reading from ${t.run.srcTokens[q]}, they look at different places: ${listed}${more}.`,
    `Their outputs are joined and mixed by one matrix (W_O) back into ${t.meta.d_model} numbers.`];
}

/** ui.tour.later_weight: the decoder self-attention's weight on later positions, summed over layers, heads
 * and rows ([L][H][T][T] patterns), and its share of all that attention's weight. */
export function laterWeight(self) {
  let future = 0, total = 0;
  for (const heads of self) for (const m of heads) m.forEach((r, a) => r.forEach((x, b) => { total += x; if (b > a) future += x; }));
  return { future, share: future / Math.max(1e-9, total) };
}

/** Stop 5; ``off``: the run's output forced with the look-ahead mask off ({forced: [L][H][T][T]}). */
function stopMasks(t, off = null) {
  const out = t.run.outTokens, n = out.length, step = Math.min(Math.max(1, Math.floor(n / 2)), n - 1);
  const { future, share } = laterWeight(off ? off.forced : t.run.patterns.self);
  const pads = t.run.srcTokens.filter((x) => x === "<pad>").length;
  const s = [`The padding mask hides the <pad> tokens that fill a batch to one length (this run has ${pads}); the look-ahead mask stops the decoder from reading tokens it has not written yet.`];
  if (off) {
    s.push(`With the look-ahead mask off, the decoder at step ${step}, writing ${out[step]}, may read all ${n} positions, ${n - step - 1} of them not written yet.`,
      `On this output, forced, the weight on later positions, summed over every decoder layer, head and row, is ${future.toFixed(3)}: ${pct(share)} of the decoder's self-attention.`);
  } else {
    s.push(`At step ${step}, writing ${out[step]}, the decoder reads ${step + 1} of the ${n} positions; the other ${n - step - 1} are hidden.`,
      `In this run the weight on later positions, summed over every decoder layer, head and row, is ${future.toFixed(3)}.`);
  }
  return s;
}

/** ui.tour.tried_masks: what switching the look-ahead mask off changed ({forced, outTokens, text} of the run
 * decoded without it). */
function changedMasks(t, off) {
  const { share } = laterWeight(off.forced);
  const base = t.run.outTokens, same = base.filter((x, i) => x === off.outTokens[i]).length;
  const decoded = base.length === off.outTokens.length && same === base.length
    ? `Decoding that way, the model still writes “${t.run.text}”.`
    : `Decoding that way, the model writes “${off.text}” instead of “${t.run.text}” (${same} of ${base.length} tokens unchanged at their place).`;
  return `What changed: with the mask off, ${pct(share)} of the decoder's self-attention on this output goes to tokens after the one being written (none with it on). ${decoded}`;
}

/** Stop 6, from the decoder's residual norms over the whole prefix ((L, 5, T): in, self-attention, cross-
 * attention and FFN additions, out), at the first position after the start token. */
function stopResidual(t) {
  const labels = t.run.decoderInput, i = Math.min(1, labels.length - 1);
  const r = t.run.dec.dec_norms, [L, R, T] = r.dims, at = (l, k) => r.data[(l * R + k) * T + i];
  let best = null;
  [["self-attention", 1], ["cross-attention", 2], ["feed-forward", 3]].forEach(([name, k]) => {
    for (let l = 0; l < L; l++) if (!best || at(l, k) > best[2]) best = [name, l, at(l, k)];
  });
  const { d_model: d, d_ff: ff } = t.meta;
  return [`Each of the ${L} decoder layers adds three things to a running sum, the residual stream: self-attention, cross-attention and a feed-forward network (${d} → ${ff} → ${d}) applied to each position alone.`,
    `At input ${labels[i]} (position ${i}) the stream's length goes from ${f2(at(0, 0))} to ${f2(at(L - 1, 4))} after the last layer.`,
    `The largest addition there is layer ${best[1]}'s ${best[0]} (length ${f2(best[2])}).`];
}

function stopCross(t) {
  const { l, h, o, k, weight } = t.peakCross();
  const reads = o > 0 ? t.out.labels[o - 1] : t.d.spm.pieces[t.meta.decoder_start_id];
  return ["Each decoder layer's cross-attention lets the word being written read the encoder's output, the source words.",
    `At the step that reads ${reads} and writes ${t.out.labels[o]}, head ${h} of decoder layer ${l} (counted from 0) puts ${pct(weight)} of its weight on ${t.src.labels[k]}.`,
    "A head like this behaves as a word aligner; many heads do not, and the tour's map shows the difference."];
}

function stopStep(t) {
  const step = t.run.outTokens.length ? t.out.spans[t.peakCross().o][0] : 0;
  const rec = t.run.steps[step];
  const top = rec.tokens.slice(0, 3).map((x, k) => `${x} ${pct(rec.probs[k])}`).join(", ");
  return [`At step ${step} the decoder's last vector goes through one linear layer to ${t.meta.tgt_vocab_size.toLocaleString("en")} scores, one per vocabulary token, and softmax turns them into probabilities.`,
    `The top three: ${top}.`,
    `Greedy decoding takes the most probable token at every step (here ${t.run.outTokens[step]}); beam search keeps several partial translations and picks the best whole one.`];
}

function stopWhole(t) {
  const { run, meta } = t, probs = run.steps.map((s) => s.prob), n = probs.length;
  const hi = argmax(probs), lo = argmin(probs);
  return [`“${run.srcText.slice(0, 120)}” → “${run.text.slice(0, 120)}”: ${run.srcTokens.length} source tokens through ${meta.encoder_layers} encoder layers, then ${n} decoding steps (0–${n - 1}) through ${meta.decoder_layers} decoder layers of ${meta.decoder_heads} heads each.`,
    `The model was surest at step ${hi} (${run.outTokens[hi]}, ${pct(probs[hi])}) and least sure at step ${lo} (${run.outTokens[lo]}, ${pct(probs[lo])}).`];
}

/** The stops the browser computes, by the app's stop number (1 to 11): [title, sentences]. */
const STOPS = { 1: ["Tokens and embeddings", stopTokens], 2: ["Positional encoding", stopPositions],
  3: ["One head: scores → softmax", stopOneHead], 4: ["Many heads", stopManyHeads],
  5: ["Padding and look-ahead masks", stopMasks], 6: ["Feed-forward and the residual stream", stopResidual],
  7: ["Cross-attention as alignment", stopCross], 8: ["One decoding step", stopStep], 11: ["The whole run", stopWhole] };

/** Every stop of the app's tour, in order: {number, title, sentences} or {number, title, server: true}.
 * ``maskOff``: stop 5 tried with the look-ahead mask off ({forced, outTokens, text}); it then says what changed.
 * Stop 6 states a pre-norm model's additions; a post-norm model's shares need the server. */
export function tourStops(run, d, maskOff = null) {
  const t = new TourRun(run, d);
  return Array.from({ length: N_STOPS }, (_, k) => {
    const number = k + 1;
    if (number === 6 && d.meta.norm_first === false) return { number, title: STOPS[6][0], server: true };
    if (number === MASK_STOP && maskOff) {
      return { number, title: STOPS[number][0], sentences: stopMasks(t, maskOff), changed: changedMasks(t, maskOff), off: true };
    }
    if (STOPS[number]) return { number, title: STOPS[number][0], sentences: STOPS[number][1](t) };
    return { number, title: SERVER_STOPS[number], server: true };
  });
}
