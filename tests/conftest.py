"""Shared fixtures for the engine tests: tiny models, tiny vocabularies, tiny synthetic corpora.

Everything here is small on purpose: the suite runs on a busy 2-core CPU.
"""
from __future__ import annotations

import gzip
import random
from pathlib import Path

import pytest
import torch

from model.engine.config import TransformerConfig
from model.engine.loaded import LoadedModel
from model.engine.transformer import Transformer
from model.engine.vocab import SPECIALS, Vocab

WORDS = ("haus", "katze", "hund", "baum", "auto", "ball", "rot", "blau", "gross", "klein")


def _write_split(data_dir: Path, split: str, lines: list[str], langs=("de", "en")) -> None:
    for lang in langs:
        with gzip.open(data_dir / f"{split}.{lang}.gz", "wt", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")


def _copy_corpus(data_dir: Path, n_train: int = 200, n_val: int = 20, seed: int = 0) -> dict[str, list[str]]:
    """Copy task: target = source, 3-7 words from a 10-word vocabulary. Test split = first train lines."""
    rng = random.Random(seed)
    sent = lambda: " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 7)))  # noqa: E731
    splits = {"train": [sent() for _ in range(n_train)], "val": [sent() for _ in range(n_val)]}
    splits["test_2016_flickr"] = splits["train"][:12]
    data_dir.mkdir(parents=True, exist_ok=True)
    for split, lines in splits.items():
        _write_split(data_dir, split, lines)
    return splits


@pytest.fixture
def make_corpus():
    """make_corpus(dir, n_train=200, n_val=20, seed=0) -> {split: lines}; writes {split}.{de,en}.gz."""
    return _copy_corpus


@pytest.fixture
def tiny_cfg() -> TransformerConfig:
    return TransformerConfig(src_vocab_size=len(SPECIALS) + len(WORDS), tgt_vocab_size=len(SPECIALS) + len(WORDS),
                             d_model=32, n_heads=4, n_encoder_layers=2, n_decoder_layers=2, d_ff=64,
                             dropout=0.0, attn_dropout=0.0, max_len=64)


@pytest.fixture
def tiny_model(tiny_cfg) -> Transformer:
    torch.set_num_threads(1)
    torch.manual_seed(0)
    return Transformer(tiny_cfg).eval()


@pytest.fixture
def tiny_lm(tiny_model) -> LoadedModel:
    vocab = Vocab(list(SPECIALS) + list(WORDS))
    return LoadedModel(tiny_model, vocab, Vocab(list(vocab.itos)), "de", "en")


# train flags for a model that learns the copy task in a few seconds
TRAIN_FLAGS = ["--src", "de", "--tgt", "en", "--d-model", "64", "--heads", "4", "--enc-layers", "2",
               "--dec-layers", "2", "--d-ff", "128", "--dropout", "0", "--attn-dropout", "0", "--max-len", "32",
               "--max-tokens", "400", "--lr", "3e-3", "--warmup", "40", "--min-freq", "1", "--threads", "1",
               "--no-bleu"]


@pytest.fixture(scope="session")
def train_flags() -> list[str]:
    return list(TRAIN_FLAGS)


@pytest.fixture(scope="session")
def trained_copy(tmp_path_factory) -> dict:
    """One copy-task model trained in-process with ``model.train.main`` (shared by several tests)."""
    from model.training.train import main
    root = tmp_path_factory.mktemp("copy")
    splits = _copy_corpus(root / "data")
    torch.manual_seed(0)
    rc = main(TRAIN_FLAGS + ["--data", str(root / "data"), "--work", str(root / "work"),
                             "--out", str(root / "ckpt"), "--epochs", "40", "--average", "1"])
    assert rc == 0
    return {"root": root, "data": root / "data", "work": root / "work", "ckpt": root / "ckpt", "splits": splits}


@pytest.fixture(scope="module")
def client(server):
    """A gradio_client Client of the module's ``server`` fixture (demo, url, ...): one per module."""
    from gradio_client import Client
    return Client(server[1], verbose=False)


# Each run's test durations, slowest first, beside the screenshots: the suite's budget is read from them.
_DURATIONS: dict[str, float] = {}


def pytest_runtest_logreport(report) -> None:
    """Setup, call and teardown summed per test (under xdist the controller receives every worker's reports)."""
    _DURATIONS[report.nodeid] = _DURATIONS.get(report.nodeid, 0.0) + report.duration


def pytest_sessionfinish(session) -> None:
    if hasattr(session.config, "workerinput") or not _DURATIONS:  # an xdist worker: its controller writes
        return
    import json
    import os
    out = Path(os.environ.get("ARTIFACTS_DIR", "test-artifacts"))
    out.mkdir(parents=True, exist_ok=True)
    ranked = sorted(_DURATIONS.items(), key=lambda kv: -kv[1])
    per_file: dict[str, float] = {}
    for nodeid, seconds in ranked:
        per_file[nodeid.split("::")[0]] = per_file.get(nodeid.split("::")[0], 0.0) + seconds
    (out / "durations.json").write_text(json.dumps({
        "total_s": round(sum(_DURATIONS.values()), 3),
        "files": {k: round(v, 3) for k, v in sorted(per_file.items(), key=lambda kv: -kv[1])},
        "tests": {k: round(v, 3) for k, v in ranked}}, indent=1), encoding="utf-8")
