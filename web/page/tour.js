// The guided tour's stops that need no server, computed from this run's own tensors as the app's tour
// (ui/present/tour.py) computes them, and worded by the app's own sentence templates: the build exports
// them (tour.json, web/build.py) and this module only fills their named slots, as the presenter's fill does.
// Stops keep the app's numbering (1 to 11); the others need the server and link to the app.

const SPECIAL = new Set(["<bos>", "<eos>", "<pad>", "<unk>", "<s>", "</s>"]);
const PIECE_SPECIALS = new Set(["<unk>", "<pad>", "<bos>", "<eos>"]);
const WORD_START = "\u2581";
const UNSPACED = [[0x0E00, 0x0EFF], [0x0F00, 0x0FFF], [0x1000, 0x109F], [0x1780, 0x17FF], [0x2E80, 0x2FDF],
  [0x3000, 0x30FF], [0x31F0, 0x31FF], [0x3400, 0x4DBF], [0x4E00, 0x9FFF], [0xF900, 0xFAFF], [0xFE30, 0xFE4F],
  [0xFF00, 0xFF9F], [0x20000, 0x3134F]];
export const MASK_STOP = 5;  // its "Try it": the look-ahead mask switched off (app.js runs the model)
const CROSS_STOP = 7;  // its "Try it" picks a head of the sharpest head's layer, that head first
export const MOVED_STOP = 9;  // ALTI+ of the run (run.alti, the build's alti.onnx); its "Try it" hides a word

/** ui.present.md_escape: HTML first, then Markdown punctuation. */
export const mdEscape = (x) => String(x).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;")
  .replace(/([\\`*_{}[\]()#+!|~>-])/g, "\\$1");
const pct = (x) => `${(100 * x).toFixed(1)} %`;
const em = (t) => `*${mdEscape(t.trim() || t)}*`;
const hex = (c, n) => c.toString(16).padStart(n, "0");

/** Python's repr of a str: quoted, with its backslashes, quote and unprintable characters escaped. */
function pyRepr(x) {
  const s = String(x), q = s.includes("'") && !s.includes('"') ? '"' : "'";
  const one = (ch) => {
    const c = ch.codePointAt(0), named = { "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t" }[ch];
    if (named) return named;
    if (ch === q) return `\\${q}`;
    if (ch === " " || !/[\p{C}\p{Z}]/u.test(ch)) return ch;
    return c <= 0xff ? `\\x${hex(c, 2)}` : c <= 0xffff ? `\\u${hex(c, 4)}` : `\\U${hex(c, 8)}`;
  };
  return q + [...s].map(one).join("") + q;
}
const FORMATS = { "": String, md: mdEscape, em, pct, repr: pyRepr, ",": (x) => x.toLocaleString("en") };
const SLOT = /\{(\w+)(?::([^{}]*))?\}/g;

/** ui.present.tour.fill: a template's {name} / {name:format} slots filled. */
export function fill(template, slots) {
  return template.replace(SLOT, (_, name, spec = "") => {
    const v = slots[name];
    if (v === undefined) throw new Error(`the tour's template needs ${name}`);
    const fixed = /^\.(\d)f$/.exec(spec);
    return fixed ? v.toFixed(+fixed[1]) : FORMATS[spec](v);
  });
}

/** A sentence's Markdown (escapes, *em*, **strong**, the three HTML entities) as DOM nodes. */
export function markdown(text) {
  const out = [], stack = [];
  let buf = "";
  const node = () => (stack.length ? stack.at(-1) : null);
  const flush = () => {
    if (!buf) return;
    const t = document.createTextNode(buf.replace(/&lt;/g, "<").replace(/&gt;/g, ">").replace(/&amp;/g, "&"));
    (node() ?? { append: (n) => out.push(n) }).append(t);
    buf = "";
  };
  for (let i = 0; i < text.length; i++) {
    if (text[i] === "\\" && i + 1 < text.length) { buf += text[++i]; continue; }
    if (text[i] !== "*") { buf += text[i]; continue; }
    flush();
    const tag = text[i + 1] === "*" ? "strong" : "em";
    if (tag === "strong") i++;
    if (node()?.tagName.toLowerCase() === tag) { const done = stack.pop(); (node() ?? { append: (n) => out.push(n) }).append(done); }
    else stack.push(document.createElement(tag));
  }
  flush();
  while (stack.length) { const done = stack.pop(); (node() ?? { append: (n) => out.push(n) }).append(done); }
  return out;
}

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

/** Word labels and the token indices under each, as the app's vocabularies join and split them. */
export function words(tokens, spm) {
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
  constructor(run, d, T) {
    Object.assign(this, { run, d, T, meta: d.meta });
    this.src = words(run.srcTokens, d.spm);
    this.out = words(run.outTokens, d.spm);
    this.i0 = Math.max(0, run.srcTokens.findIndex((t) => !SPECIAL.has(t)));  // content_src
  }

  say(name, slots = {}) { return fill(this.T.say[name], slots); }

  embedding(i) {
    const scaled = row(this.run.enc.enc_embed, i), pos = row(this.run.enc.enc_pos, i);
    const s = this.meta.token_scale;
    return { token: norm(scaled.map((x) => x / s)), scaled: norm(scaled), pos: norm(pos),
      total: norm(scaled.map((x, k) => x + pos[k])) };
  }

  /** ui.tour.peak_cross: (layer, head, output word, source word, weight), queries averaged, keys summed; the
   * sharpest head, or ``layer`` and ``head`` where given. */
  peakCross(layer = null, head = null) {
    const cross = this.run.patterns.cross;
    const w = cross.map((heads) => heads.map((rows) => this.out.spans.map((os, o) => this.src.spans.map((ks, k) => {
      if (SPECIAL.has(this.out.labels[o]) || SPECIAL.has(this.src.labels[k])) return -1;
      return ks.reduce((sum, j) => sum + os.reduce((m, r) => m + rows[r][j], 0) / os.length, 0);
    }))));
    let best = [layer ?? 0, head ?? 0], sharpest = -Infinity;
    if (layer === null || head === null) {
      w.forEach((heads, l) => heads.forEach((m, h) => {
        const peaks = m.map((r) => Math.max(...r)).filter((x) => x >= 0);
        const mean = peaks.length ? peaks.reduce((a, b) => a + b, 0) / peaks.length : -Infinity;
        if (mean > sharpest) { sharpest = mean; best = [l, h]; }
      }));
    }
    const [l, h] = best, m = w[l][h];
    let o = 0, k = 0;
    m.forEach((r, a) => r.forEach((x, b) => { if (x > m[o][k]) { o = a; k = b; } }));
    return { l, h, o, k, weight: m[o][k] };
  }
}

/** The cross-attention head stop 7 shows: the sharpest one's layer, and its head or the picked one. */
export function crossHead(run, d, pick) {
  const t = new TourRun(run, d, null), best = t.peakCross();
  const h = pick === undefined || pick === null || pick === "" ? best.h : pickIndex(pick, best.h, run.patterns.cross[best.l].length);
  return t.peakCross(best.l, h);
}

/** ui.state.read_index: a picked index as a number in 0..n-1, else ``fallback``. */
const pickIndex = (pick, fallback, n) => (pick !== undefined && pick !== null && /^\d+$/.test(String(pick)) ? Math.min(+pick, n - 1) : fallback);

const cut = (x, n) => [...x].slice(0, n).join("");  // Python's x[:n], by code point

function stopTokens(t, pick) {
  const toks = t.run.srcTokens, i = pickIndex(pick, t.i0, toks.length), d = t.meta.d_model, n = t.embedding(i), scale = t.meta.token_scale;
  const how = t.say(Math.abs(scale - Math.sqrt(d)) <= 1e-4 * Math.max(scale, Math.sqrt(d)) ? "tokens_how_sqrt" : "tokens_how", { d, scale });
  const shown = toks.slice(0, 24).map(mdEscape).join(" ") + (toks.length > 24 ? " …" : "");
  return [t.say("tokens_enter", { src: cut(t.run.srcText, 120), n: toks.length, shown }),
    toks.some((x) => x.startsWith(WORD_START)) ? t.say("piece_note") : "",
    t.say("tokens_lookup", { d, how }),
    t.say("tokens_grows", { token: toks[i], i, token_norm: n.token, scaled_norm: n.scaled })].filter(Boolean);
}

function stopPositions(t, pick) {
  const toks = t.run.srcTokens, i = Math.min(t.i0 + 1, toks.length - 1), j = Math.min(i + 1, toks.length - 1);
  const n = t.embedding(i);
  if (pick === "off") {
    return [t.say("positions_why"), t.say("positions_off_at", { i, token: toks[i], scaled_norm: n.scaled }),
      t.say("positions_off_other", { j })];
  }
  return [t.say("positions_why"),
    t.say("positions_at", { i, token: toks[i], scaled_norm: n.scaled, pos_norm: n.pos, total_norm: n.total }),
    t.say("positions_other", { j })];
}

function stopOneHead(t, pick) {
  const toks = t.run.srcTokens, q = pickIndex(pick, t.i0, toks.length), d_k = t.meta.d_model / t.meta.encoder_heads;
  const scores = row(t.run.enc.enc_scores_0, q, 0), pattern = row(t.run.enc.enc_pattern_0, q, 0);
  const ok = t.run.srcIds.map((id, k) => (id !== t.meta.pad_id ? k : -1)).filter((k) => k >= 0);
  const top = ok[argmax(ok.map((k) => scores[k]))], low = ok[argmin(ok.map((k) => scores[k]))];
  return [t.say("head_score", { query: toks[q], d_k, sqrt_dk: Math.sqrt(d_k) }),
    t.say("head_range", { top_score: scores[top], top: toks[top], low_score: scores[low], low: toks[low] }),
    t.say("head_softmax", { top: toks[top], top_weight: pattern[top] }),
    t.say("head_output")];
}

function stopManyHeads(t, pick) {
  const layer = pickIndex(pick, 0, t.run.patterns.enc.length);
  const q = t.i0, heads = t.run.patterns.enc[layer], d_k = t.meta.d_model / t.meta.encoder_heads;
  const rows = heads.map((m, h) => {
    const pooled = t.src.spans.map((s) => s.reduce((a, j) => a + m[q][j], 0));
    const k = argmax(pooled);
    return { h, key: t.src.labels[k], weight: pooled[k] };
  });
  const listed = rows.slice(0, 4).map((r) => t.say("heads_item", r)).join("; ");
  const more = rows.length > 4 ? t.say("heads_more", { n: rows.length - 4 }) : "";
  return [t.say("heads_side", { layer, n: rows.length, d_k }),
    t.say("heads_look", { query: t.src.labels[t.src.spans.findIndex((s) => s.includes(q))] ?? t.run.srcTokens[q], listed, more }),
    t.say("heads_join", { d: t.meta.d_model })];
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
  const s = [t.say("masks_what", { pad: "<pad>", pads })], token = out[step];
  if (off) s.push(t.say("masks_off_step", { step, token, n, later: n - step - 1 }), t.say("masks_off_weight", { future, share }));
  else s.push(t.say("masks_step", { step, token, read: step + 1, n, later: n - step - 1 }), t.say("masks_weight", { future }));
  return s;
}

/** ui.tour.tried_masks: what switching the look-ahead mask off changed ({forced, outTokens, text} of the run
 * decoded without it). */
function changedMasks(t, off) {
  const { share } = laterWeight(off.forced);
  const base = t.run.outTokens, same = base.filter((x, i) => x === off.outTokens[i]).length;
  const what = t.T.say.masks_decoding;
  const unchanged = base.length === off.outTokens.length && same === base.length;
  const decoded = unchanged ? t.say("changed_same", { what, text: t.run.text })
    : t.say("changed_other", { what, other: off.text, text: t.run.text, same, n: base.length });
  return t.say("masks_tried", { share, decoded: decoded.replace(/^\*\*What changed:\*\* /, "") });
}

/** ui.tour._changed: what ``what`` (a template's words) changed in the output ({outTokens, text} of the other run). */
export function changed(run, d, T, what, other) {
  const t = new TourRun(run, d, T), base = run.outTokens;
  const same = base.filter((x, i) => x === other.outTokens[i]).length;
  if (base.length === other.outTokens.length && same === base.length) return t.say("changed_same", { what, text: run.text });
  return t.say("changed_other", { what, other: other.text, text: run.text, same, n: base.length });
}

/** Stop 6, read in the decoder's residual norms over the whole prefix ((L, 5, T): in, self-attention, cross-
 * attention and FFN additions, out), at the first position after the start token. */
function stopResidual(t, pick) {
  const labels = t.run.decoderInput, i = pickIndex(pick, Math.min(1, labels.length - 1), labels.length);
  const r = t.run.dec.dec_norms, [L, R, T] = r.dims, at = (l, k) => r.data[(l * R + k) * T + i];
  let best = null;
  t.T.sublayers.forEach((what, s) => {
    for (let l = 0; l < L; l++) if (!best || at(l, s + 1) > best.length) best = { what, layer: l, length: at(l, s + 1) };
  });
  return [t.say("residual_sum", { L, d: t.meta.d_model, d_ff: t.meta.d_ff }),
    t.say("residual_length", { token: labels[i], i, resid_in: at(0, 0), resid_out: at(L - 1, 4) }),
    t.say("residual_largest", { verb: t.T.residual_verbs.pre, ...best })];
}

function stopCross(t, pick) {
  const { l, h, o, k, weight } = crossHead(t.run, t.d, pick);
  const reads = o > 0 ? t.out.labels[o - 1] : t.d.spm.pieces[t.meta.decoder_start_id];
  return [t.say("cross_what", { unit: "words" }),
    t.say("cross_peak", { reads, out: t.out.labels[o], h, l, weight, key: t.src.labels[k] }),
    t.say("cross_aligner")];
}

/** The step stops 8 and 9 look at: the first step of the output word stop 7 found (ui.tour.decoding_step). */
export function decodingStep(run, d, T) {
  const t = new TourRun(run, d, T);
  return run.outTokens.length ? t.out.spans[t.peakCross().o][0] : 0;
}

function stopStep(t) {
  const step = t.run.outTokens.length ? t.out.spans[t.peakCross().o][0] : 0;
  const rec = t.run.steps[step];
  const top = rec.tokens.slice(0, 3).map((token, k) => t.say("step_item", { token, p: rec.probs[k] })).join(", ");
  return [t.say("step_scores", { step, V: t.meta.tgt_vocab_size }), t.say("step_top", { top }),
    t.say("step_greedy", { token: t.run.outTokens[step] })];
}

/** ui.tour.contributions: ALTI+ ({dims: [T, S + T], data}) at output ``step``: each source word's share and the
 * output prefix's. */
function contributions(alti, spans, S, step) {
  const W = alti.dims[1], row = alti.data.subarray(step * W, (step + 1) * W);
  let prefix = 0;
  for (let k = S; k < W; k++) prefix += row[k];
  return { shares: spans.map((s) => s.reduce((a, j) => a + row[j], 0)), prefix };
}

const sum = (xs) => xs.reduce((a, b) => a + b, 0);

/** The source word a stop 9 pick hides (ui.tour._hidden), or null. */
export const hiddenWord = (pick, n) => (/^\d+$/.test(String(pick ?? "")) && +pick < n ? +pick : null);

/** ui.tour.stop_moved's numbers: at the tour's decoding step, what moved the output (ALTI+ shares of each source
 * word and of the prefix written before the step), its sentences, its trial's choices and its figure's bars; with a word hidden
 * (``pick``), the shares of the run decoded without it (run.ablated, made by app.js). */
function moved(t, pick, firstChoice) {
  const { run } = t, keys = t.src.labels, S = run.srcTokens.length;
  const step = run.outTokens.length ? t.out.spans[t.peakCross().o][0] : 0, token = run.outTokens[step];
  const { shares, prefix } = contributions(run.alti, t.src.spans, S, step);
  const ok = keys.map((k, j) => j).filter((j) => !SPECIAL.has(keys[j]));
  const j = (ok.length ? ok : keys.map((_, i) => i)).reduce((b, x) => (shares[x] > shares[b] ? x : b));
  const sentences = [t.say("moved_mix", { token, step }), t.say("moved_alti", { source: sum(shares), prefix }),
    t.say("moved_top", { unit: "word", key: keys[j], share: shares[j] })];
  const choices = [firstChoice, [t.say("moved_hide", { key: keys[j] }), String(j)]];
  const h = hiddenWord(pick, keys.length), other = h === null ? null : run.ablated?.[h];
  let bars = { shares: [...shares, prefix], top: j, title: t.say("moved_title", { token: token.trim(), step }) };
  if (other) {
    const at = Math.min(step, other.outTokens.length - 1), said = other.outTokens[at];
    const got = contributions(other.alti, t.src.spans, S, at);
    sentences.push(t.say("moved_hidden", { key: keys[h], said, at, share: got.shares[h] }));
    bars = { shares: [...got.shares, got.prefix], top: h,
      title: t.say("moved_title_hidden", { token: said.trim(), at, key: keys[h].trim() }) };
  }
  return { sentences, choices, bars: { ...bars, labels: [...keys, t.T.say.moved_prefix] }, drawn: h === null || Boolean(other) };
}

function stopWhole(t, pick) {
  const { run, meta } = t, probs = run.steps.map((s) => s.prob), n = probs.length;
  const hi = argmax(probs), lo = argmin(probs), j = pickIndex(pick, lo, n);
  const picked = pick === undefined || pick === null || pick === "" ? [] : [t.say("whole_step", { j, token: run.outTokens[j], p: probs[j] })];
  return [t.say("whole_run", { src: cut(run.srcText, 120), text: cut(run.text, 120), n_src: run.srcTokens.length,
    enc_layers: meta.encoder_layers, n, last: n - 1, dec_layers: meta.decoder_layers, heads: meta.decoder_heads }),
  t.say("whole_sure", { hi, hi_token: run.outTokens[hi], hi_p: probs[hi], lo, lo_token: run.outTokens[lo], lo_p: probs[lo] }),
  ...picked, t.say("whole_leave")];
}

/** The stops the browser computes, by the app's stop number (1 to 11). */
const STOPS = { 1: stopTokens, 2: stopPositions, 3: stopOneHead, 4: stopManyHeads, 5: stopMasks, 6: stopResidual,
  7: stopCross, 8: stopStep, 11: stopWhole };

/** Whether the page computes stop ``number`` for a run of model ``d`` (a stored first screen has no tensors
 * for it yet, and shows the app's stored stop until a sentence is translated here). */
export function computable(number, d) {
  if (number === MOVED_STOP) return Boolean(d.meta.alti_bytes);
  return Boolean(STOPS[number]) && !(number === 6 && d.meta.norm_first === false);
}

/** Every stop of the app's tour, in order: {number, title, sentences} (Markdown) or {number, title, server:
 * true}. ``T``: the build's tour.json. ``maskOff``: stop 5 tried with the look-ahead mask off
 * ({forced, outTokens, text}); it then says what changed. ``picks``: each stop's "Try it" pick, by number. Stop 6 states a pre-norm model's additions; a
 * post-norm model's shares need the server. Stop 9 is computed where the run has its ALTI+ (run.alti) and
 * ``movedTrial`` is its stored trial (whose first choice, "as it is", it keeps). */
export function tourStops(run, d, T, maskOff = null, picks = {}, movedTrial = null) {
  const t = new TourRun(run, d, T);
  return T.titles.map((title, k) => {
    const number = k + 1;
    if (number === MOVED_STOP && run.alti && movedTrial) {
      const m = moved(t, picks[number], movedTrial.choices[0]);
      return { number, title, sentences: m.sentences, choices: m.choices, bars: m.drawn ? m.bars : null };
    }
    if (!computable(number, d) || number === MOVED_STOP) return { number, title, server: true };
    if (number === MASK_STOP && maskOff) return { number, title, sentences: stopMasks(t, maskOff), changed: changedMasks(t, maskOff), off: true };
    const value = number === CROSS_STOP && run.outTokens.length ? String(t.peakCross().h) : undefined;  // its trial's default
    return { number, title, sentences: STOPS[number](t, picks[number]), value };
  });
}
