"""Training dynamics (model.dynamics): every number of a tiny run's frames recomputed by hand."""
from __future__ import annotations

import gzip
import itertools
import json
import math
from pathlib import Path

import numpy as np
import pytest
import sacrebleu
import torch

from model.analysis.alignment.reference import Reference
from model.analysis.attribution import attribute
from model.analysis.computation import force
from model.engine.decoding import DecodeOptions, full_trace, translate
from model.training.measure_dynamics import DATA_DIRS, main, read
from model.analysis.dynamics import Settings, ValSet, dictionary, kendall_tau, measure
from model.families.frames import list_frames, load_frame, read_parent
from model.engine.names import CROSS, DEC_SELF, ENC_SELF, hook_name

from tests.frames_fixtures import framed_run  # noqa: F401 (a fixture)

ROOT = Path(__file__).resolve().parents[2]
SETTINGS = Settings(sentences=8, alti_sentences=3, dictionary_size=6, batch_size=3)


def kendalltau_by_pairs(x, y) -> float:
    """Kendall's tau-b from its definition, pair by pair: (concordant - discordant) over the geometric mean of
    the pairs untied in x and the pairs untied in y; nan when either is zero."""
    conc = disc = untied_x = untied_y = 0
    for i, j in itertools.combinations(range(len(x)), 2):
        dx, dy = x[i] - x[j], y[i] - y[j]
        untied_x, untied_y = untied_x + (dx != 0), untied_y + (dy != 0)
        if dx * dy > 0:
            conc += 1
        elif dx * dy < 0:
            disc += 1
    return (conc - disc) / math.sqrt(untied_x * untied_y) if untied_x and untied_y else math.nan


def val_set(run) -> ValSet:
    """The copy task's val sentences with the identity alignment (word i of the target is word i of the source)."""
    lines = run.splits["val"]
    refs = [Reference.of([(i, i) for i in range(len(s.split()))]) for s in lines]
    return ValSet(tuple(lines), tuple(lines), tuple(refs))


@pytest.fixture(scope="module")
def measured(framed_run):
    parent = read_parent(framed_run.ckpt)
    info = list_frames(framed_run.frames)[-2]          # step 32: trained, not finished
    lm = load_frame(info.path, parent)
    val = val_set(framed_run)
    sub = ValSet(val.src[:8], val.tgt[:8], val.refs[:8])
    entries = dictionary(val, "de", "en", SETTINGS.dictionary_size)
    return lm, sub, entries, measure(lm, sub, entries, SETTINGS)


def ids(lm, text):
    return [2] + lm.src_vocab.encode(text.split()) + [3]


def hand_ce(lm, val, eps=0.0, ablate=None, empty=False):
    model = lm.model
    if ablate is not None:                      # zero the head's slice of W_o's input: its output is gone
        kind, layer, head = ablate
        model = type(model)(model.cfg).eval()
        model.load_state_dict(lm.model.state_dict())
        attn = getattr(getattr(model, kind.stack).layers[layer], kind.module)
        with torch.no_grad():
            attn.w_o.weight[:, head * attn.d_k:(head + 1) * attn.d_k] = 0
    total, n = 0.0, 0
    for s, t in zip(val.src, val.tgt):
        out = lm.tgt_vocab.encode(t.split()) + [3]
        src = [2, 3] if empty else ids(lm, s)
        with torch.no_grad():
            logp = model(torch.tensor([src]), torch.tensor([[2] + out[:-1]]))[0].log_softmax(-1).double()
        for pos, tok in enumerate(out):
            total += (1 - eps) * -logp[pos, tok].item() + eps * -logp[pos].mean().item()
            n += 1
    return total / n


def test_losses_by_hand(measured, framed_run):
    lm, val, _, f = measured
    assert f.step == 32 and f.lr == lm.frame.lr and f.val_loss == lm.frame.val_loss
    assert f.val_ce == pytest.approx(hand_ce(lm, val), rel=1e-5)
    assert f.val_ce_smoothed == pytest.approx(hand_ce(lm, val, eps=0.1), rel=1e-5)
    assert f.lm_loss == pytest.approx(hand_ce(lm, val, empty=True), rel=1e-5)
    assert f.lm_loss > f.val_ce                # the source helps once the copy task is partly learned


def hand_stats(lm, val, kind, layer, head):
    rows = []
    for s, t in zip(val.src, val.tgt):
        src, out = ids(lm, s), lm.tgt_vocab.encode(t.split()) + [3]
        dec_in = [2] + out[:-1]
        p = full_trace(lm, src, out)[hook_name("pattern", kind, layer)][0, head].double().numpy()
        keys = dec_in if kind == DEC_SELF else src
        for i in range(p.shape[0]):
            row = p[i]
            rows.append([-sum(x * math.log(x) for x in row if x > 0),
                         row[i - 1] if i >= 1 else 0.0, row[i] if i < len(row) else 0.0,
                         row[i + 1] if i + 1 < len(row) else 0.0,
                         sum(x for x, k in zip(row, keys) if k == 2), sum(x for x, k in zip(row, keys) if k == 3)])
    return np.mean(rows, 0)


@pytest.mark.parametrize("kind", [ENC_SELF, DEC_SELF, CROSS])
def test_head_statistics_and_importance_by_hand(measured, kind):
    lm, val, _, f = measured
    for h in f.heads:
        if h.kind == kind and (h.layer, h.head) in {(0, 1), (1, 3)}:
            got = [h.entropy, h.prev, h.same, h.next, h.bos, h.eos]
            assert got == pytest.approx(list(hand_stats(lm, val, kind, h.layer, h.head)), abs=1e-6)
            assert h.importance == pytest.approx(hand_ce(lm, val, ablate=(kind, h.layer, h.head)) - f.val_ce,
                                                 abs=1e-5)
            assert (h.aer is None) == (kind != CROSS)
    assert len(f.heads) == 3 * 2 * 4


def test_cross_head_aer_and_reordering_by_hand(measured):
    lm, val, _, f = measured
    for h in (h for h in f.heads if h.kind == CROSS):
        best = 1.0
        for shift in (0, 1):                   # the row predicting word j, or the row where it is the input
            hits = n = 0
            for s, t, ref in zip(val.src, val.tgt, val.refs):
                out = lm.tgt_vocab.encode(t.split()) + [3]
                p = full_trace(lm, ids(lm, s), out)[hook_name("pattern", CROSS, h.layer)][0, h.head].numpy()
                words = len(t.split())
                arg = [int(np.argmax(p[j + shift, 1:-1])) for j in range(words)]
                hits += sum((a, j) in ref.sure for j, a in enumerate(arg))
                n += words
            best = min(best, 1 - 2 * hits / (n + n))
        assert h.aer == pytest.approx(best, abs=1e-9)
    taus = []
    for s, t in zip(val.src, val.tgt):
        out = lm.tgt_vocab.encode(t.split()) + [3]
        tr = full_trace(lm, ids(lm, s), out)
        mean = np.mean([tr[hook_name("pattern", CROSS, l)][0].numpy() for l in range(2)], (0, 1))
        arg = mean[:len(t.split()), 1:-1].argmax(-1)
        tau = kendalltau_by_pairs(np.arange(len(arg)), arg)
        if not math.isnan(tau):
            taus.append(tau)
    assert f.reordering_tau == pytest.approx(np.mean(taus), abs=1e-9)


def test_kendall_tau_matches_its_definition():
    # the reference itself, on scipy's documented example (ties in both): tau-b = -0.47140452079103173
    assert kendalltau_by_pairs([12, 2, 1, 12, 2], [1, 4, 7, 1, 0]) == pytest.approx(-0.47140452079103173, abs=1e-15)
    assert math.isnan(kendalltau_by_pairs([1, 1, 1], [1, 2, 3]))
    rng = np.random.default_rng(0)
    for _ in range(20):
        x, y = rng.integers(0, 5, 9), rng.integers(0, 5, 9)
        want = kendalltau_by_pairs(x, y)
        got = kendall_tau(x, y)
        assert got == pytest.approx(want, abs=1e-12) or (math.isnan(want) and math.isnan(got))
    assert kendall_tau([0, 1, 2], [5, 6, 7]) == 1 and kendall_tau([0, 1, 2], [2, 1, 0]) == -1


def test_alti_shares_agree_with_the_attribution_view(measured):
    lm, val, _, f = measured
    src, tgt = [], []
    for s, t in list(zip(val.src, val.tgt))[:SETTINGS.alti_sentences]:
        tr = force(lm, s, t).translation
        per = [attribute(lm.model, tr, pos, ig_steps=8, ig_max_steps=8) for pos in range(len(tr.output_ids))]
        src.append(np.mean([a.source_share for a in per]))
        tgt.append(np.mean([a.target_share for a in per]))
    assert f.source_share == pytest.approx(np.mean(src), abs=1e-9)
    assert f.prefix_share == pytest.approx(np.mean(tgt), abs=1e-9)
    assert f.source_share + f.prefix_share == pytest.approx(1.0, abs=0.02)


def test_dictionary_lexical_accuracy_and_bleu_by_hand(measured, framed_run):
    lm, val, entries, f = measured
    counts = {}
    for line in framed_run.splits["val"]:
        for w in line.split():
            counts[w] = counts.get(w, 0) + 1
    assert [w for w, _ in entries] == sorted(counts, key=lambda w: (-counts[w], w))[:6]
    assert all(s == t for s, t in entries)                # the copy task's dictionary is the identity
    hits = [t in translate(lm, s, DecodeOptions()).text.split() for s, t in entries]
    assert f.lexical_accuracy == pytest.approx(np.mean(hits))
    hyps = [translate(lm, s, DecodeOptions(replace_unk=False)).text for s in val.src]
    assert f.bleu == pytest.approx(round(sacrebleu.BLEU().corpus_score(hyps, [list(val.tgt)]).score, 2))


def assert_close(a, b, tol=1e-5) -> None:
    """Two measurements of one frame, within float noise (batches of another size sum in another order)."""
    for k, v in a.__dict__.items():
        if k != "heads":
            assert v == pytest.approx(b.__dict__[k], abs=tol, nan_ok=True), k
    assert len(a.heads) == len(b.heads)
    for x, y in zip(a.heads, b.heads):
        for k, v in x.__dict__.items():
            assert v == pytest.approx(y.__dict__[k], abs=tol), (x.kind, x.layer, x.head, k)


def _write_val(run, folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for lang in ("de", "en"):
        with gzip.open(folder / f"val.{lang}.gz", "wt", encoding="utf-8") as fh:
            fh.write("\n".join(run.splits["val"]) + "\n")
    (folder / "de-en.val.align").write_text(
        "\n".join(" ".join(f"{i}-{i}" for i in range(len(s.split()))) for s in run.splits["val"]) + "\n")


def test_command_reproduces_its_json_for_one_frame(framed_run, tmp_path, measured):
    _write_val(framed_run, tmp_path)
    flags = ["--frames", str(framed_run.frames), "--checkpoint", str(framed_run.ckpt), "--data", str(tmp_path),
             "--align-dir", str(tmp_path), "--sentences", "8", "--alti-sentences", "3", "--dictionary-size", "6"]
    assert main(flags + ["--out", str(tmp_path / "all.json")]) == 0
    full = read(tmp_path / "all.json")
    assert [x.step for x in full.frames] == [i.step for i in list_frames(framed_run.frames)]
    assert_close(full.frames[-2], measured[3])           # the command measures what measure() does
    assert main(flags + ["--out", str(tmp_path / "one.json"), "--steps", "16"]) == 0
    one = read(tmp_path / "one.json")
    assert one.frames == tuple(x for x in full.frames if x.step == 16)   # the same batches: bit for bit
    assert json.loads((tmp_path / "one.json").read_text())["settings"]["sentences"] == 8
    assert main(flags[:4] + ["--data", str(tmp_path / "none"), "--out", str(tmp_path / "x.json")]) == 2


def test_a_rerun_measures_only_the_new_frames(framed_run, tmp_path, monkeypatch):
    _write_val(framed_run, tmp_path)
    out = tmp_path / "dyn.json"
    flags = ["--frames", str(framed_run.frames), "--checkpoint", str(framed_run.ckpt), "--data", str(tmp_path),
             "--align-dir", str(tmp_path), "--sentences", "8", "--alti-sentences", "3", "--dictionary-size", "6",
             "--out", str(out)]
    assert main(flags + ["--steps", "0,4"]) == 0
    first = read(out)
    stamp = first.frames[0]
    measured = []
    import model.training.measure_dynamics as cmd
    original = cmd.measure
    monkeypatch.setattr(cmd, "measure", lambda *a, **k: measured.append(1) or original(*a, **k))
    assert main(flags + ["--steps", "0,4,8"]) == 0
    again = read(out)
    assert len(measured) == 1 and [f.step for f in again.frames] == [0, 4, 8]
    assert again.frames[0] == stamp     # kept, not measured again


SHIPPED = sorted(p for p in (ROOT / "checkpoints").glob("*/frames/dynamics.json"))


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.parent.parent.name)
def test_shipped_dynamics_reproduce_for_one_frame(path, tmp_path):
    shipped = read(path)
    s = shipped.settings
    first = shipped.frames[0].step
    data = next((d for d in map(Path, DATA_DIRS) if (d / "val.de.gz").is_file()), None)
    if data is None:
        pytest.fail("the shipped dynamics need Multi30k's val split (checkpoints/multi30k or ../shared/multi30k)")
    assert main(["--frames", str(path.parent), "--out", str(tmp_path / "one.json"), "--steps", str(first),
                 "--data", str(data), "--align-dir", str(ROOT / "checkpoints" / "alignments"),
                 "--sentences", str(s.sentences), "--alti-sentences", str(s.alti_sentences),
                 "--dictionary-size", str(s.dictionary_size)]) == 0
    assert_close(read(tmp_path / "one.json").frames[0], shipped.frames[0], tol=1e-4)
