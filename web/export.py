"""The shipped models as two ONNX graphs each, traced through the engine's own modules.

- the encoder: source ids -> memory, with every head's pattern (and the scores, q and K the tour reads, and
  for the tour's one head, TOUR_HEAD, its values and its output after W_O);
- ALTI+ (model/analysis/attribution.py ``alti_tensors``): source ids, the decoder's input and which source
  tokens stay visible -> the decoder's contributions over [source; target prefix] at every step, the engine's
  own code traced through a Computation of the run (float64, as the app computes it), and the last step's
  logits (the greedy loop of a run with source tokens hidden, as Interventions.ablate_src_tokens hides them);
- the decoder over new target positions after a cache of past self-attention keys and values: prefix ids
  and the cache -> the next token's logits, the cache grown by the new positions, and every self- and
  cross-attention pattern of the new positions. One graph serves both ways the engine decodes
  (model.engine.decoding.decoder_step): with the look-ahead mask on, one new token a step after the cache
  (``past_*`` of length P); with it off, the whole prefix recomputed after an empty cache (P = 0). The
  views' step is the whole prefix after an empty cache too, so the embedding table is stored once.

The mask switches are float inputs (1 = on), so that the page can do what the Masks section does. The
patterns come out of the engine's hook points (``capture``), exactly what the app draws.
Weights are stored in fp16 and cast to fp32 once, when the browser loads the graph.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from model.analysis.attribution import alti_tensors
from model.analysis.computation import Computation
from model.analysis.postnorm import SUBLAYERS
from model.engine.hooks import capture
from model.engine.names import CROSS, DEC_SELF, ENC_SELF, hook_name

OPSET = 17
FLAGS = ("use_padding_mask", "use_causal_mask", "use_pos")
TOUR_HEAD = (0, 0)  # the encoder head the tour's "One head" stop opens (ui/present/tour.py stop_one_head)
TOUR_V, TOUR_RESULT = "enc_v_{}".format(TOUR_HEAD[0]), "enc_result_{}_{}".format(*TOUR_HEAD)


@dataclass(frozen=True)
class GraphNames:
    """The inputs and outputs of one exported graph, in order."""
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]


def attention_outputs(prefix: str, kind, n_layers: int) -> list[tuple[str, str]]:
    """(output name, hook name) of every layer's pattern, scores (before the mask), q and K."""
    out = []
    for layer in range(n_layers):
        for point in ("pattern", "scores", "q", "k"):
            out.append((f"{prefix}_{point}_{layer}", hook_name(point, kind, layer)))
    return out


def _embed(stack, tokens, use_pos, positions=None):
    """The stack's embedding with the positional encoding scaled by ``use_pos`` (0 or 1), through its hooks:
    _Stack.embed with its Python switch made a graph input (``positions``: the tokens' indices, default 0..T-1)."""
    x = stack.hook_embed(stack.tok_embed(tokens) * stack.scale)
    pe = stack.pe[: tokens.size(1)] if positions is None else stack.pe.index_select(0, positions)
    return x + stack.hook_pos(pe[None] * use_pos)


def _norms(trace, part: str, n_layers: int) -> torch.Tensor:
    """(layers, 2 + sublayers, T): |residual in|, |what each sublayer added| (encoder: attention, FFN;
    decoder: self-attention, cross-attention, FFN) and |residual out| at each position, as
    Computation.residual_norms reads a pre-norm model."""
    rows = []
    for layer in range(n_layers):
        point = lambda p: trace[hook_name(p, part, layer)][0]  # noqa: E731
        adds = [(point(after) - point(before)).norm(dim=-1) for _, before, after in SUBLAYERS[part].values()]
        rows.append(torch.stack([point("resid_pre").norm(dim=-1), *adds, point("resid_post").norm(dim=-1)]))
    return torch.stack(rows)


class EncoderGraph(nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model
        self.attn = attention_outputs("enc", ENC_SELF, model.cfg.n_encoder_layers)
        self.names = GraphNames(("src", "use_padding_mask", "use_pos"),
                                ("memory", "enc_embed", "enc_pos", "enc_norms", *(n for n, _ in self.attn),
                                 TOUR_V, TOUR_RESULT))

    def forward(self, src, use_padding_mask, use_pos):
        enc, cfg = self.model.encoder, self.model.cfg
        mask = ((src != cfg.pad_id) | (use_padding_mask < 0.5))[:, None, None, :]
        with capture(self.model) as trace:
            x = _embed(enc, src, use_pos)
            for layer in enc.layers:
                x = layer(x, mask)
            memory = enc.norm(x)
        return (memory, trace[hook_name("embed", "encoder")], trace[hook_name("pos", "encoder")],
                _norms(trace, "encoder", cfg.n_encoder_layers), *(trace[h] for _, h in self.attn),
                *self._tour_head(trace))

    def _tour_head(self, trace) -> tuple[torch.Tensor, torch.Tensor]:
        """TOUR_HEAD's values (1, H, S, d_k) of its layer, and its output after its slice of W_O (1, S, D), as
        Computation.head reads them."""
        layer, head = TOUR_HEAD
        attn = self.model.encoder.layers[layer].self_attn
        z = trace[hook_name("z", ENC_SELF, layer)][:, head]                     # (1, S, d_k)
        w = attn.w_o.weight.view(-1, attn.n_heads, attn.d_k)[:, head]           # (D, d_k)
        return trace[hook_name("v", ENC_SELF, layer)], z @ w.T


def past_names(n_layers: int) -> list[str]:
    return [f"past_{kv}_{layer}" for layer in range(n_layers) for kv in ("k", "v")]


def present_names(n_layers: int) -> list[str]:
    return [f"present_{kv}_{layer}" for layer in range(n_layers) for kv in ("k", "v")]


class DecoderGraph(nn.Module):
    """New positions ``tgt`` (1, N) after P cached ones (``past_k_l``/``past_v_l``: (1, H, P, d_k) each):
    the last position's logits, the cache with the new positions appended, and the new rows' patterns."""

    def __init__(self, model):
        super().__init__()
        self.model = model
        L = model.cfg.n_decoder_layers
        self.attn = attention_outputs("self", DEC_SELF, L) + attention_outputs("cross", CROSS, L)
        self.names = GraphNames(("tgt", "memory", "src", *FLAGS, *past_names(L)),
                                ("logits", "dec_embed", "dec_pos", "dec_norms", *(n for n, _ in self.attn),
                                 *present_names(L)))

    def forward(self, tgt, memory, src, use_padding_mask, use_causal_mask, use_pos, *past):
        dec, cfg = self.model.decoder, self.model.cfg
        src_mask = ((src != cfg.pad_id) | (use_padding_mask < 0.5))[:, None, None, :]
        P, N = past[0].size(2), tgt.size(1)
        new = torch.arange(N) + P                       # the new positions' indices
        causal = (torch.arange(P + N)[None, :] <= new[:, None])[None, None] | (use_causal_mask < 0.5)
        real = tgt != cfg.pad_id
        if cfg.decoder_start_id == cfg.pad_id:  # Marian starts with <pad>: that one is a real input
            real = real | (new == 0)[None]
        seen = torch.cat([torch.ones_like(past[0][:, 0, :, 0], dtype=torch.bool), real], 1)
        tgt_mask = seen[:, None, None, :] & causal      # as Transformer.tgt_mask, after P cached keys
        caches = [{"self": {"k": past[2 * i], "v": past[2 * i + 1]}, "cross": {}} for i in range(len(dec.layers))]
        with capture(self.model) as trace:
            x = _embed(dec, tgt, use_pos, new)
            for layer, cache in zip(dec.layers, caches):
                x = layer(x, memory, src_mask, tgt_mask, cache)
            logits = self.model.generator(dec.norm(x)[:, -1])
        present = [c["self"][kv] for c in caches for kv in ("k", "v")]
        return (logits, trace[hook_name("embed", "decoder")], trace[hook_name("pos", "decoder")],
                _norms(trace, "decoder", cfg.n_decoder_layers), *(trace[h] for _, h in self.attn), *present)


class AltiGraph(nn.Module):
    """``src`` (1, S), the decoder's input ``tgt`` (1, T) and ``keep`` (1, S; 0: that source token hidden from
    every attention that reads the source, as Interventions.ablate_src_tokens) -> ``alti`` (T, S + T): ALTI+
    contributions of the source and the target prefix to each step, and the last step's ``logits``."""

    def __init__(self, model):
        super().__init__()
        self.model = model
        self.names = GraphNames(("src", "tgt", "keep"), ("alti", "logits"))

    def forward(self, src, tgt, keep):
        m = self.model
        src_mask = ((src != m.cfg.pad_id) & (keep > 0.5))[:, None, None, :]
        with capture(m) as trace:
            memory = m.encode(src, src_mask)
            h = m.decode(tgt, memory, src_mask, m.tgt_mask(tgt))
        _, r = alti_tensors(Computation(trace, m))
        return r, m.generator(h[:, -1])


def _dynamic_axes(names: GraphNames, axes: dict[str, dict[int, str]]) -> dict:
    return {n: axes[n] for n in names.inputs + names.outputs if n in axes}


def export_graph(graph: nn.Module, args: tuple, path: Path, axes: dict) -> None:
    graph.eval()
    with torch.no_grad():
        torch.onnx.export(graph, args, str(path), input_names=list(graph.names.inputs),
                          output_names=list(graph.names.outputs), dynamic_axes=_dynamic_axes(graph.names, axes),
                          opset_version=OPSET, do_constant_folding=True, dynamo=False)


def axes_for(graph) -> dict[str, dict[int, str]]:
    """Which axes vary: S (source length) and T (decoder prefix length) wherever they appear."""
    axes = {"src": {1: "S"}, "tgt": {1: "T"}, "memory": {1: "S"}, "enc_embed": {1: "S"}, "enc_pos": {1: "S"},
            "enc_norms": {2: "S"}, TOUR_V: {2: "S"}, TOUR_RESULT: {1: "S"}, "dec_embed": {1: "T"}, "dec_pos": {1: "T"}, "dec_norms": {2: "T"}}
    for name, _ in graph.attn:  # T: the new positions; K: every self-attention key (cached and new)
        head, point = name.split("_")[:2]
        if point in ("pattern", "scores"):
            axes[name] = {2: "S" if head == "enc" else "T", 3: {"self": "K", "cross": "S"}.get(head, "S")}
        elif point in ("q", "k"):
            axes[name] = {2: "S" if head == "enc" or (head == "cross" and point == "k") else
                          ("K" if point == "k" else "T")}
    for name in graph.names.inputs + graph.names.outputs:
        if name.startswith("past_"):
            axes[name] = {2: "P"}
        elif name.startswith("present_"):
            axes[name] = {2: "K"}
    return axes


def export_model(model, out: Path) -> dict[str, Path]:
    """encoder.onnx and decoder.onnx (fp32) of ``model`` into ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    model = model.eval()
    src = torch.tensor([[2, 10, 11, 12, 3]])
    tgt = torch.tensor([[20, 21]])
    one = torch.ones(1)
    cfg = model.cfg
    past = [torch.zeros(1, cfg.decoder_heads, 2, cfg.d_model // cfg.decoder_heads)] * (2 * cfg.n_decoder_layers)
    enc, dec = EncoderGraph(model), DecoderGraph(model)
    paths = {"encoder": out / "encoder.onnx", "decoder": out / "decoder.onnx"}
    export_graph(enc, (src, one, one), paths["encoder"], axes_for(enc))
    with torch.no_grad():
        memory = model.encoder(src, (src != model.cfg.pad_id)[:, None, None, :])
    export_graph(dec, (tgt, memory, src, one, one, one, *past), paths["decoder"], axes_for(dec))
    paths["alti"] = out / "alti.onnx"
    alti_axes = {"src": {1: "S"}, "tgt": {1: "T"}, "keep": {1: "S"}, "alti": {0: "T", 1: "ST"}}
    export_graph(AltiGraph(model), (src, tgt, torch.ones(src.shape)), paths["alti"], alti_axes)
    return paths
