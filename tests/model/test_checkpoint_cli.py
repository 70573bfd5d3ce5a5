"""Checkpoint folders (round trip, clear errors) and the translate / evaluate CLIs."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import sacrebleu
import torch

from model.engine.config import BOS_ID, EOS_ID, PAD_ID
from model.engine.transformer import Transformer
from model.families import load_checkpoint
from model.families.ours import CheckpointError, find_checkpoints, save_checkpoint
from model.families.cli import load_or_exit

ROOT = Path(__file__).resolve().parents[2]
SRC = torch.tensor([[BOS_ID, 4, 5, 6, 7, EOS_ID], [BOS_ID, 8, 9, EOS_ID, PAD_ID, PAD_ID]])
TGT = torch.tensor([[BOS_ID, 10, 11, 12], [BOS_ID, 13, PAD_ID, PAD_ID]])


def cli(module: str, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONIOENCODING="utf-8")
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, "-m", module, *args], cwd=ROOT, env=env, input=stdin,
                          capture_output=True, text=True, timeout=120)


@pytest.fixture
def saved(tmp_path, tiny_lm):
    path = tmp_path / "ckpt"
    save_checkpoint(path, tiny_lm.model, tiny_lm.src_vocab, tiny_lm.tgt_vocab, "de", "en", {"length_penalty": 0.8})
    return path


def logits(model):
    with torch.inference_mode():
        return model(SRC, TGT)


# -- round trip ------------------------------------------------------------------------------
def test_round_trip(saved, tiny_lm):
    assert sorted(p.name for p in saved.iterdir()) == ["config.json", "model.safetensors", "vocab.json"]
    lm = load_checkpoint(saved)
    assert lm.model.cfg == tiny_lm.model.cfg
    assert lm.src_vocab == tiny_lm.src_vocab and lm.tgt_vocab == tiny_lm.tgt_vocab
    assert (lm.src_lang, lm.tgt_lang, lm.name, lm.path) == ("de", "en", "de-en", saved)
    assert lm.meta == {"length_penalty": 0.8}
    assert not lm.model.training
    assert lm.model.generator.weight is lm.model.decoder.tok_embed.weight  # tying survives the round trip
    torch.testing.assert_close(logits(lm.model), logits(tiny_lm.model), atol=1e-2, rtol=1e-2)
    # exactly the original model with its weights rounded to fp16
    rounded = Transformer(tiny_lm.model.cfg).eval()
    rounded.load_state_dict({k: v.half().float() for k, v in tiny_lm.model.state_dict().items()})
    torch.testing.assert_close(logits(lm.model), logits(rounded), atol=1e-6, rtol=0)
    assert find_checkpoints(saved.parent) == [saved]


def test_round_trip_fp32_untied(tmp_path, tiny_lm, tiny_cfg):
    from dataclasses import replace
    torch.manual_seed(3)
    model = Transformer(replace(tiny_cfg, tie_embeddings=False)).eval()
    save_checkpoint(tmp_path / "c", model, tiny_lm.src_vocab, tiny_lm.tgt_vocab, "de", "en", dtype=torch.float32)
    lm = load_checkpoint(tmp_path / "c")
    assert not lm.model.cfg.tie_embeddings
    assert lm.model.generator.weight is not lm.model.decoder.tok_embed.weight
    torch.testing.assert_close(logits(lm.model), logits(model), atol=1e-6, rtol=0)


# -- broken checkpoints ------------------------------------------------------------------------
def edit_config(path: Path, **changes):
    cfg = json.loads((path / "config.json").read_text())
    cfg["model"].update(changes)
    (path / "config.json").write_text(json.dumps(cfg))


def truncate(p: Path):
    data = p.read_bytes()
    p.write_bytes(data[: len(data) // 2])


BREAKAGES = {
    "no-folder": (lambda p: p.rename(p.with_name("elsewhere")), r"not found"),
    "no-weights": (lambda p: (p / "model.safetensors").unlink(), r"model\.safetensors is missing"),
    "no-vocab": (lambda p: (p / "vocab.json").unlink(), r"vocab\.json is missing"),
    "no-config": (lambda p: (p / "config.json").unlink(), r"config\.json is missing"),
    "garbage-weights": (lambda p: (p / "model.safetensors").write_bytes(os.urandom(3000)), r"corrupt or truncated"),
    "truncated-weights": (lambda p: truncate(p / "model.safetensors"), r"corrupt or truncated"),
    "empty-weights": (lambda p: (p / "model.safetensors").write_bytes(b""), r"corrupt or truncated"),
    "garbage-config": (lambda p: (p / "config.json").write_text("{not json"), r"not a valid model config"),
    "config-without-model": (lambda p: (p / "config.json").write_text('{"src_lang": "de"}'),
                             r"not a valid model config"),
    "garbage-vocab": (lambda p: (p / "vocab.json").write_text("[1, 2"), r"vocab\.json is corrupt"),
    "vocab-size-changed": (lambda p: edit_config(p, src_vocab_size=20), r"vocabulary sizes 14/14 do not match"),
    "d-model-changed": (lambda p: edit_config(p, d_model=64), r"shapes do not match"),
    "layers-changed": (lambda p: edit_config(p, n_encoder_layers=3), r"weights do not match the config"),
    "heads-invalid": (lambda p: edit_config(p, n_heads=5), r"config\.json does not describe a buildable model"),
    # loadable shapes, wrong model: the weights' own config (safetensors metadata) catches it
    "heads-changed": (lambda p: edit_config(p, n_heads=2), r"n_heads: weights 4, config\.json 2"),
    "size-not-a-number": (lambda p: edit_config(p, d_ff="wide"), r"config\.json does not describe a buildable model"),
}


@pytest.mark.parametrize("name", list(BREAKAGES))
def test_broken_checkpoint_gives_clear_error(saved, name, capsys):
    breaker, pattern = BREAKAGES[name]
    breaker(saved)
    with pytest.raises(CheckpointError, match=pattern) as err:
        load_checkpoint(saved)
    msg = str(err.value)
    assert str(saved) in msg and "\n" not in msg
    # no chained exception for a traceback to dump
    assert err.value.__cause__ is None and (err.value.__context__ is None or err.value.__suppress_context__)
    # the CLIs' loader turns it into one line on stderr and a non-zero exit
    with pytest.raises(SystemExit) as ex:
        load_or_exit(saved, "cpu")
    assert ex.value.code not in (0, None)
    err_out = capsys.readouterr().err
    assert err_out.count("\n") == 1 and err_out.startswith("error: ") and re.search(pattern, err_out)


def test_cli_bad_checkpoint_exits_with_one_line(saved, tmp_path):
    (saved / "model.safetensors").write_bytes(b"\x00garbage" * 50)
    res = cli("model.translate", "--checkpoint", str(saved), stdin="haus\n")
    assert res.returncode != 0
    assert "Traceback" not in res.stderr and res.stdout == ""
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "model.safetensors" in lines[0]

    res = cli("model.evaluate", "--checkpoint", str(tmp_path / "missing"), "--data", str(tmp_path))
    assert res.returncode != 0
    assert "Traceback" not in res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "not found" in lines[0]


# -- the CLIs on a trained copy-task model -------------------------------------------------------
def test_translate_cli_keeps_blank_lines(trained_copy):
    lines = ["haus katze hund", "", "rot blau gross klein", "", "", "ball auto baum", "   "]
    res = cli("model.translate", "--checkpoint", str(trained_copy["ckpt"]), "--beam", "2",
              stdin="\n".join(lines) + "\n")
    assert res.returncode == 0, res.stderr
    out = res.stdout.split("\n")
    assert out[-1] == "" and len(out) - 1 == len(lines)
    for src, hyp in zip(lines, out):
        if src.strip():
            assert hyp.strip(), f"empty translation for {src!r}"
        else:
            assert hyp == ""
    # the copy model copies: at least two of the three sentences come back exactly
    assert sum(hyp == src for src, hyp in zip(lines, out) if src.strip()) >= 2


def test_evaluate_cli_prints_both_bleus_with_signatures(trained_copy, tmp_path):
    hyps_file = tmp_path / "hyps.txt"
    res = cli("model.evaluate", "--checkpoint", str(trained_copy["ckpt"]), "--data", str(trained_copy["data"]),
              "--split", "test_2016_flickr", "--beam", "1", "--hyps", str(hyps_file))
    assert res.returncode == 0, res.stderr
    text = res.stdout
    assert "de-en test_2016_flickr beam 1" in text and "12 sentences" in text
    cased = re.search(r"BLEU cased\s+([\d.]+)\s+(\S+)", text)
    lower = re.search(r"BLEU lowercased\s+([\d.]+)\s+(\S+)", text)
    assert cased and lower, text
    assert re.fullmatch(r"nrefs:1\|case:mixed\|eff:no\|tok:13a\|smooth:exp\|version:[\d.]+", cased.group(2))
    assert re.fullmatch(r"nrefs:1\|case:lc\|eff:no\|tok:13a\|smooth:exp\|version:[\d.]+", lower.group(2))
    # the printed scores are sacreBLEU's scores of the written translations
    hyps = hyps_file.read_text(encoding="utf-8").splitlines()
    refs = trained_copy["splits"]["test_2016_flickr"]
    assert len(hyps) == len(refs) == 12
    assert float(cased.group(1)) == pytest.approx(sacrebleu.corpus_bleu(hyps, [refs]).score, abs=0.01)
    assert float(lower.group(1)) == pytest.approx(sacrebleu.corpus_bleu(hyps, [refs], lowercase=True).score,
                                                  abs=0.01)
    assert float(cased.group(1)) > 80  # the copy model reproduces sentences it was trained on


def test_evaluate_json(trained_copy, capsys):
    from model.training.evaluate import main
    assert main(["--checkpoint", str(trained_copy["ckpt"]), "--data", str(trained_copy["data"]),
                 "--split", "test_2016_flickr", "--beam", "2", "--limit", "5", "--json", "--device", "cpu"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["sentences"] == 5 and res["beam"] == 2 and res["split"] == "test_2016_flickr"
    assert set(res["cased"]) == {"bleu", "signature"} and "case:lc" in res["lowercased"]["signature"]
    assert 0 <= res["lowercased"]["bleu"] <= 100 and res["lowercased"]["bleu"] >= res["cased"]["bleu"]
