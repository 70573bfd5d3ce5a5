// Output pieces -> text, as SubwordVocab.to_text does: pieces joined into words, "dirt - bikes" rejoined,
// then a light detokenizer (the app uses Moses; this one handles the punctuation Multi30k captions hold).

const SPECIALS = new Set(["<unk>", "<pad>", "<bos>", "<eos>"]);

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

export function toText(pieces, spm, lang) {
  const words = [];
  for (const w of joinWords(pieces, spm)) {
    if (SPECIALS.has(w) && w !== "<unk>") continue;
    const n = words.length;
    if (n >= 2 && words[n - 1] === "-" && /[\p{L}\p{N}]$/u.test(words[n - 2]) && /^[\p{L}\p{N}]/u.test(w)) {
      words.splice(n - 2, 2, words[n - 2] + "-" + w);
    } else words.push(w);
  }
  let text = words.join(" ");
  const tight = lang === "fr" ? /\s+([.,)\]}%…])/gu : /\s+([.,!?;:)\]}%…])/gu;
  text = text.replace(tight, "$1").replace(/([(\[{])\s+/gu, "$1");
  if (lang === "en") text = text.replace(/\s+('s|'re|'ve|'ll|'d|'m|n't)\b/gu, "$1");
  if (lang === "fr") text = text.replace(/([ldjmnstc]|qu)'\s+/giu, "$1'");
  return text;
}
