"""OPUS-MT (Marian) pairs in a static Space: the weights' precision chosen by the greedy-token rule our own
models' was chosen by, the weights split into parts under the Hub's 10 MB a file, joined again exactly, and
the Space's README naming where each pair comes from."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers")  # builds the random Marian folders (a development requirement)

from model.engine.decoding import DecodeOptions, greedy_batch, source_ids  # noqa: E402
from model.families import load_checkpoint  # noqa: E402
from tests.model.test_marian import build_marian  # noqa: E402
from tests.web.test_web_fixtures import ROOT, lines  # noqa: E402
from web import marian as opus  # noqa: E402
from web.build import LFS_MB, PART_BYTES, WASM, build_direction  # noqa: E402
from web.build import main as build_main  # noqa: E402
from web.runtime import Graphs  # noqa: E402


def checkpoints(tmp: Path) -> Path:
    """A checkpoints folder holding one of our directions (en-de) and the data its example comes from."""
    ckpt = tmp / "checkpoints"
    (ckpt / "en-de").mkdir(parents=True)
    for f in ("config.json", "spm.model", "model.safetensors", "vocab.json"):
        (ckpt / "en-de" / f).symlink_to(ROOT / "checkpoints" / "en-de" / f)
    (ckpt / "multi30k").symlink_to(ROOT / "checkpoints" / "multi30k")
    return ckpt


def test_auto_precision_is_the_smaller_that_keeps_98_percent_of_greedy_outputs(tmp_path):
    torch.set_num_threads(1)
    folder = build_marian(tmp_path / "hf" / "opus-mt-de-en", eos_bias=2.5)
    meta = build_direction(folder, tmp_path / "site", "auto", checkpoints=ROOT / "checkpoints")
    check = meta["precision_check"]
    assert check["sentences"] == opus.SAMPLE and check["rule"] == opus.RULE
    want = "int8" if check["int8"] >= opus.RULE * check["sentences"] else "fp16"
    assert meta["precision"] == want, check
    assert ("fp16" in check) == (want == "fp16")  # fp16 measured only when int8 broke the rule
    # the count is real: the stored graphs decode that many sentences as the engine does
    lm = load_checkpoint(folder)
    graphs = Graphs(tmp_path / "site" / "models" / meta["name"], meta)
    same = 0
    for text in lines("val", "de")[:opus.SAMPLE]:
        _, _, ids, budget = source_ids(lm, text, DecodeOptions(beam=1))
        same += graphs.greedy(ids, budget) == greedy_batch(lm.model, torch.tensor([ids]), budget)[0]
    assert same == check[want]


def test_a_language_multi30k_lacks_keeps_fp16_and_says_why(tmp_path, monkeypatch):
    folder = build_marian(tmp_path / "hf" / "opus-mt-de-en")
    monkeypatch.setattr(opus, "_sample", lambda lm, n: [])
    lm = load_checkpoint(folder)
    precision, check = opus.choose_precision(lm, {}, {})
    assert precision == "fp16" and check["sentences"] == 0 and "no validation sentences" in check["note"]


def test_a_space_with_an_opus_mt_pair_has_no_file_over_the_hubs_limit(tmp_path):
    """OPUS-MT base's shape (6 + 6 layers, 8 heads, d_ff = 4 d_model) at d_model 192, its weights in fp16:
    12 MB, split into parts; every file of the Space under 10 MB but ONNX Runtime's WASM (not ours, kept
    with Git LFS); the parts joined decode as the engine does."""
    torch.set_num_threads(1)
    folder = build_marian(tmp_path / "hf" / "opus-mt-de-en", d_model=192, layers=6, heads=8, ffn=768, eos_bias=2.5)
    space = tmp_path / "space"
    assert build_main(["--space", str(space), "--checkpoints", str(checkpoints(tmp_path)), "--marian", str(folder),
                       "--marian-precision", "fp16"]) == 0
    model = space / "models" / "opus-mt-de-en"
    meta = json.loads((model / "meta.json").read_text(encoding="utf-8"))
    assert meta["precision"] == "fp16" and len(meta["weights"]) >= 2 and not (model / "weights.bin").exists()
    sizes = [(model / p).stat().st_size for p in meta["weights"]]
    assert all(n == PART_BYTES for n in sizes[:-1]) and 0 < sizes[-1] <= PART_BYTES
    assert sum(sizes) > LFS_MB * 1e6  # the whole would have been over the limit
    over = sorted(p.relative_to(space).as_posix() for p in space.rglob("*") if p.is_file() and p.stat().st_size > LFS_MB * 1e6)
    assert over == [WASM], over
    attributes = (space / ".gitattributes").read_text(encoding="utf-8")
    assert "*.bin filter=lfs" in attributes and "*.wasm filter=lfs" in attributes  # the Hub takes binaries by LFS
    manifest = json.loads((space / "models" / "manifest.json").read_text(encoding="utf-8"))
    about = manifest["about"]["opus-mt-de-en"]
    assert manifest["marian"] == ["opus-mt-de-en"] and about["bytes"] == sum(sizes) + sum(
        (model / f).stat().st_size for f in ("encoder.onnx", "decoder.onnx"))
    readme = (space / "README.md").read_text(encoding="utf-8")
    assert "`opus-mt-de-en`: OPUS-MT (Marian), from `opus-mt-de-en`" in readme and "see the model's page" in readme

    lm = load_checkpoint(folder)
    graphs = Graphs(model, meta)
    for text in lines("val", "de")[:5]:
        _, _, ids, budget = source_ids(lm, text, DecodeOptions(beam=1))
        with torch.inference_mode():
            assert graphs.greedy(ids, budget) == greedy_batch(lm.model, torch.tensor([ids]), budget)[0], text
    shutil.rmtree(space)
