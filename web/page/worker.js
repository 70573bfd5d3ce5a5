// ONNX Runtime Web off the page's thread: the graphs load and run here, so that a long translation never
// holds up a click. The page (engine.js) sends {id, op, args}; the answer is {id, out} or {id, error}, and
// while a model loads, {progress: {base, loaded, total}} in bytes.

import * as ort from "./vendor/ort.wasm.min.mjs";
import { Direction, remembered, topK } from "./engine.js";

// Threads share memory, which a browser allows only a cross-origin isolated page; the page says how many in
// the worker's name (engine.js).
const THREADS = self.crossOriginIsolated ? Math.max(1, Number(/threads=(\d+)/.exec(self.name)?.[1] ?? 1)) : 1;
ort.env.wasm.numThreads = THREADS;
ort.env.wasm.wasmPaths = new URL("./vendor/", import.meta.url).href;

const WASM = "ort-wasm-simd-threaded.wasm";  // meta.bytes names it "vendor/" + WASM
const GRAPHS = ["encoder.onnx", "decoder.onnx"];  // then the weights: weights.bin, or its parts (meta.weights)
const sessions = new Map();  // model folder -> Promise of {encoder, decoder, meta}
const tokenizers = new Map();  // direction -> Promise of its Direction (words and pieces, no graphs)
let runs = Promise.resolve();  // one graph run at a time: a session runs one call at once

/** A file's bytes, read as they arrive so that the page can show a progress bar. A failed or cut download
 * says which file and why. */
async function bytesOf(url, tick) {
  const file = url.split("/").slice(-2).join("/");
  const failed = (why) => new Error(`the download of ${file} failed (${why})`);
  const r = await fetch(url).catch(() => { throw failed("no connection"); });
  if (!r.ok) throw failed(`HTTP ${r.status}`);
  const parts = [];
  let n = 0;
  for (const reader = r.body.getReader(); ;) {
    const { done, value } = await reader.read().catch(() => { throw failed(`cut off after ${n} bytes`); });
    if (done) break;
    parts.push(value);
    n += value.length;
    tick(value.length);
  }
  const out = new Uint8Array(n);
  parts.reduce((at, p) => (out.set(p, at), at + p.length), 0);
  return out;
}

/** ONNX Runtime's WASM, fetched here (and handed over) so that its bytes count in the progress bar. */
let wasm = null;
function wasmBinary(tick) {
  if (ort.env.wasm.wasmBinary) return Promise.resolve();
  wasm ??= bytesOf(ort.env.wasm.wasmPaths + WASM, tick).then((b) => { ort.env.wasm.wasmBinary = b.buffer; },
    (e) => { wasm = null; throw e; });
  return wasm;
}

/** The encoder and decoder sessions of one model folder; both read their weights from one file. ``sizes``:
 * each file's bytes as the build wrote them in meta.json (the progress bar's total). */
async function load(base, meta, sizes) {
  let loaded = 0;
  const files = [...GRAPHS, ...(meta.weights ?? ["weights.bin"])];
  const total = files.reduce((s, f) => s + (sizes[f] ?? 0), ort.env.wasm.wasmBinary || wasm ? 0 : sizes[`vendor/${WASM}`] ?? 0);
  const tick = (n) => { loaded += n; postMessage({ progress: { base, loaded, total } }); };
  const [enc, dec, ...parts] = await Promise.all([...files.map((f) => bytesOf(`${base}/${f}`, tick)), wasmBinary(tick)]);
  const weights = joined(parts.slice(0, files.length - GRAPHS.length));
  const opts = { executionProviders: ["wasm"], graphOptimizationLevel: "all",
    externalData: [{ path: "weights.bin", data: weights }] };
  const make = creating.then(async () => ({ encoder: await ort.InferenceSession.create(enc, opts),
    decoder: await ort.InferenceSession.create(dec, opts), meta, base, opts, alti: null }));
  creating = make.catch(() => {});
  return make;
}

/** The weights' parts (the build splits a large weights.bin under the host's limit a file), in order. */
function joined(parts) {
  if (parts.length === 1) return parts[0];
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  parts.reduce((at, p) => (out.set(p, at), at + p.length), 0);
  return out;
}

// one session created at a time: ONNX Runtime mounts the external data by its file name, and every
// direction's is "weights.bin", so two directions created at once could read each other's weights
let creating = Promise.resolve();

function model(base) {
  const m = sessions.get(base);
  if (!m) throw new Error("the model is not loaded");
  return m;
}

const tensor = (t) => new ort.Tensor(t.data instanceof BigInt64Array ? "int64" : "float32", t.data, t.dims);
const plain = (t) => ({ dims: t.dims, data: t.data });
const plainAll = (o) => Object.fromEntries(Object.entries(o).map(([k, v]) => [k, plain(v)]));

function flags(sw) {
  const f = (on) => new ort.Tensor("float32", new Float32Array([on === false ? 0 : 1]), [1]);
  return { use_padding_mask: f(sw.padding), use_causal_mask: f(sw.causal), use_pos: f(sw.pos) };
}

async function encode(m, ids, sw) {
  const src = new ort.Tensor("int64", BigInt64Array.from(ids.map(BigInt)), [1, ids.length]);
  const fl = flags(sw);
  const out = await m.encoder.run({ src, use_padding_mask: fl.use_padding_mask, use_pos: fl.use_pos });
  return { src, out };
}

/** An empty self-attention cache: every past_* input with no positions. */
function emptyCache(meta) {
  const H = meta.decoder_heads, dk = meta.d_model / H, out = {};
  for (const n of meta.decoder_inputs.filter((x) => x.startsWith("past_"))) out[n] = new ort.Tensor("float32", new Float32Array(0), [1, H, 0, dk]);
  return out;
}

function step(m, ys, memory, src, sw, cache, fetch) {
  const tgt = new ort.Tensor("int64", BigInt64Array.from(ys.map(BigInt)), [1, ys.length]);
  const feeds = { tgt, memory, src, ...flags(sw), ...(cache ?? emptyCache(m.meta)) };
  return fetch ? m.decoder.run(feeds, fetch) : m.decoder.run(feeds);
}


/** The most tokens greedy decoding writes for ``n`` source tokens. */
const stepBudget = (meta, n) => Math.max(1, Math.min(100, meta.max_len - 1, 2 * n + 10));

/** Greedy decoding, as model.engine.decoding.decoder_step: with the look-ahead mask on one new token a step
 * after the cache, with it off the whole prefix again; the whole prefix's outputs at the end if ``views``. */
async function greedy(m, ids, sw, views, k) {
  const t0 = performance.now(), meta = m.meta;
  const { src, out: enc } = await encode(m, ids, sw);
  const budget = stepBudget(meta, ids.length);
  const cached = sw.causal !== false;
  const past = meta.decoder_inputs.filter((x) => x.startsWith("past_"));
  const fetch = cached ? ["logits", ...past.map((n) => n.replace("past_", "present_"))] : ["logits"];
  const ys = [meta.decoder_start_id], steps = [];
  let cache = emptyCache(meta);
  for (let t = 0; t < budget; t++) {
    const out = await step(m, cached ? ys.slice(-1) : ys, enc.memory, src, sw, cached ? cache : null, fetch);
    if (cached) cache = Object.fromEntries(past.map((n) => [n, out[n.replace("past_", "present_")]]));
    const s = topK(out.logits.data, meta.never_generated, k);
    steps.push(s);
    ys.push(s.choice);
    if (s.choice === meta.eos_id) break;
  }
  const dec = views ? plainAll(await step(m, ys.slice(0, -1), enc.memory, src, sw, null, null)) : null;
  return { ids: ys.slice(1), steps, enc: plainAll(enc), dec, ms: performance.now() - t0, threads: THREADS };
}

/** The ALTI+ graph's session (alti.onnx, web/export.py AltiGraph), made on first use with the weights the
 * model's other graphs read; a failed load is tried again next time. */
function altiSession(m) {
  if (!m.alti) {
    const make = creating.then(async () => ort.InferenceSession.create(await bytesOf(`${m.base}/alti.onnx`, () => {}), m.opts));
    creating = make.catch(() => {});
    m.alti = make;
    make.catch(() => { m.alti = null; });
  }
  return m.alti;
}

const ids64 = (ids) => new ort.Tensor("int64", BigInt64Array.from(ids.map(BigInt)), [1, ids.length]);

/** ALTI+ of source ``ids`` with the tokens ``keep`` marks 0 hidden (Interventions.ablate_src_tokens), over the
 * output ``outIds``, or, where null, over the greedy output of the graph itself with those tokens hidden (the
 * step budget of ``greedy``): {ids, alti: (T, S + T)}. */
async function alti(m, ids, keep, outIds) {
  const session = await altiSession(m), meta = m.meta;
  const feeds = (ys) => ({ src: ids64(ids), tgt: ids64(ys), keep: new ort.Tensor("float32", Float32Array.from(keep), [1, ids.length]) });
  let out = outIds;
  if (!out) {
    const budget = stepBudget(meta, ids.length), ys = [meta.decoder_start_id];
    for (let t = 0; t < budget && ys.at(-1) !== meta.eos_id; t++) {
      ys.push(topK((await session.run(feeds(ys), ["logits"])).logits.data, meta.never_generated, 1).choice);
    }
    out = ys.slice(1);
  }
  const r = await session.run(feeds([meta.decoder_start_id, ...out.slice(0, -1)]), ["alti"]);
  return { ids: out, alti: plain(r.alti) };
}

const OPS = {
  load: (base, meta, sizes) => {
    if (!sessions.has(base)) {
      const p = load(base, meta, sizes);
      sessions.set(base, p);
      p.catch(() => sessions.delete(base));  // tried again on the next action
    }
    return sessions.get(base).then(() => true);
  },
  source: async (site, name, text) => (await remembered(tokenizers, name, () => Direction.load(site, name))).source(text),
  encode: async (base, ids, sw) => {
    const { src, out } = await encode(await model(base), ids, sw);
    return { src: plain(src), out: plainAll(out) };
  },
  step: async (base, ys, memory, src, sw, cache, fetch) => {
    const m = await model(base);
    const c = cache && Object.fromEntries(Object.entries(cache).map(([n, t]) => [n, tensor(t)]));
    return plainAll(await step(m, ys, tensor(memory), tensor(src), sw, c, fetch));
  },
  greedy: async (base, ids, sw, views, k) => greedy(await model(base), ids, sw, views, k),
  alti: async (base, ids, keep, outIds) => alti(await model(base), ids, keep, outIds),
};

/** Every typed array's buffer in an answer, handed over rather than copied (the worker keeps none). */
function buffers(x, out = new Set()) {
  if (ArrayBuffer.isView(x)) out.add(x.buffer);
  else if (x && typeof x === "object") for (const v of Object.values(x)) buffers(v, out);
  return out;
}

self.onmessage = ({ data: { id, op, args } }) => {
  const job = op === "load" || op === "source" ? OPS[op](...args) : (runs = runs.then(() => OPS[op](...args), () => OPS[op](...args)));
  job.then((out) => {
    try { postMessage({ id, out }, [...buffers(out)]); } catch { postMessage({ id, out }); }  // a shared buffer: copy
  }, (e) => postMessage({ id, error: String(e?.message ?? e) }));
};
