// The real translation models offered beside ours: OPUS-MT (Marian) pairs the build exported with every head
// (python -m web.build --marian). One is loaded only when chosen; its tokenizer is MarianTokenizer's
// (marian.js), dressed as the page's views read our SentencePiece one, so that every view, the tour and the
// step player draw it unchanged.

import { Direction } from "./engine.js";
import { MarianTokenizer } from "./marian.js";

const LANG = { de: "German", en: "English", fr: "French", cs: "Czech", es: "Spanish", it: "Italian", nl: "Dutch" };
const langName = (code) => LANG[code] ?? code;
const MB = (n) => `${(n / 1e6).toFixed(1)} MB`;

const json = async (url) => { const r = await fetch(url); if (!r.ok) throw new Error(`${url.split("/").slice(-2).join("/")}: ${r.status}`); return r.json(); };
const bytes = async (url) => { const r = await fetch(url); if (!r.ok) throw new Error(`${url.split("/").slice(-2).join("/")}: ${r.status}`); return new Uint8Array(await r.arrayBuffer()); };

/** MarianTokenizer as the views read a tokenizer: ``pieces`` by id (</s> named <eos>, the name the views
 * know), ``decode`` of one word's pieces (SentencePiece's join) and ``toText`` of an output
 * (MarianTokenizer.decode, which text.js's toText defers to). */
class MarianPieces {
  constructor(tok) {
    this.tok = tok;
    this.eos = tok.targetStoi.get(tok.spec.eos);
    this.pieces = tok.targetVocab.map((t, i) => (i === this.eos ? "<eos>" : t ?? tok.spec.unk));
    this.id = new Map(this.pieces.map((p, i) => [p, i]));
    this.side = tok.spec.decode_side === "source" ? tok.source : tok.target;
  }

  decode(pieces) { return this.side.decode(pieces); }

  encode(text) { return this.tok.tokenize(text); }

  toText(pieces) { return this.tok.decode(pieces.map((p) => this.id.get(p) ?? this.tok.targetStoi.get(this.tok.spec.unk))); }
}

/** An OPUS-MT model: the page's Direction with MarianTokenizer's source ids (pieces then </s>, no <bos>). */
export class MarianDirection extends Direction {
  static async load(base, name) {
    const d = new MarianDirection();
    d.loaded = new Promise((ok) => { d.loadedOnce = ok; });
    Object.assign(d, { base: `${base}/models/${name}`, site: base, name });
    d.meta = await json(`${d.base}/meta.json`);
    d.tokenizer = await MarianTokenizer.load(d.base, bytes);
    d.spm = new MarianPieces(d.tokenizer);
    d.words = { words: (text) => text.split(/\s+/u).filter(Boolean) };
    Direction.all.add(d);
    return d;
  }

  pieces(text) { return this.tokenizer.tokenize(text); }

  /** Source tokens and ids as ``tokenizer(text).input_ids`` (cut to the model's length) and whether cut. */
  source(text) {
    const pieces = this.pieces(text), room = this.meta.max_len - 1, kept = pieces.slice(0, room);
    return { tokens: [...kept, "<eos>"], ids: [...this.tokenizer.ids(kept), this.meta.eos_id], truncated: pieces.length > room };
  }

  /** On the page's thread: MarianTokenizer takes about a millisecond a sentence, 20 ms for 2,000 characters. */
  async sourceOffThread(text) { return this.source(text); }
}

/** The direction ``name`` of the site (an OPUS-MT one if the manifest lists it so): tokenizer and meta. */
export function openDirection(base, name, manifest) {
  return (manifest?.marian ?? []).includes(name) ? MarianDirection.load(base, name) : Direction.load(base, name);
}

/** Every file a direction's model needs, for the service worker to keep. */
export function modelFiles(d) {
  const own = d instanceof MarianDirection
    ? [d.meta.tokenizer, ...new Set([d.tokenizer.spec.source.charsmap, d.tokenizer.spec.target.charsmap].filter(Boolean))]
    : ["spm.json"];
  const files = ["meta.json", ...own, "first.json", "encoder.onnx", "decoder.onnx", ...(d.meta.weights ?? ["weights.bin"]),
    ...(d.meta.alti_bytes ? ["alti.onnx"] : [])];  // the tour's ALTI+: stop 9 offline too
  return [...files.map((f) => `models/${d.name}/${f}`), ...(d instanceof MarianDirection ? [] : [`models/spacy_${d.meta.src_lang}.json`])];
}

export const modelLabel = (name, about) => `${langName(about.src_lang)} → ${langName(about.tgt_lang)} · OPUS-MT (${MB(about.bytes)})`;

/** The OPUS-MT models listed after ours in the direction picker, each with its download size. */
export function offerModels(sel, manifest) {
  const names = manifest.marian ?? [];
  if (!names.length) return;
  const group = Object.assign(document.createElement("optgroup"), { label: "Real translation models (downloaded when chosen)" });
  for (const name of names) group.append(new Option(modelLabel(name, manifest.about[name]), name));
  sel.append(group);
}

/** Where the chosen model comes from and its licence (an OPUS-MT one), or nothing (ours). */
export function aboutModel(el, manifest, name) {
  const about = manifest.about?.[name];
  el.hidden = !about;
  if (!about) return el.replaceChildren();
  const page = about.hub ? Object.assign(document.createElement("a"), { href: `https://huggingface.co/${about.source}`, textContent: about.source, rel: "noopener", target: "_blank" }) : about.source;
  const licence = about.licence ? `licence: ${about.licence}` : "licence: see the model's page";
  const by = about.source.startsWith("Helsinki-NLP/") ? ", trained by the University of Helsinki on the OPUS corpora" : "";
  el.replaceChildren(
    `A real translation model: OPUS-MT (Marian, ${(about.parameters / 1e6).toFixed(about.parameters < 1e7 ? 1 : 0)} M parameters${by}), `,
    about.hub ? "from the Hugging Face Hub, " : "from a local folder, ", page, ` (${licence}). `,
    `Converted by this project's engine with every head; weights in ${about.precision}. `,
    `It downloads ${MB(about.bytes)} the first time you translate with it; this browser keeps it, so a second visit downloads nothing.`);
}
