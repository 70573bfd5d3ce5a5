"""OPUS-MT (Marian) models in the static site: ``python -m web.build --marian DIR_OR_HUB_ID``.

The model is converted by the engine as the app converts it (model/families/marian.py) and exported by
web/export.py like our own, every head's outputs included. What differs is written here: the folder's
name on the site, where the model came from, and its tokenizer as MarianTokenizer has it (two
SentencePiece unigram models, one vocabulary, the special tokens), which page/marian.js reads.
"""
from __future__ import annotations

import hashlib
import json
import re
import tempfile
from pathlib import Path

import onnx

from model import families
from model.engine.loaded import LoadedModel
from model.families import marian as family

from .compact import share_weights, store
from .runtime import Graphs
from .sentencepiece_spec import unigram_spec

TOKENIZER = "tokenizer.json"
PRECISIONS = ("int8", "fp16")  # the smaller first: the first that keeps the rule is stored
RULE = 0.98  # the share of sentences whose greedy tokens must stay identical to the engine's (as for ours)
SAMPLE = 50  # validation sentences the rule is measured on
SPECIAL_DEFAULTS = {"unk_token": "<unk>", "eos_token": "</s>", "pad_token": "<pad>"}  # MarianTokenizer's


class MarianSiteError(ValueError):
    """A Marian model the site cannot offer, with a readable reason."""


def site_name(source) -> str:
    """The model's folder under models/: the Hub id's or the folder's last part (``opus-mt-de-en``)."""
    name = re.sub(r"[^\w.-]", "-", str(source).rstrip("/").split("/")[-1])
    if not name.strip(".-"):
        raise MarianSiteError(f"no usable name in {source!r}")
    return name


def owns(lm: LoadedModel) -> bool:
    return family.owns(lm)


def sources(marian, built: list[dict]) -> list:
    """The --marian sources, checked for names that clash with each other or with our directions."""
    taken = {m["name"] for m in built}
    for source in marian:
        if families.detect(source) is not family:
            raise MarianSiteError(f"{source}: not a Marian (OPUS-MT) folder, nor a Hub id")
        name = site_name(source)
        if name in taken:
            raise MarianSiteError(f"{source}: the site already has a model named {name!r}")
        taken.add(name)
    return list(marian)


def _json(path: Path) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    except ValueError as e:
        raise MarianSiteError(f"{path.name} is not JSON ({e})") from None


def _itos(path: Path) -> list:
    """vocab.json as a list indexed by id (None where an id has no token)."""
    stoi = _json(path)
    itos = [None] * (max(stoi.values(), default=-1) + 1)
    for token, i in stoi.items():
        itos[int(i)] = token
    return itos


def _content(token) -> str:
    return token["content"] if isinstance(token, dict) else str(token)


def specials(config: dict, vocab: list) -> list[dict]:
    """The tokens MarianTokenizer never splits, with their ids and whether spaces beside them are dropped:
    tokenizer_config.json's added tokens, else its (or MarianTokenizer's default) unk, eos and pad."""
    stoi = {t: i for i, t in enumerate(vocab) if t is not None}
    added = config.get("added_tokens_decoder") or {}
    names = [_content(config.get(k, v)) for k, v in SPECIAL_DEFAULTS.items()]
    names += [_content(t) for t in config.get("additional_special_tokens") or []]
    out = {t["content"]: {"content": t["content"], "id": int(i), "lstrip": bool(t.get("lstrip")),
                          "rstrip": bool(t.get("rstrip"))} for i, t in added.items()}
    if any(t.get("single_word") for t in added.values()):
        raise MarianSiteError("a special token marked single_word: the page does not split text that way")
    for name in names:
        if name not in out:
            if name not in stoi:
                raise MarianSiteError(f"the special token {name!r} is not in vocab.json")
            out[name] = {"content": name, "id": stoi[name], "lstrip": False, "rstrip": False}
    return sorted(out.values(), key=lambda s: s["id"])


def _side(path: Path, target: Path) -> dict:
    """One side's unigram model; its character map written beside, named by its bytes (both sides of a
    model, and most models, share one)."""
    try:
        spec, charsmap = unigram_spec(path)
    except ValueError as e:
        raise MarianSiteError(str(e)) from None
    spec["charsmap"] = None
    if charsmap:
        spec["charsmap"] = f"charsmap-{hashlib.sha256(charsmap).hexdigest()[:12]}.bin"
        (target / spec["charsmap"]).write_bytes(charsmap)
    return spec


def write_tokenizer(folder: Path, target: Path) -> dict:
    """tokenizer.json (and its character maps) of a Marian folder: both SentencePiece models, vocab.json
    (and target_vocab.json where the sides have their own), the special tokens, and which side's model
    joins output pieces (transformers' MarianTokenizer decodes with the source model unless the
    vocabularies are separate)."""
    config = _json(folder / "tokenizer_config.json")
    separate = bool(config.get("separate_vocabs", False))
    vocab = _itos(folder / family.VOCAB)
    spec = {"source": _side(folder / family.SOURCE_SPM, target), "target": _side(folder / family.TARGET_SPM, target),
            "vocab": vocab, "target_vocab": _itos(folder / family.TARGET_VOCAB) if separate else None,
            "specials": specials(config, vocab), "unk": _content(config.get("unk_token", "<unk>")),
            "eos": _content(config.get("eos_token", "</s>")), "decode_side": "target" if separate else "source",
            "clean_up_tokenization_spaces": bool(config.get("clean_up_tokenization_spaces", False))}
    (target / TOKENIZER).write_text(json.dumps(spec, ensure_ascii=False), encoding="utf-8")
    return spec


def meta(lm: LoadedModel, source) -> dict:
    """What the page says about the model beside ours: its family, where it came from, its tokenizer."""
    named = str(source) if family.looks_like_hub_id(str(source)) else site_name(source)  # no local path
    return {"family": family.LABEL, "source": named, "tokenizer": TOKENIZER, "licence": _licence(Path(lm.path))}


def _licence(folder: Path) -> str | None:
    """The licence a Hub model card declares in its front matter (OPUS-MT: cc-by-4.0), if any."""
    card = folder / "README.md"
    if not card.is_file():
        return None
    m = re.search(r"^license:\s*(\S+)", card.read_text(encoding="utf-8", errors="replace"), re.M)
    return m.group(1) if m else None


def _sample(lm: LoadedModel, n: int) -> list[str]:
    """The first ``n`` validation sentences of the model's source language, where Multi30k has it."""
    from .serve import DATA, lines
    return lines("val", lm.src_lang)[:n] if (DATA / f"val.{lm.src_lang}.gz").is_file() else []


def _identical(lm: LoadedModel, fp32: dict, meta: dict, precision: str, sources: list, refs: list) -> int:
    """How many of ``sources`` the graphs stored at ``precision`` decode to the engine's greedy ids."""
    with tempfile.TemporaryDirectory() as tmp:
        graphs = {part: store(_copy(g), precision) for part, g in fp32.items()}
        (Path(tmp) / "weights.bin").write_bytes(share_weights(list(graphs.values())))
        for part, graph in graphs.items():
            onnx.save(graph, str(Path(tmp) / f"{part}.onnx"))
        run = Graphs(Path(tmp), meta)
        return sum(run.greedy(ids, budget) == ref for (ids, budget), ref in zip(sources, refs))


def _copy(model: onnx.ModelProto) -> onnx.ModelProto:
    out = onnx.ModelProto()
    out.CopyFrom(model)
    return out


def choose_precision(lm: LoadedModel, fp32: dict, meta: dict, n: int = SAMPLE) -> tuple[str, dict]:
    """(precision, what was measured): the smaller of int8 and fp16 whose graphs decode at least RULE of
    ``n`` validation sentences to the very greedy ids of the engine (fp32), the rule our own models' precision
    was chosen by (bench/web_int8.py). With no sentences in the source language: fp16, which loses nothing."""
    import torch

    from model.engine.decoding import DecodeOptions, greedy_batch, source_ids
    texts = _sample(lm, n)
    if not texts:
        return "fp16", {"sentences": 0, "note": f"no validation sentences in {lm.src_lang!r}: fp16 kept"}
    sources = [source_ids(lm, t, DecodeOptions(beam=1))[2:] for t in texts]
    with torch.inference_mode():
        refs = [greedy_batch(lm.model, torch.tensor([ids]), budget)[0] for ids, budget in sources]
    check = {"sentences": len(texts), "rule": RULE}
    for precision in PRECISIONS:
        check[precision] = _identical(lm, fp32, meta, precision, sources, refs)
        if check[precision] >= RULE * len(texts):
            return precision, check
    return "fp16", check  # neither keeps the rule: the closer one


def about(meta: dict) -> dict:
    """What the page says of the model before it is chosen: its family, origin, licence and download."""
    return {"family": meta["family"], "source": meta["source"], "licence": meta["licence"],
            "hub": family.looks_like_hub_id(meta["source"]), "precision": meta["precision"],
            "src_lang": meta["src_lang"], "tgt_lang": meta["tgt_lang"], "parameters": meta["parameters"],
            "bytes": sum(n for f, n in meta["bytes"].items() if not f.startswith("vendor/"))}


def space_note(metas: list[dict]) -> str:
    """The Space README's lines on its OPUS-MT models: where each comes from and under which licence."""
    if not metas:
        return ""
    unknown = "not stated in its model card: see the model's page"
    rows = [f"- `{m['name']}`: OPUS-MT (Marian), from `{m['source']}`, licence "
            f"{m['licence'] or unknown}; weights in {m['precision']}" for m in metas]
    return "\nOPUS-MT models, converted by the project's engine (every head exported):\n" + "\n".join(rows) + "\n"
