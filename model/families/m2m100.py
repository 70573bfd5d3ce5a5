"""M2M100 and NLLB-200 checkpoints (Hugging Face ``model_type: m2m_100``), converted into our network.

Their architecture is already ours: pre-norm, ReLU, a final LayerNorm per stack, scaled token embeddings
shared by encoder, decoder and generator, sinusoidal positions. What the frozen config records: the
position table's frequencies (``pos_layout="fairseq"``) and that a sentence's first position reads row
``padding_idx + 1`` of it (``pos_offset``), no logits bias, and ``</s>`` as the decoder's start token.

The tokenizer is SentencePiece used directly (transformers is never imported here). A sentence is framed
by its language: the source as ``[src_lang_code] pieces </s>``, and decoding forces the target language's
code as the first output token (``forced_start``), as transformers' ``forced_bos_token_id`` does. Ids:
M2M100 maps pieces through ``vocab.json``; NLLB's ids are SentencePiece's shifted by one past its four
specials. The language codes come after either, with the ids the folder's tokenizer files give them.

A many-to-many model translates between every pair of its languages: :func:`with_languages` gives the
same network under another (source, target) pair.
"""
from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass
from pathlib import Path

import torch

from model.engine.config import TransformerConfig
from model.engine.loaded import LoadedModel
from model.engine.transformer import Transformer, tied_keys

from .marian import ACTIVATIONS, HUB_ID, HubPieceVocab, hf_model_type, read_weights, side_shapes

LABEL = "M2M100"  # how the model list names this family (an NLLB vocabulary's models: "NLLB-200")

CONFIG, SPM, VOCAB_JSON, TOKENIZER_JSON = "config.json", "sentencepiece.bpe.model", "vocab.json", "tokenizer.json"
TOKENIZER_FILES = [SPM, VOCAB_JSON, TOKENIZER_JSON, "tokenizer_config.json", "special_tokens_map.json",
                   "added_tokens.json", "generation_config.json", CONFIG]
SPECIAL_PIECES = ("<s>", "<pad>", "</s>", "<unk>")  # fairseq's ids 0-3 in both families
NLLB_CODE = re.compile(r"^[a-z]{3}_[A-Z][a-z]{3}$")  # eng_Latn
M2M_CODE = re.compile(r"^__([a-z]{2,3}(?:_[A-Za-z]+)?)__$")  # __en__
MODEL_TYPES = ("m2m_100", "m2m100")  # config.json's model_type (transformers writes the first)
HUB_NAME = re.compile(r"m2m[-_]?100|nllb", re.IGNORECASE)
# M2M100's tokenizer files do not list its language codes: their tokens __xx__ take the ids after
# vocab.json's in this order (fairseq's), chosen by tokenizer_config.json's "language_codes"
M2M100_LANGUAGES = {
    "m2m100": ("af am ar ast az ba be bg bn br bs ca ceb cs cy da de el en es et fa ff fi fr fy ga gd gl gu ha he hi "
               "hr ht hu hy id ig ilo is it ja jv ka kk km kn ko lb lg ln lo lt lv mg mk ml mn mr ms my ne nl no ns "
               "oc or pa pl ps pt ro ru sd si sk sl so sq sr ss su sv sw ta th tl tn tr uk ur uz vi wo xh yi yo zh "
               "zu").split(),
    "wmt21": "en ha is ja cs ru zh de".split(),
}


class M2M100Error(ValueError):
    """An M2M100 / NLLB folder or Hub id that cannot be loaded, with a readable reason."""


LOAD_ERROR, NOUN = M2M100Error, "M2M100/NLLB model"  # what load raises, and how the registry names the source in it


def is_m2m100_source(source) -> bool:
    """A folder whose config says m2m_100, or a Hub id named like one (facebook/nllb-…, facebook/m2m100_…)."""
    path = Path(str(source))
    if path.is_dir():
        return hf_model_type(path) in MODEL_TYPES
    return bool(HUB_ID.match(str(source))) and bool(HUB_NAME.search(str(source)))


# --------------------------------------------------------------------------- the vocabulary

class M2M100Vocab(HubPieceVocab):
    """One SentencePiece model for both sides, the ids of the family, and the language codes. A sentence's
    tokens start with its language's code token (``__de__`` for M2M100, ``deu_Latn`` for NLLB)."""

    def __init__(self, itos: list[str], proto: bytes, lang_tokens: dict[str, str], family: str):
        self.lang_tokens = dict(lang_tokens)  # language code -> its token
        super().__init__(itos, proto, family,
                         frozenset(SPECIAL_PIECES) | frozenset(self.lang_tokens.values()) | {"<mask>"})
        self.family = family

    @property
    def languages(self) -> list[str]:
        return list(self.lang_tokens)

    def lang_token(self, lang: str) -> str:
        if lang not in self.lang_tokens:
            raise ValueError(f"language {lang!r} is not one of this model's {len(self.lang_tokens)} "
                             f"(e.g. {', '.join(list(self.lang_tokens)[:5])})")
        return self.lang_tokens[lang]

    def tokens(self, text: str, lang: str = "") -> list[str]:
        """``[language code] pieces`` (the closing </s> is the engine's frame)."""
        head = [self.lang_token(lang)] if lang else []
        return head + self.sp.encode(text, out_type=str)

    def forced_start(self, lang: str) -> tuple[int, ...]:
        """The target language's code: the first token decoding must produce."""
        return (self.stoi[self.lang_token(lang)],) if lang else ()

    def segment(self, words: list[str]) -> list[str]:
        return self.sp.encode(" ".join(words), out_type=str)

    def to_json(self) -> dict:
        return {"kind": self.family, "size": len(self)}

    def __eq__(self, other) -> bool:
        return isinstance(other, M2M100Vocab) and self.proto == other.proto and self.itos == other.itos


def _json(folder: Path, name: str) -> dict:
    try:
        data = json.loads((folder / name).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _added_tokens(folder: Path) -> dict[str, int]:
    """Tokens with their own ids: tokenizer.json's added tokens, else added_tokens.json (exact ids)."""
    added = _json(folder, TOKENIZER_JSON).get("added_tokens")
    if isinstance(added, list):
        return {str(t["content"]): int(t["id"]) for t in added if isinstance(t, dict) and "id" in t}
    return {str(k): int(v) for k, v in _json(folder, "added_tokens.json").items()}


def _listed_codes(folder: Path) -> list[str]:
    """The language code tokens the tokenizer files list, in their order."""
    for name in ("tokenizer_config.json", "special_tokens_map.json"):
        cfg = _json(folder, name)
        for key in ("extra_special_tokens", "additional_special_tokens"):
            items = cfg.get(key)
            if isinstance(items, list) and items:
                toks = [t["content"] if isinstance(t, dict) else str(t) for t in items]
                return [t for t in toks if M2M_CODE.match(t) or NLLB_CODE.match(t)]
    return []


def _base_itos(folder: Path, sp, family: str) -> list[str]:
    """The ids before the language codes: vocab.json's (M2M100), or SentencePiece's shifted by one (NLLB)."""
    if family == "m2m100":
        stoi = _json(folder, VOCAB_JSON)
        if not stoi:
            raise M2M100Error(f"{VOCAB_JSON} is missing or unreadable (an M2M100 folder needs {VOCAB_JSON} and {SPM})")
        itos = [""] * (max(int(i) for i in stoi.values()) + 1)
        for tok, i in stoi.items():
            itos[int(i)] = tok
        return itos
    return list(SPECIAL_PIECES) + [sp.id_to_piece(i) for i in range(3, sp.get_piece_size())]


def read_vocab(folder: Path, size: int) -> M2M100Vocab:
    """The family's vocabulary of ``size`` ids from the folder's tokenizer files."""
    import sentencepiece as spm
    if not (folder / SPM).is_file():
        raise M2M100Error(f"{SPM} is missing (the tokenizer's SentencePiece model)")
    try:
        proto = (folder / SPM).read_bytes()
        sp = spm.SentencePieceProcessor(model_proto=proto)
    except (OSError, RuntimeError) as e:
        raise M2M100Error(f"{SPM} is not a SentencePiece model ({' '.join(str(e).split())[:200]})") from None
    family = "m2m100" if (folder / VOCAB_JSON).is_file() else "nllb"
    itos = _base_itos(folder, sp, family)
    added = _added_tokens(folder)
    codes = [t for t in added if M2M_CODE.match(t) or NLLB_CODE.match(t)] or _listed_codes(folder)
    if not codes and family == "m2m100":
        which = str(_json(folder, "tokenizer_config.json").get("language_codes", "m2m100"))
        codes = [f"__{c}__" for c in M2M100_LANGUAGES.get(which, [])]
    if not codes:
        raise M2M100Error("the tokenizer files name no language codes (tokenizer.json, tokenizer_config.json)")
    first = len(itos)
    ids = {t: added.get(t, first + i) for i, t in enumerate(codes)}
    itos += [""] * max(0, max(ids.values()) + 1 - len(itos))
    for t, i in ids.items():
        itos[i] = t
    if "<mask>" in added and added["<mask>"] < size:
        itos += [""] * max(0, added["<mask>"] + 1 - len(itos))
        itos[added["<mask>"]] = "<mask>"
    if len(itos) > size:
        raise M2M100Error(f"the tokenizer has {len(itos)} ids, more than the model's {size}")
    itos = [t or f"<unused{i}>" for i, t in enumerate(itos + [""] * (size - len(itos)))]
    langs = {(M2M_CODE.match(t).group(1) if M2M_CODE.match(t) else t): t for t in codes}
    return M2M100Vocab(itos, proto, langs, family)


# --------------------------------------------------------------------------- the network

def m2m100_config(hf: dict) -> TransformerConfig:
    """Our frozen config for a Hugging Face M2M100Config (NLLB-200's dense models use the same)."""
    act = hf.get("activation_function", "relu")
    if act not in ACTIVATIONS:
        raise M2M100Error(f"unknown activation {act!r} in {CONFIG}; supported: {', '.join(sorted(ACTIVATIONS))}")
    if hf.get("layernorm_embedding") or hf.get("normalize_embedding"):
        raise M2M100Error(f"{CONFIG} asks for a LayerNorm on the embeddings, which this converter does not build")
    try:
        pad = int(hf.get("pad_token_id", 1))
        vocab = int(hf["vocab_size"])
        return TransformerConfig(
            src_vocab_size=vocab, tgt_vocab_size=vocab, d_model=int(hf["d_model"]), **side_shapes(hf),
            dropout=float(hf.get("dropout", 0.1)), attn_dropout=float(hf.get("attention_dropout", 0.0)),
            max_len=int(hf.get("max_position_embeddings", 1024)), tie_embeddings=True, share_embeddings=True,
            pad_id=pad, norm_first=True, activation=ACTIVATIONS[act], pos_layout="fairseq", pos_offset=pad + 1,
            final_norm=True, logits_bias=False, embed_scale=None if hf.get("scale_embedding", True) else 1.0,
            decoder_start_id=int(hf.get("decoder_start_token_id", 2)), eos_id=int(hf.get("eos_token_id", 2)),
            src_bos_id=None)
    except (KeyError, TypeError, ValueError) as e:
        raise M2M100Error(f"{CONFIG} is not a complete M2M100 config ({type(e).__name__}: {e})") from None


_RENAMES = (("self_attn_layer_norm", "norm_1"), ("encoder_attn_layer_norm", "norm_2"), ("encoder_attn.", "cross_attn."),
            ("out_proj", "w_o"), ("q_proj", "w_q"), ("fc1", "ff.w_1"), ("fc2", "ff.w_2"))


def _rename(key: str, stack: str) -> str:
    key = key.replace("final_layer_norm", "norm_2" if stack == "encoder" else "norm_3")
    for a, b in _RENAMES:
        key = key.replace(a, b)
    return key


def convert_state_dict(hf_state: dict[str, torch.Tensor], cfg: TransformerConfig) -> dict[str, torch.Tensor]:
    """transformers' M2M100 tensor names -> ours: K and V into one ``w_kv``, each stack's ``layer_norm``
    into its final ``norm``; the position tables (computed, not stored) and the tied copies dropped."""
    sd = {k.removeprefix("model."): v for k, v in hf_state.items()}
    emb = sd.get("shared.weight", sd.get("decoder.embed_tokens.weight", sd.get("encoder.embed_tokens.weight")))
    if emb is None:
        raise M2M100Error("the weights hold no token embedding (shared.weight)")
    out = {"decoder.tok_embed.weight": emb}
    for stack, n in (("encoder", cfg.n_encoder_layers), ("decoder", cfg.n_decoder_layers)):
        for part in ("weight", "bias"):
            out[f"{stack}.norm.{part}"] = sd[f"{stack}.layer_norm.{part}"]
        for i in range(n):
            p = f"{stack}.layers.{i}."
            for attn in ("self_attn", "encoder_attn") if stack == "decoder" else ("self_attn",):
                for part in ("weight", "bias"):
                    out[_rename(p + f"{attn}.w_kv.{part}", stack)] = torch.cat(
                        [sd[p + f"{attn}.k_proj.{part}"], sd[p + f"{attn}.v_proj.{part}"]], 0)
            for k, v in sd.items():
                if k.startswith(p) and not re.search(r"\.(k|v)_proj\.", k):
                    out[_rename(k, stack)] = v
    extra = sorted(k for k in sd if k.startswith(("encoder.", "decoder.")) and "layers." not in k
                   and not k.startswith(("encoder.embed", "decoder.embed", "encoder.layer_norm", "decoder.layer_norm")))
    if extra:
        raise M2M100Error(f"the weights hold tensors this converter does not place (e.g. {extra[:3]})")
    return {k: v.float() for k, v in out.items()}


# --------------------------------------------------------------------------- loading

@dataclass
class M2M100Model:
    """What a folder converts into: our network, its one vocabulary (both sides), a language pair."""
    model: Transformer
    vocab: M2M100Vocab
    src_lang: str
    tgt_lang: str
    path: Path
    meta: dict


def default_pair(folder: Path, vocab: M2M100Vocab) -> tuple[str, str]:
    """The tokenizer config's src_lang/tgt_lang where it names them, else English -> French if the model
    has both, else its first two languages."""
    cfg, langs = _json(folder, "tokenizer_config.json"), vocab.languages
    code = {t: c for c, t in vocab.lang_tokens.items()}
    src, tgt = (code.get(cfg.get(k), cfg.get(k)) for k in ("src_lang", "tgt_lang"))
    for a, b in (("en", "fr"), ("eng_Latn", "fra_Latn"), tuple(langs[:2])):
        src, tgt = (src if src in langs else a), (tgt if tgt in langs and tgt != src else b)
        if src in langs and tgt in langs:
            return src, tgt
    raise M2M100Error("the model knows fewer than two languages")


def download(repo_id: str) -> Path:
    """A Hub model's snapshot in huggingface_hub's cache (its tokenizer files and safetensors weights,
    else pytorch_model.bin); honours HF_HUB_OFFLINE, HF_ENDPOINT and HF_HUB_CACHE."""
    from huggingface_hub import snapshot_download
    try:
        folder = Path(snapshot_download(repo_id, allow_patterns=TOKENIZER_FILES + ["model.safetensors"]))
        if not (folder / "model.safetensors").is_file():
            folder = Path(snapshot_download(repo_id, allow_patterns=TOKENIZER_FILES + ["pytorch_model.bin"]))
    except Exception as e:  # offline, unknown repository, HTTP errors: huggingface_hub has many kinds
        raise M2M100Error(f"could not fetch {repo_id!r} from the Hugging Face Hub "
                          f"({type(e).__name__}: {' '.join(str(e).split())[:300]})") from None
    return folder


def _build(cfg: TransformerConfig, state: dict[str, torch.Tensor]) -> Transformer:
    model = Transformer(cfg)
    expected = set(model.state_dict()) - tied_keys(cfg)
    missing, unexpected = expected - set(state), set(state) - expected
    if missing or unexpected:
        raise M2M100Error(f"the weights do not match {CONFIG} (missing {sorted(missing)[:3]}, "
                          f"unexpected {sorted(unexpected)[:3]})")
    try:
        model.load_state_dict(state, strict=False)
    except RuntimeError as e:
        raise M2M100Error(f"the weights do not match {CONFIG} ({' '.join(str(e).split())[:300]})") from None
    return model


def load_m2m100(source, device: str | torch.device = "cpu") -> M2M100Model:
    """Convert an M2M100 / NLLB folder, or a Hub id, into our network and vocabulary (fp32, eval mode)."""
    folder = Path(str(source))
    if not folder.is_dir():
        if not HUB_ID.match(str(source)):
            raise M2M100Error(f"folder not found, and not a Hub id: {source}")
        folder = download(str(source))
    kind = hf_model_type(folder)
    if kind not in MODEL_TYPES:
        found = f"model_type {kind!r}" if kind else f"no model_type in {CONFIG}"
        raise M2M100Error(f"{folder} is not an M2M100/NLLB model ({found}; their folders have 'm2m_100')")
    cfg = m2m100_config(_json(folder, CONFIG))
    vocab = read_vocab(folder, cfg.tgt_vocab_size)
    try:
        state = convert_state_dict(read_weights(folder), cfg)
    except KeyError as e:
        raise M2M100Error(f"the weights do not match {CONFIG} (no tensor {e})") from None
    except ValueError as e:  # read_weights' own readable reason (a cut or missing weights file)
        raise M2M100Error(str(e)) from None
    model = _build(cfg, state)
    src, tgt = default_pair(folder, vocab)
    meta = {"format": vocab.family, "source": str(source), "languages": len(vocab.languages)}
    return M2M100Model(model.to(device).eval(), vocab, src, tgt, folder, meta)


def claims(source) -> bool:
    """Whether ``source`` is for this family (see :func:`is_m2m100_source`)."""
    return is_m2m100_source(source)


def owns(lm: LoadedModel) -> bool:
    return lm.meta.get("format") in ("m2m100", "nllb")


def load(source, device: str | torch.device = "cpu") -> LoadedModel:
    """:func:`load_m2m100` as the engine's LoadedModel (one vocabulary serves both sides)."""
    m = load_m2m100(source, device)
    return LoadedModel(m.model, m.vocab, m.vocab, m.src_lang, m.tgt_lang, m.path, m.meta, {})


def with_languages(lm, src_lang: str, tgt_lang: str):
    """The same loaded model (shared weights) translating ``src_lang`` -> ``tgt_lang``; ValueError names
    a language the model does not know. ``lm`` is a LoadedModel whose vocabulary is an M2M100Vocab."""
    vocab = lm.src_vocab
    if not isinstance(vocab, M2M100Vocab):
        raise ValueError("only a many-to-many model (M2M100, NLLB) changes its languages")
    for lang in (src_lang, tgt_lang):
        vocab.lang_token(lang)
    return dataclasses.replace(lm, src_lang=src_lang, tgt_lang=tgt_lang)
