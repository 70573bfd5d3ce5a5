"""Every view on a post-norm model (Marian) tells the truth: the LayerNorm decompositions add up to the
model's own numbers, ALTI+ and the norm-based scores agree with a brute-force computation by loops, and
the logit lens equals transformers' own logits layer by layer."""
import numpy as np
import pytest
import torch

pytest.importorskip("transformers")

from model.analysis.attribution import _shares, alti_matrices, attention_block, attribute, cross_norms  # noqa: E402
from model.analysis.computation import Computation, force  # noqa: E402
from model.analysis.postnorm import SUBLAYERS, layer_norm64, ln_linear  # noqa: E402
from model.families import load_checkpoint  # noqa: E402
from tests.model.test_marian import EN, PROBES, build_marian  # noqa: E402
from model.engine.names import HeadRef  # noqa: E402


@pytest.fixture(scope="module")
def marian_dir(tmp_path_factory):
    torch.set_num_threads(1)
    return build_marian(tmp_path_factory.mktemp("postnorm") / "opus-mt-de-en", layers=2, heads=4)


@pytest.fixture(scope="module")
def lm(marian_dir):
    lm = load_checkpoint(marian_dir)
    with torch.no_grad():  # LayerNorms that are not the identity, so that gamma and beta count
        g = torch.Generator().manual_seed(3)
        for m in lm.model.modules():
            if isinstance(m, torch.nn.LayerNorm):
                m.weight.copy_(1 + 0.3 * torch.randn(m.weight.shape, generator=g))
                m.bias.copy_(0.2 * torch.randn(m.bias.shape, generator=g))
    return lm


@pytest.fixture(scope="module")
def forced(lm):
    return force(lm, PROBES[0], EN[0])


@pytest.fixture(scope="module")
def comp(lm, forced):
    return Computation(forced.translation.trace, lm.model)


def test_ln_linear_shares_add_up_to_the_layer_norm_exactly():
    g = torch.Generator().manual_seed(0)
    norm = torch.nn.LayerNorm(16)
    with torch.no_grad():
        norm.weight.copy_(torch.randn(16, generator=g))
        norm.bias.copy_(torch.randn(16, generator=g))
    terms, rest = torch.randn(5, 7, 16, generator=g, dtype=torch.float64), torch.randn(5, 16, generator=g,
                                                                                       dtype=torch.float64)
    d = ln_linear(terms, rest, norm)
    full = layer_norm64(terms.sum(1) + rest, norm)
    torch.testing.assert_close(d.terms.sum(1) + d.rest, full, atol=1e-12, rtol=0)
    torch.testing.assert_close(d.output, full, atol=1e-12, rtol=0)
    # one term by hand: gamma * (z - mean z) / sigma of the whole sum
    u = (terms.sum(1) + rest)[2].numpy()
    sigma = np.sqrt(u.var() + norm.eps)
    z = terms[2, 3].numpy()
    np.testing.assert_allclose(d.terms[2, 3].numpy(), norm.weight.detach().numpy() * (z - z.mean()) / sigma,
                               atol=1e-6)


def test_the_model_is_post_norm_and_what_each_sublayer_adds_reconstructs_the_stream(lm, comp):
    assert not lm.model.cfg.norm_first
    for part, subs in SUBLAYERS.items():
        for layer in range(comp.n_layers(part)):
            for sub, (_, before, after) in subs.items():
                d = comp.sublayer_shares(part, layer, sub)
                captured = comp.get(after, part, layer)[0].double()
                torch.testing.assert_close(d.output, captured, atol=2e-5, rtol=0)
                torch.testing.assert_close(d.terms.sum(1) + d.rest, d.output, atol=1e-12, rtol=0)
                # brute force: the raw sublayer output through the model's own LayerNorm gives the stream
                x, f = comp.get(before, part, layer)[0].double(), comp.sublayer_output(part, layer, sub)
                norm = getattr(getattr(lm.model, part).layers[layer], SUBLAYERS[part][sub][0])
                torch.testing.assert_close(layer_norm64(x + f, norm), captured, atol=2e-5, rtol=0)
    r = comp.residual_norms("decoder")
    assert r.post_norm and r.cross is not None and r.attn_raw is not None
    share = comp.sublayer_shares("decoder", 1, "cross").terms[:, 1].norm(dim=-1).numpy()
    np.testing.assert_allclose(r.cross[1], share, rtol=1e-6)
    np.testing.assert_allclose(r.ffn_raw[0], comp.sublayer_output("decoder", 0, "ffn").norm(dim=-1).numpy(),
                               rtol=1e-6)


def test_attention_blocks_decompose_the_captured_output(comp):
    for kind, after in (("encoder.self_attn", "resid_mid"), ("decoder.self_attn", "resid_mid"),
                        ("decoder.cross_attn", "resid_mid_cross")):
        for layer in range(2):
            d = attention_block(comp, kind, layer)
            captured = comp.get(after, kind.split(".")[0], layer)[0].double()
            torch.testing.assert_close(d.output, captured, atol=2e-5, rtol=0)
            torch.testing.assert_close(d.terms.sum(1) + d.rest, captured, atol=2e-5, rtol=0)


def _brute_alti(comp, lm, kind: str, layer: int) -> np.ndarray:
    """ALTI for post-LN by loops over queries, keys and heads, from the captured v and pattern."""
    attn = comp.attn_module(kind, layer)
    part = kind.split(".")[0]
    block = getattr(lm.model, part).layers[layer]
    norm = block.norm_2 if attn.cross else block.norm_1
    gamma, beta = norm.weight.detach().double().numpy(), norm.bias.detach().double().numpy()
    v = comp.get("v", kind, layer)[0].double().numpy()
    a = comp.get("pattern", kind, layer)[0].double().numpy()
    W = attn.w_o.weight.detach().double().numpy()
    b = attn.w_o.bias.detach().double().numpy()
    x = comp.get("resid_mid" if attn.cross else "resid_pre", part, layer)[0].double().numpy()
    H, dk = attn.n_heads, attn.d_k
    Tq, Tk = a.shape[1], a.shape[2]
    out = np.zeros((Tq, Tk + (1 if attn.cross else 0)))
    for i in range(Tq):
        T = [sum(a[h, i, j] * W[:, h * dk:(h + 1) * dk] @ v[h, j] for h in range(H)) for j in range(Tk)]
        if attn.cross:
            T.append(x[i].copy())
        else:
            T[i] = T[i] + x[i]
        u = sum(T) + b
        sigma = np.sqrt(u.var() + norm.eps)
        L = [gamma * (t - t.mean()) / sigma for t in T]
        y = sum(L) + gamma * (b - b.mean()) / sigma + beta
        c = np.array([max(0.0, np.abs(y).sum() - np.abs(y - t).sum()) for t in L])
        out[i] = c / c.sum()
    return out


def test_post_ln_alti_equals_a_brute_force_computation(comp, lm, forced):
    enc = [_brute_alti(comp, lm, "encoder.self_attn", i) for i in range(2)]
    r_enc, r = alti_matrices(comp)
    np.testing.assert_allclose(r_enc, enc[1] @ enc[0], atol=1e-9)
    for kind in ("decoder.self_attn", "decoder.cross_attn"):
        d = attention_block(comp, kind, 1)
        np.testing.assert_allclose(_shares(d.terms, d.output).numpy(), _brute_alti(comp, lm, kind, 1), atol=1e-9)
    S = len(forced.translation.src_ids)
    assert (r >= 0).all() and np.allclose(r.sum(-1), 1) and np.allclose(np.triu(r[:, S:], 1), 0)
    # the LayerNorm matters: the pre-norm formula (no norm) gives other shares on this model
    d = attention_block(comp, "encoder.self_attn", 0)
    x = comp.get("resid_pre", "encoder", 0)[0].double()
    from model.analysis.attribution import _token_terms
    terms, y = _token_terms(comp, "encoder.self_attn", 0)
    terms[torch.arange(len(x)), torch.arange(len(x))] += x
    assert not np.allclose(_shares(terms, y + x).numpy(), _shares(d.terms, d.output).numpy(), atol=1e-3)


def test_norm_based_cross_scores_follow_kobayashi_2021(comp, lm, forced):
    S, pos, layer = len(forced.translation.src_ids), 2, 1
    attn = comp.attn_module("decoder.cross_attn", layer)
    norm = lm.model.decoder.layers[layer].norm_2
    gamma = norm.weight.detach().double().numpy()
    v = comp.get("v", "cross", layer)[0].double().numpy()
    a = comp.get("pattern", "cross", layer)[0].double().numpy()
    W, b = attn.w_o.weight.detach().double().numpy(), attn.w_o.bias.detach().double().numpy()
    x = comp.get("resid_mid", "decoder", layer)[0].double().numpy()[pos]
    dk = attn.d_k
    T = [sum(a[h, pos, j] * W[:, h * dk:(h + 1) * dk] @ v[h, j] for h in range(attn.n_heads)) for j in range(S)]
    sigma = np.sqrt((sum(T) + x + b).var() + norm.eps)
    expected = [np.linalg.norm(gamma * (t - t.mean()) / sigma) for t in T]
    np.testing.assert_allclose(cross_norms(comp, layer, pos), expected, rtol=1e-9)


def test_attribution_runs_on_a_post_norm_model_and_says_so(lm, forced):
    from ui.present import inside
    a = attribute(lm.model, forced.translation, 1, ig_steps=16)
    assert a.post_norm and abs(a.alti.sum() + a.target_alti.sum() - 1) < 1e-9
    md = inside.attribution_markdown(a)
    assert "post-norm" in md and "σ fixed" in md
    labels = [inside.method_label(a, m) for m in ("norm", "alti")]
    assert labels == ["norm-based ‖LN(Σₕ αₕ·fₕ(x))‖", "ALTI+ (post-LN)"]
    assert inside.attribution_payload(a)["post_norm"] is True


def test_logit_lens_is_the_models_own_mapping_layer_by_layer(lm, marian_dir, forced, comp):
    from transformers import MarianMTModel
    hf = MarianMTModel.from_pretrained(marian_dir, attn_implementation="eager").eval()
    with torch.no_grad():  # the same LayerNorms as ours
        for (name, m), (_, ours) in zip(
                ((n, m) for n, m in hf.named_modules() if isinstance(m, torch.nn.LayerNorm)),
                ((n, m) for n, m in lm.model.named_modules() if isinstance(m, torch.nn.LayerNorm))):
            m.weight.copy_(ours.weight)
            m.bias.copy_(ours.bias)
    tr = forced.translation
    dec_in = [lm.model.cfg.decoder_start_id] + tr.output_ids[:-1]
    with torch.no_grad():
        out = hf(input_ids=torch.tensor([tr.src_ids]), decoder_input_ids=torch.tensor([dec_in]),
                 output_hidden_states=True)
    lens = comp.logit_lens()
    torch.testing.assert_close(torch.from_numpy(lens.probs[-1]), out.logits[0].softmax(-1), atol=1e-5, rtol=1e-4)
    for i, h in enumerate(out.decoder_hidden_states[1:]):  # hidden state i + 1 is layer i's output
        logits = hf.lm_head(h) + hf.final_logits_bias
        torch.testing.assert_close(torch.from_numpy(lens.probs[i]), logits[0].softmax(-1), atol=1e-5, rtol=1e-4)
    from ui.present.inside import lens_title
    title = lens_title(lm.model.cfg)
    assert "final norm" not in title and "logits bias" in title and "post-norm" in title


def test_the_positional_views_name_marians_sin_then_cos_halves(lm):
    from model.families.ours import Registry
    from ui.present import views
    reg = Registry(models={"de-en": lm}, pe={"de-en": lm.model.encoder.pe.detach().numpy().copy()})
    heat, curves, _, compared = views.positional_figures(reg, "de-en", 16, "0, 1, 20")
    assert heat.layout.xaxis.title.text == "dimension (first half sin, second half cos)"
    D = lm.model.cfg.d_model
    wave = "cos" if 20 >= D // 2 else "sin"
    assert [t.name for t in curves.data] == ["dim 0 (sin)", "dim 1 (sin)", f"dim 20 ({wave})"]
    # the model's own table: sin of every frequency in the first half, cos in the second
    pe = reg.pe["de-en"][:16]
    np.testing.assert_allclose(pe[:, 0], np.sin(np.arange(16)), atol=1e-6)
    np.testing.assert_allclose(pe[:, D // 2], np.cos(np.arange(16)), atol=1e-6)
    assert compared.layout.annotations[0].text.startswith("sin | cos halves (the model&#39;s)")


def test_one_heads_norm_view_says_it_is_the_attention_term_alone(lm, forced):
    from ui.present import inside
    from ui.state import Run, Selection
    run = Run.of(lm, "de-en", forced.translation, forced=True)
    fig = inside.norm_weight_figure(run, lm, HeadRef("cross", 1, 2), "pieces")
    assert "before the residual add and the LayerNorm" in fig.layout.title.subtitle.text
    comp = Computation(forced.translation.trace, lm.model)
    z = [d.customdata for d in fig.data if d.type == "heatmap"][1]  # the raw values: the head's own term
    np.testing.assert_allclose(np.asarray(z, float), comp.norm_weights("cross", 1)[2], rtol=1e-3, atol=1e-4)
    title = inside.residual_figure(run, lm, "decoder").layout.title.text
    assert "post-norm" in title and "σ fixed" in title


def test_ablated_heads_add_nothing_to_the_decompositions(lm):
    from model.engine.config import Interventions
    iv = Interventions(ablate_heads=frozenset({("encoder.self_attn", 0, 1), ("decoder.cross_attn", 1, 0)}))
    tr = force(lm, PROBES[1], EN[1], iv).translation
    comp = Computation(tr.trace, lm.model, tr.interventions)
    for kind, part, after, layer in (("encoder.self_attn", "encoder", "resid_mid", 0),
                                     ("decoder.cross_attn", "decoder", "resid_mid_cross", 1)):
        d = attention_block(comp, kind, layer)
        torch.testing.assert_close(d.output, comp.get(after, part, layer)[0].double(), atol=2e-5, rtol=0)
    a = attribute(lm.model, tr, 1, ig_steps=16)
    assert abs(a.alti.sum() + a.target_alti.sum() - 1) < 1e-9
