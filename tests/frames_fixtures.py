"""A tiny training run with frames, built once per test module that imports ``framed_run``."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from tests.conftest import TRAIN_FLAGS, _copy_corpus


@dataclass(frozen=True)
class FramedRun:
    data: Path
    work: Path
    ckpt: Path
    frames: Path
    splits: dict

    def history(self) -> list[dict]:
        return json.loads((self.work / "history.json").read_text())


def train_with_frames(root: Path, epochs: int = 12) -> FramedRun:
    """The copy task (about 4 updates an epoch), frames on the log schedule: 0, 4, 8, 16, 32, last."""
    from model.training.train import main
    splits = _copy_corpus(root / "data")
    torch.manual_seed(0)
    rc = main(TRAIN_FLAGS + ["--data", str(root / "data"), "--work", str(root / "work"), "--out", str(root / "ckpt"),
                             "--epochs", str(epochs), "--average", "1", "--frames", "log"])
    assert rc == 0
    return FramedRun(root / "data", root / "work", root / "ckpt", root / "work" / "frames", splits)


@pytest.fixture(scope="module")
def framed_run(tmp_path_factory) -> FramedRun:
    return train_with_frames(tmp_path_factory.mktemp("framed"))


def framed_app(tmp_path_factory):
    """An app (no warm-up) serving a checkpoint that ships frames, for a browser module's fixture: yields its
    address, closes it after."""
    import shutil

    from tests.app_fixtures import launch
    run = train_with_frames(tmp_path_factory.mktemp("framed"))
    root = tmp_path_factory.mktemp("ck")
    shutil.copytree(run.ckpt, root / "de-en")
    shutil.copytree(run.frames, root / "de-en" / "frames")
    demo, url = launch(root, warm=False)
    yield url
    demo.close()
