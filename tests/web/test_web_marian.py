"""OPUS-MT (Marian) in the static site: the page's tokenizer (page/marian.js, run by node) against
transformers' MarianTokenizer, piece for piece, on SentencePiece unigram models trained here on Multi30k
with the normalisers and options OPUS-MT models use; and the exported graphs against transformers' Marian
and our engine."""
from __future__ import annotations

import json
import random
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

transformers = pytest.importorskip("transformers")  # a development requirement: the reference

from model.engine.decoding import greedy_batch  # noqa: E402
from model.families import load_checkpoint  # noqa: E402
from tests.model.test_marian import PROBES, build_marian  # noqa: E402
from tests.web.test_web_fixtures import HARD_STRINGS, ROOT, lines  # noqa: E402
from web.build import build_direction  # noqa: E402
from web.build import main as build_main  # noqa: E402
from web.compact import MIN_CAST  # noqa: E402
from web.export import export_model  # noqa: E402
from web.marian import write_tokenizer  # noqa: E402
from web.runtime import Graphs  # noqa: E402

TOL_PATTERN = 1e-4

LANGS = ("de", "en", "fr", "cs")
# (source, target, source options, target options, separate vocabularies): every language on both sides,
# sentencepiece's default normaliser (nmt_nfkc) and others, byte fallback, a user-defined piece
PAIRS = {"de-en": ("de", "en", {}, {"byte_fallback": True}, False),
         "fr-cs": ("fr", "cs", {"normalization_rule_name": "nfkc_cf", "user_defined_symbols": ["Hund", "<sep>"]},
                   {"normalization_rule_name": "identity", "remove_extra_whitespaces": False}, True),
         "cs-fr": ("cs", "fr", {"byte_fallback": True, "character_coverage": 0.98}, {"add_dummy_prefix": False}, False),
         "en-de": ("en", "de", {"normalization_rule_name": "nfkc"}, {"split_digits": True}, False)}
HARD = [*HARD_STRINGS, "Ein Hund 🐕‍🦺 und 👩🏽‍🚀 auf 🇩🇪", "一只狗在草地上奔跑。我们去北京吧！", "Příliš žluťoučký kůň",
        "Cafe\u0301 cre\u0300me bru\u0302le\u0301e n\u0303o A\u030a", "ＡＢＣ ① ﬁ ½ ㍻ ｶﾞ", "x" * 1000 + " Hund" * 200,
        ">>fra<< Ein Hund", ">>x Hund <<", "Hund>><<", "a<unk>b </s> c<pad>", "x<sep>y Hunde",
        "  \u3000x\x1c \ufeff\u200b y\u00a0 ",
        "\x00\x07Hund\ud7ff\ue000\U0010fffd", "Hund\n\tKatze\r\n", "", "   ", "▁Hund ▁ ▁▁"]
NODE = r"""
import { MarianTokenizer } from "%s";
import { readFileSync } from "node:fs";
const [dir, queries] = process.argv.slice(2);
const spec = JSON.parse(readFileSync(`${dir}/tokenizer.json`, "utf8"));
const maps = {};
for (const s of [spec.source, spec.target]) if (s.charsmap) maps[s.charsmap] = readFileSync(`${dir}/${s.charsmap}`);
const tok = new MarianTokenizer(spec, maps);
const q = JSON.parse(readFileSync(queries, "utf8"));
process.stdout.write(JSON.stringify({
  source: q.source.map((t) => tok.tokenize(t)), target: q.target.map((t) => tok.tokenize(t, true)),
  source_ids: q.source.map((t) => tok.encode(t)), target_ids: q.target.map((t) => tok.encode(t, true)),
  decoded: q.decode.map((ids) => [tok.decode(ids), tok.decode(ids, { skipSpecial: false }),
                                  tok.decode(ids, { side: "target" })]),
}));
""" % (ROOT / "web" / "page" / "marian.js").as_uri()


def _train(lang: str, prefix: Path, options: dict) -> None:
    import sentencepiece as spm
    spm.SentencePieceTrainer.train(sentence_iterator=iter(lines("test_2016_flickr", lang)), model_prefix=str(prefix),
                                   model_type="unigram", vocab_size=1000, hard_vocab_limit=False, minloglevel=2,
                                   num_threads=1, **options)


def _pieces(model: Path) -> set[str]:
    import sentencepiece as spm
    sp = spm.SentencePieceProcessor(model_file=str(model))
    return {sp.id_to_piece(i) for i in range(sp.get_piece_size())}


def tokenizer_folder(work: Path, pair: str):
    """A MarianTokenizer saved as Hugging Face saves one, with SentencePiece unigram models trained here."""
    from transformers import MarianTokenizer
    src, tgt, src_opts, tgt_opts, separate = PAIRS[pair]
    work.mkdir(parents=True)
    _train(src, work / "src", src_opts)
    _train(tgt, work / "tgt", tgt_opts)
    src_pieces, tgt_pieces = _pieces(work / "src.model"), _pieces(work / "tgt.model")
    specials = {"<unk>", "<s>", "</s>"}
    vocab = lambda pieces: ["</s>", "<unk>", ">>fra<<"] + sorted(pieces - specials) + ["<pad>"]  # noqa: E731
    itos = vocab(src_pieces if separate else src_pieces | tgt_pieces)
    (work / "vocab.json").write_text(json.dumps({t: i for i, t in enumerate(itos)}, ensure_ascii=False))
    kw = {}
    if separate:
        (work / "target_vocab.json").write_text(json.dumps({t: i for i, t in enumerate(vocab(tgt_pieces))},
                                                           ensure_ascii=False))
        kw = {"separate_vocabs": True, "target_vocab_file": str(work / "target_vocab.json")}
    tok = MarianTokenizer(vocab=str(work / "vocab.json"), source_spm=str(work / "src.model"),
                          target_spm=str(work / "tgt.model"), source_lang=src, target_lang=tgt, **kw)
    tok.save_pretrained(work / "folder")
    return MarianTokenizer.from_pretrained(work / "folder"), work / "folder"


def run_node(site: Path, queries: dict, tmp: Path) -> dict:
    (tmp / "queries.json").write_text(json.dumps(queries, ensure_ascii=False), encoding="utf-8")
    (tmp / "run.mjs").write_text(NODE, encoding="utf-8")
    done = subprocess.run(["node", str(tmp / "run.mjs"), str(site), str(tmp / "queries.json")], capture_output=True,
                          text=True, encoding="utf-8", timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def target_tokens(tok, text: str) -> list[str]:
    tok._switch_to_target_mode()
    try:
        return tok.tokenize(text)
    finally:
        tok._switch_to_input_mode()


def random_outputs(tok, n: int) -> list[list[int]]:
    """Id sequences as a random model emits them: any token of the vocabulary, specials and bytes too."""
    rng = random.Random(0)
    size = len(tok.decoder)
    return [[rng.randrange(size) for _ in range(rng.randrange(1, 30))] + [tok.eos_token_id] for _ in range(n)]


def _check(tok, folder: Path, texts: dict[str, list[str]], tmp: Path) -> None:
    site = tmp / "site"
    site.mkdir()
    write_tokenizer(folder, site)
    target_ids = [tok(text_target=t).input_ids for t in texts["target"]]
    decode = target_ids + random_outputs(tok, 300)
    got = run_node(site, {**texts, "decode": decode}, tmp)
    for text, pieces, ids in zip(texts["source"], got["source"], got["source_ids"]):
        assert pieces == tok.tokenize(text), text
        assert ids == tok(text).input_ids, text
    for text, pieces, ids, ref in zip(texts["target"], got["target"], got["target_ids"], target_ids):
        assert pieces == target_tokens(tok, text), text
        assert ids == ref, text
    by_source = not tok.separate_vocabs  # transformers 5's default side (4.x decoded with the target's model)
    for ids, (plain, kept, by_target) in zip(decode, got["decoded"]):
        assert plain == tok.decode(ids, skip_special_tokens=True, use_source_tokenizer=by_source), ids
        assert kept == tok.decode(ids, skip_special_tokens=False, use_source_tokenizer=by_source), ids
        assert by_target == tok.decode(ids, skip_special_tokens=True, use_source_tokenizer=False), ids


@pytest.mark.parametrize("pair", list(PAIRS))
def test_the_page_tokenizes_and_decodes_every_validation_sentence_as_marian_tokenizer(pair, tmp_path):
    src, tgt = PAIRS[pair][:2]
    tok, folder = tokenizer_folder(tmp_path / "tok", pair)
    _check(tok, folder, {"source": lines("val", src) + HARD, "target": lines("val", tgt) + HARD}, tmp_path)


def test_hard_strings_really_meet_the_cases_they_are_for(tmp_path):
    """The hard strings reach unknown characters, byte pieces, normalisation rules and the special tokens."""
    tok, _ = tokenizer_folder(tmp_path / "tok", "de-en")
    pieces = [p for t in HARD for p in target_tokens(tok, t)]
    assert any(p.startswith("<0x") for p in pieces)  # byte fallback on the target side
    src = [tok.tokenize(t) for t in HARD]
    assert any(tok.unk_token_id in tok.convert_tokens_to_ids(p) for p in src)
    assert {p for s in src for p in s if p in tok.all_special_tokens} == {"<unk>", "</s>", "<pad>"}
    assert max(len(t) for t in HARD) >= 2000 and src[HARD.index(">>fra<< Ein Hund")][0] == ">>fra<<"
    assert tok.tokenize("ＡＢＣ") == tok.tokenize("ABC")  # the NFKC rules of the character map
    assert src[HARD.index("一只狗在草地上奔跑。我们去北京吧！")] == ["▁", "一只狗在草地上奔跑。我们去北京吧!"]  # one unknown run, NFKC
    tok, _ = tokenizer_folder(tmp_path / "tok2", "fr-cs")
    assert "Hund" in tok.tokenize("x<sep>y Hunde") and "<sep>" in tok.tokenize("x<sep>y Hunde")  # user-defined
    assert tok.tokenize("CHIEN") == tok.tokenize("chien")  # nfkc_cf folds case
    assert "▁▁" in "".join(target_tokens(tok, "  \u3000x\x1c \ufeff\u200b y\u00a0 "))  # spaces kept as they are


def test_a_model_the_page_cannot_read_is_refused_with_its_reason(tmp_path):
    from web.marian import MarianSiteError
    tok, folder = tokenizer_folder(tmp_path / "tok", "de-en")
    import sentencepiece as spm
    spm.SentencePieceTrainer.train(sentence_iterator=iter(lines("test_2016_flickr", "de")),
                                   model_prefix=str(tmp_path / "bpe"), model_type="bpe", vocab_size=500,
                                   minloglevel=2, num_threads=1)
    shutil.copyfile(tmp_path / "bpe.model", folder / "source.spm")
    (tmp_path / "site").mkdir()
    with pytest.raises(MarianSiteError, match="not a unigram SentencePiece model"):
        write_tokenizer(folder, tmp_path / "site")


# --------------------------------------------------------------------------- the exported graphs

def rounded_to_fp16(module):
    """``module`` with every tensor the site stores in fp16 (web/compact.py: weights of 16 elements or
    more) rounded so: the numbers the page computes with. The position table is a constant of the graph,
    not a weight: it stays fp32 (ours: the ``pe`` buffers; transformers': ``embed_positions``)."""
    with torch.no_grad():
        for name, t in [*module.named_parameters(), *module.named_buffers()]:
            if t.numel() >= MIN_CAST and not (name.endswith(".pe") or "embed_positions" in name):
                t.copy_(t.half().float())
    return module


@pytest.fixture(scope="module")
def marian_dir(tmp_path_factory) -> Path:
    torch.set_num_threads(1)
    return build_marian(tmp_path_factory.mktemp("marian") / "opus-mt-de-en", eos_bias=2.5, dec_layers=3, dec_heads=2)


@pytest.fixture(scope="module")
def built(marian_dir, tmp_path_factory):
    """(model folder on the site, its meta) as python -m web.build --marian writes them."""
    out = tmp_path_factory.mktemp("site")
    meta = build_direction(marian_dir, out, checkpoints=ROOT / "checkpoints")
    return out / "models" / meta["name"], meta


@pytest.fixture(scope="module")
def references(marian_dir):
    """(transformers' Marian, our engine's conversion), both with the site's fp16-rounded weights."""
    from transformers import MarianMTModel
    hf = MarianMTModel.from_pretrained(marian_dir, attn_implementation="eager").eval()
    lm = load_checkpoint(marian_dir)
    return rounded_to_fp16(hf), rounded_to_fp16(lm.model)


def test_the_site_holds_the_marian_model_with_every_head_and_its_tokenizer(built):
    folder, meta = built
    assert meta["name"] == "opus-mt-de-en" and meta["family"] == "OPUS-MT" and not meta["norm_first"]
    assert (meta["encoder_layers"], meta["decoder_layers"], meta["decoder_heads"]) == (2, 3, 2)
    assert {f"enc_pattern_{i}" for i in range(2)} <= set(meta["encoder_outputs"])
    assert {f"{k}_pattern_{i}" for k in ("self", "cross") for i in range(3)} <= set(meta["decoder_outputs"])
    spec = json.loads((folder / meta["tokenizer"]).read_text(encoding="utf-8"))
    assert (folder / spec["source"]["charsmap"]).is_file() and not (folder / "spm.json").exists()
    assert json.loads((folder / "first.json").read_text(encoding="utf-8"))["text"] == meta["example"]


def test_greedy_tokens_from_the_graphs_equal_generate_and_the_engine(built, references, marian_dir, tmp_path):
    from transformers import MarianTokenizer
    folder, meta = built
    hf, ours = references
    tok = MarianTokenizer.from_pretrained(marian_dir)
    got = run_node(folder, {"source": PROBES, "target": [], "decode": []}, tmp_path)
    graphs, lengths = Graphs(folder, meta), set()
    for text, src_ids in zip(PROBES, got["source_ids"]):
        assert src_ids == tok(text).input_ids
        with torch.inference_mode():
            ref = hf.generate(torch.tensor([src_ids]), num_beams=1, do_sample=False, max_new_tokens=20)[0, 1:]
        ref = [t for t in ref.tolist() if t != meta["pad_id"]]
        assert graphs.greedy(src_ids, 20) == ref == greedy_batch(ours, torch.tensor([src_ids]), 20)[0], text
        lengths.add(len(ref))
    assert min(lengths) < 20 == max(lengths)  # hypotheses that ended with </s>, and one that ran to the limit


def _patterns_against_transformers(graphs: Graphs, hf, src_ids: list[int], dec_in: list[int]) -> int:
    enc = graphs.encode(src_ids)
    dec = graphs.decode(dec_in, enc["memory"], src_ids)
    with torch.inference_mode():
        ref = hf(input_ids=torch.tensor([src_ids]), decoder_input_ids=torch.tensor([dec_in]), output_attentions=True)
    pairs = [(enc[f"enc_pattern_{i}"], a) for i, a in enumerate(ref.encoder_attentions)]
    pairs += [(dec[f"self_pattern_{i}"], a) for i, a in enumerate(ref.decoder_attentions)]
    pairs += [(dec[f"cross_pattern_{i}"], a) for i, a in enumerate(ref.cross_attentions)]
    for ours, theirs in pairs:
        assert ours.shape == tuple(theirs.shape)
        np.testing.assert_allclose(ours, theirs.numpy(), atol=TOL_PATTERN, rtol=0)
    return len(pairs)


def test_every_head_pattern_is_transformers_output_attentions(built, references, marian_dir, tmp_path):
    """The site's fp16 graphs against transformers with the same rounded weights; the export itself
    (fp32, before the weights are stored) against transformers as it was saved."""
    from transformers import MarianMTModel, MarianTokenizer
    folder, meta = built
    hf, _ = references
    tok = MarianTokenizer.from_pretrained(marian_dir)
    graphs = Graphs(folder, meta)
    fp32 = tmp_path / "fp32"
    export_model(load_checkpoint(marian_dir).model, fp32)
    exact = MarianMTModel.from_pretrained(marian_dir, attn_implementation="eager").eval()
    for text in PROBES:
        src_ids = tok(text).input_ids
        dec_in = [meta["decoder_start_id"], *graphs.greedy(src_ids, 20)[:-1]]
        assert _patterns_against_transformers(graphs, hf, src_ids, dec_in) == 2 + 3 + 3
        _patterns_against_transformers(Graphs(fp32, meta), exact, src_ids, dec_in)


def test_the_command_line_adds_marian_models_beside_ours_and_names_a_bad_one(marian_dir, tmp_path):
    ckpt = tmp_path / "checkpoints"
    (ckpt / "en-de").mkdir(parents=True)
    for f in ("config.json", "spm.model", "model.safetensors", "vocab.json"):
        (ckpt / "en-de" / f).symlink_to(ROOT / "checkpoints" / "en-de" / f)
    (ckpt / "multi30k").symlink_to(ROOT / "checkpoints" / "multi30k")
    assert build_main(["--out", str(tmp_path / "site"), "--checkpoints", str(ckpt), "--marian", str(marian_dir)]) == 0
    manifest = json.loads((tmp_path / "site" / "models" / "manifest.json").read_text())
    assert manifest["directions"] == ["en-de"] and manifest["marian"] == ["opus-mt-de-en"]
    assert manifest["languages"] == ["en"] and manifest["examples"]["opus-mt-de-en"]
    clash = shutil.copytree(marian_dir, tmp_path / "en-de")
    with pytest.raises(SystemExit, match="^python -m web.build: .*en-de: the site already has a model named 'en-de'"):
        build_main(["--out", str(tmp_path / "again"), "--checkpoints", str(ckpt), "--marian", str(clash)])
    for other in (ckpt / "en-de", "no/such/folder"):  # one of ours; neither a folder nor a Hub id
        with pytest.raises(SystemExit, match="^python -m web.build: .*: not a Marian \\(OPUS-MT\\) folder, nor a Hub"):
            build_main(["--out", str(tmp_path / "again"), "--checkpoints", str(ckpt), "--marian", str(other)])
