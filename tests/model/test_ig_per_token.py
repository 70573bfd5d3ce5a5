"""Integrated gradients right per token, not only in sum: at the app's defaults, every token's score is within
the engine's stated tolerance (1 % of the largest score, or IG_ATOL nats where the scores are tiny) of an
integral computed independently (a float64 copy of the model, its own adaptive rule and error estimate, its
values checked to add up to the float64 delta), on a tiny float64 model and on each shipped direction's test
sentences, long ones included. The verdict counts the reference's own error against the engine: its distance
from the reference plus the reference's error must be within the tolerance. The engine's own per-token error
estimate must also cover its real error where it says it converged."""
from __future__ import annotations

import copy
import dataclasses
import gzip
from pathlib import Path

import numpy as np
import pytest
import torch

from model.analysis.attribution import IG_ATOL, IG_START, IG_TOKEN_RTOL, _log_prob, gradients
from model.families import load_checkpoint
from model.engine.decoding import DecodeOptions, translate
from model.engine.results import decoder_input
from model.engine.transformer import Transformer

CHECKPOINTS = Path(__file__).resolve().parents[2] / "checkpoints"
ROOT = Path(__file__).resolve().parents[2]
# the test texts shipped beside the checkpoints, else a Multi30k folder in the checkout or beside it
DATA = [ROOT / "checkpoints" / "multi30k", ROOT / "data" / "multi30k", ROOT.parent / "shared" / "multi30k"]
REF_NODES, REF_START, REF_MAX_EVALUATIONS = 4, 32, 40_000
# as fractions of the error the engine is allowed (max(IG_TOKEN_RTOL * the largest score, IG_ATOL)): the
# reference's own error estimate is trusted only once small (a coarse rule can miss most of a narrow peak and
# still look settled), so every token's is brought within REF_TRUSTED, within REF_DECIDES where the verdict
# on the engine is close, and the float64 values must add up to delta within REF_SUM
REF_TRUSTED, REF_DECIDES, REF_SUM = 0.5, 0.2, 0.25


def allowed(values: np.ndarray) -> float:
    """The engine's per-token tolerance, as it states it: 1 % of the largest score, or IG_ATOL nats."""
    return max(IG_TOKEN_RTOL * float(np.abs(values).max()), IG_ATOL)


@dataclasses.dataclass
class Reference:
    values: np.ndarray   # IG per source token
    error: np.ndarray    # per token: the summed |halves - whole| of its panels, over-estimating the values' error
    delta: float         # f(input) - f(baseline) in float64: what the values must add up to
    evaluations: int


def reference_ig(model: Transformer, src_ids, dec_in, position: int, token: int, engine: np.ndarray) -> Reference:
    """IG per source token from the zero baseline, in float64, by its own rule: 4-point Gauss-Legendre on each
    half of 32 equal panels; a panel's error, per token, is how far its halves' sum moved from the whole
    panel's rule, and a token's error is the sum over the panels with no cancellation. The panels that hold
    half of an unsettled token's error are halved (the integrand is only piecewise smooth, ReLU kinks, with
    narrow peaks) until every token's error is within REF_TRUSTED of the engine's tolerance and either
    the engine's score (``engine``) is surely within its tolerance or the reference is within REF_DECIDES:
    refined only as far as the verdict needs, which keeps it cheap where the engine is well inside."""
    m = copy.deepcopy(model).double().eval()
    src, dec = torch.tensor([src_ids]), torch.tensor([dec_in])
    emb = (m.encoder.tok_embed(src) * m.encoder.scale).detach()
    x, w = np.polynomial.legendre.leggauss(REF_NODES)
    spent = [0]

    def rule(bounds) -> list[torch.Tensor]:
        nodes = torch.tensor(np.concatenate([a + (b - a) * (x + 1) / 2 for a, b in bounds]))
        weights = torch.tensor(np.concatenate([(b - a) * w / 2 for a, b in bounds]))
        out = []
        for i in range(0, len(nodes), 256):
            with torch.enable_grad():
                path = (nodes[i:i + 256, None, None] * emb).requires_grad_(True)
                (g,) = torch.autograd.grad(_log_prob(m, path, src, dec, position, token).sum(), path)
            out.append((g * emb).sum(-1) * weights[i:i + 256, None])
        spent[0] += len(nodes)
        return list(torch.cat(out).view(len(bounds), REF_NODES, -1).sum(1))

    def halves(a, b):
        return [(a, (a + b) / 2), ((a + b) / 2, b)]

    def panels_of(wholes: dict) -> dict:
        """{(a, b): the whole panel's value} -> {(a, b): (its halves' sum, the two halves, |sum - whole|)}"""
        values = iter(rule([h for ab in wholes for h in halves(*ab)]))
        out = {}
        for ab, whole in wholes.items():
            lv, rv = next(values), next(values)
            out[ab] = (lv + rv, (lv, rv), (lv + rv - whole).abs())
        return out

    with torch.no_grad():
        delta = float(_log_prob(m, emb, src, dec, position, token) - _log_prob(m, 0 * emb, src, dec, position, token))
    bounds = [(i / REF_START, (i + 1) / REF_START) for i in range(REF_START)]
    panels = panels_of(dict(zip(bounds, rule(bounds))))
    while spent[0] <= REF_MAX_EVALUATIONS:
        values = torch.stack([v for v, _, _ in panels.values()]).sum(0).numpy()
        errs = torch.stack([e for _, _, e in panels.values()])  # (panels, tokens)
        error, limit = errs.sum(0).numpy(), allowed(values)
        gap = np.abs(engine - values)
        open_ = (error > REF_TRUSTED * limit) | ((gap + error > limit) & (error > REF_DECIDES * limit))
        if abs(values.sum() - delta) > REF_SUM * limit:
            open_ |= error > 0.5 * error.max()  # a stretch the rule underrates: refine where it is least sure
        if not open_.any():
            return Reference(values, error, delta, spent[0])
        keys, chosen = list(panels), set()
        for j in np.flatnonzero(open_):
            ranked = torch.argsort(errs[:, j], descending=True).tolist()
            held = np.cumsum(errs[ranked, j].numpy()) - errs[ranked, j].numpy()  # what the panels above hold
            chosen.update(i for i, h in zip(ranked, held) if h < 0.5 * error[j])
        wholes = {}
        for i in chosen:
            _, (lv, rv), _ = panels.pop(keys[i])
            (left, right) = halves(*keys[i])
            wholes[left], wholes[right] = lv, rv
        panels.update(panels_of(wholes))
    raise AssertionError(f"the reference did not settle within {REF_MAX_EVALUATIONS} evaluations")


def _check(model: Transformer, src_ids, out_ids, position: int) -> tuple[float, object]:
    """(the engine's worst token error at the defaults as a share of its tolerance: its distance from the
    reference plus the reference's own error, so at most 1 where it is surely within; the engine's result)."""
    dec_in = decoder_input(model.cfg.decoder_start_id, out_ids)
    ig = gradients(model, src_ids, dec_in, position, out_ids[position], IG_START).integrated
    ref = reference_ig(model, src_ids, dec_in, position, out_ids[position], ig.values)
    limit, gap = allowed(ref.values), np.abs(ig.values - ref.values)
    assert not ig.converged or (gap - ref.error).max() <= max(ig.token_error, 1e-9) * 1.5 + 0.1 * limit, \
        "the engine's per-token estimate must cover its real error where it says it converged"
    return float((gap + ref.error).max() / limit), ig


@pytest.fixture
def one_thread():
    """One torch thread: the test takes one of CI's two cores, and other tests get their setting back."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_tiny_float64_model_per_token(tiny_cfg, one_thread):
    cfg = dataclasses.replace(tiny_cfg, n_encoder_layers=3)
    torch.manual_seed(5)
    model = Transformer(cfg).double().eval()
    with torch.no_grad():  # sharper weights: a rougher path, so that refinement has something to do
        for p in model.parameters():
            if p.dim() > 1:
                p.mul_(1.5)
    src = [2, 5, 9, 6, 11, 7, 8, 3]
    out = [6, 12, 5, 3]
    for position in range(len(out)):
        share, ig = _check(model, src, out, position)
        assert ig.converged and share <= 1, (position, share, ig.steps)


def _test_sentence(lang: str, which: str) -> str:
    """The first Multi30k test sentence, or the longest of the first 200."""
    for d in DATA:
        f = d / f"test_2016_flickr.{lang}.gz"
        if f.exists():
            with gzip.open(f, "rt", encoding="utf-8") as fh:
                lines = [line.strip() for line in fh]
            return lines[0] if which == "first" else max(lines[:200], key=len)
    pytest.fail(f"no Multi30k test set for {lang} under {DATA}")


# 46 source pieces for the shipped en-de model, the length where the sum-only rule was worst
LONG_EN = ("A man in a blue shirt and a woman in a red dress are walking their two small dogs along the sandy beach "
           "near the old wooden pier, while the children build castles and the sun sets behind the lighthouse.")
# each direction's first test sentence and its longest of the first 200 (36, 32, 32 and 45 pieces), and the
# 46-piece one above, each read at its middle output position (4-42 s of one core each). en-fr's longest has
# a spike in its path (near alpha = 0.217, narrower than a panel's node spacing) that halving alone missed:
# the engine's estimate said 0.22 of the tolerance where the real error was 0.96; the panels' tails see it.
CASES = [(d, d[:2], which) for d in ("de-en", "en-de", "en-fr", "fr-en") for which in ("first", "longest")]
CASES.insert(4, ("en-de", "en", LONG_EN))


@pytest.mark.parametrize("direction,lang,which", CASES, ids=lambda v: v if len(v) < 12 else "46-pieces")
def test_shipped_models_per_token(direction, lang, which, one_thread):
    lm = load_checkpoint(CHECKPOINTS / direction, "cpu")
    text = which if which not in ("first", "longest") else _test_sentence(lang, which)
    tr = translate(lm, text, DecodeOptions(trace=False, record=False))
    position = len(tr.output_ids) // 2
    share, ig = _check(lm.model, tr.src_ids, tr.output_ids, position)
    assert share <= 1, (direction, text, len(tr.src_ids), position, share, ig.steps, ig.token_error)
