"""Joint subword vocabulary: round trip, word grouping, checkpoints, spaCy-free training, tokenized BLEU."""
from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors import safe_open

from model.engine.config import TransformerConfig
from model.engine.decoding import DecodeOptions, translate, translate_batch
from model.engine.results import pool_words
from model.engine.transformer import Transformer
from model.engine.vocab import SubwordVocab, tokenize, tokenize_corpus
from model.families import load_checkpoint
from model.families.ours import CheckpointError, save_checkpoint
from model.training.bleu import moses_tokenize, tokenized_bleu
from tests.app_fixtures import SENTENCES, make_checkpoint
from model.engine import decoding
from ui.present import payload
from model.analysis import profiles as analysis, readouts
from ui import state
from ui.present import views
from model.engine.names import HeadRef

ROOT = Path(__file__).resolve().parents[2]
EXTRA = {"de": ["Ein Hund rennt über die Wiese.", "Eine Gruppe von Menschen steht vor einem Gebäude.",
                "Ein kleines Mädchen spielt mit einem Ball."],
         "en": ["A dog runs across the meadow.", "A group of people stands in front of a building.",
                "A little girl plays with a ball."]}


def corpus(lang: str) -> list[str]:
    return SENTENCES[lang] + EXTRA[lang]


@pytest.fixture(scope="module")
def sv() -> SubwordVocab:
    words = tokenize_corpus(corpus("de"), "de") + tokenize_corpus(corpus("en"), "en")
    return SubwordVocab.train(words * 3, vocab_size=400, threads=1)


def test_specials_first_and_no_unk_for_unseen_latin_text(sv):
    assert sv.itos[:4] == ["<unk>", "<pad>", "<bos>", "<eos>"]
    pieces = sv.segment(tokenize("Ødegaard's naïve Café in Zürich", "de"))
    assert 0 not in sv.encode(pieces)  # byte fallback: unseen characters still get pieces
    assert len(pieces) > 5  # unseen words are split, not kept whole


@pytest.mark.parametrize("lang,text", [("de", "Ein Mann fährt mit dem Fahrrad durch die Stadt."),
                                       ("en", "Two dogs, a cat on dirt-bikes and Ødegaard's naïve café \"here\".")])
def test_round_trip_reads_as_normal_text(sv, lang, text):
    words = tokenize(text, lang)
    pieces = sv.segment(words)
    assert sv.join(pieces) == words  # pieces -> the spaCy words again
    assert sv.to_text(["<bos>"] + sv.decode(sv.encode(pieces)) + ["<eos>"], lang) == text
    assert sv.to_text(sv.decode(sv.encode(pieces)), lang) == text


def test_pieces_group_into_words(sv):
    words = tokenize("Ein Fahrradhelm liegt auf Ødegaards Tisch.", "de")
    pieces = ["<bos>"] + sv.segment(words) + ["<eos>", "<pad>"]
    spans = sv.word_spans(pieces)
    assert [i for s in spans for i in s] == list(range(len(pieces)))  # a partition, in order
    assert spans[0] == [0] and spans[-2:] == [[len(pieces) - 2], [len(pieces) - 1]]
    assert sv.join(pieces) == ["<bos>"] + words + ["<eos>", "<pad>"]
    assert any(len(s) > 1 for s in spans)  # some word really is several pieces
    for s in spans[1:-2]:
        assert pieces[s[0]].startswith("\u2581") and not any(pieces[i].startswith("\u2581") for i in s[1:])
    # a piece right after a special starts a word even without the word mark
    assert sv.word_spans(["<bos>", "rad", "\u2581Ein"]) == [[0], [1], [2]]


def tiny_subword_checkpoint(path: Path, sv: SubwordVocab) -> Path:
    torch.manual_seed(0)
    cfg = TransformerConfig(len(sv), len(sv), d_model=32, n_heads=4, n_encoder_layers=1, n_decoder_layers=1,
                            d_ff=64, dropout=0.0, attn_dropout=0.0, max_len=64, share_embeddings=True)
    return save_checkpoint(path, Transformer(cfg).eval(), sv, sv, "de", "en")


def test_subword_checkpoint_saves_loads_and_translates(tmp_path, sv):
    path = tiny_subword_checkpoint(tmp_path / "ck", sv)
    assert json.loads((path / "vocab.json").read_text())["kind"] == "subword"
    assert (path / "spm.model").is_file()
    with safe_open(str(path / "model.safetensors"), "pt") as f:
        keys = set(f.keys())
    assert "decoder.tok_embed.weight" in keys and "encoder.tok_embed.weight" not in keys
    lm = load_checkpoint(path)
    m = lm.model
    assert m.encoder.tok_embed.weight is m.decoder.tok_embed.weight is m.generator.weight  # one matrix
    assert lm.src_vocab == sv and lm.tgt_vocab is lm.src_vocab
    t = translate(lm, "Ein Mann fährt Fahrrad.", DecodeOptions(beam=2, max_len=8))
    assert t.src_tokens == ["<bos>"] + sv.segment(tokenize("Ein Mann fährt Fahrrad.", "de")) + ["<eos>"]
    assert isinstance(t.text, str) and t.replaced == {}
    assert translate_batch(lm, ["Ein Mann fährt Fahrrad.", ""], beam=1) [1] == ""
    (path / "spm.model").unlink()
    with pytest.raises(CheckpointError, match="spm.model is missing"):
        load_checkpoint(path)


def test_word_level_checkpoint_still_loads_and_translates(tmp_path):
    """The format of the first shipped models (word vocabularies, separate embeddings, no spm.model)."""
    path = make_checkpoint(tmp_path / "en-de", "en", "de")
    cfg = json.loads((path / "config.json").read_text())
    assert not (path / "spm.model").exists() and isinstance(json.loads((path / "vocab.json").read_text())["src"], list)
    assert cfg["model"]["share_embeddings"] is False
    lm = load_checkpoint(path)
    assert lm.src_vocab.kind == "word" and not lm.model.cfg.share_embeddings
    assert lm.model.encoder.tok_embed.weight is not lm.model.decoder.tok_embed.weight
    t = translate(lm, "A man rides a bike.", DecodeOptions(beam=2, max_len=6))
    assert t.src_tokens == ["<bos>", "A", "man", "rides", "a", "bike", ".", "<eos>"]
    assert lm.src_vocab.word_spans(t.src_tokens) == [[i] for i in range(len(t.src_tokens))]


def test_pooled_rows_sum_to_one_and_single_pieces_are_unchanged(sv):
    rng = np.random.default_rng(0)
    q = ["<bos>"] + sv.segment(["Ein", "Feuerwehrmann", "fährt"])
    k = ["<bos>"] + sv.segment(["Zweirädrige", "Fahrräder", "stehen", "."]) + ["<eos>"]
    q_spans, k_spans = sv.word_spans(q), sv.word_spans(k)
    assert any(len(s) > 1 for s in q_spans) and any(len(s) > 1 for s in k_spans)
    w = rng.random((2, 3, len(q), len(k)))
    w /= w.sum(-1, keepdims=True)
    pooled = pool_words(w, q_spans, k_spans)
    assert pooled.shape == (2, 3, len(q_spans), len(k_spans))
    np.testing.assert_allclose(pooled.sum(-1), 1.0, atol=1e-12)
    for a, qs in enumerate(q_spans):
        for b, ks in enumerate(k_spans):
            expected = w[..., qs, :][..., ks].sum(-1).mean(-1)
            np.testing.assert_allclose(pooled[..., a, b], expected, atol=1e-12)
            if len(qs) == 1 and len(ks) == 1:  # a one-piece word keeps its own weight (a sum and mean of one: exact)
                np.testing.assert_array_equal(pooled[..., a, b], w[..., qs[0], ks[0]])
    identity = [[i] for i in range(len(k))]
    np.testing.assert_array_equal(pool_words(w, [[i] for i in range(len(q))], identity), w)


def write_tiny_data(root: Path) -> Path:
    for split, n in (("train", 8), ("val", 2), ("test_2016_flickr", 2)):
        for lang in ("de", "en"):
            lines = corpus(lang)[:n] if split != "train" else corpus(lang) * 2
            with gzip.open(root / f"{split}.{lang}.gz", "wt", encoding="utf-8") as f:
                f.write("\n".join(lines) + "\n")
    return root


def test_prepare_then_train_without_spacy(tmp_path):
    from model.training.prepare import main as prepare_main
    data = write_tiny_data(tmp_path)
    prep = tmp_path / "prep"
    assert prepare_main(["--langs", "de", "en", "--data", str(data), "--out", str(prep), "--vocab-size", "400"]) == 0
    script = ("import sys; sys.modules['spacy'] = None\n"  # any spaCy import now fails
              "from model.train import main\n"
              f"sys.exit(main(['--prepared', {str(prep)!r}, '--src', 'en', '--tgt', 'de', '--work', "
              f"{str(tmp_path / 'work')!r}, '--out', {str(tmp_path / 'ck')!r}, '--epochs', '1', '--d-model', '32', "
              "'--heads', '4', '--enc-layers', '1', '--dec-layers', '1', '--d-ff', '64', '--threads', '1', "
              "'--max-tokens', '200', '--average', '1']))\n")
    res = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300,
                         env={"PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"})
    assert res.returncode == 0, res.stderr[-2000:]
    lm = load_checkpoint(tmp_path / "ck")
    assert (lm.src_lang, lm.tgt_lang, lm.src_vocab.kind) == ("en", "de", "subword")
    assert lm.model.cfg.share_embeddings and lm.model.cfg.src_vocab_size == len(lm.src_vocab)
    hist = json.loads((tmp_path / "ck" / "history.json").read_text())
    assert len(hist) == 1 and "val_bleu_tok" in hist[0]


def test_tokenized_bleu_by_hand():
    assert moses_tokenize('A "big" dog\'s ball.', "en") == "a &quot; big &quot; dog &apos;s ball ."
    hyps = ['A "big" dog\'s ball.', "Two cats sleep."]
    official = ["a &quot; big &quot; dog &apos;s ball .", "two cats sleep ."]
    res = tokenized_bleu(hyps, "en", tok_refs=official)
    assert res.bleu == 100.0 and res.refs.startswith("official") and "tok:none" in res.signature
    raw = tokenized_bleu(hyps, "en", raw_refs=['a "big" dog\'s ball.', "TWO CATS SLEEP."])
    assert raw.bleu == 100.0 and raw.refs.startswith("raw")
    assert tokenized_bleu(["A big dog sleeps.", "Two cats sleep."], "en", tok_refs=official).bleu < 60
    with pytest.raises(ValueError):
        tokenized_bleu(hyps, "en", tok_refs=official[:1])


def test_attention_view_reads_as_words_by_default(tmp_path, sv):
    """The app's map of a subword model labels whole words (pieces pooled); "Pieces" shows the pieces."""
    import app
    lm = load_checkpoint(tiny_subword_checkpoint(tmp_path / "de-en", sv))
    tr = translate(lm, "Ein Feuerwehrmann fährt.", DecodeOptions(max_len=5))
    assert "Feuerwehrmann" not in tr.src_tokens  # the word is several pieces
    run = state.Run.of(lm, "de-en", tr, [])
    assert run.src_spans == lm.src_vocab.word_spans(tr.src_tokens)

    def ticks(fig):
        return {t for ax in fig.to_dict()["layout"].values() if isinstance(ax, dict)
                for t in ax.get("ticktext", []) or []}
    words = views.attention_figure(run, HeadRef("encoder.self_attn", 0, 0), "head", "words", lm)
    pieces = views.attention_figure(run, HeadRef("encoder.self_attn", 0, 0), "head", "pieces", lm)
    assert any("Feuerwehrmann" in t for t in ticks(words))
    assert not any("Feuerwehrmann" in t for t in ticks(pieces))
    def heading(fig):  # one head's units are said in its subtitle
        return f"{fig.layout.title.text} | {fig.layout.title.subtitle.text}"
    assert "query words" in heading(words) and "query tokens" in heading(pieces)
    # rollout and alignment lines pool the same way, and show pieces when asked
    roll = views.rollout_view_figure(run, "all", "words").to_dict()
    assert "pieces pooled into words" in roll["layout"]["title"]["text"]
    assert any("Feuerwehrmann" in t for ax in roll["layout"].values() if isinstance(ax, dict)
               for t in ax.get("ticktext", []) or [])
    aligned = json.dumps(views.alignment_view_figure(run, "layer", 0, 0, "words").to_dict(), ensure_ascii=False)
    assert "Feuerwehrmann" in aligned
    assert "Feuerwehrmann" not in json.dumps(views.alignment_view_figure(run, "layer", 0, 0, "pieces").to_dict(),
                                             ensure_ascii=False)
    # the step view's cross-attention reads per source word; the API and export carry the word spans
    cross = views.step_figures(run, 0)[4].to_dict()
    assert "source words" in cross["layout"]["title"]["text"]
    step_ticks = [x for ax in cross["layout"].values() if isinstance(ax, dict) for x in ax.get("ticktext", []) or []]
    assert any("Feuerwehrmann" in t for t in step_ticks)
    out = payload.to_json(tr, [], "de-en", lm=lm)
    assert out["src_word_spans"] == run.src_spans and "Feuerwehrmann" in out["src_words"]
    assert len(out["output_word_spans"]) == len(out["output_words"])
    assert sum(len(s) for s in out["output_word_spans"]) == len(out["output_tokens"])
    meta = payload.export_metadata(tr, "de-en", lm)
    assert meta["src_word_spans"] == run.src_spans and meta["decoder_input_words"][0] == "<bos>"


def test_norm_weights_and_attribution_follow_the_units(tmp_path, sv):
    """Computation's attention-like views pool pieces into words when Units says words."""
    from model.analysis.attribution import attribute
    from model.engine.names import CROSS
    from ui.present import inside
    lm = load_checkpoint(tiny_subword_checkpoint(tmp_path / "de-en", sv))
    tr = translate(lm, "Ein Feuerwehrmann fährt.", DecodeOptions(max_len=5))
    run = state.Run.of(lm, "de-en", tr, [])
    text = {u: json.dumps(inside.norm_weight_figure(run, lm, HeadRef(CROSS, 0, 1), u).to_dict(),
                          ensure_ascii=False) for u in ("words", "pieces")}
    assert "Feuerwehrmann" in text["words"] and "(words)" in text["words"]
    assert "Feuerwehrmann" not in text["pieces"] and "(tokens)" in text["pieces"]
    attr = attribute(lm.model, tr, 0)
    words = attr.by_word(run.src_spans, run.src_words)
    assert "Feuerwehrmann" in words.src_tokens and len(words.src_tokens) < len(attr.src_tokens)
    np.testing.assert_allclose(words.alti.sum(), attr.alti.sum())
    assert [r[0] for r in inside.attribution_table(words)] == run.src_words


def test_compare_and_profiles_read_as_words(tmp_path, sv):
    """Compare maps and head profiles of a subword model are over words; rows still sum to 1."""
    from model.engine.config import Interventions
    lm = load_checkpoint(tiny_subword_checkpoint(tmp_path / "de-en", sv))
    text = "Ein Feuerwehrmann fährt."
    base = translate(lm, text, DecodeOptions(max_len=5))
    iv = Interventions(causal_mask=False)
    mod = translate(lm, text, DecodeOptions(max_len=5), iv=iv)
    cmp = state.CompareRun("de-en", base, mod, decoding.full_trace(lm, base.src_ids, base.output_ids, iv), iv)
    fig = views.compare_maps_figure(cmp, HeadRef("encoder.self_attn", 0, 0), lm).to_dict()
    assert "words" in fig["layout"]["title"]["text"] and "Feuerwehrmann" in json.dumps(fig, ensure_ascii=False)
    words = readouts.head_profiles(base, lm=lm)
    pieces = readouts.head_profiles(base)
    assert words.keys() == pieces.keys()
    key = ("encoder.self_attn", 0)  # enc. self is over fewer keys as words
    assert any(not np.allclose(words[key].stat(s), pieces[key].stat(s)) for s in analysis.STATS)
    pooled, q, k = base.attention_by_word(lm, "decoder.cross_attn")
    np.testing.assert_allclose(pooled.sum(-1), 1.0, atol=1e-5)
    assert "Feuerwehrmann" in k and len(k) < len(base.src_tokens)


def test_beam_tree_texts_are_words_not_pieces(tmp_path, sv):
    lm = load_checkpoint(tiny_subword_checkpoint(tmp_path / "de-en", sv))
    tr = translate(lm, "Ein Feuerwehrmann fährt.", DecodeOptions(beam=3, max_len=6))
    finals = [n for n in readouts.beam_tree_data(lm, tr).nodes if n.final]
    assert finals and all("\u2581" not in n.text for n in finals)
    assert any(n.text for n in finals)
    hyp = decoding.hypothesis(lm, tr, finals[0].ids)
    assert hyp.text == finals[0].text
