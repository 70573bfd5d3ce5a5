"""Hugging Face Marian (OPUS-MT) checkpoints, converted into our own network.

As nanoGPT's ``from_pretrained`` does for GPT-2: the weights are renamed into :class:`Transformer`'s
(K and V concatenated into ``w_kv``) and its frozen config says what differs from our own models:
post-norm, SiLU ("swish"), sin-then-cos positions, no final norm, a logits bias, <pad> as the decoder's
start token and a source framed as ``pieces </s>``. Every hook point, the KV cache and the lean decode
step then work unchanged.

A folder in Hugging Face's layout (``config.json``, ``model.safetensors`` or ``pytorch_model.bin``,
``source.spm``, ``target.spm``, ``vocab.json``) or a Hub id (``Helsinki-NLP/opus-mt-de-en``, fetched
with ``huggingface_hub`` into its usual cache) both load. This module never imports transformers.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import torch

from model.engine.config import TransformerConfig
from model.engine.loaded import LoadedModel
from model.engine.transformer import Transformer, tied_keys
from model.engine.vocab import WORD_START, SubwordVocab, piece_word_spans

LABEL = "OPUS-MT"  # how the model list names this family

CONFIG, SOURCE_SPM, TARGET_SPM, VOCAB, TARGET_VOCAB = ("config.json", "source.spm", "target.spm", "vocab.json",
                                                       "target_vocab.json")
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
SMALL_FILES = [CONFIG, SOURCE_SPM, TARGET_SPM, VOCAB, TARGET_VOCAB, "tokenizer_config.json", "generation_config.json"]
# Hugging Face's activation names -> ours
ACTIVATIONS = {"swish": "silu", "silu": "silu", "relu": "relu", "gelu": "gelu", "gelu_new": "gelu_tanh",
               "gelu_pytorch_tanh": "gelu_tanh"}
HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*$")
LANG_CODE = re.compile(r"^>>[^<>]+<<")  # multilingual models' target-language prefix, e.g. >>fra<<


class MarianError(ValueError):
    """A Marian folder or Hub id that cannot be loaded, with a readable reason."""


LOAD_ERROR, NOUN = MarianError, "Marian model"  # what load raises, and how the registry names the source in it


def hf_model_type(path: Path) -> str | None:
    """The ``model_type`` of a Hugging Face config.json in ``path`` (None: none there, or one of ours)."""
    try:
        cfg = json.loads((Path(path) / CONFIG).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return str(cfg["model_type"]) if isinstance(cfg, dict) and "model_type" in cfg else None


def is_marian_folder(path: Path) -> bool:
    """Whether ``path`` holds a Hugging Face Marian config (as opposed to one of our checkpoints)."""
    return hf_model_type(path) == "marian"


def looks_like_hub_id(name: str) -> bool:
    """``owner/name`` that is no local path (nor inside a local folder such as ``checkpoints/``)."""
    name = str(name)
    return bool(HUB_ID.match(name)) and not Path(name).exists() and not Path(name.split("/")[0]).exists()


class HubPieceVocab(SubwordVocab):
    """A Hub tokenizer's SentencePiece model for the pieces and its vocab.json for the ids (a piece not in
    vocab.json is ``<unk>``, as the Hub tokenizers do). A word starts at a piece marked ``▁``, as in our
    subword models; a special is its own word. Marian's and M2M100's vocabularies differ only in their
    specials and in how a sentence starts."""

    kind = "subword"

    def __init__(self, itos: list[str], proto: bytes, model_type: str, specials):
        import sentencepiece as spm
        self.proto, self.model_type = bytes(proto), model_type
        self.sp = spm.SentencePieceProcessor(model_proto=self.proto)
        self.itos = list(itos)
        self.stoi = {t: i for i, t in enumerate(self.itos)}
        self.specials = frozenset(specials)
        self.unk_id = self.stoi["<unk>"]

    def is_special(self, token: str) -> bool:
        return token in self.specials

    def encode(self, tokens: list[str]) -> list[int]:
        return [self.stoi.get(t, self.unk_id) for t in tokens]

    def decode(self, ids) -> list[str]:
        return [self.itos[i] if 0 <= i < len(self.itos) else "<unk>" for i in ids]

    def word_spans(self, tokens: list[str]) -> list[list[int]]:
        """Token indices of each word. Text without spaces (Chinese) has no ``▁`` inside a run of
        characters: there a word is a piece."""
        return piece_word_spans(tokens, self.is_special)

    def _text(self, pieces: list[str]) -> str:
        # as the Hub tokenizers: a piece this side's model does not know (Marian's shared vocabulary holds
        # the other side's too) comes back as it is, so its ▁ is turned into a space afterwards
        return self.sp.decode_pieces(pieces).replace(WORD_START, " ").strip()

    def join(self, tokens: list[str]) -> list[str]:
        return [tokens[s[0]] if tokens[s[0]] in self.specials else self._text([tokens[i] for i in s])
                for s in self.word_spans(tokens)]

    def to_text(self, tokens: list[str], lang: str = "") -> str:
        """The detokenized text: SentencePiece's own decoding of the pieces, specials dropped."""
        return self._text([t for t in tokens if t not in self.specials])


class MarianVocab(HubPieceVocab):
    """One side of Marian's tokenizer: its own SentencePiece model (source.spm or target.spm) for the
    pieces, and the vocab.json shared by both sides for the ids (as MarianTokenizer does). A leading
    >>lang<< code is a special."""

    def __init__(self, itos: list[str], proto: bytes, specials=("</s>", "<unk>", "<pad>")):
        super().__init__(itos, proto, "marian", specials)

    def is_special(self, token: str) -> bool:
        return token in self.specials or bool(LANG_CODE.match(token))

    def tokens(self, text: str, lang: str = "") -> list[str]:
        """The pieces of raw ``text`` (no spaCy): a leading >>lang<< code is kept as one token."""
        code = LANG_CODE.match(text)
        head = [code.group(0)] if code else []
        return head + self.sp.encode(text[code.end():] if code else text, out_type=str)

    def segment(self, words: list[str]) -> list[str]:
        return self.tokens(" ".join(words))

    def to_json(self) -> dict:
        return {"kind": "marian", "size": len(self)}

    def __eq__(self, other) -> bool:
        return isinstance(other, MarianVocab) and self.proto == other.proto and self.itos == other.itos


@dataclass
class MarianModel:
    """What a Marian folder converts into: our network, both vocabularies, the languages, the folder."""
    model: Transformer
    src_vocab: MarianVocab
    tgt_vocab: MarianVocab
    src_lang: str
    tgt_lang: str
    path: Path
    meta: dict


def side_shapes(hf: dict) -> dict:
    """Depth, heads and feed-forward width of each side, as TransformerConfig's keywords (the decoder's
    own fields stay None where they equal the encoder's, so a symmetric model's config reads as before).
    Raises KeyError/TypeError/ValueError on a config without them."""
    heads, ffn = int(hf["encoder_attention_heads"]), int(hf["encoder_ffn_dim"])
    dec_heads, dec_ffn = int(hf["decoder_attention_heads"]), int(hf["decoder_ffn_dim"])
    d = int(hf["d_model"])
    for side, h in (("encoder", heads), ("decoder", dec_heads)):
        if h < 1 or d % h:
            raise ValueError(f"d_model {d} does not split into {h} {side} attention heads")
    return {"n_heads": heads, "n_decoder_heads": None if dec_heads == heads else dec_heads,
            "n_encoder_layers": int(hf["encoder_layers"]), "n_decoder_layers": int(hf["decoder_layers"]),
            "d_ff": ffn, "d_ff_decoder": None if dec_ffn == ffn else dec_ffn}


def marian_config(hf: dict) -> TransformerConfig:
    """Our frozen config for a Hugging Face MarianConfig (as read from config.json)."""
    act = hf.get("activation_function", "gelu")
    if act not in ACTIVATIONS:
        raise MarianError(f"unknown activation {act!r} in {CONFIG}; supported: {', '.join(sorted(ACTIVATIONS))}")
    vocab = int(hf["vocab_size"])
    shared = bool(hf.get("share_encoder_decoder_embeddings", True))
    pad = int(hf.get("pad_token_id", vocab - 1))
    try:
        return TransformerConfig(
            src_vocab_size=vocab, tgt_vocab_size=vocab if shared else int(hf.get("decoder_vocab_size") or vocab),
            d_model=int(hf["d_model"]), **side_shapes(hf), dropout=float(hf.get("dropout", 0.1)),
            attn_dropout=float(hf.get("attention_dropout", 0.0)), max_len=int(hf.get("max_position_embeddings", 512)),
            tie_embeddings=bool(hf.get("tie_word_embeddings", True)), share_embeddings=shared, pad_id=pad,
            norm_first=False, activation=ACTIVATIONS[act], pos_layout="halves", final_norm=False, logits_bias=True,
            embed_scale=None if hf.get("scale_embedding", False) else 1.0,
            decoder_start_id=int(hf.get("decoder_start_token_id", pad)), eos_id=int(hf.get("eos_token_id", 0)),
            src_bos_id=None)
    except (KeyError, TypeError, ValueError) as e:
        raise MarianError(f"{CONFIG} is not a complete Marian config ({type(e).__name__}: {e})") from None


_LAYER_RENAMES = (("self_attn_layer_norm", "norm_1"), ("encoder_attn_layer_norm", "norm_2"),
                  ("encoder_attn.", "cross_attn."), ("out_proj", "w_o"), ("q_proj", "w_q"),
                  ("fc1", "ff.w_1"), ("fc2", "ff.w_2"))


def convert_state_dict(hf_state: dict[str, torch.Tensor], cfg: TransformerConfig) -> dict[str, torch.Tensor]:
    """Hugging Face Marian tensor names -> ours. K and V projections become one ``w_kv``; the static
    position tables are dropped (we compute the same table); tied tensors are left to the model."""
    sd = {k.removeprefix("model."): v for k, v in hf_state.items()}
    out: dict[str, torch.Tensor] = {}
    emb = sd.get("shared.weight", sd.get("encoder.embed_tokens.weight"))
    if emb is None:
        raise MarianError("the weights hold no token embedding (shared.weight)")
    if cfg.share_embeddings:  # the encoder's embedding is the decoder's (tied in the model)
        out["decoder.tok_embed.weight"] = emb
    else:
        out["encoder.tok_embed.weight"], out["decoder.tok_embed.weight"] = emb, sd["decoder.embed_tokens.weight"]
    if not cfg.tie_embeddings:
        out["generator.weight"] = sd["lm_head.weight"]
    bias = sd.get("final_logits_bias")
    out["generator.bias"] = torch.zeros(cfg.tgt_vocab_size) if bias is None else bias.reshape(-1)
    for stack, n in (("encoder", cfg.n_encoder_layers), ("decoder", cfg.n_decoder_layers)):
        final = "norm_2" if stack == "encoder" else "norm_3"
        for i in range(n):
            p = f"{stack}.layers.{i}."
            for attn in ("self_attn", "encoder_attn") if stack == "decoder" else ("self_attn",):
                for part in ("weight", "bias"):
                    out[_rename(p + f"{attn}.kv.{part}")] = torch.cat(
                        [sd[p + f"{attn}.k_proj.{part}"], sd[p + f"{attn}.v_proj.{part}"]], 0)
            for k, v in sd.items():
                if k.startswith(p) and not re.search(r"\.(k|v)_proj\.", k):
                    out[_rename(k).replace("final_layer_norm", final)] = v
    return {k: v.float() for k, v in out.items()}


def _rename(key: str) -> str:
    for a, b in _LAYER_RENAMES:
        key = key.replace(a, b)
    return key.replace(".kv.", ".w_kv.")


def read_weights(folder: Path) -> dict[str, torch.Tensor]:
    """model.safetensors, else pytorch_model.bin read with ``weights_only=True`` (no code runs)."""
    st, pt = folder / WEIGHT_FILES[0], folder / WEIGHT_FILES[1]
    try:
        if st.is_file():
            from safetensors.torch import load_file
            return load_file(str(st))
        if pt.is_file():
            return torch.load(str(pt), map_location="cpu", weights_only=True)
    except Exception as e:  # safetensors, pickle and zip each raise their own kind for a cut file
        name = st.name if st.is_file() else pt.name
        why = " ".join(str(e).split())[:200]
        raise MarianError(f"{name} is corrupt or truncated ({type(e).__name__}: {why})") from None
    raise MarianError(f"no weights: neither {WEIGHT_FILES[0]} nor {WEIGHT_FILES[1]}")


def _read_itos(path: Path, size: int) -> list[str]:
    try:
        stoi = json.loads(path.read_text(encoding="utf-8"))
        itos = [""] * size
        for tok, i in stoi.items():
            itos[int(i)] = tok
    except (OSError, ValueError, TypeError, IndexError) as e:
        raise MarianError(f"{path.name} is not a vocabulary of {size} ids ({type(e).__name__}: {e})") from None
    for name in ("<unk>", "</s>"):
        if name not in stoi:
            raise MarianError(f"{path.name} has no {name} token")
    return [t or f"<unused{i}>" for i, t in enumerate(itos)]


def read_vocabs(folder: Path, cfg: TransformerConfig) -> tuple[MarianVocab, MarianVocab]:
    for name in (SOURCE_SPM, TARGET_SPM, VOCAB):
        if not (folder / name).is_file():
            raise MarianError(f"{name} is missing (a Marian folder needs {SOURCE_SPM}, {TARGET_SPM} and {VOCAB})")
    src_itos = _read_itos(folder / VOCAB, cfg.src_vocab_size)
    tgt_itos = src_itos if cfg.share_embeddings else _read_itos(folder / TARGET_VOCAB, cfg.tgt_vocab_size)
    try:
        return (MarianVocab(src_itos, (folder / SOURCE_SPM).read_bytes()),
                MarianVocab(tgt_itos, (folder / TARGET_SPM).read_bytes()))
    except RuntimeError as e:
        raise MarianError(f"a .spm file is not a SentencePiece model ({e})") from None


def languages(folder: Path, name: str) -> tuple[str, str]:
    """(source, target) language codes: tokenizer_config.json's, else the name's ``...-de-en`` ending."""
    try:
        tok = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
        if tok.get("source_lang") and tok.get("target_lang"):
            return str(tok["source_lang"]), str(tok["target_lang"])
    except (OSError, ValueError, AttributeError):
        pass
    m = re.search(r"([a-z]{2,3}(?:_[a-z]+)?)-([a-z]{2,3}(?:_[a-z]+)?)$", name.rstrip("/").split("/")[-1])
    return (m.group(1), m.group(2)) if m else ("src", "tgt")


def download(repo_id: str) -> Path:
    """A Hub model's snapshot in huggingface_hub's cache (only the files a Marian model needs; the
    safetensors weights when the repository has them, else pytorch_model.bin). Honours HF_HUB_OFFLINE,
    HF_ENDPOINT and HF_HUB_CACHE."""
    from huggingface_hub import snapshot_download
    try:
        folder = Path(snapshot_download(repo_id, allow_patterns=SMALL_FILES + [WEIGHT_FILES[0]]))
        if not any((folder / w).is_file() for w in WEIGHT_FILES):
            folder = Path(snapshot_download(repo_id, allow_patterns=SMALL_FILES + [WEIGHT_FILES[1]]))
    except Exception as e:  # offline, unknown repository, HTTP errors: huggingface_hub has many kinds
        why = " ".join(str(e).split())[:300]
        raise MarianError(f"could not fetch {repo_id!r} from the Hugging Face Hub ({type(e).__name__}: {why})") \
            from None
    return folder


def load_marian(source, device: str | torch.device = "cpu") -> MarianModel:
    """Convert a Marian folder, or a Hub id, into our network and vocabularies (fp32, eval mode)."""
    folder = Path(source)
    if not folder.is_dir():
        if not looks_like_hub_id(str(source)):
            raise MarianError(f"folder not found, and not a Hub id: {source}")
        folder = download(str(source))
    if not is_marian_folder(folder):
        found = f"model_type {hf_model_type(folder)!r}" if hf_model_type(folder) else f"no model_type in {CONFIG}"
        raise MarianError(f"{folder} is not a Marian model ({found}; OPUS-MT folders have 'marian')")
    hf = json.loads((folder / CONFIG).read_text(encoding="utf-8"))
    cfg = marian_config(hf)
    src_vocab, tgt_vocab = read_vocabs(folder, cfg)
    try:
        state = convert_state_dict(read_weights(folder), cfg)
    except KeyError as e:
        raise MarianError(f"the weights do not match {CONFIG} (no tensor {e})") from None
    model = Transformer(cfg)
    expected = set(model.state_dict()) - tied_keys(cfg)
    missing, unexpected = expected - set(state), set(state) - expected
    if missing or unexpected:
        raise MarianError(f"the weights do not match {CONFIG} (missing {sorted(missing)[:3]}, "
                          f"unexpected {sorted(unexpected)[:3]})")
    try:
        model.load_state_dict(state, strict=False)
    except RuntimeError as e:
        raise MarianError(f"the weights do not match {CONFIG} ({' '.join(str(e).split())[:300]})") from None
    src_lang, tgt_lang = languages(folder, str(source))
    meta = {"format": "marian", "source": str(source), "activation": hf.get("activation_function")}
    return MarianModel(model.to(device).eval(), src_vocab, tgt_vocab, src_lang, tgt_lang, folder, meta)


def claims(source) -> bool:
    """Whether ``source`` is for this family: a folder with a Hugging Face config (the loader names a
    model_type it cannot read), or a Hub id."""
    path = Path(str(source))
    return bool(hf_model_type(path)) or (not path.is_dir() and looks_like_hub_id(str(source)))


def owns(lm: LoadedModel) -> bool:
    """Whether ``lm`` was converted from a Marian checkpoint."""
    return lm.meta.get("format") == "marian"


def load(source, device: str | torch.device = "cpu") -> LoadedModel:
    """:func:`load_marian` as the engine's :class:`LoadedModel` (no model card)."""
    m = load_marian(source, device)
    return LoadedModel(m.model, m.src_vocab, m.tgt_vocab, m.src_lang, m.tgt_lang, m.path, m.meta, {})
