// Words as spaCy's blank tokenizer splits them (the engine's first step before SentencePiece), from the
// rules the build read out of spaCy (spacy_<lang>.json): the same loop as spacy/tokenizer.pyx.

const re = (p, extra = "") => (p ? new RegExp(p.source, p.flags + extra) : null);

/** Drop control and format characters as model.engine.vocab.clean_text does. */
export function cleanText(text) {
  return text.replace(/[\p{Cc}\p{Zl}\p{Zp}]/gu, " ").replace(/[\p{Cf}\p{Cs}\p{Co}]/gu, "");
}

export class SpacyWords {
  constructor(rules) {
    this.prefix = re(rules.prefix);
    this.suffix = re(rules.suffix);
    this.infix = re(rules.infix, "g");
    this.tokenMatch = re(rules.token_match);
    this.urlMatch = re(rules.url_match);
    this.specials = new Map(Object.entries(rules.specials));
    this.matcher = rules.matcher.filter(([, toks]) => toks.length > 0);
  }

  /** The words of ``text`` (whitespace tokens dropped), as model.engine.vocab.tokenize gives them. */
  words(text) {
    const out = [];
    cleanText(text).split(/\s+/u).forEach((span, k) => { if (span) this.tokenize(span, k, out); });
    return this.applySpecialCases(out).filter((t) => t.trim() !== "");
  }

  findPrefix(s) { const m = this.prefix && this.prefix.exec(s); return m && m.index === 0 ? m[0].length : 0; }

  findSuffix(s) { const m = this.suffix && this.suffix.exec(s); return m ? s.length - m.index : 0; }

  isSpecial(s) { return this.specials.has(s); }

  /** The tokens of one whitespace-free span, appended to ``out`` as {text, span: k}. */
  tokenize(span, k, out) {
    const toks = [];
    if (this.isSpecial(span)) toks.push(...this.specials.get(span));
    else {
      const prefixes = [], suffixes = [];
      const core = this.splitAffixes(span, prefixes, suffixes);
      for (const p of prefixes) this.push(p, toks);
      if (core) this.attach(core, toks);
      for (let i = suffixes.length - 1; i >= 0; i--) this.push(suffixes[i], toks);
    }
    for (const text of toks) out.push({ text, span: k });
  }

  push(text, out) {
    if (this.isSpecial(text)) out.push(...this.specials.get(text));
    else out.push(text);
  }

  splitAffixes(s, prefixes, suffixes) {
    let last = -1;
    while (s && s.length !== last) {
      if (this.tokenMatch && this.tokenMatch.test(s)) break;
      if (this.isSpecial(s)) break;
      last = s.length;
      const pre = this.findPrefix(s);
      let prefix = "", minusPre = "";
      if (pre) {
        prefix = s.slice(0, pre); minusPre = s.slice(pre);
        if (minusPre && this.isSpecial(minusPre)) { prefixes.push(prefix); return minusPre; }
      }
      const suf = this.findSuffix(s.slice(pre));
      let suffix = "", minusSuf = "";
      if (suf) {
        suffix = s.slice(s.length - suf); minusSuf = s.slice(0, s.length - suf);
        if (minusSuf && this.isSpecial(minusSuf)) { suffixes.push(suffix); return minusSuf; }
      }
      if (pre && suf && pre + suf <= s.length) { s = s.slice(pre, s.length - suf); prefixes.push(prefix); suffixes.push(suffix); }
      else if (pre) { s = minusPre; prefixes.push(prefix); }
      else if (suf) { s = minusSuf; suffixes.push(suffix); }
    }
    return s;
  }

  attach(s, out) {
    if (this.isSpecial(s)) { this.push(s, out); return; }
    if ((this.tokenMatch && this.tokenMatch.test(s)) || (this.urlMatch && this.urlMatch.test(s))) {
      out.push(s); return;
    }
    const matches = this.infix ? [...s.matchAll(this.infix)] : [];
    let start = 0;
    for (const m of matches) {
      const a = m.index, b = m.index + m[0].length;
      if (a === 0) continue;
      if (a !== start) out.push(s.slice(start, a));
      if (a !== b) out.push(s.slice(a, b));
      start = b;
    }
    if (s.slice(start)) out.push(s.slice(start));
  }

  /** Special cases that hold an affix, found across the tokens made (spaCy's _special_matcher):
   * the longest first, overlapping ones dropped, each replaced by its special tokens. */
  applySpecialCases(tokens) {
    const texts = tokens.map((t) => t.text);
    const found = [];
    for (const [key, pat] of this.matcher) {
      for (let i = 0; i + pat.length <= texts.length; i++) {
        let ok = true;
        for (let j = 0; j < pat.length && ok; j++) ok = texts[i + j] === pat[j] && tokens[i + j].span === tokens[i].span;
        if (ok) found.push([i, i + pat.length, key]);
      }
    }
    if (!found.length) return texts;
    found.sort((x, y) => (x[1] - x[0]) - (y[1] - y[0]) || x[0] - y[0]);
    const seen = new Set(), kept = [];
    for (let k = found.length - 1; k >= 0; k--) {
      const [a, b] = found[k];
      if (!seen.has(a) && !seen.has(b - 1)) kept.push(found[k]);
      for (let i = a; i < b; i++) seen.add(i);
    }
    kept.sort((x, y) => x[0] - y[0]);
    const out = [];
    let i = 0;
    for (const [a, b, key] of kept) {
      while (i < a) out.push(texts[i++]);
      out.push(...this.specials.get(key));
      i = b;
    }
    while (i < texts.length) out.push(texts[i++]);
    return out;
  }
}
