// One direction's model in the browser: tokenizer, encoder and decoder graphs, greedy decoding.
// The same steps as model.engine.decoding.translate with --beam 1: spaCy words, SentencePiece pieces,
// <bos> pieces <eos>, then the next token's argmax (never <bos> or <pad>) until <eos> or the step budget.

import { SentencePieceBPE } from "./spm.js";
import { SpacyWords } from "./words.js";

export const MAX_INPUT_CHARS = 2000;
export const TOP_K = 10;
const json = async (url) => { const r = await fetch(url); if (!r.ok) throw new Error(`${url}: ${r.status}`); return r.json(); };
const wordRules = new Map();

/** The worker that runs ONNX Runtime (worker.js), started on first use and again after it failed: calls
 * answer by id; ``onProgress`` hears the bytes of a model while it loads. */
// ONNX Runtime's threads: only where the host isolates the page (the Space's README asks for the headers), and
// half the cores at most, up to 4: on 2 cores a second thread made our small models slower (bench/web_threads.json)
const THREADS = globalThis.crossOriginIsolated ? Math.max(1, Math.min(4, Math.floor((navigator.hardwareConcurrency || 1) / 2))) : 1;

const runtime = {
  worker: null, calls: new Map(), next: 0, onProgress: null,
  start() {
    const w = new Worker(new URL("./worker.js", import.meta.url), { type: "module", name: `threads=${THREADS}` });
    w.onmessage = ({ data }) => {
      if (data.progress) return this.onProgress?.(data.progress);
      const call = this.calls.get(data.id);
      this.calls.delete(data.id);
      if (data.error) call?.fail(new Error(data.error)); else call?.ok(data.out);
    };
    w.onerror = (e) => { e.preventDefault(); this.stop(new Error(e.message || "the model's worker did not start")); };
    return w;
  },
  stop(err) {  // every pending call fails; the next one starts a new worker (and loads its models again)
    this.worker?.terminate();
    this.worker = null;
    for (const c of this.calls.values()) c.fail(err);
    this.calls.clear();
    for (const d of Direction.all) d.sessions = null;
  },
  call(op, ...args) {
    this.worker ??= this.start();
    const id = this.next++;
    return new Promise((ok, fail) => { this.calls.set(id, { ok, fail }); this.worker.postMessage({ id, op, args }); });
  },
};

/** The page's progress bar: ``fn({loaded, total})`` in bytes while a model loads. */
export function onModelProgress(fn) { runtime.onProgress = fn; }

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
  static all = new Set();

  /** The tokenizer and the model's description; the graphs load on first use (``graphs``), so that a first
   * screen computed when the site was built can be drawn before ONNX Runtime Web has started. */
  static async load(base, name) {
    const d = new Direction();
    d.loaded = new Promise((ok) => { d.loadedOnce = ok; });  // the graphs' first successful load
    d.base = `${base}/models/${name}`;
    d.site = base;
    d.name = name;
    const [meta, spm] = await Promise.all([json(`${d.base}/meta.json`), json(`${d.base}/spm.json`)]);  // side by side
    d.meta = meta;
    d.spm = new SentencePieceBPE(spm);
    d.words = await remembered(wordRules, d.meta.src_lang, () => json(`${base}/models/spacy_${d.meta.src_lang}.json`).then((r) => new SpacyWords(r)));
    Direction.all.add(d);
    return d;
  }

  /** The encoder and decoder sessions, created once in the worker; a failed load is tried again on next use. */
  graphs() {
    if (!this.sessions) {
      this.sessions = runtime.call("load", this.base, this.meta, this.meta.bytes ?? {});
      this.sessions.then(() => this.loadedOnce(), () => { this.sessions = null; });
    }
    return this.sessions;
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

  /** ``source`` computed in the worker: a long input's words and pieces take the page's thread no time. */
  sourceOffThread(text) {
    return runtime.call("source", this.site, this.name, text);
  }

  /** The encoder's outputs: {src, out}, each tensor as {dims, data}. */
  async encode(ids, sw = {}) {
    await this.graphs();
    return runtime.call("encode", this.base, ids, sw);
  }

  /** The self-attention cache before the first step: none here (the worker's step starts from an empty one). */
  emptyCache() {
    return null;
  }

  /** The decoder over new positions ``ys`` after ``cache`` (default: none, the whole prefix). ``fetch``:
   * the outputs wanted (ORT then skips what only the others need); all of them when null. */
  async step(ys, memory, src, sw = {}, cache = null, fetch = null) {
    await this.graphs();
    return runtime.call("step", this.base, ys, memory, src, sw, cache, fetch);
  }

  /** Greedy decoding of source ids (worker.js): every step's top-k, and the outputs of the whole prefix
   * (every pattern) unless ``views`` is false. */
  async greedy(ids, sw = {}, views = true) {
    await this.graphs();
    return runtime.call("greedy", this.base, ids, sw, views, TOP_K);
  }

  /** ALTI+ (the build's alti.onnx) of source ``ids`` with the tokens ``keep`` marks 0 hidden, over output
   * ``outIds`` or, where null, over the greedy output with them hidden: {ids, alti: {dims: [T, S + T], data}}. */
  async alti(ids, keep, outIds = null) {
    await this.graphs();
    return runtime.call("alti", this.base, ids, keep, outIds);
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

/** ``map``'s promise for ``key``, made by ``make`` once; a rejected one is forgotten (made again next time). */
export function remembered(map, key, make) {
  if (!map.has(key)) {
    const p = make();
    map.set(key, p);
    p.catch(() => { if (map.get(key) === p) map.delete(key); });
  }
  return map.get(key);
}
