// SentencePiece unigram encoding and decoding, read from the pieces the build exported
// (web/sentencepiece_spec.py unigram_spec). It follows sentencepiece itself, step for step:
// normalizer.cc (the precompiled character map: longest rule first, on UTF-8 bytes; spaces squeezed and
// escaped as ▁), unigram_model.cc EncodeOptimized (Viterbi over the pieces' scores, an unknown
// character scored min - 10; its float32 and float64 sums kept as C++ computes them, so that near ties
// break the same way) and sentencepiece_processor.cc (unknown runs merged or spelled as bytes; decoding).

const SPACE = "\u2581";
const SPACE_BYTES = [0xe2, 0x96, 0x81];
const UNK_PENALTY = 10;
const FLT_MIN = 2 ** -126;  // max_score_ starts here in unigram_model.cc (not -FLT_MAX)
const MAX_TRIE_RESULTS = 32;  // normalizer.h kMaxTrieResultsSize
const TYPE = { NORMAL: 1, UNKNOWN: 2, CONTROL: 3, USER_DEFINED: 4, UNUSED: 5, BYTE: 6 };
const utf8 = new TextEncoder();
const text8 = new TextDecoder();

/** A precompiled character map (NormalizerSpec.precompiled_charsmap): a darts-clone double array over
 * UTF-8 keys, then the replacements, each ended by a NUL byte. */
export class CharsMap {
  constructor(blob) {
    const bytes = blob instanceof Uint8Array ? blob : new Uint8Array(blob);
    const size = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength).getUint32(0, true);
    this.units = new Uint32Array(new Uint8Array(bytes.subarray(4, 4 + size)).buffer);  // a copy, aligned
    this.normalized = bytes.subarray(4 + size);
  }

  /** The longest rule matching ``input`` at ``pos`` (darts-clone commonPrefixSearch): [length, replacement
   * bytes], or null. */
  longest(input, pos) {
    const u = this.units;
    let node = u[0] >>> 10 << ((u[0] & 512) >>> 6);
    let found = null, results = 0;
    for (let i = pos; i < input.length && results < MAX_TRIE_RESULTS; i++) {
      node ^= input[i];
      const unit = u[node];
      if (unit === undefined || (unit & 0x800000ff) !== input[i]) break;
      node ^= unit >>> 10 << ((unit & 512) >>> 6);
      if ((unit >>> 8) & 1) {
        results++;
        const start = u[node] & 0x7fffffff;
        found = [i + 1 - pos, this.normalized.subarray(start, this.normalized.indexOf(0, start))];
      }
    }
    return found;
  }
}

/** sentencepiece's string_util::DecodeUTF8: [code point length, valid] of the character at ``pos``. */
function utf8Char(b, pos) {
  const c = b[pos], n = b.length - pos;
  const trail = (k) => (b[pos + k] & 0xc0) === 0x80;
  const valid = (cp) => cp < 0xd800 || (cp >= 0xe000 && cp <= 0x10ffff);
  if (c < 0x80) return [1, true];
  if (n >= 2 && (c & 0xe0) === 0xc0) {
    const cp = ((c & 0x1f) << 6) | (b[pos + 1] & 0x3f);
    if (trail(1) && cp >= 0x80 && valid(cp)) return [2, true];
  } else if (n >= 3 && (c & 0xf0) === 0xe0) {
    const cp = ((c & 0x0f) << 12) | ((b[pos + 1] & 0x3f) << 6) | (b[pos + 2] & 0x3f);
    if (trail(1) && trail(2) && cp >= 0x800 && valid(cp)) return [3, true];
  } else if (n >= 4 && (c & 0xf8) === 0xf0) {
    const cp = ((c & 0x07) << 18) | ((b[pos + 1] & 0x3f) << 12) | ((b[pos + 2] & 0x3f) << 6) | (b[pos + 3] & 0x3f);
    if (trail(1) && trail(2) && trail(3) && cp >= 0x10000 && valid(cp)) return [4, true];
  }
  return [1, false];
}

const REPLACEMENT = utf8.encode("\ufffd");

export class SentencePieceUnigram {
  /** spec: {pieces: [[piece, score, type]], add_dummy_prefix, remove_extra_whitespaces, escape_whitespaces,
   * byte_fallback, unk_surface}; charsMap: a CharsMap, or null for the identity normaliser. */
  constructor(spec, charsMap = null) {
    this.spec = spec;
    this.charsMap = charsMap;
    this.pieces = new Map();    // what the Viterbi search may use: normal and user-defined pieces
    this.reserved = new Map();  // control, unknown and byte pieces: found by decoding only
    this.type = spec.pieces.map((p) => p[2]);
    this.score = spec.pieces.map((p) => Math.fround(p[1]));
    let min = Infinity, max = FLT_MIN;
    spec.pieces.forEach(([piece, , type], i) => {
      const normal = type === TYPE.NORMAL || type === TYPE.USER_DEFINED || type === TYPE.UNUSED;
      const map = normal ? this.pieces : this.reserved;
      if (!map.has(piece)) map.set(piece, i);
      if (type === TYPE.NORMAL) { min = Math.min(min, this.score[i]); max = Math.max(max, this.score[i]); }
    });
    for (const [piece, i] of this.pieces) if (this.type[i] === TYPE.UNUSED) this.pieces.delete(piece);
    this.maxScore = max;
    this.unkScore = Math.fround(min - UNK_PENALTY);
    this.unkId = this.type.indexOf(TYPE.UNKNOWN);
    this.maxChars = Math.max(1, ...[...this.pieces.keys()].map((p) => Array.from(p).length));
    this.userDefined = spec.pieces.filter((p) => p[2] === TYPE.USER_DEFINED).map((p) => utf8.encode(p[0]));
  }

  /** normalizer.cc NormalizePrefix: [replacement bytes, bytes consumed] at ``pos``. */
  prefix(input, pos) {
    let user = 0;
    for (const u of this.userDefined) {
      if (u.length > user && u.length <= input.length - pos && u.every((b, k) => input[pos + k] === b)) user = u.length;
    }
    if (user) return [input.subarray(pos, pos + user), user];
    const rule = this.charsMap && this.charsMap.longest(input, pos);
    if (rule) return [rule[1], rule[0]];
    const [n, valid] = utf8Char(input, pos);
    return [valid ? input.subarray(pos, pos + n) : REPLACEMENT, n];
  }

  /** The normalised text, as sentencepiece's Normalizer::Normalize gives it (▁ for spaces). */
  normalize(text) {
    const s = this.spec, input = utf8.encode(text), out = [];
    const isSpace = (r) => r.length === 1 && r[0] === 0x20;
    let pos = 0;
    if (s.remove_extra_whitespaces) {
      while (pos < input.length) {
        const [r, n] = this.prefix(input, pos);
        if (!isSpace(r)) break;
        pos += n;
      }
    }
    if (pos === input.length) return "";
    const space = s.escape_whitespaces ? SPACE_BYTES : [0x20];
    if (s.add_dummy_prefix) out.push(...space);
    let prevSpace = s.remove_extra_whitespaces;
    while (pos < input.length) {
      const [r, n] = this.prefix(input, pos);
      let k = 0;
      while (prevSpace && k < r.length && r[k] === 0x20) k++;
      if (k < r.length) {
        for (; k < r.length; k++) {
          if (r[k] === 0x20) out.push(...space); else out.push(r[k]);
        }
        prevSpace = r[r.length - 1] === 0x20;
      }
      pos += n;
      if (!s.remove_extra_whitespaces) prevSpace = false;
    }
    if (s.remove_extra_whitespaces) {
      const ends = () => out.length >= space.length && space.every((b, k) => out[out.length - space.length + k] === b);
      while (ends()) out.length -= space.length;
    }
    return text8.decode(new Uint8Array(out));
  }

  /** The best segmentation of normalised text: [[piece, id]] (id = the unknown id for an unknown run). */
  viterbi(norm) {
    const chars = Array.from(norm);
    const at = [0];  // UTF-16 offset of each character
    for (const c of chars) at.push(at[at.length - 1] + c.length);
    const n = chars.length;
    const score = new Float64Array(n + 1), from = new Int32Array(n + 1).fill(-1), id = new Int32Array(n + 1);
    for (let start = 0; start < n; start++) {
      const till = score[start];
      let single = false;
      for (let end = start + 1; end <= Math.min(n, start + this.maxChars); end++) {
        const i = this.pieces.get(norm.slice(at[start], at[end]));
        if (i === undefined) continue;
        const own = this.type[i] === TYPE.USER_DEFINED  // a bonus that always picks it, over its UTF-8 length
          ? Math.fround(utf8.encode(norm.slice(at[start], at[end])).length * this.maxScore) - 0.1
          : this.score[i];
        const candidate = own + till;  // double, as C++'s conditional makes it
        if (from[end] === -1 || candidate > score[end]) {
          score[end] = Math.fround(candidate); from[end] = start; id[end] = i;
        }
        if (end === start + 1) single = true;
      }
      if (!single) {
        const candidate = Math.fround(this.unkScore + till);  // float + float
        if (from[start + 1] === -1 || candidate > score[start + 1]) {
          score[start + 1] = candidate; from[start + 1] = start; id[start + 1] = this.unkId;
        }
      }
    }
    const out = [];
    for (let end = n; end > 0; end = from[end]) out.push([norm.slice(at[from[end]], at[end]), id[end]]);
    return out.reverse();
  }

  /** The pieces of ``text``, as sentencepiece's encode(text, out_type=str) gives them. */
  encode(text) {
    const out = [];
    let prevUnk = false;
    for (const [piece, i] of this.viterbi(this.normalize(text))) {
      const unk = i === this.unkId;
      if (unk && this.spec.byte_fallback) {
        for (const b of utf8.encode(piece)) out.push("<0x" + b.toString(16).toUpperCase().padStart(2, "0") + ">");
      } else if (unk && prevUnk) {
        out[out.length - 1] += piece;
      } else {
        out.push(piece);
      }
      prevUnk = unk;
    }
    return out;
  }

  pieceId(piece) {
    return this.pieces.get(piece) ?? this.reserved.get(piece) ?? this.unkId;
  }

  /** Text of pieces, as sentencepiece's decode_pieces gives it: control pieces vanish, an unknown piece is
   * kept as it is (<unk> itself becomes the unknown surface), runs of byte pieces become UTF-8, and the
   * first piece's ▁ is dropped. */
  decode(pieces) {
    const s = this.spec;
    let text = "", bytes = [], bosWs = true, bosSeen = false;
    const flush = () => {
      for (let k = 0; k < bytes.length;) {
        const [n, valid] = utf8Char(bytes, k);
        text += valid ? text8.decode(new Uint8Array(bytes.slice(k, k + n))) : "\ufffd";
        k += n;
      }
      bytes = [];
    };
    for (const piece of pieces) {
      const i = this.pieceId(piece), type = this.type[i];
      if (type === TYPE.BYTE) { bytes.push(parseInt(piece.slice(3, 5), 16)); continue; }
      flush();
      if (bosSeen || text) bosWs = false;
      bosSeen = false;
      if (type === TYPE.CONTROL) continue;
      if (type === TYPE.UNKNOWN) { text += piece === s.pieces[i][0] ? s.unk_surface : piece; continue; }
      let p = piece;
      if (bosWs && (s.add_dummy_prefix || s.remove_extra_whitespaces) && p.startsWith(SPACE)) {
        p = p.slice(1);
        bosSeen = !s.remove_extra_whitespaces;
      }
      text += p.replaceAll(SPACE, " ");
    }
    flush();
    return text;
  }
}
