"""Every view tells the truth for an NLLB-shaped model: pre-norm like ours, so the residual decomposition,
ALTI+, the norm-based weights and the logit lens apply as derived; the positions shown are the rows its
table really added (numbered from padding_idx + 1); every registered view draws at each kind's own
heads (its decoder has fewer heads and layers than its encoder)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("transformers")  # builds the tiny random model and is the reference

from model.analysis.attribution import alti_matrices  # noqa: E402
from model.families import load_checkpoint  # noqa: E402
from model.analysis.computation import Computation, force  # noqa: E402
from model.analysis.contrast import attribute_contrast  # noqa: E402
from model.engine.decoding import DecodeOptions, translate  # noqa: E402
from model.engine.names import ATTN_KINDS, hook_name  # noqa: E402
from tests.model.test_m2m100 import build_m2m100  # noqa: E402
from tests.model.test_marian import EN, PROBES  # noqa: E402
from ui.state import Run, Selection  # noqa: E402
from ui.present.views import REGISTRY, Env  # noqa: E402


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    torch.set_num_threads(1)
    return build_m2m100("nllb", tmp_path_factory.mktemp("nllb_views") / "nllb-200-tiny")


@pytest.fixture(scope="module")
def lm(folder):
    return load_checkpoint(folder)


@pytest.fixture(scope="module")
def run(lm):
    return Run.of(lm, "nllb-200-tiny", translate(lm, PROBES[0], DecodeOptions(beam=2, max_len=8)))


def test_the_positions_shown_are_the_ones_the_reference_adds(lm, folder, run):
    from transformers import M2M100ForConditionalGeneration
    hf = M2M100ForConditionalGeneration.from_pretrained(folder).eval()
    src = torch.tensor([run.tr.src_ids])
    with torch.inference_mode():
        theirs = hf.model.encoder.embed_positions(src, hf.model.encoder.embed_tokens(src))
    ours = run.tr.trace[hook_name("pos", "encoder")]
    torch.testing.assert_close(ours.float(), theirs.float(), atol=1e-6, rtol=0)


def test_the_pre_norm_decompositions_add_up(lm, run):
    comp = Computation(run.tr.trace, lm.model)
    for part in ("encoder", "decoder"):
        r = comp.residual_norms(part)
        assert not r.post_norm  # the sums of what each sublayer adds, as for our own models
    r_enc, r = alti_matrices(comp)
    assert np.allclose(r.sum(-1), 1.0, atol=1e-4)  # every output step's contributions are shares of one
    fo = force(lm, PROBES[0], EN[0])
    lens = Computation(fo.translation.trace, lm.model).logit_lens()
    probs = torch.from_numpy(fo.loss).neg().exp()
    last = torch.from_numpy(lens.probs[-1]).gather(1, torch.tensor(fo.translation.output_ids)[:, None])[:, 0]
    torch.testing.assert_close(last, probs, atol=1e-5, rtol=1e-4)  # the last layer's lens is the model itself
    c = attribute_contrast(lm.model, run.tr, 1)
    assert len(c.attribution.src_tokens) == len(run.tr.src_ids)


@pytest.mark.parametrize("name", sorted(n for n, s in REGISTRY.items() if s.draw is not None))
def test_every_view_draws(name, lm, run):
    for kind in ATTN_KINDS:
        sel = Selection(kind=kind, layer=lm.model.cfg.layers(kind) - 1, head=lm.model.cfg.heads(kind) - 1, step=1,
                        query=0, view="head")
        out = REGISTRY[name].draw(run, sel, Env(lm))
        assert all(f is not None for f in (out if isinstance(out, (list, tuple)) else [out]))
