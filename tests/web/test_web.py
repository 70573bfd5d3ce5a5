"""python -m web.build: what it finds, what it writes, and the exported graphs' mask switches against the
engine (ONNX Runtime in Python on the very files the page loads)."""
from __future__ import annotations

import json
import re
import shutil

import numpy as np
import onnx
import pytest
import torch

from model.analysis.computation import Computation
from model.engine.config import Interventions
from model.engine.decoding import DecodeOptions, decoder_input, translate
from model.engine.hooks import capture
from model.engine.names import CROSS, DEC_SELF, ENC_SELF
from model.families.ours import load
from tests.web.test_web_fixtures import ROOT, lines, site
from web.build import directions
from web.runtime import Graphs
from web.spacy_rules import to_js

SHIPPED = ["cs-en", "de-en", "en-cs", "en-de", "en-fr", "fr-en"]  # every shipped direction, in name order
MAX_MB = 15  # one direction's two graphs and their weights, uncompressed
TOL_LOGITS, TOL_PATTERN = 1e-3, 1e-4


def test_directions_are_found_from_the_checkpoints(tmp_path):
    assert [p.name for p in directions(ROOT / "checkpoints")] == SHIPPED
    shutil.copytree(ROOT / "checkpoints" / "de-en", tmp_path / "xx-yy", ignore=shutil.ignore_patterns("*.safetensors"))
    (tmp_path / "no-spm").mkdir()
    (tmp_path / "no-spm" / "config.json").write_text((ROOT / "checkpoints/de-en/config.json").read_text())
    assert [p.name for p in directions(tmp_path)] == ["xx-yy"]


def test_the_site_holds_every_direction_with_fp16_weights_and_named_heads():
    out = site()
    manifest = json.loads((out / "models" / "manifest.json").read_text())
    assert manifest["directions"] == SHIPPED and manifest["languages"] == ["cs", "de", "en", "fr"]
    for name in SHIPPED:
        folder = out / "models" / name
        meta = json.loads((folder / "meta.json").read_text())
        L = meta["decoder_layers"]
        assert {f"cross_pattern_{i}" for i in range(L)} <= set(meta["decoder_outputs"])
        assert {f"self_pattern_{i}" for i in range(L)} <= set(meta["decoder_outputs"])
        assert {f"enc_pattern_{i}" for i in range(meta["encoder_layers"])} <= set(meta["encoder_outputs"])
        size = sum((folder / f).stat().st_size for f in ("encoder.onnx", "decoder.onnx", "weights.bin"))
        assert size < MAX_MB * 1e6, f"{name}: {size / 1e6:.1f} MB"
        weights = (folder / "weights.bin").stat().st_size  # every weight once, in fp16: the table is shared
        assert 0.99 < weights / (2 * meta["parameters"]) < 1.01, (name, weights)  # (vectors stay in the graphs)
        for graph in ("encoder", "decoder"):
            m = onnx.load(str(folder / f"{graph}.onnx"))
            assert m.opset_import[0].version >= 17
            big = [i for i in m.graph.initializer if int(np.prod(i.dims)) >= 16]
            assert big and all(i.data_type == onnx.TensorProto.FLOAT16 for i in big), graph
            tables = [i for i in big if int(np.prod(i.dims)) >= 1_000_000]
            assert len(tables) == 1, f"{graph}: the embedding table is stored once"
            assert {"use_padding_mask", "use_pos"} <= {i.name for i in m.graph.input}


def graphs(name: str) -> Graphs:
    folder = site() / "models" / name
    return Graphs(folder, json.loads((folder / "meta.json").read_text()))


def run_graphs(name, src_ids, dec_in, iv: Interventions) -> dict:
    g = graphs(name)
    eo = g.encode(src_ids, iv.src_padding_mask, iv.positional_encoding)
    do = g.decode(dec_in, eo["memory"], src_ids, padding=iv.src_padding_mask, causal=iv.causal_mask,
                  pos=iv.positional_encoding)
    return {**eo, **do}


@pytest.mark.parametrize("iv", [Interventions(), Interventions(causal_mask=False),
                                Interventions(positional_encoding=False), Interventions(src_padding_mask=False)],
                         ids=["default", "no-look-ahead", "no-positions", "no-padding-mask"])
def test_mask_switches_match_the_engine(iv):
    """Teacher-forced over the engine's own greedy output (the source padded with 3 <pad>, so that the
    padding switch has keys to reveal): the logits and every pattern, switched as the engine switches them."""
    lm = load(ROOT / "checkpoints" / "de-en")
    text = lines("val", "de")[7]
    tr = translate(lm, text, DecodeOptions(beam=1, pad_src_to=0), iv)
    src_ids = tr.src_ids + [lm.model.cfg.pad_id] * 3
    dec_in = decoder_input(lm.model.cfg.decoder_start_id, tr.output_ids)
    with torch.no_grad(), capture(lm.model, ["*.hook_pattern", "hook_logits"]) as trace:
        lm.model(torch.tensor([src_ids]), torch.tensor([dec_in]), iv)
    got = run_graphs("de-en", src_ids, dec_in, iv)
    assert np.abs(got["logits"][0] - trace["hook_logits"][0, -1].numpy()).max() < TOL_LOGITS
    for short, kind in (("enc", ENC_SELF), ("self", DEC_SELF), ("cross", CROSS)):
        ours = np.stack([got[f"{short}_pattern_{i}"][0] for i in range(4)])
        assert np.abs(ours - trace.attention(kind)).max() < TOL_PATTERN, short


def test_the_residual_norms_are_the_apps():
    """enc_norms and dec_norms (what the page's tour reads) against Computation.residual_norms, the app's
    reading of the same run: |stream in|, each sublayer's addition and |stream out|, per layer and position."""
    lm = load(ROOT / "checkpoints" / "de-en")
    tr = translate(lm, lines("val", "de")[3], DecodeOptions(beam=1))
    comp = Computation(tr.trace, lm.model)
    got = run_graphs("de-en", tr.src_ids, decoder_input(lm.model.cfg.decoder_start_id, tr.output_ids), Interventions())
    for part, subs in (("encoder", ("attn", "ffn")), ("decoder", ("attn", "cross", "ffn"))):
        r, ours = comp.residual_norms(part), got[f"{part[:3]}_norms"]
        want = np.stack([np.stack([r.resid[i], *(getattr(r, s)[i] for s in subs), r.resid[i + 1]])
                         for i in range(r.resid.shape[0] - 1)])
        assert ours.shape == want.shape, part
        assert np.abs(ours - want).max() <= 1e-3 * np.abs(want).max(), part  # fp16-stored weights, fp32 sums


@pytest.mark.parametrize("causal", [True, False], ids=["cached-steps", "look-ahead-off"])
def test_the_decoder_graph_decodes_as_the_engine(causal):
    """Greedy with the one decoder graph as the page runs it (one cached step at a time with the look-ahead
    mask on; the whole prefix after an empty cache with it off) gives the engine's ids, and a cached step's
    logits and new pattern row equal the whole prefix's last ones."""
    lm = load(ROOT / "checkpoints" / "de-en")
    g = graphs("de-en")
    for text in lines("val", "de")[:8]:
        tr = translate(lm, text, DecodeOptions(beam=1, record=False, trace=False), Interventions(causal_mask=causal))
        assert g.greedy(tr.src_ids, causal=causal) == tr.output_ids, text
    src_ids, prefix = tr.src_ids, decoder_input(lm.model.cfg.decoder_start_id, tr.output_ids)[:6]
    memory = g.encode(src_ids)["memory"]
    whole = g.decode(prefix, memory, src_ids)
    before = g.decode(prefix[:-1], memory, src_ids)
    cache = {n: before[n.replace("past_", "present_")] for n in g.past}
    step = g.decode(prefix[-1:], memory, src_ids, cache)
    assert np.abs(step["logits"] - whole["logits"]).max() < TOL_LOGITS
    assert np.abs(step["self_pattern_3"][0, :, 0] - whole["self_pattern_3"][0, :, -1]).max() < TOL_PATTERN
    assert step["present_k_0"].shape[2] == len(prefix)


def test_python_patterns_become_javascript_patterns():
    assert to_js(r"(?iu)^\w+\-\d$") == (r"^[\p{L}\p{N}_]+\-\p{Nd}$", "ui")
    assert to_js(r"[\w\']+\!") == (r"[\p{L}\p{N}_']+!", "u")
    assert to_js(r"a{2,3}\U0001F600") == (r"a{2,3}\u{1F600}", "u")
    assert to_js(r"[]a]") == (r"[\]a]", "u")
    js, flags = to_js(r"(?u)^(?:[\w\+\-\.]{2,})://")
    assert flags == "u" and re.escape("{2,}") not in js
