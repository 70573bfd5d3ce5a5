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

import pytest

transformers = pytest.importorskip("transformers")  # a development requirement: the reference

from tests.test_web_fixtures import HARD_STRINGS, ROOT, lines  # noqa: E402
from web.marian import write_tokenizer  # noqa: E402

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
        ">>fra<< Ein Hund", ">>x Hund <<", "Hund>><<", "a<unk>b </s> c<pad>", "x<sep>y Hunde", "  \u3000x\x1c \ufeff\u200b y\u00a0 ",
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
    for ids, (plain, kept, by_target) in zip(decode, got["decoded"]):
        assert plain == tok.decode(ids, skip_special_tokens=True), ids
        assert kept == tok.decode(ids, skip_special_tokens=False), ids
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
