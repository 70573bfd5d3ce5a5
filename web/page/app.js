// The page: a typed sentence in one direction, translated in the browser, and the views drawn from it.
// window.explorer is the same machinery for the tests and benchmarks (no second code path).

import { cleanInput, isBlank, onModelProgress, remembered } from "./engine.js";
import { toText } from "./text.js";
import { drawGrid, drawHead, drawPositions, axesOf, KINDS } from "./views.js";
import { MASK_STOP, MOVED_STOP, changed, computable, decodingStep, fill, hiddenWord, markdown, tourStops, words as wordsOf } from "./tour.js";
import { POS_STOP, STEP_STOP, stopFigure, trialOf } from "./stops.js";
import { appLink, fromQuery, pageKind, toQuery, unshown } from "./link.js";
import { Player } from "./player.js";
import { Masks } from "./masks.js";
import { drawOverview } from "./overview.js";
import { aboutModel, modelFiles, offerModels, openDirection } from "./models.js";

const BASE = new URL(".", import.meta.url).href.replace(/\/$/, "");
const $ = (id) => document.getElementById(id);
const loaded = new Map();
const LANG = { de: "German", en: "English", fr: "French", cs: "Czech" };
const UNFAMILIAR_SHARE = 0.3;
let current = null, player = null, masks = null;
let site = null;  // the manifest (directions, examples, the app's address) and the tour's texts (tour.json)
let openStop = null;  // the tour stop the link or a click opened (1-based)

/** A direction's tokenizer and description, loaded once; a failed load is tried again on the next action. */
function direction(name) {
  const known = loaded.has(name);
  const d = remembered(loaded, name, () => openDirection(BASE, name, site?.manifest));
  if (!known) d.then(() => keepForOffline(name)).catch(() => {});
  return d;
}

const VENDOR = ["worker.js", "vendor/ort.wasm.min.mjs", "vendor/ort-wasm-simd-threaded.mjs", "vendor/ort-wasm-simd-threaded.wasm"];

/** Once the service worker controls the page, ask it for a direction's files, so that the ones fetched
 * before it took over are kept for offline use too (it copies them from the HTTP cache, no second download). */
async function keepForOffline(name) {
  if (!("serviceWorker" in navigator)) return;
  await navigator.serviceWorker.ready;
  if (!navigator.serviceWorker.controller) await new Promise((ok) => navigator.serviceWorker.addEventListener("controllerchange", ok, { once: true }));
  const d = await loaded.get(name);
  await d.loaded;  // once the model has loaded (its own download): every file is asked for once
  const all = await Promise.all([...VENDOR, ...modelFiles(d)].map((u) =>
    fetch(`${BASE}/${u}`).then((r) => r.ok, () => false)));
  if (all.every(Boolean)) document.body.dataset.offline = [document.body.dataset.offline, name].filter(Boolean).join(" ");
}

/** (1, H, A, B) tensor -> H arrays of A rows of B numbers. */
function heads(t) {
  const [, H, A, B] = t.dims, d = t.data, out = [];
  for (let h = 0; h < H; h++) {
    const rows = [];
    for (let a = 0; a < A; a++) rows.push(Array.from(d.subarray((h * A + a) * B, (h * A + a + 1) * B)));
    out.push(rows);
  }
  return out;
}

function rows2d(t) {  // (1, A, B) -> A rows
  const [, A, B] = t.dims;
  return Array.from({ length: A }, (_, a) => Array.from(t.data.subarray(a * B, (a + 1) * B)));
}

function patterns(d, res) {
  const L = (kind) => (kind === "enc" ? d.meta.encoder_layers : d.meta.decoder_layers);
  const out = {};
  for (const kind of KINDS) {
    const src = kind === "enc" ? res.enc : res.dec;
    out[kind] = Array.from({ length: L(kind) }, (_, l) => heads(src[`${kind}_pattern_${l}`]));
  }
  return out;
}

/** Source words the model spells byte by byte, as the app's guardrail counts them. */
function unfamiliar(d, tokens) {
  let words = 0, odd = 0, inWord = false, oddWord = false;
  for (const t of tokens.slice(1, -1)) {
    if (t.startsWith("\u2581") || !inWord) { if (inWord) odd += oddWord; words++; inWord = true; oddWord = false; }
    if (/^<0x[0-9A-F]{2}>$/.test(t)) oddWord = true;
  }
  if (inWord) odd += oddWord;
  return { words, odd };
}

function notices(d, src, pre) {
  const out = [...pre];
  const u = unfamiliar(d, src.tokens);
  if (u.words && u.odd / u.words > UNFAMILIAR_SHARE) {
    out.push(`${u.odd} of ${u.words} source words are outside what the model learned (spelled byte by byte, or read as <unk>): ` +
      `the input may be in another script or language than ${LANG[d.meta.src_lang] ?? d.meta.src_lang}. Expect a translation that has little to do with it.`);
  }
  if (src.truncated) out.push(`The sentence is longer than the model's maximum of ${d.meta.max_len - 2} tokens; it was cut there.`);
  return out;
}

/** Translate ``text`` in direction ``name``: everything the views draw, or {notices} alone for blank input. */
async function translate(name, text, switches = {}) {
  const d = await direction(name);
  const { text: clean, notices: pre } = cleanInput(text);
  if (isBlank(clean)) return { dir: name, notices: [...pre, "The input is empty: type a sentence to translate."], empty: true };
  const src = await d.sourceOffThread(clean);
  const res = await d.greedy(src.ids, switches);
  return runOf(d, name, clean, src, res, switches, notices(d, src, pre));
}

function runOf(d, name, text, src, res, switches, notes) {
  const outTokens = res.ids.map((i) => d.spm.pieces[i]);
  return {
    dir: name, srcText: text, srcTokens: src.tokens, srcIds: src.ids, outIds: res.ids, outTokens,
    decoderInput: ["<bos>", ...outTokens.slice(0, -1)], text: toText(outTokens, d.spm, d.meta.tgt_lang),
    patterns: patterns(d, res), steps: res.steps.map((s) => ({ ...s, tokens: s.ids.map((i) => d.spm.pieces[i]) })),
    enc: res.enc, dec: res.dec, switches, notices: notes, ms: res.ms, threads: res.threads,
  };
}

/** A tensor stored as web/first.py writes one (dims, base64 little-endian float32) as the page reads one. */
function storedTensor({ dims, data }) {
  const bytes = Uint8Array.from(atob(data), (c) => c.charCodeAt(0));
  return { dims, data: new Float32Array(bytes.buffer) };
}

/** The direction's first screen, computed when the site was built (web/first.py), if ``text`` is its sentence
 * and this page's tokenizer gives its source ids; else null (the model then runs here). */
async function firstScreen(name, text) {
  const stored = fetch(`${BASE}/models/${name}/first.json`).then((r) => (r.ok ? r.json() : null), () => null);
  const d = await direction(name);
  const f = await stored;
  if (!f) return null;
  const src = d.source(text);
  if (f.text !== text || f.srcIds.join() !== src.ids.join()) return null;
  const tensors = (o) => Object.fromEntries(Object.entries(o).map(([k, v]) => [k, storedTensor(v)]));
  const res = { ids: f.ids, steps: f.steps, enc: tensors(f.enc), dec: tensors(f.dec), ms: null };
  return runOf(d, name, text, src, res, {}, notices(d, src, []));
}

/** Greedy decoding of given source ids (the parity tests feed the engine's own). */
async function greedyIds(name, ids, switches = {}) {
  const d = await direction(name);
  const res = await d.greedy(ids, switches);
  return { ids: res.ids, patterns: patterns(d, res), ms: res.ms };
}

async function pieces(name, text) { return (await direction(name)).pieces(text); }
async function words(name, text) { return (await direction(name)).words.words(text); }
async function encodePieces(name, text) { return (await direction(name)).spm.encode(text); }

// ---------------------------------------------------------------- the screen

function say(el, lines) {
  el.replaceChildren(...lines.map((t) => Object.assign(document.createElement("p"), { textContent: t })));
  el.hidden = lines.length === 0;
}

function fillHeadPicker(run, want = null) {
  const sel = $("head-pick"), keep = want ?? sel.value;
  sel.replaceChildren();
  for (const kind of KINDS) run.patterns[kind].forEach((hs, l) => hs.forEach((_, h) => {
    sel.append(new Option(headLabel(kind, l, h), headKey(kind, l, h)));
  }));
  sel.value = keep && [...sel.options].some((o) => o.value === keep) ? keep : headKey("cross", run.patterns.cross.length - 1, 0);
}

// a head's label and key as the app writes them (model/engine/names.py HeadRef): 'dec L1 H2', 'dec.1.2';
// the page's data name the decoder's self-attention "self"
const HEAD_SHORT = { enc: "enc", self: "dec", cross: "cross" };
const headLabel = (kind, l, h) => `${HEAD_SHORT[kind]} L${l} H${h}`;
const headKey = (kind, l, h) => `${HEAD_SHORT[kind]}.${l}.${h}`;
const headOf = (key) => {
  const [short, l, h] = key.split(".");
  return [Object.keys(HEAD_SHORT).find((k) => HEAD_SHORT[k] === short), l, h];
};

function drawHeadView(run) {
  const [kind, l, h] = headOf($("head-pick").value);
  const [ys, xs] = axesOf(run, kind);
  return drawHead($("head-plot"), run.patterns[kind][+l][+h], xs, ys, `${kind} layer ${l} head ${h}`);
}

function stepsTable(run) {
  const rows = run.steps.map((s, i) => {
    const tr = document.createElement("tr");
    const cells = [String(i), run.outTokens[i], s.prob.toFixed(3),
      s.tokens.map((t, k) => `${t} ${s.probs[k].toFixed(3)}`).join("  ·  ")];
    tr.replaceChildren(...cells.map((c) => Object.assign(document.createElement("td"), { textContent: c })));
    return tr;
  });
  $("steps-body").replaceChildren(...rows);
}

/** A paragraph of the tour: its Markdown drawn, and kept as written (data-md) for the tests. */
function para(md, className = "") {
  const p = Object.assign(document.createElement("p"), { className });
  p.dataset.md = md;
  p.replaceChildren(...markdown(md));
  return p;
}

/** A stop (or its figure, ``what``) that needs the server: said, with a link to the app on this sentence at
 * this stop (and its pick). */
function serverNote(run, number, what = "This stop needs the server (PyTorch): ", pick = null) {
  const a = Object.assign(document.createElement("a"), { textContent: "open this stop in the app",
    href: appLink(site.manifest.app, { ...linkState(run), tour: number, tpick: pick }), className: "app-link" });
  const p = Object.assign(document.createElement("p"), { className: "server" });
  p.append(what, a, ", on the same sentence.");
  return p;
}

const storedTours = new Map();
const ONE_HEAD_STOP = 3;

/** The app's tour of the direction's example sentence, drawn by its own viz/ code when the site was built
 * (models/<name>/tour.json): each stop's figure is the skeleton the page fills for any sentence, and, for that
 * sentence alone (``example``), what the page cannot compute. */
async function storedTour(run) {
  if (!storedTours.has(run.dir)) {
    storedTours.set(run.dir, fetch(`${BASE}/models/${run.dir}/tour.json`).then((r) => (r.ok ? r.json() : null), () => null));
  }
  const t = await storedTours.get(run.dir);
  if (!t) return null;
  return { ...t, example: t.text === run.srcText && t.output_ids.join() === run.outIds.join() && !maskSwitched(run) };
}

const maskSwitched = (run) => Object.values(run.switches ?? {}).some((on) => on === false);

/** A figure, drawn once its stop comes into view (eleven Plotly figures at once would slow the page). */
const figureObserver = "IntersectionObserver" in window ? new IntersectionObserver((seen) => {
  for (const e of seen) if (e.isIntersecting) drawStoredFigure(e.target);
}, { rootMargin: "200px" }) : null;

function drawStoredFigure(el) {
  if (el.dataset.drawn || !el.figure) return;
  el.dataset.drawn = "pending";
  figureObserver?.unobserve(el);
  Plotly.react(el, el.figure.data, el.figure.layout, { responsive: true, displaylogo: false })
    .then(() => { el.dataset.drawn = "1"; });
}

/** A stop's figure: the app's skeleton filled with this run's numbers (stops.js); where the page cannot
 * compute it, the app's own figure for the example sentence, else said, with a link to the app. */
async function figureOf(run, d, stop, stored, pick) {
  const kept = stored?.stops[stop.number], skeleton = kept?.picks?.[stop.off ? "off" : pick] ?? kept?.figure;
  const at = stop.number === STEP_STOP ? decodingStep(run, d, site.tour) : null;
  const what = stop.number === MOVED_STOP ? stop.bars : stop.number === STEP_STOP && pick !== "beam" ? at : stop.off ? "off" : pick;
  // a first screen stores no tensors of stop 3's figure (web/first.py): its stored figure, or a pick's run here
  const lean = stop.number === ONE_HEAD_STOP && !run.enc.enc_q_0;
  if (lean && pick !== undefined) await d.encode(run.srcIds, run.switches).then(({ out }) => Object.assign(run.enc, out), (e) => console.warn(e));
  let fig = lean && pick === undefined ? null
    : await stopFigure(stop.number, run, d, skeleton, what, stored?.plot_px).catch((e) => { console.warn(e); return null; });
  if (!fig && stored?.example && !stop.off && pick === undefined) fig = kept?.figure ?? null;  // the app's, as stored
  if (!fig) return serverNote(run, stop.number, "Its figure for this sentence needs the server: ", pick);
  const el = Object.assign(document.createElement("div"), { className: "plot tour-figure" });
  el.figure = fig;
  // its height held before Plotly draws it, so that what lies below does not move under a reader's click
  el.style.minHeight = `${fig.layout?.height ?? 450}px`;
  el.dataset.filled = fig === kept?.figure ? "stored" : "page";
  if (figureObserver) figureObserver.observe(el);
  else queueMicrotask(() => drawStoredFigure(el));
  return el;
}

let tourPicks = { run: null, picks: {}, changed: {} };  // each stop's "Try it" pick on the run shown
const picksOf = (run) => (tourPicks.run === run ? tourPicks : (tourPicks = { run, picks: {}, changed: {} }));

/** A stop's "Try it": the app's choices (stops.js trialOf); a pick redraws the stop's text and figure. */
function trialControl(run, stop, stored, maskOff) {
  const { picks } = picksOf(run);
  const trial = trialOf(stop.number, run, stored?.stops[stop.number], picks[stop.number], stored?.example, stop.value, stop.choices);
  if (!trial || stop.number === MASK_STOP) return [];
  const defaultTrial = trialOf(stop.number, run, stored?.stops[stop.number], undefined, stored?.example, stop.value, stop.choices);
  const sel = Object.assign(document.createElement("select"), { className: "try-pick" });
  sel.setAttribute("aria-label", trial.label);
  for (const [label, value] of trial.choices) sel.append(new Option(label, value));
  sel.value = trial.value;
  sel.addEventListener("change", async () => {
    picks[stop.number] = sel.value;
    picksOf(run).changed[stop.number] = await tried(run, stop.number, sel.value, defaultTrial).catch((e) => `That did not work in this browser: ${e.message}.`);
    await tour(run, maskOff);
  });
  const label = Object.assign(document.createElement("label"), { className: "try", textContent: `${trial.label} ` });
  label.append(sel);
  return [label];
}

/** What a pick changed, as the app's tour says it: stop 2 without positional encoding decodes again; another
 * pick names what the stop shows instead of what (ui.present.tour.tried). */
async function tried(run, number, pick, trial) {
  const d = await direction(run.dir);
  if (number === POS_STOP) {
    if (pick !== "off") return "";
    const other = await d.greedy(run.srcIds, { pos: false }, false);
    const outTokens = other.ids.map((i) => d.spm.pieces[i]);
    return changed(run, d, site.tour, site.tour.say.positions_without, { outTokens, text: toText(outTokens, d.spm, d.meta.tgt_lang) });
  }
  if (number === MOVED_STOP) {
    const src = wordsOf(run.srcTokens, d.spm), h = hiddenWord(pick, src.labels.length);
    if (h === null) return "";
    const other = await hiddenRun(run, d, src.spans[h], h);
    return changed(run, d, site.tour, fill(site.tour.say.moved_hidden_what, { key: src.labels[h] }), other);
  }
  const label = (v) => trial.choices.find(([, value]) => value === v)?.[0];
  return pick === trial.value || !label(pick) ? "" : fill(site.tour.say.tried_pick, { now: label(pick), was: label(trial.value) });
}

/** The run's sentence decoded with source word ``h`` (its tokens ``span``) hidden, as the app's tour hides it
 * (Interventions.ablate_src_tokens), and its ALTI+: kept as run.ablated[h] for stop 9. */
async function hiddenRun(run, d, span, h) {
  run.ablated ??= {};
  if (!run.ablated[h]) {
    const res = await d.alti(run.srcIds, run.srcIds.map((_, i) => (span.includes(i) ? 0 : 1)));
    const outTokens = res.ids.map((i) => d.spm.pieces[i]);
    run.ablated[h] = { alti: res.alti, outTokens, text: toText(outTokens, d.spm, d.meta.tgt_lang) };
  }
  return run.ablated[h];
}

/** The run's ALTI+ (stop 9), where the page computed the run (a first screen's stays the stored one) and the
 * build exported the graph; a failure leaves the stop to the app. */
async function withAlti(run, d) {
  if (run.alti !== undefined || run.ms === null || run.empty || !d.meta.alti_bytes) return;
  run.alti = await d.alti(run.srcIds, run.srcIds.map(() => 1), run.outIds).then((r) => r.alti, (e) => { console.warn(e); return null; });
}

/** The tour's stops: those that need no server computed here from this run, in the app's own sentences;
 * the others linked to the app (and, for the example sentence, shown as the app stated them at build time).
 * ``maskOff``: stop 5 tried with the look-ahead mask off. */
async function tour(run, maskOff = null) {
  const d = await direction(run.dir);
  const stored = await storedTour(run);
  await withAlti(run, d);
  const n = site.tour.titles.length, { picks, changed: said } = picksOf(run);
  const movedTrial = stored?.stops[MOVED_STOP]?.trial;
  const items = await Promise.all(tourStops(run, d, site.tour, maskOff, picks, movedTrial).map(async (stop) => {
    const li = document.createElement("li");
    li.dataset.stop = String(stop.number);
    li.dataset.pick = picks[stop.number] ?? "";  // what the stop is drawn for (its "Try it" pick; "": the default)
    const head = Object.assign(document.createElement("h3"), { textContent: `Stop ${stop.number} of ${n}: ${stop.title}`, tabIndex: 0 });
    head.addEventListener("click", () => openTourStop(stop.number));
    const kept = stop.server && stored?.example ? stored.stops[stop.number] : null;
    const text = kept ? kept.sentences.map((s) => para(s, "stored")) : stop.server ? [] : stop.sentences.map((s) => para(s));
    li.replaceChildren(head, ...text);
    // the stored stop of the example, where the page computes it once a sentence runs here: no server to name
    if (stop.server && !(kept && computable(stop.number, d))) li.append(serverNote(run, stop.number));
    if (stop.number === MASK_STOP && !stop.server) li.append(...maskTrial(run, stop));
    li.append(...trialControl(run, stop, stored, maskOff));
    if (said[stop.number]) li.append(para(said[stop.number], "changed"));
    li.append(await figureOf(run, d, stop, stored, picks[stop.number]));
    if (stop.server) li.classList.add("server");
    return li;
  }));
  $("tour").replaceChildren(...items);
  if (openStop) openTourStop(openStop, false);
}

/** A part of the model's overview opened: its view's section scrolled to (an attention kind: its map). */
function openView(view) {
  const kind = pageKind(view);
  if (kind) {
    $("grid-kind").value = kind;
    $("grid-kind").dispatchEvent(new Event("change"));
  }
  const box = { positions: "positions-box", steps: "step-by-step", masks: "masks-box" }[view] ?? (kind && "every-head");
  if (box) $(box).scrollIntoView({ block: "start" });
}

/** Stop ``number`` marked open (and scrolled to, when a link asked for it), and kept in the link. */
function openTourStop(number, byClick = true) {
  openStop = number;
  for (const li of $("tour").children) li.classList.toggle("open", Number(li.dataset.stop) === number);
  const li = $("tour").querySelector(`li[data-stop='${number}']`);
  if (li && !byClick) li.scrollIntoView({ block: "start" });
  const fig = li?.querySelector(".tour-figure");
  if (fig) drawStoredFigure(fig);
  if (current) writeLink(current);
}

/** What the page shows, in the app's link keys (ui/state.py to_query). */
function linkState(run) {
  const [kind, layer, head] = headOf($("head-pick").value);
  return { text: run.srcText, model: run.dir, kind, layer: Number(layer), head: Number(head), tour: openStop };
}

function writeLink(run) {
  const url = new URL(location.href);
  url.search = toQuery(linkState(run), unshown(new URLSearchParams(location.search))).toString();
  player?.writeLink(url);  // the step player's sampling keys
  history.replaceState(null, "", url);
}

/** Stop 5's "Try it": a button that switches the look-ahead mask off (or back on), and what that changed. */
function maskTrial(run, stop) {
  const btn = Object.assign(document.createElement("button"), { type: "button", className: "try",
    textContent: stop.off ? "Try it: both masks on" : "Try it: switch the look-ahead mask off" });
  btn.addEventListener("click", async () => {
    btn.disabled = true;
    try {
      await tour(run, stop.off ? null : await maskOffRun(run));
    } catch (e) {
      btn.after(Object.assign(document.createElement("p"), { className: "notice", textContent: `That did not work in this browser: ${e.message}.` }));
      btn.disabled = false;
    }
  });
  const out = [btn];
  if (stop.changed) out.push(para(stop.changed, "changed"));
  return out;
}

/** The run's own output forced through the decoder with the look-ahead mask off (its self-attention), and
 * the sentence decoded that way, as the app's tour compares them. */
async function maskOffRun(run) {
  const d = await direction(run.dir), sw = { causal: false };
  const { src, out: enc } = await d.encode(run.srcIds, sw);
  const forced = await d.step([d.meta.decoder_start_id, ...run.outIds.slice(0, -1)], enc.memory, src, sw);
  const decoded = await d.greedy(run.srcIds, sw, false);
  const outTokens = decoded.ids.map((i) => d.spm.pieces[i]);
  return { forced: patterns(d, { enc, dec: forced }).self, outTokens, text: toText(outTokens, d.spm, d.meta.tgt_lang) };
}

/** Plotly.js, loaded async beside the modules (index.html), so that the first screen's files are fetched
 * while it is parsed. */
const plotlyReady = new Promise((ok, fail) => {
  if (window.Plotly) return ok();
  $("plotly").addEventListener("load", () => { performance.mark("plotly"); ok(); }, { once: true });
  $("plotly").addEventListener("error", () => fail(new Error("Plotly.js did not load")), { once: true });
});

/** The status line, and the byte progress bar beside it while a model loads (hidden otherwise). */
function status(text, bar = null) {
  $("status").textContent = text;
  let el = $("load-bar");
  if (!el && bar) {
    el = Object.assign(document.createElement("progress"), { id: "load-bar" });
    el.setAttribute("aria-label", "Model download");
    $("status").after(el);
  }
  if (!el) return;
  el.hidden = !bar;
  if (bar?.total) { el.max = bar.total; el.value = Math.min(bar.loaded, bar.total); } else el.removeAttribute("value");
}

const MB = (n) => (n / 1e6).toFixed(1);
let loading = null;  // who shows the bar now (the last action that waits for a model); null: nobody
onModelProgress(({ loaded: got, total }) => {
  if (loading) status(`loading the model… ${MB(got)}${total ? ` of ${MB(total)}` : ""} MB`, { loaded: got, total });
});

/** The model of ``d`` loaded, with the bar shown meanwhile; then the status ``what``, unless a later action
 * has taken the status over. */
async function withModel(d, what) {
  const mine = {};
  loading = mine;
  status("loading the model…", {});
  try {
    await d.graphs();
  } finally {
    if (loading === mine) { loading = null; status(what); }
  }
}

/** A new task, so that a click waiting behind the drawing is answered between two figures. */
const breathe = () => new Promise((ok) => setTimeout(ok, 0));

async function show(run) {
  say($("notices"), run.notices);
  if (run.empty) return;
  await plotlyReady;
  await breathe();
  current = run;
  $("translation").textContent = run.text;
  $("timing").textContent = run.ms === null
    ? `${run.outIds.length} tokens, computed by the same model when this page was built; a sentence you type runs in this browser`
    : `${run.outIds.length} tokens in ${run.ms.toFixed(0)} ms, in this browser (${run.threads > 1 ? `${run.threads} threads` : "one thread"})`;
  await drawGrid($("grid"), run, $("grid-kind").value);
  window.explorer.firstMap ??= performance.now();  // for bench/web_load.py: navigation start -> first grid
  await breathe();
  fillHeadPicker(run, linked.head);
  linked.head = null;
  await drawHeadView(run);
  drawOverview($("overview"), site.tour.overview, (await direction(run.dir)).meta, openView);
  await breathe();
  stepsTable(run);
  masks.reset(run);  // a new sentence: the old comparison goes
  await player.load(run);
  await drawPositions($("pos-plot"), rows2d(run.enc.enc_pos), run.srcTokens);
  await breathe();
  await tour(run);
  writeLink(run);
  status(run.ms === null ? "✓ example shown" : "✓ translated");
}

async function onTranslate() {
  status("translating…");
  try {
    const name = $("dir").value, d = await direction(name);
    await withModel(d, "translating…");
    const run = await translate(name, $("text").value);
    if (!run.empty) status("drawing…");
    await show(run);
    if (run.empty) status("✓ ready");
  } catch (e) {
    say($("notices"), [`Something went wrong in the browser: ${e.message}. The page still works: try again.`]);
    status("✗ failed");
  }
}

/** What the opening link asked for that the first run still has to show: the head (kind:layer:head). */
const linked = { head: null };

/** The link's keys the page does not show, said, with the same link to the app. */
function sayUnshown(q, directions) {
  const model = q.get("model") ?? q.get("dir");
  const keys = [...(model && !directions.includes(model) ? ["model"] : []), ...unshown(q).keys()];
  if (!keys.length) return;
  const a = Object.assign(document.createElement("a"), { textContent: "open the same link in the app", href: appLink(site.manifest.app, q) });
  const p = Object.assign(document.createElement("p"), { className: "notice app-only" });
  p.append(`This link also sets ${keys.join(", ")}, which only the app shows: `, a, ".");
  $("link-note").replaceChildren(p);
  $("link-note").hidden = false;
}

/** After a first screen computed at build time: the model loaded in the background, so that what is typed
 * next runs at once; the status says when it can. A failure here is only said: the next action tries again. */
async function preload(name) {
  try {
    const d = await direction(name);
    await withModel(d, "✓ ready");
    window.explorer.modelReady = performance.now();
  } catch (e) {
    status(`✓ example shown (the model did not load: ${e.message}; Translate tries again)`);
  }
}

const SW_WAIT_MS = 3000;

/** The service worker registered; resolves once it controls the page, or after ``ms``, or when it fails. */
function serviceWorker(ms) {
  if (!("serviceWorker" in navigator)) return Promise.resolve();
  const sw = navigator.serviceWorker;
  const controls = sw.controller ? Promise.resolve()
    : new Promise((ok) => sw.addEventListener("controllerchange", ok, { once: true }));
  return Promise.race([sw.register("sw.js").then(() => controls), new Promise((ok) => setTimeout(ok, ms))]).catch(() => {});
}

async function init() {
  const [manifest, tourTexts] = await Promise.all([`${BASE}/models/manifest.json`, `${BASE}/tour.json`]
    .map((u) => fetch(u).then((r) => r.json())));
  site = { manifest, tour: tourTexts };
  $("n-models").textContent = manifest.directions.map((n) => n.replace("-", " → ")).join(", ");
  const sel = $("dir");
  for (const name of manifest.directions) sel.append(new Option(name.replace("-", " → "), name));
  offerModels(sel, manifest);
  const q = new URLSearchParams(location.search), link = fromQuery(q, tourTexts.titles.length);
  const examples = manifest.examples ?? {};
  const offered = [...manifest.directions, ...(manifest.marian ?? [])];
  sel.value = [link.model, "de-en"].find((n) => offered.includes(n)) ?? manifest.directions[0];
  aboutModel($("model-about"), manifest, sel.value);
  $("text").value = link.text ?? examples[sel.value] ?? "";
  if (link.kind) linked.head = headKey(pageKind(link.kind), link.layer, link.head);
  if (link.kind) $("grid-kind").value = pageKind(link.kind);
  openStop = link.tour;
  sayUnshown(q, offered);
  sel.addEventListener("change", () => {  // another direction's untouched example becomes this one's, as in the app
    if (Object.values(examples).includes($("text").value)) $("text").value = examples[sel.value] ?? $("text").value;
    aboutModel($("model-about"), manifest, sel.value);
  });
  $("go").addEventListener("click", onTranslate);
  $("text").addEventListener("keydown", (e) => {  // Enter translates; Shift+Enter starts a new line
    if (e.key === "Enter" && !e.shiftKey && !e.isComposing) { e.preventDefault(); onTranslate(); }
  });
  $("grid-kind").addEventListener("change", () => current && drawGrid($("grid"), current, $("grid-kind").value));
  $("head-pick").addEventListener("change", () => { if (current) { drawHeadView(current); writeLink(current); } });
  player = new Player($("player"), direction);
  player.readLink(q);
  masks = new Masks($("masks"), direction);
  Object.assign(window.explorer, { player, masks });
  performance.mark("manifest");
  const first = await firstScreen(sel.value, $("text").value).catch(() => null);
  performance.mark("first-data");
  if (first) await show(first);
  else await onTranslate();
  // offline use is a bonus; registered once the first screen is drawn, so its copies never compete with it,
  // and before the model's worker starts, so that the model's files pass through it (downloaded once)
  if (first) await serviceWorker(SW_WAIT_MS);
  else serviceWorker(0);
  if (first) await preload(sel.value);
  else if (current) window.explorer.modelReady = performance.now();
}

window.explorer = { translate, greedyIds, pieces, words, encodePieces, direction, firstScreen, ready: null };
window.explorer.ready = init();
