// One direction's model in the browser: tokenizer, encoder and decoder graphs, greedy decoding.
// The same steps as model.engine.decoding.translate with --beam 1: spaCy words, SentencePiece pieces,
// <bos> pieces <eos>, then the next token's argmax (never <bos> or <pad>) until <eos> or the step budget.

import * as ort from "./vendor/ort.wasm.min.mjs";
import { SentencePieceBPE } from "./spm.js";
import { SpacyWords } from "./words.js";

ort.env.wasm.numThreads = 1;  // no cross-origin isolation on a static host: one thread
ort.env.wasm.wasmPaths = new URL("./vendor/", import.meta.url).href;

export const MAX_INPUT_CHARS = 2000;
export const TOP_K = 10;
const json = async (url) => { const r = await fetch(url); if (!r.ok) throw new Error(`${url}: ${r.status}`); return r.json(); };
const wordRules = new Map();

/** Input as the app cleans it: capped at 2,000 characters, with the app's notice. */
export function cleanInput(text) {
  const notices = [];
  let t = text ?? "";
  if (t.length > MAX_INPUT_CHARS) {
    notices.push(`The input had ${t.length.toLocaleString("en")} characters; only the first ${MAX_INPUT_CHARS.toLocaleString("en")} were used.`);
    t = t.slice(0, MAX_INPUT_CHARS);
  }
  return { text: t.replace(/\p{Cs}/gu, ""), notices };  // a lone surrogate: the tokenizer drops it too
}

export function isBlank(text) {
  return /^[\p{Z}\p{Cc}\p{Cf}\p{Cs}\p{Co}\p{Zl}\p{Zp}]*$/u.test(text);
}

export class Direction {
  /** The tokenizer and the model's description; the graphs load on first use (``graphs``), so that a first
   * screen computed when the site was built can be drawn before ONNX Runtime Web has started. */
  static async load(base, name) {
    const d = new Direction();
    d.base = `${base}/models/${name}`;
    const spm = json(`${d.base}/spm.json`);  // fetched beside meta.json, not after it
    d.meta = await json(`${d.base}/meta.json`);
    d.spm = new SentencePieceBPE(await spm);
    const lang = d.meta.src_lang;
    if (!wordRules.has(lang)) wordRules.set(lang, json(`${base}/models/spacy_${lang}.json`).then((r) => new SpacyWords(r)));
    d.words = await wordRules.get(lang);
    return d;
  }

  /** The encoder and decoder sessions, created once. Both graphs read their weights from one file (each
   * tensor once: the embedding table is shared). */
  graphs() {
    if (!this.sessions) {
      this.sessions = this.loadGraphs();
      this.sessions.catch(() => { this.sessions = null; });  // a failed load is tried again on next use
    }
    return this.sessions;
  }

  async loadGraphs() {
    const r = await fetch(`${this.base}/weights.bin`);
    if (!r.ok) throw new Error(`weights.bin: ${r.status}`);
    const opts = { executionProviders: ["wasm"], graphOptimizationLevel: "all",
      externalData: [{ path: "weights.bin", data: new Uint8Array(await r.arrayBuffer()) }] };
    const [encoder, decoder] = await Promise.all([ort.InferenceSession.create(`${this.base}/encoder.onnx`, opts),
      ort.InferenceSession.create(`${this.base}/decoder.onnx`, opts)]);
    return { encoder, decoder };
  }

  /** Source pieces (spaCy words joined by spaces, then SentencePiece), as SubwordVocab.tokens gives them. */
  pieces(text) {
    const words = this.words.words(text).filter((w) => w.trim());
    return words.length ? this.spm.encode(words.join(" ")) : [];
  }

  /** <bos> pieces <eos>, cut to the model's length; ids and whether it was cut. */
  source(text) {
    const pieces = this.pieces(text);
    const room = this.meta.max_len - 2;
    const kept = pieces.slice(0, room);
    const tokens = ["<bos>", ...kept, "<eos>"];
    const ids = [this.meta.bos_id, ...kept.map((p) => this.spm.id.get(p) ?? 0), this.meta.eos_id];
    return { tokens, ids, truncated: pieces.length > room };
  }

  flags(sw) {
    const f = (on) => new ort.Tensor("float32", new Float32Array([on === false ? 0 : 1]), [1]);
    return { use_padding_mask: f(sw.padding), use_causal_mask: f(sw.causal), use_pos: f(sw.pos) };
  }

  async encode(ids, sw) {
    const src = new ort.Tensor("int64", BigInt64Array.from(ids.map(BigInt)), [1, ids.length]);
    const fl = this.flags(sw);
    const { encoder } = await this.graphs();
    const out = await encoder.run({ src, use_padding_mask: fl.use_padding_mask, use_pos: fl.use_pos });
    return { src, out };
  }

  /** An empty self-attention cache: every past_* input with no positions. */
  emptyCache() {
    const H = this.meta.decoder_heads, dk = this.meta.d_model / H, out = {};
    for (const n of this.meta.decoder_inputs.filter((x) => x.startsWith("past_"))) out[n] = new ort.Tensor("float32", new Float32Array(0), [1, H, 0, dk]);
    return out;
  }

  /** The decoder over new positions ``ys`` after ``cache`` (default: none, the whole prefix). ``fetch``:
   * the outputs wanted (ORT then skips what only the others need); all of them when null. */
  async step(ys, memory, src, sw, cache = null, fetch = null) {
    const tgt = new ort.Tensor("int64", BigInt64Array.from(ys.map(BigInt)), [1, ys.length]);
    const feeds = { tgt, memory, src, ...this.flags(sw), ...(cache ?? this.emptyCache()) };
    const { decoder } = await this.graphs();
    return fetch ? decoder.run(feeds, fetch) : decoder.run(feeds);
  }

  /** Greedy decoding of source ids, as model.engine.decoding.decoder_step: with the look-ahead mask on one
   * new token a step after the cache, with it off the whole prefix again. Every step's top-k, and the
   * outputs of the whole prefix (every pattern) unless ``views`` is false. */
  async greedy(ids, sw = {}, views = true) {
    const t0 = performance.now();
    const { src, out: enc } = await this.encode(ids, sw);
    const budget = Math.max(1, Math.min(100, this.meta.max_len - 1, 2 * ids.length + 10));
    const cached = sw.causal !== false;
    const past = this.meta.decoder_inputs.filter((x) => x.startsWith("past_"));
    const fetch = cached ? ["logits", ...past.map((n) => n.replace("past_", "present_"))] : ["logits"];
    const ys = [this.meta.decoder_start_id], steps = [];
    let cache = this.emptyCache();
    for (let t = 0; t < budget; t++) {
      const out = await this.step(cached ? ys.slice(-1) : ys, enc.memory, src, sw, cached ? cache : null, fetch);
      if (cached) cache = Object.fromEntries(past.map((n) => [n, out[n.replace("past_", "present_")]]));
      const step = topK(out.logits.data, this.meta.never_generated, TOP_K);
      steps.push(step);
      ys.push(step.choice);
      if (step.choice === this.meta.eos_id) break;
    }
    const dec = views ? await this.step(ys.slice(0, -1), enc.memory, src, sw) : null;
    return { ids: ys.slice(1), steps, enc, dec, ms: performance.now() - t0 };
  }
}

/** The chosen next token (the argmax among those decoding may choose) and the model's k best, with their
 * probabilities over the whole vocabulary, as the app records them. */
export function topK(logits, never, k) {
  let max = -Infinity, choice = -1;
  for (let i = 0; i < logits.length; i++) {
    if (logits[i] > max) max = logits[i];
    if (!never.includes(i) && (choice < 0 || logits[i] > logits[choice])) choice = i;
  }
  let sum = 0;
  for (const x of logits) sum += Math.exp(x - max);
  const ids = Array.from(logits.keys()).sort((a, b) => logits[b] - logits[a]).slice(0, k);
  const p = (i) => Math.exp(logits[i] - max) / sum;
  return { choice, prob: p(choice), ids, probs: ids.map(p), logits: ids.map((i) => logits[i]) };
}
