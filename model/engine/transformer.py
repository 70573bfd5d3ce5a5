"""The encoder-decoder Transformer (Vaswani et al. 2017), readable top to bottom.

One network, shaped by its frozen config: our own checkpoints are pre-norm (ReLU, interleaved
sinusoids, a final norm per stack); converted ones (Marian / OPUS-MT) are post-norm (SiLU, sin-then-cos
halves, no final norm, a logits bias, decoding starts with <pad>). The defaults are our own network.

Every number the app shows is captured from hook points inside this file:
``{encoder,decoder}.hook_embed`` / ``hook_pos`` and, for every attention module,
``hook_scores`` (scaled, before masking and softmax), ``hook_mask`` (the boolean
mask as applied, True = attend) and ``hook_pattern`` (after softmax, before dropout).

A KV-cached decode step with nothing hooked runs ``_decoder_layer_step`` instead of the
decoder layers' modules: the same arithmetic with less Python overhead per token.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .config import ACTIVATIONS, NO_INTERVENTION, Interventions, TransformerConfig
from .hooks import HookPoint, global_hooks
from .masks import causal_mask, padding_mask
from .names import ATTN_KINDS, CROSS, DEC_SELF, ENC_SELF, Kind  # noqa: F401 (importable here)


def sinusoidal_encoding(max_len: int, d_model: int, layout: str = "interleaved") -> torch.Tensor:
    """(max_len, d_model); even dimensions sin, odd dimensions cos (interleaved, as in the paper), or
    with ``layout="halves"`` the same frequencies as sin in the first half, cos in the second (Marian:
    computed in float64 as it does, so converted models see the very table they were trained with), or
    with ``layout="fairseq"`` sin then cos at frequencies 10000^(-j / (d/2 - 1)), in float32 (M2M100, NLLB)."""
    if layout == "fairseq":
        half = d_model // 2
        freq = torch.exp(torch.arange(half, dtype=torch.int64).float() * -(math.log(10000) / (half - 1)))
        angle = torch.arange(max_len, dtype=torch.int64).float()[:, None] * freq[None]
        pe = torch.cat([torch.sin(angle), torch.cos(angle)], 1)
        return torch.cat([pe, torch.zeros(max_len, 1)], 1) if d_model % 2 else pe
    if layout == "halves":
        pos = torch.arange(max_len, dtype=torch.float64)[:, None]
        j = torch.arange(d_model, dtype=torch.float64)
        angle = pos / torch.pow(torch.tensor(10000.0, dtype=torch.float64), 2 * torch.floor(j / 2) / d_model)
        return torch.cat([torch.sin(angle[:, 0::2]), torch.cos(angle[:, 1::2])], 1).float()
    pos = torch.arange(max_len, dtype=torch.float32)[:, None]
    div = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32) * (-math.log(10000.0) / d_model))
    pe = torch.zeros(max_len, d_model)
    pe[:, 0::2] = torch.sin(pos * div)
    pe[:, 1::2] = torch.cos(pos * div)[:, : d_model // 2]
    return pe


def _dropout(module: nn.Dropout, x: torch.Tensor) -> torch.Tensor:
    """nn.Dropout is the identity in eval(); skip the module call there (decoding calls it ~20x a step)."""
    return module(x) if module.training else x


def _split_heads(x: torch.Tensor, n_heads: int) -> torch.Tensor:  # (B, T, D) -> (B, H, T, d_k)
    B, T, D = x.shape
    return x.view(B, T, n_heads, D // n_heads).transpose(1, 2)


def _merge_heads(z: torch.Tensor) -> torch.Tensor:  # (B, H, T, d_k) -> (B, T, D)
    B, H, T, d_k = z.shape
    return z.transpose(1, 2).reshape(B, T, H * d_k)


def _attend(q, k, v, mask: torch.Tensor | None, dropout_p: float = 0.0) -> torch.Tensor:
    """Fused softmax(q k^T / sqrt(d_k)) v. mask: bool (B, 1, Tq, Tk), True = attend; None = all visible."""
    if mask is None:  # no mask to convert, combine or check
        return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p)
    row_ok = mask.any(-1, keepdim=True)  # a row with no visible key outputs zeros, never NaN
    z = F.scaled_dot_product_attention(q, k, v, attn_mask=mask | ~row_ok, dropout_p=dropout_p)
    return z * row_ok


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model: int, n_heads: int, attn_dropout: float, cross: bool = False):
        super().__init__()
        assert d_model % n_heads == 0
        self.n_heads, self.d_k, self.cross = n_heads, d_model // n_heads, cross
        self.attn_dropout = attn_dropout
        self.w_q = nn.Linear(d_model, d_model)
        self.w_kv = nn.Linear(d_model, 2 * d_model)
        self.w_o = nn.Linear(d_model, d_model)
        self.hook_q = HookPoint()       # (B, H, Tq, d_k) after W_Q
        self.hook_k = HookPoint()       # (B, H, Tk, d_k) after W_K (every cached key)
        self.hook_v = HookPoint()       # (B, H, Tk, d_k) after W_V
        self.hook_scores = HookPoint()
        self.hook_mask = HookPoint()
        self.hook_pattern = HookPoint()
        self.hook_z = HookPoint()       # (B, H, Tq, d_k) alpha V, before W_O
        # (B, Tq, H, D) each head's slice of W_O (no bias); opt-in: H times the module's output
        self.hook_result = HookPoint(opt_in=True)

    def forward(self, x, mask, memory=None, cache: dict | None = None, ablate: tuple[int, ...] = ()):
        """x: (B, Tq, D) queries; memory: (B, S, D) for cross-attention; mask: bool, True = attend,
        or None when every key is visible (then no mask work is done).

        ``cache`` (a dict) holds K/V: cross-attention projects memory once; self-attention
        appends the new positions' K/V each call.
        """
        H = self.n_heads
        q = _split_heads(self.w_q(x), H)
        if self.cross and cache is not None and "k" in cache:
            k, v = cache["k"], cache["v"]
        else:
            k, v = (_split_heads(t, H) for t in self.w_kv(memory if self.cross else x).chunk(2, dim=-1))
            if cache is not None:
                if not self.cross and "k" in cache:
                    k, v = torch.cat([cache["k"], k], 2), torch.cat([cache["v"], v], 2)
                cache["k"], cache["v"] = k, v
        q, k, v = self.hook_q(q), self.hook_k(k), self.hook_v(v)

        B, Tq, Tk = q.size(0), q.size(2), k.size(2)
        if self.hook_mask.active:  # a capture records the mask as applied: all True for None
            mask = torch.ones(1, 1, 1, 1, dtype=torch.bool, device=q.device) if mask is None else mask
            mask = self.hook_mask(mask.expand(B, 1, Tq, Tk))
        elif mask is not None:
            mask = mask.expand(B, 1, Tq, Tk)
        p = self.attn_dropout if self.training else 0.0
        if self.hook_scores.active or self.hook_pattern.active or self.hook_mask.active:
            # explicit path, so that scores and pattern exist to be captured
            scores = self.hook_scores(q @ k.transpose(-2, -1) / math.sqrt(self.d_k))
            if mask is None:
                pattern = scores.softmax(-1)
            else:
                pattern = scores.masked_fill(~mask, torch.finfo(scores.dtype).min).softmax(-1)
                pattern = pattern.masked_fill(~mask, 0.0)
            z = F.dropout(self.hook_pattern(pattern), p, self.training) @ v
        else:
            z = _attend(q, k, v, mask, p)
        if ablate:
            keep = torch.ones(H, device=z.device, dtype=z.dtype)
            keep[list(ablate)] = 0
            z = z * keep[None, :, None, None]
        z = self.hook_z(z)
        if self.hook_result.active:  # per-head outputs exist only when someone looks at them
            w = self.w_o.weight.view(-1, H, self.d_k)  # (D, H, d_k)
            result = self.hook_result(torch.einsum("bhtk,dhk->bthd", z, w))
            return result.sum(2) + self.w_o.bias
        return self.w_o(_merge_heads(z))


class FeedForward(nn.Module):
    def __init__(self, d_model: int, d_ff: int, dropout: float, activation: str = "relu"):
        super().__init__()
        self.w_1, self.w_2, self.dropout = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model), nn.Dropout(dropout)
        self.act = ACTIVATIONS[activation]
        # before / after the activation; opt-in: (B, T, d_ff), a third of a run's trace, and only the export reads them
        self.hook_pre, self.hook_post = HookPoint(opt_in=True), HookPoint(opt_in=True)

    def forward(self, x):
        return self.w_2(_dropout(self.dropout, self.hook_post(self.act(self.hook_pre(self.w_1(x))))))


def _sublayer(x, norm: nn.LayerNorm, fn, dropout: nn.Dropout, norm_first: bool):
    """One residual sublayer: pre-norm x + f(norm(x)), or post-norm norm(x + f(x)).

    For a post-norm model the residual hooks therefore see the normalised stream, which is what the
    next sublayer reads and adds to."""
    if norm_first:
        return x + _dropout(dropout, fn(norm(x)))
    return norm(x + _dropout(dropout, fn(x)))


def _layer_norms(cfg: TransformerConfig, n: int):
    return (nn.LayerNorm(cfg.d_model, eps=cfg.norm_eps) for _ in range(n))


class EncoderLayer(nn.Module):
    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        self.norm_first = cfg.norm_first
        self.self_attn = MultiHeadAttention(cfg.d_model, cfg.encoder_heads, cfg.attn_dropout)
        self.ff = FeedForward(cfg.d_model, cfg.d_ff, cfg.dropout, cfg.activation)
        self.norm_1, self.norm_2 = _layer_norms(cfg, 2)
        self.dropout = nn.Dropout(cfg.dropout)
        self.hook_resid_pre, self.hook_resid_mid, self.hook_resid_post = HookPoint(), HookPoint(), HookPoint()

    def forward(self, x, src_mask, ablate=()):
        x = self.hook_resid_pre(x)
        x = self.hook_resid_mid(_sublayer(x, self.norm_1, lambda h: self.self_attn(h, src_mask, ablate=ablate),
                                          self.dropout, self.norm_first))
        return self.hook_resid_post(_sublayer(x, self.norm_2, self.ff, self.dropout, self.norm_first))


class DecoderLayer(nn.Module):
    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        self.norm_first = cfg.norm_first
        self.self_attn = MultiHeadAttention(cfg.d_model, cfg.decoder_heads, cfg.attn_dropout)
        self.cross_attn = MultiHeadAttention(cfg.d_model, cfg.decoder_heads, cfg.attn_dropout, cross=True)
        self.ff = FeedForward(cfg.d_model, cfg.decoder_ff, cfg.dropout, cfg.activation)
        self.norm_1, self.norm_2, self.norm_3 = _layer_norms(cfg, 3)
        self.dropout = nn.Dropout(cfg.dropout)
        # resid_mid: after self-attention; resid_mid_cross: after cross-attention
        self.hook_resid_pre, self.hook_resid_mid = HookPoint(), HookPoint()
        self.hook_resid_mid_cross, self.hook_resid_post = HookPoint(), HookPoint()

    def forward(self, x, memory, src_mask, tgt_mask, cache=None, ablate_self=(), ablate_cross=()):
        self_cache, cross_cache = (None, None) if cache is None else (cache["self"], cache["cross"])
        x = self.hook_resid_pre(x)
        x = self.hook_resid_mid(_sublayer(x, self.norm_1, lambda h: self.self_attn(
            h, tgt_mask, cache=self_cache, ablate=ablate_self), self.dropout, self.norm_first))
        x = self.hook_resid_mid_cross(_sublayer(x, self.norm_2, lambda h: self.cross_attn(
            h, src_mask, memory=memory, cache=cross_cache, ablate=ablate_cross), self.dropout, self.norm_first))
        return self.hook_resid_post(_sublayer(x, self.norm_3, self.ff, self.dropout, self.norm_first))


def _step_weights(layer: DecoderLayer) -> dict:
    """A decoder layer's tensors by module name, as the arguments of F.linear / F.layer_norm."""
    w: dict = {"n_heads": layer.self_attn.n_heads, "norm_first": layer.norm_first, "act": layer.ff.act}
    for name, m in layer.named_modules():
        if isinstance(m, nn.Linear):
            w[name] = (m.weight, m.bias)
        elif isinstance(m, nn.LayerNorm):
            w[name] = (m.normalized_shape, m.weight, m.bias, m.eps)
    return w


def _decoder_layer_step(x, w: dict, cache: dict, memory, src_mask):
    """DecoderLayer.forward for one new position that sees every cached one (eval, nothing hooked).

    The same operations on the same tensors, written with F.* on the weights in ``w`` (gathered
    once per decode): at one token per step, nn.Module calls, attribute look-ups and reshapes
    cost more than the matmuls themselves. With one position, (B, 1, D) <-> (B, H, 1, d_k) are views.
    Pre-norm: x + f(norm(x)); post-norm: norm(x + f(x)), as in :func:`_sublayer`.
    """
    H, own, cross, pre = w["n_heads"], cache["self"], cache["cross"], w["norm_first"]
    B, D = x.size(0), x.size(2)
    h = F.layer_norm(x, *w["norm_1"]) if pre else x
    q = F.linear(h, *w["self_attn.w_q"]).view(B, H, 1, D // H)
    k, v = F.linear(h, *w["self_attn.w_kv"]).view(B, 2, H, 1, D // H).unbind(1)
    if "k" in own:
        k, v = torch.cat([own["k"], k], 2), torch.cat([own["v"], v], 2)
    own["k"], own["v"] = k, v
    x = x + F.linear(_attend(q, k, v, None).reshape(B, 1, D), *w["self_attn.w_o"])
    if not pre:
        x = F.layer_norm(x, *w["norm_1"])

    h = F.layer_norm(x, *w["norm_2"]) if pre else x
    q = F.linear(h, *w["cross_attn.w_q"]).view(B, H, 1, D // H)
    if "k" not in cross:
        cross["k"], cross["v"] = (_split_heads(t, H) for t in
                                  F.linear(memory, *w["cross_attn.w_kv"]).chunk(2, dim=-1))
    k, v = cross["k"], cross["v"]
    mask = None if src_mask is None else src_mask.expand(B, 1, 1, k.size(2))
    x = x + F.linear(_attend(q, k, v, mask).reshape(B, 1, D), *w["cross_attn.w_o"])
    if not pre:
        x = F.layer_norm(x, *w["norm_2"])

    h = F.layer_norm(x, *w["norm_3"]) if pre else x
    x = x + F.linear(w["act"](F.linear(h, *w["ff.w_1"])), *w["ff.w_2"])
    return x if pre else F.layer_norm(x, *w["norm_3"])


class _Stack(nn.Module):
    """Token embedding x scale (sqrt(d_model) by default) plus the sinusoidal encoding, then layers,
    then a final norm (the identity when the config has none)."""

    def __init__(self, vocab_size: int, cfg: TransformerConfig, layer_cls, n_layers: int):
        super().__init__()
        self.d_model, self.scale = cfg.d_model, cfg.token_scale
        self.tok_embed = nn.Embedding(vocab_size, cfg.d_model, padding_idx=cfg.pad_id)
        pe = sinusoidal_encoding(cfg.max_len + cfg.pos_offset, cfg.d_model, cfg.pos_layout)
        self.register_buffer("pe", pe[cfg.pos_offset:] if cfg.pos_offset else pe, persistent=False)
        self.hook_embed = HookPoint()  # scaled token embeddings
        self.hook_pos = HookPoint()    # the positional encoding that was added (zeros when switched off)
        self.dropout = nn.Dropout(cfg.dropout)
        self.layers = nn.ModuleList(layer_cls(cfg) for _ in range(n_layers))
        self.norm = nn.LayerNorm(cfg.d_model, eps=cfg.norm_eps) if cfg.final_norm else nn.Identity()
        self.hook_norm = HookPoint()  # the stack's output, after its final norm (if any)

    def embed(self, tokens: torch.Tensor, start_pos: int, use_pos: bool) -> torch.Tensor:
        x = self.hook_embed(self.tok_embed(tokens) * self.scale)
        T = tokens.size(1)
        if start_pos + T > self.pe.size(0):
            raise ValueError(f"sequence of {start_pos + T} positions exceeds max_len {self.pe.size(0)}")
        pe = self.pe[start_pos:start_pos + T][None].to(x.dtype)
        if not use_pos:
            pe = torch.zeros_like(pe)
        elif self.hook_pos.active:  # a capture keeps what it is given: never the buffer itself
            pe = pe.clone()
        pe = self.hook_pos(pe)
        return _dropout(self.dropout, x + pe)


class Encoder(_Stack):
    def __init__(self, cfg: TransformerConfig):
        super().__init__(cfg.src_vocab_size, cfg, EncoderLayer, cfg.n_encoder_layers)

    def forward(self, src, src_mask, iv: Interventions = NO_INTERVENTION):
        x = self.embed(src, 0, iv.positional_encoding)
        for i, layer in enumerate(self.layers):
            x = layer(x, src_mask, ablate=iv.heads(ENC_SELF, i))
        return self.hook_norm(self.norm(x))


class Decoder(_Stack):
    def __init__(self, cfg: TransformerConfig):
        super().__init__(cfg.tgt_vocab_size, cfg, DecoderLayer, cfg.n_decoder_layers)

    def forward(self, tgt, memory, src_mask, tgt_mask, iv: Interventions = NO_INTERVENTION,
                cache: "KVCache | None" = None, start_pos: int = 0):
        """Masks: bool, True = attend, or None = every key visible. With ``cache``, ``tgt`` holds only
        the new positions, ``start_pos`` is the first one's index."""
        x = self.embed(tgt, start_pos, iv.positional_encoding)
        if cache is not None and tgt_mask is None and tgt.size(1) == 1 and self._lean_step_allowed(iv, cache):
            # one greedy/beam step, nothing to capture: the lean per-layer step (same numbers)
            if cache.weights is None:
                cache.weights = [_step_weights(layer) for layer in self.layers]
            for w, layer_cache in zip(cache.weights, cache.layers):
                x = _decoder_layer_step(x, w, layer_cache, memory, src_mask)
            return self.hook_norm(self.norm(x))
        for i, layer in enumerate(self.layers):
            x = layer(x, memory, src_mask, tgt_mask, None if cache is None else cache.layers[i],
                      ablate_self=iv.heads(DEC_SELF, i), ablate_cross=iv.heads(CROSS, i))
        return self.hook_norm(self.norm(x))

    def _lean_step_allowed(self, iv: Interventions, cache: "KVCache") -> bool:
        """Whether _decoder_layer_step computes what the layers would: eval, no autograd, no
        ablated head, and no hook on any decoder module (a capture must see its hook points fire)."""
        if self.training or torch.is_grad_enabled() or iv.ablate_heads or global_hooks():
            return False
        if cache.modules is None:  # self.modules() walks the tree: once per decode, not per step
            cache.modules = tuple(self.modules())
        return not any(m._forward_hooks or m._forward_pre_hooks for m in cache.modules)


class KVCache:
    """Per decoder layer: self-attention K/V (grow each step) and cross-attention K/V (computed once).
    One cache per decode (a sequence or a batch of them)."""

    def __init__(self, n_layers: int):
        self.layers = [{"self": {}, "cross": {}} for _ in range(n_layers)]
        # looked up once per decode by Decoder.forward's lean step: its modules and their tensors
        self.modules: tuple[nn.Module, ...] | None = None
        self.weights: list[dict] | None = None

    def __len__(self) -> int:
        first = self.layers[0]["self"]
        return 0 if "k" not in first else first["k"].size(2)

    def reorder(self, index: torch.Tensor) -> None:
        """Keep batch rows ``index`` (beam parents) in every cached tensor."""
        for layer in self.layers:
            for part in layer.values():
                for key in part:
                    part[key] = part[key].index_select(0, index)


def tied_keys(cfg: TransformerConfig) -> set[str]:
    """State-dict keys that alias another tensor (not stored: safetensors refuses shared memory)."""
    return ({"generator.weight"} if cfg.tie_embeddings else set()) | \
        ({"encoder.tok_embed.weight"} if cfg.share_embeddings else set())


class Transformer(nn.Module):
    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        self.cfg = cfg
        self.encoder = Encoder(cfg)
        self.decoder = Decoder(cfg)
        self.generator = nn.Linear(cfg.d_model, cfg.tgt_vocab_size, bias=cfg.logits_bias)
        # the generator's output, every call; opt-in: (B, T, vocabulary) is the largest tensor by far
        self.hook_logits = HookPoint(opt_in=True)
        self._init_weights()
        if cfg.tie_embeddings:
            self.generator.weight = self.decoder.tok_embed.weight
        if cfg.share_embeddings:
            if cfg.src_vocab_size != cfg.tgt_vocab_size:
                raise ValueError("share_embeddings needs one joint vocabulary (equal vocabulary sizes)")
            self.encoder.tok_embed.weight = self.decoder.tok_embed.weight

    def _init_weights(self):
        for name, p in self.named_parameters():
            if "tok_embed" in name:
                nn.init.normal_(p, 0.0, self.cfg.d_model ** -0.5)
            elif p.dim() > 1:
                nn.init.xavier_uniform_(p)
            elif name.endswith("bias"):
                nn.init.zeros_(p)
        for emb in (self.encoder.tok_embed, self.decoder.tok_embed):
            with torch.no_grad():
                emb.weight[self.cfg.pad_id].zero_()

    # masks -----------------------------------------------------------------
    def src_mask(self, src: torch.Tensor, iv: Interventions = NO_INTERVENTION) -> torch.Tensor:
        mask = padding_mask(src, self.cfg.pad_id) if iv.src_padding_mask else \
            torch.ones_like(src, dtype=torch.bool)[:, None, None, :]
        if iv.ablate_src_tokens:
            idx = [i for i in iv.ablate_src_tokens if 0 <= i < src.size(1)]
            mask = mask.clone()
            mask[..., idx] = False
        return mask

    def tgt_mask(self, tgt: torch.Tensor, iv: Interventions = NO_INTERVENTION) -> torch.Tensor:
        mask = padding_mask(tgt, self.cfg.pad_id)
        if self.cfg.decoder_start_id == self.cfg.pad_id:  # Marian starts with <pad>: that one is a real input
            mask = mask.clone()
            mask[..., 0] = True
        mask = mask.expand(-1, -1, tgt.size(1), -1)
        return mask & causal_mask(tgt.size(1), tgt.device) if iv.causal_mask else mask

    # the three parts, kept apart as in the Annotated Transformer ----------------
    def encode(self, src, src_mask, iv: Interventions = NO_INTERVENTION):
        return self.encoder(src, src_mask, iv)

    def decode(self, tgt, memory, src_mask, tgt_mask, iv: Interventions = NO_INTERVENTION,
               cache: KVCache | None = None, start_pos: int = 0):
        return self.decoder(tgt, memory, src_mask, tgt_mask, iv, cache, start_pos)

    def forward(self, src, tgt, iv: Interventions = NO_INTERVENTION):
        """Teacher-forced logits (B, T, V) for decoder input ``tgt``."""
        src_mask = self.src_mask(src, iv)
        memory = self.encode(src, src_mask, iv)
        return self.logits(self.decode(tgt, memory, src_mask, self.tgt_mask(tgt, iv), iv))

    def logits(self, h: torch.Tensor) -> torch.Tensor:
        """The generator on decoder output ``h``, through ``hook_logits``."""
        return self.hook_logits(self.generator(h))

    def validate_interventions(self, iv: Interventions) -> None:
        for kind, layer, head in iv.ablate_heads:
            if not (0 <= layer < self.cfg.layers(kind) and 0 <= head < self.cfg.heads(kind)):
                raise ValueError(f"no head ({kind}, layer {layer}, head {head}) in this model")

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())
