// An OPUS-MT (Marian) model's tokenizer, as transformers' MarianTokenizer tokenizes and decodes: the text
// split at its special tokens, a leading >>lang<< code kept whole, each side's SentencePiece unigram model
// for the pieces (source.spm for sources, target.spm for targets) and vocab.json for the ids (a piece it
// lacks is <unk>), </s> appended. Read from tokenizer.json, written by web/marian.py.

import { CharsMap, SentencePieceUnigram } from "./unigram.js";

// Python's str.isspace() characters: the ones str.strip() removes
const PY_SPACE = "[\\t\\n\\x0b\\x0c\\r\\x1c-\\x1f \\x85\\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000]";
const LEFT = new RegExp(`^${PY_SPACE}+`, "u"), RIGHT = new RegExp(`${PY_SPACE}+$`, "u");
const strip = (t) => t.replace(LEFT, "").replace(RIGHT, "");
const CLEAN_UP = [[" .", "."], [" ?", "?"], [" !", "!"], [" ,", ","], [" ' ", "'"], [" n't", "n't"], [" 'm", "'m"],
  [" 's", "'s"], [" 've", "'ve"], [" 're", "'re"]];  // transformers' clean_up_tokenization, in its order

const escape = (s) => s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");

export class MarianTokenizer {
  /** spec: tokenizer.json; charsMaps: {file name: bytes} of the character maps its two sides name. */
  constructor(spec, charsMaps = {}) {
    const side = (s) => new SentencePieceUnigram(s, s.charsmap ? new CharsMap(charsMaps[s.charsmap]) : null);
    this.spec = spec;
    this.source = side(spec.source);
    this.target = side(spec.target);
    this.vocab = spec.vocab;
    this.targetVocab = spec.target_vocab ?? spec.vocab;
    const index = (v) => new Map(v.map((t, i) => [t, i]));
    this.stoi = index(this.vocab);
    this.targetStoi = spec.target_vocab ? index(this.targetVocab) : this.stoi;
    this.specials = new Map(spec.specials.map((s) => [s.content, s]));
    this.specialIds = new Set(spec.specials.map((s) => s.id));
    const names = [...this.specials.keys()].sort((a, b) => b.length - a.length).map(escape);
    this.splitter = names.length ? new RegExp(`(${names.join("|")})`, "u") : null;
  }

  static async load(url, fetchBytes) {
    const spec = await (await fetch(`${url}/tokenizer.json`)).json();
    const names = [...new Set([spec.source.charsmap, spec.target.charsmap].filter(Boolean))];
    const maps = Object.fromEntries(await Promise.all(names.map(async (n) => [n, await fetchBytes(`${url}/${n}`)])));
    return new MarianTokenizer(spec, maps);
  }

  /** The tokens of ``text`` (PreTrainedTokenizer.tokenize, then MarianTokenizer._tokenize), source side
   * unless ``target``. */
  tokenize(text, target = false) {
    const parts = this.splitter ? text.split(this.splitter) : [text];
    for (let i = 1; i < parts.length; i += 2) {  // odd places: the special tokens
      const s = this.specials.get(parts[i]);
      if (s.rstrip && parts[i + 1]) parts[i + 1] = parts[i + 1].replace(LEFT, "");
      if (s.lstrip && parts[i - 1]) parts[i - 1] = parts[i - 1].replace(RIGHT, "");
    }
    const out = [];
    parts.forEach((part, i) => {
      if (!part) return;
      if (i % 2) { out.push(part); return; }
      let rest = part;
      const end = rest.startsWith(">>") ? rest.indexOf("<<") : -1;
      if (end !== -1) { out.push(rest.slice(0, end + 2)); rest = rest.slice(end + 2); }
      out.push(...(target ? this.target : this.source).encode(rest));
    });
    return out;
  }

  /** Ids of tokens (a token the vocabulary lacks is <unk>). */
  ids(tokens, target = false) {
    const stoi = target ? this.targetStoi : this.stoi;
    const unk = stoi.get(this.spec.unk);
    return tokens.map((t) => this.specials.get(t)?.id ?? stoi.get(t) ?? unk);
  }

  /** input_ids of ``text``: its tokens' ids, then </s> (``tokenizer(text).input_ids``). */
  encode(text, target = false) {
    return [...this.ids(this.tokenize(text, target), target), this.stoi.get(this.spec.eos)];
  }

  /** Token strings of ids (vocabulary ids of the target side, where the two differ). */
  tokens(ids) {
    return ids.map((i) => this.targetVocab[i] ?? this.spec.unk);
  }

  /** ``tokenizer.decode(ids, skip_special_tokens=skipSpecial)``. Which side's SentencePiece model joins the
   * pieces: spec.decode_side, as transformers 5's MarianTokenizer chooses (4.x always took the target's). */
  decode(ids, { skipSpecial = true, side = this.spec.decode_side } = {}) {
    const sp = side === "source" ? this.source : this.target;
    const tokens = this.tokens(ids.filter((i) => !(skipSpecial && this.specialIds.has(i))));
    let text = "", run = [];
    for (const t of tokens) {
      if (this.specials.has(t)) { text += sp.decode(run) + t + " "; run = []; } else run.push(t);
    }
    text = strip((text + sp.decode(run)).replaceAll("\u2581", " "));
    if (this.spec.clean_up_tokenization_spaces) for (const [a, b] of CLEAN_UP) text = text.replaceAll(a, b);
    return text;
  }
}
