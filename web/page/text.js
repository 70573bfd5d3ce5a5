// Output pieces -> text, as SubwordVocab.to_text does: pieces joined into words, "dirt - bikes" rejoined,
// then the Moses detokenizer (sacremoses' MosesDetokenizer, the rules our four target languages reach),
// checked sentence for sentence against the engine's (tests/test_web_text.py).

const SPECIALS = new Set(["<unk>", "<pad>", "<bos>", "<eos>"]);
const CJK = [[4352, 4607], [11904, 42191], [43072, 43135], [44032, 55215], [63744, 64255], [65072, 65103],
  [65381, 65500], [94208, 101119], [110592, 110895], [110960, 111359], [131072, 196607]];
const XML = [["&bar;", "|"], ["&#124;", "|"], ["&lt;", "<"], ["&gt;", ">"], ["&bra;", "["], ["&ket;", "]"],
  ["&quot;", '"'], ["&apos;", "'"], ["&#91;", "["], ["&#93;", "]"], ["&amp;", "&"]];
const IS_CURRENCY = /^[\p{Sc}(\[{¿¡]+$/u;
const IS_PUNCT = /^[,.?!:;\\%}\])]+$/u;
const IS_EN_CONTRACTION = /^'\p{Alphabetic}/u;
const IS_FR_CONTRACTION = /\p{Alphabetic}'$/u;
const STARTS_ALPHA = /^\p{Alphabetic}/u;
const IS_QUOTE = /^['"„“`]+$/u;

const isCjk = (ch) => { const c = ch.codePointAt(0); return CJK.some(([lo, hi]) => lo <= c && c <= hi); };

export function joinWords(pieces, spm) {
  const words = [];
  let cur = null;
  for (const p of pieces) {
    if (SPECIALS.has(p)) { if (cur) words.push(cur); words.push([p]); cur = null; continue; }
    if (p.startsWith("\u2581") || cur === null) { if (cur) words.push(cur); cur = [p]; } else cur.push(p);
  }
  if (cur) words.push(cur);
  return words.map((w) => (SPECIALS.has(w[0]) ? w[0] : spm.decode(w).trim()));
}

/** A quote: opened (a space before, none after) or closed, counted per quote as Moses counts them. */
function quote(state, token, prev, lang) {
  const q = /^[„“”]+$/u.test(token) ? '"' : token;
  state.quotes[q] ??= 0;
  if (lang === "cs" && token === "„") state.quotes[q] = 0;
  if (lang === "cs" && token === "“") state.quotes[q] = 1;
  if (state.quotes[q] % 2 === 0) {
    if (lang === "en" && token === "'" && prev !== undefined && /s$/u.test(prev)) return [token, " "];
    state.quotes[q] += 1;
    return [state.space + token, ""];
  }
  state.quotes[q] += 1;
  return [token, " "];
}

/** One token's text and the space the next one gets (MosesDetokenizer.tokenize's loop body). */
function place(state, tokens, i, lang) {
  const token = tokens[i], prev = tokens[i - 1], sp = state.space;
  if (isCjk(token) && lang !== "ko") return [i > 0 && isCjk([...prev].at(-1)) ? token : sp + token, " "];
  if (IS_CURRENCY.test(token)) return [sp + token, ""];
  if (IS_PUNCT.test(token)) return [(lang === "fr" && /^[?!:;\\%]$/u.test(token) ? " " : "") + token, " "];
  if (lang === "en" && i > 0 && IS_EN_CONTRACTION.test(token)) return [token, " "];
  if (lang === "cs" && i > 1 && /^[0-9]+$/u.test(tokens.at(-2)) && /^[.,]$/u.test(tokens.at(-1)) && /^[0-9]+$/u.test(token)) return [token, " "];
  if (["fr", "it", "ga"].includes(lang) && i <= tokens.length - 2 && IS_FR_CONTRACTION.test(token) && STARTS_ALPHA.test(tokens[i + 1])) return [sp + token, ""];
  if (lang === "cs" && i <= tokens.length - 3 && IS_FR_CONTRACTION.test(token) && /^[-–]$/u.test(tokens[i + 1]) && /^li$|^mail.*/iu.test(tokens[i + 2])) {
    state.skip = true;
    return [sp + token + tokens[i + 1], ""];
  }
  if (IS_QUOTE.test(token)) return quote(state, token, prev, lang);
  return [sp + token, " "];
}

/** sacremoses' MosesDetokenizer(lang).detokenize(words). */
export function detokenize(words, lang) {
  let text = ` ${words.join(" ")} `.replaceAll(" @-@ ", "-");
  for (const [from, to] of XML) text = text.replaceAll(from, to);
  const tokens = text.split(/\s+/u).filter(Boolean), state = { space: " ", quotes: { "'": 0, '"': 0, "``": 0, "`": 0, "''": 0 }, skip: false };
  let out = "";
  for (let i = 0; i < tokens.length; i++) {
    const [s, space] = place(state, tokens, i, lang);
    out += s;
    state.space = space;
    // the dash went out with the contraction: go on after it, as Moses' Perl does
    if (state.skip) { state.skip = false; i += 1; }
  }
  return out.replace(/ {2,}/gu, " ").trim();
}

export function toText(pieces, spm, lang) {
  if (spm.toText) return spm.toText(pieces);  // a tokenizer that writes its own text (OPUS-MT's: models.js)
  const words = [];
  for (const w of joinWords(pieces, spm)) {
    if (SPECIALS.has(w) && w !== "<unk>") continue;
    const n = words.length;
    if (n >= 2 && words[n - 1] === "-" && /[\p{L}\p{N}]$/u.test(words[n - 2]) && /^[\p{L}\p{N}]/u.test(w)) {
      words.splice(n - 2, 2, words[n - 2] + "-" + w);
    } else words.push(w);
  }
  return detokenize(words, lang);
}
