"""M2M100 and NLLB-200 folders converted into our network, checked against transformers' own classes.

A tiny random M2M100ForConditionalGeneration (encoder and decoder shaped apart) and a SentencePiece BPE
model trained here stand in for facebook/m2m100_418M and facebook/nllb-200-distilled-600M: the same
folder layouts (M2M100: vocab.json + sentencepiece.bpe.model; NLLB: sentencepiece.bpe.model +
tokenizer.json), the tokenizers M2M100Tokenizer / NllbTokenizer as the reference for token ids, and
the model for logits, greedy and beam output and every attention pattern.
"""
from __future__ import annotations

import contextlib
import json
import shutil
from pathlib import Path

import pytest
import torch

transformers = pytest.importorskip("transformers")  # a development requirement: the reference

from model.families import load_all, load_checkpoint  # noqa: E402
from model.families.ours import CheckpointError  # noqa: E402
from model.engine.decoding import DecodeOptions, source_ids, translate  # noqa: E402
from model.engine.hooks import capture  # noqa: E402
from model.families.m2m100 import M2M100Vocab, with_languages  # noqa: E402
from model.engine.names import ATTN_KINDS, CROSS, ENC_SELF, hook_name  # noqa: E402
from tests.model.test_marian import DE, EN, PROBES, _cli, _fill_hub_cache, cut  # noqa: E402

FAMILIES = {"m2m100": ("de", "en", "fr"), "nllb": ("deu_Latn", "eng_Latn", "fra_Latn")}


def _spm(path: Path) -> None:
    import sentencepiece as spm
    spm.SentencePieceTrainer.train(sentence_iterator=iter((DE + EN) * 4), model_prefix=str(path), vocab_size=120,
                                   model_type="bpe", character_coverage=1.0, minloglevel=2, hard_vocab_limit=False,
                                   num_threads=1)


def _tokenizer(family: str, folder: Path, work: Path):
    """The family's tokenizer saved into ``folder`` as transformers saves it; returns it."""
    import sentencepiece as spm
    src, tgt, _ = FAMILIES[family]
    if family == "m2m100":
        from transformers import M2M100Tokenizer
        sp = spm.SentencePieceProcessor(model_file=str(work / "sp.model"))
        pieces = [sp.id_to_piece(i) for i in range(3, sp.get_piece_size())]
        vocab = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3, **{p: i + 4 for i, p in enumerate(pieces)}}
        (work / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False))
        tok = M2M100Tokenizer(vocab_file=str(work / "vocab.json"), spm_file=str(work / "sp.model"), src_lang=src,
                              tgt_lang=tgt)
    else:
        from transformers import NllbTokenizer
        from transformers.models.nllb.tokenization_nllb import FAIRSEQ_LANGUAGE_CODES
        bare = work / "bare"
        bare.mkdir()
        shutil.copy(work / "sp.model", bare / "sentencepiece.bpe.model")
        tok = NllbTokenizer.from_pretrained(str(bare), src_lang=src, tgt_lang=tgt,
                                            extra_special_tokens=FAIRSEQ_LANGUAGE_CODES)
    tok.save_pretrained(folder)
    shutil.copy(work / "sp.model", folder / "sentencepiece.bpe.model")
    return tok


def _randomise(model) -> None:
    """transformers' init (std 0.02) makes a random model repeat one token: every tensor gets a value that
    counts, the embeddings small (tied to the generator: large ones make each step copy its input)."""
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.add_(torch.randn(p.shape, generator=g) * 0.5)
            else:
                p.copy_(torch.randn(p.shape, generator=g) * (0.03 if "shared" in name else 1.5 * p.size(1) ** -0.5))


def build_m2m100(family: str, folder: Path, seed: int = 0) -> Path:
    """A random M2M100ForConditionalGeneration (2 encoder layers of 4 heads, 1 decoder layer of 2 heads)
    and its tokenizer files, saved as Hugging Face saves them."""
    from transformers import M2M100Config, M2M100ForConditionalGeneration
    work = folder.parent / (folder.name + "_work")
    work.mkdir(parents=True, exist_ok=True)
    _spm(work / "sp")
    tok = _tokenizer(family, folder, work)
    V = len(tok) + (100 + 8 if family == "m2m100" else 0)  # M2M100's language codes and made-up words
    cfg = M2M100Config(vocab_size=V, d_model=32, encoder_layers=2, decoder_layers=1, encoder_attention_heads=4,
                       decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=48, max_position_embeddings=128,
                       pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=2,
                       forced_eos_token_id=None, dropout=0.0, attention_dropout=0.0, activation_dropout=0.0,
                       encoder_layerdrop=0.0, decoder_layerdrop=0.0, scale_embedding=True)
    torch.manual_seed(seed)
    model = M2M100ForConditionalGeneration(cfg)
    _randomise(model)
    model.save_pretrained(folder)
    shutil.rmtree(work)
    return folder


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def family(request):
    return request.param


@pytest.fixture(scope="module")
def folder(family, tmp_path_factory) -> Path:
    torch.set_num_threads(1)
    name = "m2m100_tiny" if family == "m2m100" else "nllb-200-tiny"
    return build_m2m100(family, tmp_path_factory.mktemp(family) / name)


@pytest.fixture(scope="module")
def hf(folder, family):
    from transformers import AutoTokenizer, M2M100ForConditionalGeneration
    model = M2M100ForConditionalGeneration.from_pretrained(folder, attn_implementation="eager").eval()
    src, tgt, _ = FAMILIES[family]
    return model, AutoTokenizer.from_pretrained(folder, src_lang=src, tgt_lang=tgt)


@pytest.fixture(scope="module")
def lm(folder):
    return load_checkpoint(folder)


def _src(lm, text: str) -> list[int]:
    return source_ids(lm, text, DecodeOptions())[2]


# --------------------------------------------------------------------------- the tokenizer

def test_token_ids_equal_the_familys_tokenizer(lm, hf, family):
    _, tok = hf
    src, tgt, other = FAMILIES[family]
    assert isinstance(lm.src_vocab, M2M100Vocab) and (lm.src_lang, lm.tgt_lang) == (src, tgt)
    for text in PROBES + DE:
        assert _src(lm, text) == tok(text).input_ids, text
        assert lm.tgt_vocab.encode(lm.tgt_vocab.tokens(text, tgt)) + [2] == tok(text_target=text).input_ids, text
    # another source language: its code opens the source, as the tokenizer's src_lang does
    tok.src_lang = other
    assert _src(with_languages(lm, other, tgt), PROBES[0]) == tok(PROBES[0]).input_ids
    tok.src_lang = src
    assert lm.tgt_vocab.forced_start(tgt) == (_code(tok, family, tgt),) == (tok(text_target=EN[0]).input_ids[0],)


def _code(tok, family: str, lang: str) -> int:
    return tok.convert_tokens_to_ids(f"__{lang}__" if family == "m2m100" else lang)


def test_an_unknown_language_is_named(lm):
    with pytest.raises(ValueError, match="language 'xx_Yyyy' is not one of this model's"):
        with_languages(lm, "xx_Yyyy", lm.tgt_lang)


# --------------------------------------------------------------------------- the network

def test_logits_and_every_pattern_equal_transformers(lm, hf, family):
    model, tok = hf
    for text, ref_text in zip(PROBES[:3], EN):
        src = torch.tensor([tok(text).input_ids])
        labels = tok(text_target=ref_text).input_ids
        dec_in = torch.tensor([[lm.model.cfg.decoder_start_id] + labels[:-1]])
        with torch.inference_mode():
            ref = model(input_ids=src, decoder_input_ids=dec_in, output_attentions=True)
            with capture(lm.model) as trace:
                ours = lm.model(src, dec_in)
        torch.testing.assert_close(ours, ref.logits, atol=1e-5, rtol=1e-5)
        theirs = dict(zip(ATTN_KINDS, (ref.encoder_attentions, ref.decoder_attentions, ref.cross_attentions)))
        for kind in ATTN_KINDS:
            assert len(theirs[kind]) == lm.model.cfg.layers(kind)
            for i, t in enumerate(theirs[kind]):
                torch.testing.assert_close(trace[hook_name("pattern", kind, i)], t, atol=1e-6, rtol=1e-5)
    cfg = lm.model.cfg
    assert cfg.norm_first and cfg.final_norm and not cfg.logits_bias and cfg.pos_offset == cfg.pad_id + 1
    assert (cfg.encoder_heads, cfg.decoder_heads, cfg.d_ff, cfg.decoder_ff) == (4, 2, 64, 48)


@contextlib.contextmanager
def _eos_shift(lm, hf_model, shift: float):
    """Both models with </s>'s embedding row (tied to the generator) pushed along the decoder's final
    norm bias, which raises its logit: a random model then ends some outputs early. Restored exactly."""
    ours, theirs = lm.model.decoder.tok_embed.weight, hf_model.model.shared.weight
    saved = ours.detach().clone(), theirs.detach().clone()
    beta = lm.model.decoder.norm.bias.detach()
    with torch.no_grad():
        ours[2] += shift * beta / beta.norm() ** 2
        theirs[2] += shift * beta / beta.norm() ** 2
    try:
        yield
    finally:
        with torch.no_grad():
            ours.copy_(saved[0])
            theirs.copy_(saved[1])


@pytest.mark.parametrize("beam", [1, 3])
def test_decoding_equals_generate_with_the_target_language_forced(lm, hf, family, beam):
    """Greedy, and beam search with no length normalisation on either side (the two penalties agree
    only at 0), to two targets: the same tokens, the language code first."""
    model, tok = hf
    src_lang, tgt, other = FAMILIES[family]
    lengths = set()
    for target, shift in ((tgt, 0.0), (other, 0.0), (tgt, 1.0), (other, 0.6)):
        _decode_pair(lm, model, tok, family, src_lang, target, beam, shift, lengths)
    assert {2, 12} <= lengths  # an output that ended with </s> right after the code, and one at the limit


def _decode_pair(lm, model, tok, family, src_lang, target, beam, shift, lengths) -> None:
    with _eos_shift(lm, model, shift):
        pair = with_languages(lm, src_lang, target)
        for text in PROBES[:3]:
            src = torch.tensor([tok(text).input_ids])
            with torch.inference_mode():
                ref = model.generate(src, num_beams=beam, do_sample=False, max_new_tokens=12, length_penalty=0.0,
                                     early_stopping=True, forced_bos_token_id=_code(tok, family, target),
                                     suppress_tokens=[1])[0, 1:].tolist()
            tr = translate(pair, text, DecodeOptions(beam=beam, max_len=12, length_penalty=0.0, record=False,
                                                     trace=False, replace_unk=False))
            assert tr.output_ids == [t for t in ref if t != 1], (target, shift, text)
            assert tr.output_ids[0] == _code(tok, family, target) and tr.prefix_len == 0
            pieces = [t for t in tok.convert_ids_to_tokens(tr.output_ids[1:]) if t not in pair.tgt_vocab.specials]
            assert tr.text == tok.convert_tokens_to_string(pieces)
            lengths.add(len(tr.output_ids))


def test_translate_with_every_capture_and_the_views_inputs(lm):
    tr = translate(lm, PROBES[1], DecodeOptions(beam=2, max_len=10))
    assert tr.src_tokens[0] == lm.src_vocab.lang_token(lm.src_lang) and tr.src_tokens[-1] == "</s>"
    assert tr.start_token == "</s>" and tr.output_tokens[0] == lm.tgt_vocab.lang_token(lm.tgt_lang)
    assert tr.attention(CROSS).shape[:2] == (1, 2) and tr.attention(ENC_SELF).shape[:2] == (2, 4)
    assert tr.trace is not None and len(tr.steps) == len(tr.output_ids)


# --------------------------------------------------------------------------- loading and bad input

def test_hub_id_loads_from_a_prefilled_cache_offline(folder, lm, family, tmp_path):
    repo = "facebook/m2m100_418M" if family == "m2m100" else "facebook/nllb-200-distilled-600M"
    cache = tmp_path / "hub"
    _fill_hub_cache(cache, repo, folder)
    env = {"HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(cache), "HF_HOME": str(tmp_path / "home")}
    src, tgt, other = FAMILIES[family]
    out = _cli(["model.translate", "--checkpoint", repo, "--beam", "1", "--device", "cpu", "--tgt-lang", other],
               env, PROBES[0] + "\n")
    assert out.returncode == 0, out.stderr
    expected = translate(with_languages(lm, src, other), PROBES[0], DecodeOptions(beam=1, record=False, trace=False))
    assert out.stdout.strip() == expected.text.strip()
    bad = _cli(["model.translate", "--checkpoint", repo, "--tgt-lang", "xx"], env, "")
    assert bad.returncode == 2 and "language 'xx' is not one of this model's" in bad.stderr
    assert "Traceback" not in bad.stderr


def _damage(d: Path, how: str) -> None:
    if how == "unknown-type":
        cfg = json.loads((d / "config.json").read_text())
        cfg["model_type"] = "wobble"
        (d / "config.json").write_text(json.dumps(cfg))
    elif how == "no-tokenizer":
        (d / "sentencepiece.bpe.model").unlink()
    else:
        cut(d / "model.safetensors")


@pytest.mark.parametrize("how, message", [
    ("no-tokenizer", "sentencepiece.bpe.model is missing"),
    ("truncated", "model.safetensors is corrupt or truncated"),
    ("unknown-type", "model_type 'wobble'"),
])
def test_bad_folders_get_one_clear_message_and_the_others_keep_loading(folder, tmp_path, how, message):
    root = tmp_path / "models"
    root.mkdir()
    good = root / folder.name
    shutil.copytree(folder, good)
    d = root / "broken"
    shutil.copytree(folder, d)
    _damage(d, how)
    with pytest.raises(CheckpointError, match=message) as e:
        load_checkpoint(d)
    assert "\n" not in str(e.value)
    reg = load_all(root)
    assert [lm.path for lm in reg.models.values()] == [good]
    assert len(reg.problems) == 1 and "broken" in reg.problems[0] and message.split()[0] in reg.problems[0]
