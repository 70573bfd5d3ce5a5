"""The models a server offers: its own checkpoints (loaded at start and kept) and added ones (Marian
folders or Hub ids, loaded on first use and evicted least recently used first).

``describe`` reads what a model is without loading its weights (the config, the tokenizer files, the
weight file's index), so that a bad folder is reported at start-up by name and a good one can be
listed with its languages and size before anyone uses it. ``ModelStore`` is the registry's ``models``
mapping: reading ``store[name]`` loads an added model if it is not loaded yet.
"""
from __future__ import annotations

import json
import math
import re
import struct
import threading
import zipfile
from collections import OrderedDict
from collections.abc import MutableMapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

import torch

from model.engine.config import TransformerConfig
from model.engine.loaded import LoadedModel
from model.engine.transformer import Transformer

from . import detect, family_of, load_checked, m2m100, marian
from .marian import (CONFIG, SMALL_FILES, WEIGHT_FILES, MarianError, hf_model_type, is_marian_folder, languages,
                     looks_like_hub_id, marian_config, read_vocabs)
from .m2m100 import M2M100Error, default_pair, m2m100_config, read_vocab, with_languages
from .m2m100 import download as m2m_download
from .ours import CheckpointError, Registry


@dataclass(frozen=True)
class ModelInfo:
    """What the model list says about a model, known without loading it."""
    key: str             # stable: our direction name, an added folder's name, or the Hub id
    source: str          # what loads it: a folder or a Hub id
    src_lang: str
    tgt_lang: str
    family: str          # the family's LABEL: "ours" or "OPUS-MT"
    parameters: int
    cfg: TransformerConfig
    pinned: bool = True  # loaded at start and never evicted
    listed: bool = True  # named by the owner (not by a visitor's request)
    languages: tuple[str, ...] = ()  # a many-to-many model's languages: it translates between any two
    base: str | None = None          # a language pair of a many-to-many model: that model's key

    @classmethod
    def of_loaded(cls, key: str, lm: LoadedModel) -> "ModelInfo":
        return cls(key, str(lm.path or key), lm.src_lang, lm.tgt_lang, _label(lm), lm.model.num_parameters(),
                   lm.model.cfg, languages=tuple(getattr(lm.src_vocab, "languages", ())))

    @property
    def many_to_many(self) -> bool:
        return len(self.languages) > 1


FAMILY_NAMES = {"m2m100": "M2M100", "nllb": "NLLB-200"}  # the M2M100 family's two vocabularies
PAIR_SEP = "@"  # "nllb-200@deu_Latn-fra_Latn": a many-to-many model under one language pair (link and API key)


def _label(lm: LoadedModel) -> str:
    return FAMILY_NAMES.get(lm.meta.get("format"), family_of(lm).LABEL)


def pair_name(base: str, src: str, tgt: str) -> str:
    return f"{base}{PAIR_SEP}{src}-{tgt}"


def split_pair(name: str) -> tuple[str, str, str] | None:
    """(base key, source, target) of a pair name, else None. Language codes hold no '-' (de, deu_Latn)."""
    base, sep, pair = str(name).rpartition(PAIR_SEP)
    src, dash, tgt = pair.partition("-")
    return (base, src, tgt) if sep and base and dash and src and tgt and src != tgt else None


def parameter_count(cfg: TransformerConfig) -> int:
    """The network's parameter count, built on the meta device (no memory, no weights read)."""
    with torch.device("meta"):
        return Transformer(cfg).num_parameters()


def _check_weights(folder: Path) -> None:
    """The weight file is whole, judged by its own index (no tensor is read): safetensors' header gives
    every tensor's byte range; a zip (pytorch_model.bin) keeps its directory at the end of the file."""
    st, pt = folder / WEIGHT_FILES[0], folder / WEIGHT_FILES[1]
    if st.is_file():
        size = st.stat().st_size
        try:
            with open(st, "rb") as f:
                n = struct.unpack("<Q", f.read(8))[0]
                if n > size - 8:
                    raise ValueError("header runs past the end of the file")
                header = json.loads(f.read(n))
            end = max((v["data_offsets"][1] for k, v in header.items() if k != "__metadata__"), default=0)
        except (struct.error, ValueError, KeyError, TypeError) as e:
            raise MarianError(f"{st.name} is corrupt or truncated ({e})") from None
        if 8 + n + end > size:
            raise MarianError(f"{st.name} is corrupt or truncated ({size:,} bytes, its index needs {8 + n + end:,})")
    elif pt.is_file():
        try:
            zipfile.ZipFile(pt).close()
        except (zipfile.BadZipFile, OSError) as e:
            raise MarianError(f"{pt.name} is corrupt or truncated ({e})") from None
    else:
        raise MarianError(f"no weights: neither {WEIGHT_FILES[0]} nor {WEIGHT_FILES[1]}")


def _hub_small_files(repo_id: str) -> Path:
    """The Hub model's config and tokenizer files in huggingface_hub's cache (the weights come on first use)."""
    from huggingface_hub import snapshot_download
    try:
        return Path(snapshot_download(repo_id, allow_patterns=SMALL_FILES))
    except Exception as e:  # offline, unknown repository, HTTP errors: huggingface_hub has many kinds
        why = " ".join(str(e).split())[:300]
        raise MarianError(f"could not fetch {repo_id!r} from the Hugging Face Hub ({type(e).__name__}: {why})") \
            from None


def _describe_m2m100(source: str, key: str | None, listed: bool) -> ModelInfo:
    """An M2M100 / NLLB folder or Hub id described without loading its weights."""
    folder = Path(source)
    try:
        hub = not folder.is_dir()
        folder = m2m_download(source) if hub else folder
        cfg = m2m100_config(json.loads((folder / CONFIG).read_text(encoding="utf-8")))
        vocab = read_vocab(folder, cfg.tgt_vocab_size)
        if not hub:
            _check_weights(folder)
        src, tgt = default_pair(folder, vocab)
    except (M2M100Error, MarianError) as e:
        raise CheckpointError(f"model {source}: {e}") from None
    except (OSError, ValueError, TypeError, AssertionError, RuntimeError) as e:
        raise CheckpointError(f"model {source}: {type(e).__name__}: {' '.join(str(e).split())[:200]}") from None
    return ModelInfo(key or model_key(source), source, src, tgt, FAMILY_NAMES[vocab.family], parameter_count(cfg),
                     cfg, pinned=False, listed=listed, languages=tuple(vocab.languages))


def describe(source: str, key: str | None = None, listed: bool = True) -> ModelInfo:
    """A Marian or M2M100/NLLB folder or Hub id checked and described without loading its weights. Raises
    :class:`CheckpointError` with the reason (not Marian, a tokenizer file missing, an unknown
    activation, a cut weight file, a Hub id that cannot be fetched)."""
    source = str(source).strip()
    if detect(source) is m2m100:
        return _describe_m2m100(source, key, listed)
    folder, hub = Path(source), False
    try:
        if not folder.is_dir():
            if not looks_like_hub_id(source):
                raise MarianError("folder not found, and not a Hub id (owner/name)")
            folder, hub = _hub_small_files(source), True
        if not is_marian_folder(folder):
            found = f"model_type {hf_model_type(folder)!r}" if hf_model_type(folder) else f"no model_type in {CONFIG}"
            raise MarianError(f"not a Marian model ({found}; OPUS-MT folders have 'marian')")
        cfg = marian_config(json.loads((folder / CONFIG).read_text(encoding="utf-8")))
        read_vocabs(folder, cfg)
        if not hub:  # a Hub model's weights are fetched on first use
            _check_weights(folder)
        n = parameter_count(cfg)
    except MarianError as e:
        raise CheckpointError(f"model {source}: {e}") from None
    except (OSError, ValueError, TypeError, AssertionError, RuntimeError) as e:
        raise CheckpointError(f"model {source}: {type(e).__name__}: {' '.join(str(e).split())[:200]}") from None
    src, tgt = languages(folder, source)
    return ModelInfo(key or model_key(source), source, src, tgt, marian.LABEL, n, cfg, pinned=False, listed=listed)


def model_key(source: str) -> str:
    """The name links and the API use for an added model: the Hub id as written, or the folder's name."""
    source = str(source).strip().rstrip("/")
    return source if not Path(source).is_dir() and looks_like_hub_id(source) else Path(source).name


class ModelStore(MutableMapping):
    """name -> LoadedModel. Pinned models are loaded once and stay; the others load on first access,
    and past ``max_loaded`` of them the least recently used is dropped (the next access loads it again).
    A model that failed to load says why on every later access, without trying again."""

    def __init__(self, loader: Callable[[ModelInfo], LoadedModel], max_loaded: int = 2):
        self.loader, self.max_loaded = loader, max(1, int(max_loaded))
        self.infos: dict[str, ModelInfo] = {}
        self.failed: dict[str, str] = {}
        self._loaded: OrderedDict[str, LoadedModel] = OrderedDict()
        self._lock = threading.RLock()

    def __getitem__(self, name: str) -> LoadedModel:
        with self._lock:
            base = self.infos[name].base if name in self.infos else None
            if base is not None:  # a language pair: the base model (loaded, or loaded now) under it, weights shared
                info = self.infos[name]
                return with_languages(self[base], info.src_lang, info.tgt_lang)
            if name in self._loaded:
                self._loaded.move_to_end(name)
                return self._loaded[name]
            if name not in self.infos:
                raise KeyError(name)
            if name in self.failed:
                raise CheckpointError(self.failed[name])
            try:
                lm = self.loader(self.infos[name])
            except CheckpointError as e:
                self.failed[name] = str(e)
                raise
            self._loaded[name] = lm
            self._evict()
            return lm

    def _evict(self) -> None:
        added = [k for k in self._loaded if not self.infos[k].pinned]
        for k in added[: max(0, len(added) - self.max_loaded)]:
            del self._loaded[k]

    def __setitem__(self, name: str, lm: LoadedModel) -> None:
        """A model loaded by the caller: pinned."""
        with self._lock:
            self.infos[name] = ModelInfo.of_loaded(name, lm)
            self._loaded[name] = lm

    def __delitem__(self, name: str) -> None:
        with self._lock:
            self.infos.pop(name)
            self._loaded.pop(name, None)

    def __iter__(self):
        return iter(list(self.infos))

    def __len__(self) -> int:
        return len(self.infos)

    def __contains__(self, name) -> bool:
        return name in self.infos

    def add(self, info: ModelInfo) -> None:
        with self._lock:
            self.infos.setdefault(info.key, info)

    def is_loaded(self, name: str) -> bool:
        info = self.infos.get(name)
        return (info.base if info is not None and info.base else name) in self._loaded

    def offer_pair(self, name: str) -> bool:
        """Offer pair ``name`` (see :func:`pair_name`) of a many-to-many model this store offers: True when
        it is (now) offered, False when the name is no such pair."""
        parts = split_pair(name)
        with self._lock:
            if name in self.infos:
                return True
            base = self.infos.get(parts[0]) if parts else None
            if base is None or not base.many_to_many or not {parts[1], parts[2]} <= set(base.languages):
                return False
            self.infos[name] = replace(base, key=name, src_lang=parts[1], tgt_lang=parts[2], pinned=True,
                                       listed=False, base=base.key)
            return True

    def loaded(self) -> dict[str, LoadedModel]:
        """The models in memory now, without loading any (a language pair where its base model is)."""
        with self._lock:
            pairs = {k: with_languages(self._loaded[i.base], i.src_lang, i.tgt_lang)
                     for k, i in self.infos.items() if i.base and i.base in self._loaded}
            return {**self._loaded, **pairs}


def infos(reg: Registry) -> dict[str, ModelInfo]:
    """Every model the registry offers, loaded or not (a plain dict of models: each described as loaded)."""
    if isinstance(reg.models, ModelStore):
        return dict(reg.models.infos)
    return {k: ModelInfo.of_loaded(k, lm) for k, lm in reg.models.items()}


def loaded(reg: Registry) -> dict[str, LoadedModel]:
    return reg.models.loaded() if isinstance(reg.models, ModelStore) else dict(reg.models)


def is_loaded(reg: Registry, name: str) -> bool:
    return reg.models.is_loaded(name) if isinstance(reg.models, ModelStore) else name in reg.models


def offer_pair(reg: Registry, name: str) -> bool:
    """Whether ``name`` is a language pair of a many-to-many model ``reg`` offers (offered from now on)."""
    return isinstance(reg.models, ModelStore) and reg.models.offer_pair(name)


def pairs_of(reg: Registry, name: str) -> tuple[str, ...]:
    """The languages of ``name``'s many-to-many model (of its base, for a pair); () for a one-pair model."""
    info = infos(reg).get(name)
    return info.languages if info is not None else ()


def _loader(reg: Registry) -> Callable[[ModelInfo], LoadedModel]:
    def load(info: ModelInfo) -> LoadedModel:
        try:  # the finite-weights check every served model passes
            lm = load_checked(info.source)
        except CheckpointError as e:
            reg.problems.append(str(e))
            raise
        except Exception as e:  # anything else a broken folder can raise
            msg = f"model {info.source} could not be loaded ({type(e).__name__}: {' '.join(str(e).split())[:200]})"
            reg.problems.append(msg)
            raise CheckpointError(msg) from None
        reg.pe[info.key] = lm.model.encoder.pe.detach().cpu().numpy().copy()
        lm.model.to(reg.device)
        return lm
    return load


def add_model(reg: Registry, source: str, listed: bool = True) -> ModelInfo:
    """Describe ``source`` and offer it (loaded on first use). Raises CheckpointError."""
    store = reg.models
    key = model_key(source)
    if key in store.infos:
        if store.infos[key].source == str(source).strip():
            return store.infos[key]
        raise CheckpointError(f"model {source}: the name {key!r} is taken by another model")
    info = describe(source, key, listed)
    store.add(info)
    return info


def with_added_models(reg: Registry, sources, max_loaded: int = 2) -> Registry:
    """``reg`` (its own checkpoints, loaded and pinned) with ``sources`` offered beside them: each one
    described now, loaded on first use. A source that fails is skipped and its reason kept in problems."""
    store = ModelStore(_loader(reg), max_loaded)
    for name, lm in reg.models.items():
        store[name] = lm
    reg.models = store
    for source in sources:
        try:
            add_model(reg, source)
        except CheckpointError as e:
            reg.problems.append(f"{e}; skipped")
    return reg


def summaries(reg: Registry) -> dict[str, ModelSummary]:
    """Every offered model's summary: a loaded one's from the model (with its card's BLEU), the others'
    from their config."""
    now = loaded(reg)
    out = {}
    for key, i in infos(reg).items():
        c = i.cfg
        out[key] = summarize(now[key]) if key in now else ModelSummary(
            key, i.src_lang, i.tgt_lang, i.parameters, c.d_model, c.n_heads, c.d_ff, c.n_encoder_layers,
            c.n_decoder_layers, c.src_vocab_size, c.tgt_vocab_size, c.max_len, c.tie_embeddings, c.dropout, None, None,
            i.source, c.decoder_heads, c.decoder_ff)
    return out


# --------------------------------------------------------------------------- what the model list says

def _flatten(d, prefix: str = ""):
    if isinstance(d, dict):
        for k, v in d.items():
            yield from _flatten(v, f"{prefix}.{k}" if prefix else str(k))
    else:
        yield prefix, d


def headline_bleu(metrics: dict) -> tuple[float, str] | None:
    """The most telling BLEU in a model card's metrics: test over val, beam over greedy, lowercased."""
    best = None
    for path, value in _flatten(metrics or {}):
        p = path.lower()
        if "bleu" not in p or isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        if not math.isfinite(float(value)) or "signature" in p:
            continue
        score = ((8 if "test" in p else 0) + (4 if "beam" in p else 0) + (2 if "tokenized" in p else 0)
                 + (1 if ("lc" in p or "lower" in p) else 0) - (8 if "no_unk" in p else 0))
        if best is None or score > best[0]:
            best = (score, float(value), path)
    return (best[1], bleu_label(best[2])) if best else None


def bleu_label(path: str) -> str:
    """A metrics key such as ``bleu.test_2016_flickr.beam5.tokenized.bleu`` in words."""
    p = path.lower()
    split = "test" if "test" in p else "val" if "val" in p else ""
    beam = re.search(r"beam(\d+)", p)
    decoding = f"beam {beam.group(1)}" if beam else "greedy" if "greedy" in p else ""
    metric = ("tokenized lowercased" if "tokenized" in p else "lowercased" if ("lower" in p or "lc" in p)
              else "cased" if "cased" in p else "")
    return ", ".join(x for x in (split, decoding, metric) if x) or path


@dataclass(frozen=True)
class ModelSummary:
    """Size, shape and headline BLEU of a loaded model (the header, the About table, /models)."""
    name: str
    src_lang: str
    tgt_lang: str
    parameters: int
    d_model: int
    n_heads: int
    d_ff: int
    encoder_layers: int
    decoder_layers: int
    src_vocab: int
    tgt_vocab: int
    max_len: int
    tied_embeddings: bool
    dropout: float
    bleu: float | None
    bleu_source: str | None
    path: str | None
    decoder_heads: int | None = None  # where the decoder differs from the encoder (n_heads, d_ff)
    decoder_ff: int | None = None

    @property
    def heads_label(self) -> str:
        """'8', or 'encoder 8, decoder 4' for a model whose sides differ."""
        dec = self.decoder_heads
        return str(self.n_heads) if dec in (None, self.n_heads) else f"encoder {self.n_heads}, decoder {dec}"

    @property
    def ff_label(self) -> str:
        dec = self.decoder_ff
        return str(self.d_ff) if dec in (None, self.d_ff) else f"encoder {self.d_ff}, decoder {dec}"


def summarize(lm: LoadedModel) -> ModelSummary:
    cfg = lm.model.cfg
    bleu = headline_bleu(lm.metrics)
    return ModelSummary(lm.name, lm.src_lang, lm.tgt_lang, lm.model.num_parameters(), cfg.d_model, cfg.n_heads,
                        cfg.d_ff, cfg.n_encoder_layers, cfg.n_decoder_layers, cfg.src_vocab_size, cfg.tgt_vocab_size,
                        cfg.max_len, cfg.tie_embeddings, cfg.dropout, bleu[0] if bleu else None,
                        bleu[1] if bleu else None, str(lm.path) if lm.path else None, cfg.decoder_heads,
                        cfg.decoder_ff)


def device_label(device) -> str:
    device = torch.device(device)
    if device.type == "cuda":
        try:
            return f"GPU ({torch.cuda.get_device_name(device)})"
        except Exception:
            return "GPU"
    return "CPU"
