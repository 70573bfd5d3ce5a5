"""spaCy's rule-based tokenizer (the engine's first step, model.engine.vocab.tokenize) as data for the page.

The page splits words as spaCy's blank pipeline does: the same prefix, suffix and infix patterns, token and
URL matches and special cases, read from spaCy itself and written as JavaScript regular expressions.
"""
from __future__ import annotations

import re

from model.engine.vocab import _spacy

SYNTAX = set("^$\\.*+?()[]{}|/-")
WORD = r"\p{L}\p{N}_"  # Python's Unicode \w: what str.isalnum() accepts, and _
QUANTIFIER = re.compile(r"\{\d*(,\d*)?\}")


def _escape(p: str, i: int, in_class: bool) -> tuple[str, int]:
    """The JavaScript for the escape at p[i] (a backslash) and the index after it."""
    n = p[i + 1]
    simple = {"w": WORD if in_class else f"[{WORD}]", "d": r"\p{Nd}", "D": r"\P{Nd}"}
    if n in simple:
        return simple[n], i + 2
    if n == "W" and not in_class:
        return f"[^{WORD}]", i + 2
    if n == "U":
        return "\\u{" + p[i + 2:i + 10].lstrip("0") + "}", i + 10
    if n.isalnum() or n in SYNTAX:
        if n in "AZW":
            raise ValueError(f"no JavaScript for \\{n}")
        return "\\" + n, i + 2
    return n, i + 2  # an identity escape Python allows and JavaScript's u mode does not


def to_js(pattern: str) -> tuple[str, str]:
    """(source, flags) of a JavaScript RegExp that matches what Python's re matches for spaCy's patterns."""
    flags, p = "u", pattern
    m = re.match(r"\(\?([aiLmsux]+)\)", p)
    if m:
        flags += "i" if "i" in m.group(1) else ""
        p = p[m.end():]
    out, i, in_class = [], 0, False
    while i < len(p):
        c = p[i]
        if c == "\\":
            piece, i = _escape(p, i, in_class)
            out.append(piece)
            continue
        if c == "[" and not in_class:
            in_class = True
            start = i + 2 if p[i + 1:i + 2] == "^" else i + 1
            out.append(p[i:start])
            if p[start:start + 1] == "]":  # Python reads a leading ] as a literal
                out.append("\\]")
                start += 1
            i = start
            continue
        if c == "]" and in_class:
            in_class = False
        elif c == "(" and p.startswith("(?P<", i):
            out.append("(?<")
            i += 4
            continue
        elif c in "{}" and not in_class and not (c == "{" and QUANTIFIER.match(p, i)) and not \
                (c == "}" and re.search(r"\{\d*(,\d*)?$", "".join(out))):
            c = "\\" + c
        out.append(c)
        i += 1
    return "".join(out), flags


def _pattern(fn) -> dict | None:
    if fn is None:
        return None
    source, flags = to_js(fn.__self__.pattern)
    return {"source": source, "flags": flags}


def tokenizer_rules(lang: str) -> dict:
    """What words.js needs to split text as spaCy's ``lang`` tokenizer does."""
    tok = _spacy(lang).tokenizer
    specials = {key: [t[65] for t in subs] for key, subs in tok.rules.items()}  # 65: spacy.attrs.ORTH
    # special cases that hold an affix are also found across tokens afterwards (spaCy's _special_matcher),
    # as the tokens the same tokenizer without special cases makes of them
    from spacy.tokenizer import Tokenizer
    plain = Tokenizer(tok.vocab, rules={}, prefix_search=tok.prefix_search, suffix_search=tok.suffix_search,
                      infix_finditer=tok.infix_finditer, token_match=tok.token_match, url_match=tok.url_match)
    matcher = [[key, [t.text for t in plain(key)]] for key in tok.rules
               if tok.find_prefix(key) or tok.find_infix(key) or tok.find_suffix(key) or " " in key]
    return {"lang": lang, "prefix": _pattern(tok.prefix_search), "suffix": _pattern(tok.suffix_search),
            "infix": _pattern(tok.infix_finditer), "token_match": _pattern(tok.token_match),
            "url_match": _pattern(tok.url_match), "specials": specials, "matcher": matcher}
