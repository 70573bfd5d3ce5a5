"""Marian (OPUS-MT) folders converted into our network, checked against transformers' own Marian.

A tiny random MarianMTModel with opus-mt's settings (swish, scaled embeddings, static sinusoidal
positions, <pad> as the decoder start) and a SentencePiece pair trained here stand in for a real
OPUS-MT folder: no download, and transformers is the reference only (the app never imports it).
"""
import contextlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

transformers = pytest.importorskip("transformers")  # a development requirement: the reference

from model import families  # noqa: E402
from model.engine.decoding import DecodeOptions, beam_search, greedy_batch, translate  # noqa: E402
from model.engine.hooks import capture  # noqa: E402
from model.families.catalog import ModelInfo  # noqa: E402
from model.families.marian import MarianVocab  # noqa: E402
from model.families import load_all, load_checkpoint  # noqa: E402
from model.families.ours import CheckpointError, save_checkpoint  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
DE = ["Ein Mädchen läuft über die Straße.", "Zwei Hunde spielen im Schnee!", "Der Mann kauft 3 Äpfel für 4,50 €.",
      "Öffne die Tür, bitte?", "Eine Frau fährt 12 km mit dem Fahrrad.", "Große Häuser stehen am Fluss (rechts).",
      "Die Kinder essen Brötchen; sie sind müde.", "Um 7:30 Uhr beginnt der Kurs – pünktlich!"]
EN = ["A girl runs across the street.", "Two dogs play in the snow!", "The man buys 3 apples for 4.50 €.",
      "Open the door, please?", "A woman rides 12 km on a bicycle.", "Big houses stand by the river (right).",
      "The children eat rolls; they are tired.", "At 7:30 the course begins – on time!"]
PROBES = ["Der Mann läuft 5 km über die Brücke!", "Zwölf Äpfel, 3 Birnen & ein Café?", "Übermorgen: 20 % Rabatt.",
          "Ça coûte 9,99 €… naïve Façade", "Die Straße (links) ist 100m lang."]


def _spm(lines: list[str], path: Path) -> None:
    import sentencepiece as spm
    spm.SentencePieceTrainer.train(sentence_iterator=iter(lines * 4), model_prefix=str(path), vocab_size=90,
                                   character_coverage=1.0, minloglevel=2, hard_vocab_limit=False, num_threads=1)


def _randomise(model, eos_bias: float) -> None:
    """Hugging Face's init (std 0.02, zero biases, identity norms) makes a random model repeat one token
    for ever: give every tensor a value that counts, and </s> a head start, so that outputs vary and
    some (not all) hypotheses end with </s> before the length limit."""
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.add_(torch.randn(p.shape, generator=g) * 0.2)
            else:
                p.copy_(torch.randn(p.shape, generator=g) * (0.15 if "embed" in name or "shared" in name
                                                             else p.size(1) ** -0.5))
        model.final_logits_bias.add_(torch.randn(model.final_logits_bias.shape, generator=g) * 0.3)
        model.final_logits_bias[0, model.config.eos_token_id] += eos_bias


def build_marian(folder: Path, d_model=32, layers=2, heads=4, ffn=64, activation="swish", seed=0,
                 eos_bias: float = 0.0, dec_layers=None, dec_heads=None, dec_ffn=None) -> Path:
    """A random MarianMTModel plus MarianTokenizer files, saved as Hugging Face saves them. The decoder
    is shaped as the encoder unless ``dec_*`` say otherwise."""
    from transformers import MarianConfig, MarianMTModel, MarianTokenizer
    work = folder.parent / (folder.name + "_spm")
    work.mkdir(parents=True, exist_ok=True)
    _spm(DE, work / "src")
    _spm(EN, work / "tgt")
    import sentencepiece as spm
    pieces = set()
    for side in ("src", "tgt"):
        sp = spm.SentencePieceProcessor(model_file=str(work / f"{side}.model"))
        pieces |= {sp.id_to_piece(i) for i in range(sp.get_piece_size())}
    itos = ["</s>", "<unk>"] + sorted(pieces - {"<unk>", "<s>", "</s>"}) + ["<pad>"]
    (work / "vocab.json").write_text(json.dumps({t: i for i, t in enumerate(itos)}, ensure_ascii=False))
    tok = MarianTokenizer(vocab=str(work / "vocab.json"), source_spm=str(work / "src.model"),
                          target_spm=str(work / "tgt.model"), source_lang="de", target_lang="en")
    V, pad = len(itos), len(itos) - 1
    cfg = MarianConfig(vocab_size=V, decoder_vocab_size=V, d_model=d_model, encoder_layers=layers,
                       decoder_layers=dec_layers or layers, encoder_attention_heads=heads,
                       decoder_attention_heads=dec_heads or heads, encoder_ffn_dim=ffn,
                       decoder_ffn_dim=dec_ffn or ffn, activation_function=activation,
                       scale_embedding=True, static_position_embeddings=True, max_position_embeddings=128,
                       pad_token_id=pad, eos_token_id=0, decoder_start_token_id=pad, forced_eos_token_id=None,
                       share_encoder_decoder_embeddings=True, dropout=0.0, attention_dropout=0.0)
    torch.manual_seed(seed)
    model = MarianMTModel(cfg)
    _randomise(model, eos_bias)
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    shutil.rmtree(work)
    return folder


@pytest.fixture(scope="module")
def marian_dir(tmp_path_factory) -> Path:
    torch.set_num_threads(1)
    return build_marian(tmp_path_factory.mktemp("marian") / "opus-mt-de-en")


@pytest.fixture(scope="module")
def hf(marian_dir):
    from transformers import MarianMTModel, MarianTokenizer
    model = MarianMTModel.from_pretrained(marian_dir, attn_implementation="eager").eval()
    return model, MarianTokenizer.from_pretrained(marian_dir)


@pytest.fixture(scope="module")
def lm(marian_dir):
    return load_checkpoint(marian_dir)


def _src(lm, text: str) -> torch.Tensor:
    return torch.tensor([lm.src_vocab.encode(lm.src_vocab.tokens(text)) + [lm.model.cfg.eos_id]])


# --------------------------------------------------------------------------- the tokenizer

def test_token_ids_equal_marian_tokenizer(lm, hf):
    _, tok = hf
    for text in PROBES + DE:
        assert _src(lm, text)[0].tolist() == tok(text).input_ids, text
        assert lm.tgt_vocab.encode(lm.tgt_vocab.tokens(text)) + [0] == tok(text_target=text).input_ids, text
    # the unknown piece: not in vocab.json -> <unk>, as MarianTokenizer does
    assert lm.src_vocab.encode(["never-a-piece"]) == [tok.unk_token_id]


def test_the_vocabulary_frames_and_pools_like_the_tokenizer(lm, hf):
    _, tok = hf
    ids = tok(text_target="Two dogs play in the snow!").input_ids
    tokens = lm.tgt_vocab.decode(ids)
    assert tokens[-1] == "</s>"
    assert lm.tgt_vocab.to_text(tokens) == tok.decode(ids, skip_special_tokens=True)
    for text in PROBES:  # a random model's outputs mix both sides' pieces (one shared vocabulary)
        out = greedy_batch(lm.model, _src(lm, text), 12)[0]
        assert lm.tgt_vocab.to_text(lm.tgt_vocab.decode(out)) == tok.decode(out, skip_special_tokens=True)
    words = lm.tgt_vocab.join(tokens)
    assert words[:5] == ["Two", "dogs", "play", "in", "the"] and words[-1] == "</s>"
    assert isinstance(lm.tgt_vocab, MarianVocab) and lm.src_lang == "de" and lm.tgt_lang == "en"


# --------------------------------------------------------------------------- the network

def test_logits_equal_transformers(lm, hf):
    model, tok = hf
    batch = tok(PROBES, text_target=[e for e in EN[:len(PROBES)]], return_tensors="pt", padding=True)
    pad = lm.model.cfg.pad_id
    dec_in = torch.cat([torch.full_like(batch.labels[:, :1], pad), batch.labels[:, :-1]], 1)
    dec_in[dec_in == -100] = pad
    with torch.inference_mode():
        ref = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask, decoder_input_ids=dec_in).logits
        ours = lm.model(batch.input_ids, dec_in)
    keep = dec_in != pad  # rows of query <pad> past each target's end are not compared (HF masks no query)
    keep[:, 0] = True
    torch.testing.assert_close(ours[keep], ref[keep], atol=1e-5, rtol=1e-5)
    assert lm.model.cfg.activation == "silu" and not lm.model.cfg.norm_first and lm.model.cfg.logits_bias


def test_every_hook_pattern_equals_output_attentions(lm, hf):
    model, tok = hf
    src = _src(lm, PROBES[0])
    dec_in = torch.tensor([[lm.model.cfg.decoder_start_id] + tok(text_target=EN[0]).input_ids[:-1]])
    with torch.inference_mode():
        ref = model(input_ids=src, decoder_input_ids=dec_in, output_attentions=True)
        with capture(lm.model) as trace:
            lm.model(src, dec_in)
    L = lm.model.cfg.n_encoder_layers
    for kind, theirs in (("encoder.self_attn", ref.encoder_attentions), ("decoder.self_attn", ref.decoder_attentions),
                         ("decoder.cross_attn", ref.cross_attentions)):
        assert len(theirs) == L
        for i in range(L):
            torch.testing.assert_close(trace[f"{kind.split('.')[0]}.layers.{i}.{kind.split('.')[1]}.hook_pattern"],
                                       theirs[i], atol=1e-6, rtol=1e-5)


EOS_SHIFTS = (0.0, 1.5, 2.5)  # a random model's </s> never wins mid-sentence: shift it so that some end early


@contextlib.contextmanager
def _eos_shift(lm, hf_model, shift: float):
    """Both models with </s>'s logit raised by ``shift`` (the same change to the same bias)."""
    eos = lm.model.cfg.eos_id
    saved = lm.model.generator.bias.detach().clone(), hf_model.final_logits_bias.detach().clone()
    with torch.no_grad():
        lm.model.generator.bias[eos] += shift
        hf_model.final_logits_bias[0, eos] += shift
    try:
        yield
    finally:
        with torch.no_grad():  # restored exactly (x + s - s need not be x in floating point)
            lm.model.generator.bias.copy_(saved[0])
            hf_model.final_logits_bias.copy_(saved[1])


def test_greedy_tokens_equal_generate(lm, hf):
    model, _ = hf
    lengths = set()
    for shift in EOS_SHIFTS:
        with _eos_shift(lm, model, shift):
            for text in PROBES:
                src = _src(lm, text)
                with torch.inference_mode():
                    ref = model.generate(src, num_beams=1, do_sample=False, max_new_tokens=20)[0, 1:].tolist()
                ours = greedy_batch(lm.model, src, 20)[0]
                assert ours == [t for t in ref if t != lm.model.cfg.pad_id], (shift, text)
                assert lm.model.cfg.pad_id not in ours
                lengths.add(len(ours))
    assert {1, 20} <= lengths  # both a hypothesis that ended with </s> and one that ran to the limit


def test_beam_equals_generate_with_raw_log_probabilities(lm, hf):
    """With no length normalisation (our alpha 0, their length_penalty 0) both rank by the summed
    log-probability, and both stop a hypothesis at </s>: the same tokens. (Their penalty divides by
    length**alpha, ours by GNMT's ((5 + length) / 6)**alpha: the two agree only at alpha 0.)"""
    model, _ = hf
    differs_from_greedy = 0
    for shift in EOS_SHIFTS:
        with _eos_shift(lm, model, shift):
            for text in PROBES:
                src = _src(lm, text)
                with torch.inference_mode():
                    ref = model.generate(src, num_beams=4, do_sample=False, max_new_tokens=20, length_penalty=0.0,
                                         early_stopping=True)[0, 1:].tolist()
                best, _, _ = beam_search(lm.model, src, 4, 20, alpha=0.0, record=False)
                assert best.ids == [t for t in ref if t != lm.model.cfg.pad_id], (shift, text)
                differs_from_greedy += best.ids != greedy_batch(lm.model, src, 20)[0]
    assert differs_from_greedy  # the beam really searched


def test_translate_runs_every_capture_on_a_marian_model(lm):
    tr = translate(lm, PROBES[1], DecodeOptions(beam=2, max_len=12))
    assert tr.src_tokens[-1] == "</s>" and tr.start_token == "<pad>"
    assert tr.decoder_input_tokens[0] == "<pad>"
    cross = tr.attention("cross")
    assert cross.shape[-1] == len(tr.src_tokens) and cross.shape[2] == len(tr.output_ids)
    assert len(tr.steps) == len(tr.output_ids)
    assert isinstance(tr.text, str)


# --------------------------------------------------------------------------- loading and bad input

def test_the_family_registry_tells_the_families_apart(marian_dir, lm, tiny_lm, tmp_path):
    ours_dir = save_checkpoint(tmp_path / "ours", tiny_lm.model, tiny_lm.src_vocab, tiny_lm.tgt_vocab, "de", "en")
    assert families.detect(marian_dir) is families.marian and families.detect(ours_dir) is families.ours
    assert families.detect("Helsinki-NLP/opus-mt-xx-yy") is families.marian  # a Hub id is no folder
    assert families.detect(tmp_path / "missing") is families.ours  # whose loader says what is missing
    assert families.family_of(lm) is families.marian
    assert families.family_of(load_checkpoint(ours_dir)) is families.ours
    assert ModelInfo.of_loaded("x", lm).family == "OPUS-MT"
    assert ModelInfo.of_loaded("y", tiny_lm).family == "ours"


def test_loading_and_describing_ask_the_one_registry(monkeypatch, marian_dir, tmp_path):
    """load_checkpoint (and so load_all and the command-line tools) and catalog.describe pick the family
    through detect: a family put first in FAMILIES is asked before any other, its own error named by it."""
    from types import SimpleNamespace
    from model.families import catalog

    class StubError(ValueError):
        pass

    def load(source, device):
        if source.endswith("bad"):
            raise StubError("weights missing")
        return ("stub model", source, device)

    stub = SimpleNamespace(claims=lambda s: str(s).startswith("stub:"), owns=lambda lm: False, load=load,
                           LOAD_ERROR=StubError, NOUN="Stub model", LABEL="stub")
    monkeypatch.setattr(families, "FAMILIES", (stub, *families.FAMILIES))
    assert families.detect("stub:x") is stub and families.detect(marian_dir) is families.marian
    assert load_checkpoint("stub:x") == ("stub model", "stub:x", "cpu")
    with pytest.raises(CheckpointError, match=r"^Stub model stub:bad: weights missing$"):
        load_checkpoint("stub:bad")
    assert catalog.describe(str(marian_dir)).family == "OPUS-MT"
    monkeypatch.setattr(families.m2m100, "claims", lambda s: True)  # now detect answers M2M100 for any source
    with pytest.raises(CheckpointError, match="sentencepiece.bpe.model is missing"):  # read the M2M100 way
        catalog.describe(str(marian_dir))


def test_only_the_registry_writes_the_family_order():
    """No module outside model/families/__init__.py asks a family whether it claims a source."""
    import ast
    root = Path(__file__).resolve().parents[2]
    found = []
    for p in [*root.joinpath("model").rglob("*.py"), *root.joinpath("ui").rglob("*.py"), root / "app.py"]:
        if p == root / "model" / "families" / "__init__.py":
            continue
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) in (
                    "claims", "is_m2m100_source") and not (p.name == "m2m100.py"):
                found.append(f"{p.relative_to(root)}:{node.lineno}")
    assert found == []


def _copy(marian_dir: Path, dest: Path) -> Path:
    shutil.copytree(marian_dir, dest)
    return dest


def test_pytorch_bin_weights_load_the_same(marian_dir, lm, tmp_path):
    from safetensors.torch import load_file
    d = _copy(marian_dir, tmp_path / "opus-mt-de-en")
    torch.save(load_file(str(d / "model.safetensors")), d / "pytorch_model.bin")
    (d / "model.safetensors").unlink()
    other = load_checkpoint(d)
    src = _src(lm, PROBES[0])
    tgt = torch.tensor([[lm.model.cfg.decoder_start_id, 5, 6, 7]])
    with torch.inference_mode():
        # exact: the same weights from either file, the same kernels on the same inputs
        assert torch.equal(other.model(src, tgt), lm.model(src, tgt))


def cut(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def damage(d: Path, how: str) -> None:
    """Break a Marian folder ``how``: not-marian, bad-activation, no-target-spm, else a truncated weights file."""
    cfg = json.loads((d / "config.json").read_text())
    if how == "not-marian":
        cfg["model_type"] = "bart"
    elif how == "bad-activation":
        cfg["activation_function"] = "wobble"
    elif how == "no-target-spm":
        (d / "target.spm").unlink()
    else:
        cut(d / "model.safetensors")
    (d / "config.json").write_text(json.dumps(cfg))


@pytest.mark.parametrize("how, message", [
    ("not-marian", "is not a Marian model \\(model_type 'bart'"),
    ("no-target-spm", "target.spm is missing"),
    ("bad-activation", "unknown activation 'wobble'"),
    ("truncated", "model.safetensors is corrupt or truncated"),
])
def test_bad_folders_get_a_clear_message_and_the_others_keep_loading(marian_dir, tmp_path, how, message):
    root = tmp_path / "models"
    root.mkdir()
    good = _copy(marian_dir, root / "opus-mt-de-en")
    d = _copy(marian_dir, root / "broken")
    damage(d, how)
    with pytest.raises(CheckpointError, match=message):
        load_checkpoint(d)
    from model.families.marian import MarianError, load_marian
    with pytest.raises(MarianError, match=message):
        load_marian(d)
    reg = load_all(root)
    assert list(reg.models) == ["de-en"] and reg.models["de-en"].path == good
    assert len(reg.problems) == 1 and "broken" in reg.problems[0]


def _fill_hub_cache(cache: Path, repo_id: str, folder: Path) -> None:
    """huggingface_hub's cache layout, as a finished download leaves it."""
    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    shutil.copytree(folder, repo / "snapshots" / commit)


def _cli(args: list[str], env: dict, stdin: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *args], input=stdin, capture_output=True, text=True,
                          cwd=ROOT, env={**os.environ, **env}, timeout=300)


def test_hub_id_loads_from_a_prefilled_cache_offline(marian_dir, lm, tmp_path):
    cache = tmp_path / "hub"
    _fill_hub_cache(cache, "Helsinki-NLP/opus-mt-de-en", marian_dir)
    env = {"HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(cache), "HF_HOME": str(tmp_path / "home")}
    by_id = _cli(["model.translate", "--checkpoint", "Helsinki-NLP/opus-mt-de-en", "--beam", "1",
                  "--device", "cpu"], env, PROBES[0] + "\n")
    by_folder = _cli(["model.translate", "--checkpoint", str(marian_dir), "--beam", "1", "--device", "cpu"],
                     env, PROBES[0] + "\n")
    assert by_id.returncode == 0, by_id.stderr
    assert by_id.stdout == by_folder.stdout and by_id.stdout.strip()
    expected = translate(lm, PROBES[0], DecodeOptions(beam=1, record=False, trace=False)).text
    assert by_id.stdout.strip() == expected.strip()
    # an id that is not in the cache: a clear error, offline, no stack trace
    missing = _cli(["model.translate", "--checkpoint", "Helsinki-NLP/opus-mt-xx-yy"], env, "")
    assert missing.returncode == 2 and "could not fetch 'Helsinki-NLP/opus-mt-xx-yy'" in missing.stderr
    assert "Traceback" not in missing.stderr


# --------------------------------------------------------------------------- the views on a post-norm model

def test_views_derived_for_pre_norm_use_their_post_norm_forms_and_the_others_stay_true(lm):
    from model.analysis.attribution import alti_matrices
    from model.analysis.computation import Computation, force
    fo = force(lm, PROBES[0], EN[0])
    tr = fo.translation
    assert tr.src_ids[-1] == lm.model.cfg.eos_id and tr.decoder_input_tokens[0] == "<pad>"
    comp = Computation(tr.trace, lm.model)
    assert comp.residual_norms("decoder").post_norm  # checked against the model in test_postnorm_views
    r_enc, r = alti_matrices(comp)
    assert r.shape == (len(tr.output_ids), len(tr.src_ids) + len(tr.output_ids))
    # the logit lens needs no final norm here: the last layer's lens is the model's own distribution
    lens = comp.logit_lens()
    np_probs = torch.from_numpy(fo.loss).neg().exp()
    torch.testing.assert_close(torch.from_numpy(lens.probs[-1]).gather(1, torch.tensor(tr.output_ids)[:, None])[:, 0],
                               np_probs, atol=1e-5, rtol=1e-4)
    steps = comp.embedding_steps("encoder")
    assert steps.scale == pytest.approx(lm.model.cfg.d_model ** 0.5)
