// SentencePiece BPE encoding of our joint vocabulary, read from the pieces the build exported
// (tokenizer.json). It follows sentencepiece's bpe_model.cc: start from single characters, merge the
// adjacent pair whose joined piece is in the vocabulary with the highest score (the leftmost on a tie),
// and spell a character the vocabulary lacks as its UTF-8 bytes (<0xNN>, byte fallback).

const SPACE = "\u2581";

export class SentencePieceBPE {
  /** spec: {pieces: [[piece, score, type]], add_dummy_prefix, remove_extra_whitespaces, escape_whitespaces}
   * type: 1 normal, 2 unknown, 3 control, 4 user defined, 5 unused, 6 byte (sentencepiece_model.proto). */
  constructor(spec) {
    this.spec = spec;
    this.pieces = spec.pieces.map((p) => p[0]);
    this.score = new Map();   // pieces a merge may produce: normal and user-defined ones
    this.id = new Map();
    spec.pieces.forEach(([piece, score, type], i) => {
      this.id.set(piece, i);
      if (type === 1 || type === 4) this.score.set(piece, type === 4 ? 0 : score);
    });
    this.unkId = spec.pieces.findIndex((p) => p[2] === 2);
    // every word-start mark is a piece's first character: merging within words gives the same result
    this.splitWords = !this.pieces.some((p, i) => spec.pieces[i][2] === 1 && p.slice(1).includes(SPACE));
  }

  normalize(text) {
    let t = text;
    if (this.spec.remove_extra_whitespaces) t = t.replace(/ +/g, " ").replace(/^ | $/g, "");
    if (t === "") return "";
    if (this.spec.add_dummy_prefix) t = " " + t;
    return this.spec.escape_whitespaces ? t.replaceAll(" ", SPACE) : t;
  }

  /** The pieces of ``text``, as sentencepiece's encode(out_type=str) gives them. */
  encode(text) {
    const norm = this.normalize(text);
    const out = [];
    const words = this.splitWords ? norm.split(/(?=\u2581)/u) : [norm];
    for (const w of words) if (w) this.encodeWord(w, out);
    return out;
  }

  encodeIds(text) {
    return this.encode(text).map((p) => this.id.get(p) ?? this.unkId);
  }

  encodeWord(word, out) {
    const sym = Array.from(word);  // code points
    for (;;) {
      let best = -1, bestScore = -Infinity;
      for (let i = 0; i + 1 < sym.length; i++) {
        const s = this.score.get(sym[i] + sym[i + 1]);
        if (s !== undefined && s > bestScore) { best = i; bestScore = s; }
      }
      if (best < 0) break;
      sym.splice(best, 2, sym[best] + sym[best + 1]);
    }
    for (const s of sym) {
      if (this.id.has(s) && this.spec.pieces[this.id.get(s)][2] !== 6) { out.push(s); continue; }
      if (!this.spec.byte_fallback) { out.push(this.pieces[this.unkId]); continue; }
      for (const b of new TextEncoder().encode(s)) out.push("<0x" + b.toString(16).toUpperCase().padStart(2, "0") + ">");
    }
  }

  /** Text of output pieces (specials and byte pieces handled as sentencepiece's decode does). */
  decode(pieces) {
    const bytes = [];
    let text = "";
    const flush = () => { if (bytes.length) { text += new TextDecoder().decode(new Uint8Array(bytes)); bytes.length = 0; } };
    for (const p of pieces) {
      const m = /^<0x([0-9A-F]{2})>$/.exec(p);
      if (m) { bytes.push(parseInt(m[1], 16)); continue; }
      flush();
      text += p;
    }
    flush();
    text = text.replaceAll(SPACE, " ");
    return this.spec.add_dummy_prefix && text.startsWith(" ") ? text.slice(1) : text;
  }
}
