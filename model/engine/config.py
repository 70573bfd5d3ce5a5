"""The frozen shape of a network (``TransformerConfig``), the special token ids, and the
interventions a run may apply: what travels with the weights and what the engine checks on load."""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import torch
import torch.nn.functional as F

from .names import Kind

PAD_ID, UNK_ID, BOS_ID, EOS_ID = 1, 0, 2, 3


def _gelu_tanh(x: torch.Tensor) -> torch.Tensor:  # a named function: modules holding it stay picklable
    return F.gelu(x, approximate="tanh")


ACTIVATIONS = {"relu": F.relu, "silu": F.silu, "gelu": F.gelu, "gelu_tanh": _gelu_tanh}
POS_LAYOUTS = ("interleaved", "halves", "fairseq")


class PreNormOnly(ValueError):
    """An analysis that is derived for pre-norm models was asked of a post-norm one."""


def require_pre_norm(cfg: "TransformerConfig", what: str) -> None:
    """Raise :class:`PreNormOnly` when ``what`` would give a wrong number for this model."""
    if not cfg.norm_first:
        raise PreNormOnly(f"{what} is derived for pre-norm models; this model normalises after each "
                          f"sublayer (post-norm), so it does not apply")


@dataclass(frozen=True)
class TransformerConfig:
    src_vocab_size: int
    tgt_vocab_size: int
    d_model: int = 256
    n_heads: int = 8                    # the encoder's heads per layer (and the decoder's, unless set below)
    n_encoder_layers: int = 3
    n_decoder_layers: int = 3
    d_ff: int = 512                     # the encoder's feed-forward width (and the decoder's, unless set below)
    dropout: float = 0.1
    attn_dropout: float = 0.1
    max_len: int = 256
    tie_embeddings: bool = True  # decoder input embedding == generator weight
    share_embeddings: bool = False  # encoder embedding == decoder embedding (one joint vocabulary)
    pad_id: int = PAD_ID
    # the shape of the network; every default is our own pre-norm model
    norm_first: bool = True          # LayerNorm before each sublayer (pre-norm); False: after each residual add
    activation: str = "relu"         # the feed-forward non-linearity: one of ACTIVATIONS
    pos_layout: str = "interleaved"  # sinusoids: "interleaved" (sin, cos, sin, ...), "halves" (all sin, then cos)
    #                                  or "fairseq" (sin then cos, M2M100/NLLB's frequencies)
    pos_offset: int = 0               # position t reads row t + pos_offset of the table (M2M100: padding_idx + 1)
    final_norm: bool = True          # a LayerNorm after each stack's last layer
    logits_bias: bool = False        # a bias added to the generator's output
    embed_scale: float | None = None  # token embeddings are multiplied by this; None = sqrt(d_model)
    norm_eps: float = 1e-5
    # the special tokens decoding uses
    decoder_start_id: int = BOS_ID   # the decoder's first input
    eos_id: int = EOS_ID
    src_bos_id: int | None = BOS_ID  # put before the source (None: the source is its tokens then <eos>)
    # a decoder shaped unlike the encoder (distilled students; Marian, M2M100 and NLLB configs allow it);
    # None = as the encoder. Last, so that positional construction keeps its meaning.
    n_decoder_heads: int | None = None
    d_ff_decoder: int | None = None

    def __post_init__(self):
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"unknown activation {self.activation!r}; expected one of {sorted(ACTIVATIONS)}")
        if self.pos_layout not in POS_LAYOUTS:
            raise ValueError(f"unknown positional layout {self.pos_layout!r}; expected one of {POS_LAYOUTS}")

    @property
    def encoder_heads(self) -> int:
        return self.n_heads

    @property
    def decoder_heads(self) -> int:
        """Heads per layer of the decoder's self- and cross-attention."""
        return self.n_heads if self.n_decoder_heads is None else int(self.n_decoder_heads)

    @property
    def decoder_ff(self) -> int:
        return self.d_ff if self.d_ff_decoder is None else int(self.d_ff_decoder)

    def heads(self, kind: "Kind | str") -> int:
        """Heads per layer of one attention kind (encoder self, decoder self or cross)."""
        return self.encoder_heads if Kind.of(kind) == Kind.ENC_SELF else self.decoder_heads

    def layers(self, kind: "Kind | str") -> int:
        """Layers holding one attention kind."""
        return self.n_encoder_layers if Kind.of(kind) == Kind.ENC_SELF else self.n_decoder_layers

    @property
    def max_heads(self) -> int:
        return max(self.encoder_heads, self.decoder_heads)

    @property
    def symmetric(self) -> bool:
        """Whether encoder and decoder have the same depth, heads and feed-forward width."""
        return (self.n_encoder_layers, self.encoder_heads, self.d_ff) == \
            (self.n_decoder_layers, self.decoder_heads, self.decoder_ff)

    @property
    def pre_norm(self) -> bool:
        """Whether the residual stream is a plain sum of what each sublayer adds (pre-norm). When False,
        the residual decomposition, ALTI+ and the norm-based attribution read each term through the
        LayerNorm after the add (model/analysis/postnorm.py)."""
        return self.norm_first

    @property
    def token_scale(self) -> float:
        return math.sqrt(self.d_model) if self.embed_scale is None else float(self.embed_scale)

    @property
    def never_generated(self) -> tuple[int, ...]:
        """Ids decoding never chooses as a next token: the decoder's start token and <pad> (but never <eos>:
        M2M100 and NLLB start decoding with </s>, which also ends a sentence)."""
        return tuple(sorted({self.decoder_start_id, self.pad_id} - {self.eos_id}))

    def n_layers(self, part: "Kind | str") -> int:
        """How many layers the stack of ``part`` has: ``"encoder"``, ``"decoder"`` or an attention
        :class:`Kind` (cross-attention lives in the decoder)."""
        stack = part.stack if isinstance(part, Kind) else part
        if stack not in ("encoder", "decoder"):
            raise ValueError(f"unknown part {part!r}; expected 'encoder', 'decoder' or an attention kind")
        return self.n_encoder_layers if stack == "encoder" else self.n_decoder_layers

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "TransformerConfig":
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in d.items() if k in known})


@dataclass(frozen=True)
class Interventions:
    """Changes to the real computation. The default changes nothing."""

    src_padding_mask: bool = True   # False: source <pad> keys become visible
    causal_mask: bool = True        # False: decoder positions see later positions
    positional_encoding: bool = True  # False: nothing is added to the token embeddings
    ablate_heads: frozenset = field(default_factory=frozenset)  # {(kind, layer, head)}: output zeroed
    ablate_src_tokens: frozenset = field(default_factory=frozenset)  # source positions hidden as keys

    def __post_init__(self):
        heads = frozenset((Kind.of(k), int(l), int(h)) for k, l, h in self.ablate_heads)
        object.__setattr__(self, "ablate_heads", heads)
        object.__setattr__(self, "ablate_src_tokens", frozenset(int(i) for i in self.ablate_src_tokens))

    def heads(self, kind: str, layer: int) -> tuple[int, ...]:
        if not self.ablate_heads:  # the usual case, asked once per layer per decode step
            return ()
        return tuple(sorted(h for k, l, h in self.ablate_heads if k == kind and l == layer))

    @property
    def is_default(self) -> bool:
        return self == Interventions()


NO_INTERVENTION = Interventions()
