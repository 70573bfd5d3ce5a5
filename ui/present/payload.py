"""What leaves the server as data: the JSON of a run, export files, example sentences (links: ui/state.py)."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from model.engine.data import head_lines
from model.engine.decoding import Translation
from model.engine.loaded import LoadedModel
from model.engine.names import ATTN_KINDS

from . import KIND_JSON, describe_interventions


def numbers(a, decimals: int | None = None) -> np.ndarray:
    """float64 values for JSON: each float32 at the shortest decimal that reads back as the same float32
    (full precision, no float64 noise digits), or rounded to ``decimals`` places when given."""
    a = np.asarray(a, dtype=np.float32)
    if decimals is not None:
        return np.round(a.astype(np.float64), decimals)
    # a few values: numpy's repr at once; an attention array: whole-array arithmetic (several times faster)
    return a.astype(str).astype(np.float64) if a.size < 64 else shortest(a)


def shortest(a: np.ndarray) -> np.ndarray:
    """Each float32 of ``a`` as the float64 nearest its shortest round-tripping decimal, whole arrays at a time.
    Whether k significant digits read back as the same float32 only grows with k, so each value's least k in
    1..9 is found by bisection (four tries, not nine). n / 10^m is the double nearest that decimal when 10^m is
    exact (|m| <= 22), so JSON writes it without noise digits. What this cannot cover (denormals, inf, nan)
    takes numpy's own shortest repr, one value at a time."""
    flat = np.ascontiguousarray(a, dtype=np.float32).ravel()
    x = flat.astype(np.float64)
    out = np.full(x.shape, np.nan)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        lead = np.floor(np.log10(np.abs(x)))
    zero = x == 0
    ok = ~zero & np.isfinite(lead) & (lead >= -14) & (lead <= 22)  # 10^m exact for every k: |k - 1 - lead| <= 22
    idx = np.flatnonzero(ok)
    xs, ls, want = x[idx], lead[idx], flat[idx]
    lo, hi = np.ones(len(idx)), np.full(len(idx), 9.0)

    def at(k):  # the values kept at k significant digits
        m = k - 1 - ls
        p = 10.0 ** np.abs(m)
        return np.where(m >= 0, np.round(xs * p) / p, np.round(xs / p) * p)
    while np.any(lo < hi):
        mid = np.floor((lo + hi) / 2)
        fits = at(mid).astype(np.float32) == want
        hi, lo = np.where(fits, mid, hi), np.where(fits, lo, mid + 1)
    r = at(lo)
    good = r.astype(np.float32) == want  # nine digits always read back; kept as a guard
    out[idx[good]] = r[good]
    out[zero] = x[zero]  # -0.0 stays -0.0
    rest = ~zero
    rest[idx[good]] = False
    out[rest] = flat[rest].astype(str).astype(np.float64)
    return out.reshape(np.shape(a))


def attention_mask(mask, shape: tuple[int, ...]) -> list:
    """The mask (True = attend) as (queries, keys) nested lists of booleans: what tells a masked cell
    (weight 0, False here) from a weight that is, or rounds to, 0 (True here)."""
    return np.broadcast_to(np.asarray(mask, dtype=bool), shape[-2:]).tolist()


def _steps(tr: Translation, decimals: int | None) -> list[dict]:
    """Per step: the token, its probability and the top-k, every probability converted in one call."""
    flat = numbers([p for s in tr.steps for p in (s.prob, *s.topk_probs)], decimals).tolist()
    out, at = [], 0
    for s in tr.steps:
        n = len(s.topk_probs)
        out.append({"step": s.step, "token": s.token, "prob": flat[at],
                    "topk": [[tok, p] for tok, p in zip(s.topk_tokens, flat[at + 1:at + 1 + n])]})
        at += 1 + n
    return out


def word_fields(lm: LoadedModel, tr: Translation) -> dict:
    w = tr.words(lm)
    return {"src_word_spans": w.src_spans, "src_words": w.src, "output_word_spans": w.output_spans,
            "output_words": w.output, "decoder_input_word_spans": w.decoder_input_spans,
            "decoder_input_words": w.decoder_input}


def to_json(tr: Translation, notices: list[str] | None = None, model: str | None = None,
            attention_arrays: bool = True, lm: LoadedModel | None = None, decimals: int | None = None) -> dict:
    """A JSON-able dict: tokens, the translation, per-step records and the attention arrays (over
    tokens; with ``lm``, also each word's token span, to read them per word). Numbers at float32
    precision unless ``decimals`` rounds them; ``attention_mask`` (queries x keys, True = attend, the
    same for every layer and head) marks the masked cells, whose weight is 0."""
    out = {
        "model": model or f"{tr.src_lang}-{tr.tgt_lang}", "src_text": tr.src_text,
        "src_tokens": list(tr.src_tokens), "output_tokens": list(tr.output_tokens),
        "decoder_input_tokens": tr.decoder_input_tokens, "translation": tr.text,
        "replaced": {str(k): v for k, v in tr.replaced.items()}, "truncated": bool(tr.truncated),
        "score": float(tr.score), "interventions": describe_interventions(tr.interventions),
        "notices": list(notices or []),
        "steps": _steps(tr, decimals),
    }
    if lm is not None:
        out.update(word_fields(lm, tr))
    if attention_arrays and tr.trace is not None:
        arrays = {KIND_JSON[k]: tr.attention(k) for k in ATTN_KINDS}
        out["attention"] = {k: numbers(a, decimals).tolist() for k, a in arrays.items()}
        out["attention_shape"] = "layers x heads x queries x keys"
        out["attention_mask"] = {KIND_JSON[k]: attention_mask(tr.mask(k), arrays[KIND_JSON[k]].shape)
                                 for k in ATTN_KINDS}
        out["precision"] = "float32" if decimals is None else f"rounded to {decimals} decimals"
    return out


def export_metadata(tr: Translation, model: str, lm: LoadedModel | None = None, settings: dict | None = None,
                    trust: dict | None = None) -> dict:
    """The JSON that goes with an export: tokens, settings, model id, and the trust signals where given."""
    card = None
    if lm is not None:
        card = {"name": lm.name, "checkpoint": lm.path.name if lm.path else None,
                "src_lang": lm.src_lang, "tgt_lang": lm.tgt_lang}
    return {"model": model, "model_card": card, "src_text": tr.src_text, "src_tokens": list(tr.src_tokens),
            "src_ids": [int(i) for i in tr.src_ids], "output_tokens": list(tr.output_tokens),
            "output_ids": [int(i) for i in tr.output_ids], "decoder_input_tokens": tr.decoder_input_tokens,
            "translation": tr.text, "settings": dict(settings or {}),
            "interventions": describe_interventions(tr.interventions),
            "hooks": sorted(tr.trace.arrays()) if tr.trace is not None else [],
            **(word_fields(lm, tr) if lm is not None else {}), **({"trust": trust} if trust is not None else {})}


def write_export(tr: Translation, model: str, folder, lm: LoadedModel | None = None,
                 settings: dict | None = None, extra: dict | None = None, trust: dict | None = None
                 ) -> tuple[Path, Path]:
    """``<folder>/attention-trace.npz`` (every tensor by hook name, plus ``extra`` arrays) and
    ``<folder>/attention-run.json``; returns both paths."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    if tr.trace is None:
        raise ValueError("the run holds no trace to export")
    npz, js = folder / "attention-trace.npz", folder / "attention-run.json"
    np.savez_compressed(npz, **tr.trace.arrays(), **(extra or {}))
    js.write_text(json.dumps(export_metadata(tr, model, lm, settings, trust), ensure_ascii=False, indent=1),
                  encoding="utf-8")
    return npz, js


# --------------------------------------------------------------------------- example sentences

EVERYDAY = {
    "de": ["Ein Mann fährt mit dem Fahrrad durch die Stadt.", "Zwei Hunde spielen im Schnee.",
           "Eine Frau liest ein Buch im Park.", "Die Kinder essen Eis am Strand."],
    "en": ["A man rides his bike through the city.", "Two dogs are playing in the snow.",
           "A woman is reading a book in the park.", "The children are eating ice cream on the beach."],
    "fr": ["Un homme fait du vélo dans la ville.", "Deux chiens jouent dans la neige.",
           "Une femme lit un livre dans le parc.", "Les enfants mangent une glace sur la plage."],
    "cs": ["Muž jede na kole městem.", "Dva psi si hrají ve sněhu.",
           "Žena čte knihu v parku.", "Děti jedí zmrzlinu na pláži."],
}
# French puts most adjectives after the noun ("un chien noir" / "a black dog"), so these show
# crossing lines in the cross-attention, which German-English word order rarely does.
DIRECTION_EXAMPLES = {
    "en-fr": ["A black dog runs on the beach.", "A woman in a red dress is walking down the street."],
    "fr-en": ["Un chien noir court sur la plage.", "Une femme en robe rouge marche dans la rue."],
    # Czech has no articles, and its case endings do the work of English prepositions: "nožem" (instrumental)
    # is "with a knife", "psovi" (dative) "to the dog". One Czech word then feeds several English ones.
    "cs-en": ["Muž krájí chléb nožem.", "Žena dává psovi míč.", "Chlapec píše tužkou."],
    "en-cs": ["A man is cutting bread with a knife.", "A boy writes with a pencil.",
              "The woman watches the man."],
}
TEST_FALLBACK = {  # the first lines of Multi30k test_2016_flickr, used when the data folder is absent
    "de": ["Ein Mann mit einem orangefarbenen Hut, der etwas anstarrt.",
           "Ein Boston Terrier läuft über saftig-grünes Gras vor einem weißen Zaun.",
           "Ein Mädchen in einem Karateanzug bricht ein Brett mit einem Tritt."],
    "en": ["A man in an orange hat starring at something.",
           "A Boston Terrier is running on lush green grass in front of a white fence.",
           "A girl in karate uniform breaking a stick with a front kick."],
    "fr": ["Un homme avec un chapeau orange regardant quelque chose.",
           "Un terrier de Boston court sur l'herbe verdoyante devant une clôture blanche.",
           "Une fille en tenue de karaté brisant un bâton avec un coup de pied."],
    "cs": ["Muž v oranžovém klobouku na něco zírá.",
           "Bostonský teriér běží po zářivě zelené trávě před bílým plotem.",
           "Dívka v uniformě na karate, která předním kopem láme dřívko."],
}
# Word order carries the meaning here: with the positional encoding off the model reads a bag of
# words, and who does what to whom is lost. Each sentence was picked by translating candidates with the
# shipped checkpoints, greedy, with and without positional encoding: the second output swaps the two
# people ("The man is looking at the woman."). The head is the encoder self-attention head whose map
# changes most (mean |Δ weight|) on that sentence. tests/model/test_shipped.py checks the outputs still differ.
@dataclass(frozen=True)
class WordOrderDemo:
    text: str
    layer: int  # encoder layer and head to show
    head: int


WORD_ORDER = {"de-en": WordOrderDemo("Die Frau sieht den Mann.", 1, 1),
              "en-de": WordOrderDemo("The woman watches the man.", 4, 1),
              "en-fr": WordOrderDemo("A man is photographing a woman.", 1, 3),
              "fr-en": WordOrderDemo("La femme regarde l'homme.", 3, 3),
              "en-cs": WordOrderDemo("The woman watches the man.", 1, 3),
              # Czech marks who does what by case ("muže" is the object wherever it stands), so most
              # sentences translate the same without positions; object-first order is where they matter.
              "cs-en": WordOrderDemo("Muže vidí žena.", 3, 1)}
WORD_ORDER_BY_LANG = {"de": "Die Frau sieht den Mann.", "en": "The woman watches the man.",
                      "fr": "La femme regarde l'homme.", "cs": "Muže vidí žena."}


# Two sentences: the same words, the roles swapped, in each source language.
PAIR_DEFAULTS = {"de": ("Der Mann sieht die Frau.", "Die Frau sieht den Mann."),
                 "en": ("The man sees the woman.", "The woman sees the man."),
                 "fr": ("L'homme voit la femme.", "La femme voit l'homme."),
                 "cs": ("Muž vidí ženu.", "Žena vidí muže.")}


def pair_texts(text_a: str, text_b: str, src_lang: str) -> tuple[str, str]:
    """The two sentences to run: another language's untouched defaults become this language's."""
    mine = PAIR_DEFAULTS.get(src_lang)
    if mine and (text_a, text_b) in PAIR_DEFAULTS.values():
        return mine
    return text_a, text_b


def word_order_demo(name: str, src_lang: str) -> WordOrderDemo:
    """The word-order sentence (and head) for direction ``name``; another model gets its language's sentence."""
    return WORD_ORDER.get(name) or WordOrderDemo(WORD_ORDER_BY_LANG.get(src_lang, WORD_ORDER_BY_LANG["en"]), 0, 0)


def corpus_sentences(lang: str, data_dirs, n: int, max_chars: int, splits=("test_2016_flickr",)
                     ) -> tuple[list[str], str] | None:
    """Up to ``n`` short sentences of the first split found in ``data_dirs``, and where they came from."""
    for split in splits:
        for d in data_dirs:
            path = Path(d) / f"{split}.{lang}.gz"
            lines = head_lines(path, 4 * n + 200)
            picked = [s for s in lines or [] if s and len(s) <= max_chars][:n]
            if picked:
                return picked, f"{path.name} (first {len(picked)})"
    return None


def test_examples(lang: str, data_dirs, n: int = 3, max_chars: int = 90) -> list[str]:
    """A few short sentences of the Multi30k test set for ``lang`` (built-in ones if it is absent)."""
    found = corpus_sentences(lang, data_dirs, n, max_chars)
    return found[0] if found else TEST_FALLBACK.get(lang, [])[:n]


@dataclass(frozen=True)
class ReferencePair:
    """A source sentence with its reference translation, and the Multi30k split it is from."""
    split: str
    source: str
    reference: str

    @property
    def label(self) -> str:
        # validation pairs have a reference word alignment, which Attention → Alignment draws after forcing
        where = "validation" if self.split == "val" else "test"
        return f"{where} · {self.source}  ⇒  {self.reference}"


def reference_pairs(src_lang: str, tgt_lang: str, data_dirs, n: int = 12, max_chars: int = 90,
                    splits=("val", "test_2016_flickr")) -> list[ReferencePair]:
    """Up to ``n`` short (source, reference) pairs of each Multi30k split (built-in test pairs if none)."""
    pairs = []
    for split in splits:
        for d in data_dirs:
            src = head_lines(Path(d) / f"{split}.{src_lang}.gz", 4 * n + 200)
            ref = head_lines(Path(d) / f"{split}.{tgt_lang}.gz", 4 * n + 200)
            if src and ref:
                pairs += [ReferencePair(split, s, r) for s, r in zip(src, ref) if s and r and len(s) <= max_chars][:n]
                break
    if pairs:
        return pairs
    return [ReferencePair("test_2016_flickr", s, r)
            for s, r in zip(TEST_FALLBACK.get(src_lang, []), TEST_FALLBACK.get(tgt_lang, []))][:n]


def validation_sentences(lang: str, data_dirs, n: int = 24, max_chars: int = 200) -> tuple[list[str], str]:
    """Up to ``n`` held-out sentences: val, else test_2016_flickr, else the built-in ones."""
    found = corpus_sentences(lang, data_dirs, n, max_chars, ("val", "test_2016_flickr"))
    if found:
        return found
    builtin = (TEST_FALLBACK.get(lang, []) + EVERYDAY.get(lang, []))[:n]
    return builtin, f"built-in examples ({len(builtin)})"


def examples_for(names: list[str], langs: dict[str, str], data_dirs) -> list[list[str]]:
    """[sentence, direction] rows for the Examples table: direction-specific ones, test set, everyday."""
    rows = []
    for name in names:
        lang = langs[name]
        for s in (DIRECTION_EXAMPLES.get(name, []) + test_examples(lang, data_dirs, 3) + EVERYDAY.get(lang, [])[:2]):
            rows.append([s, name])
    return rows
