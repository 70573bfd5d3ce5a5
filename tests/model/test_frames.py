"""Training frames as models: listing in step order, loading with the parent's vocabulary, metadata checks."""
from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from model.families import load_checkpoint
from model.engine.decoding import DecodeOptions, translate
from model.families.frames import FrameError, FrameModel, list_frames, load_frame, read_info, read_parent

from tests.frames_fixtures import framed_run  # noqa: F401 (a fixture)

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = sorted(p for p in (ROOT / "checkpoints").glob("*/frames") if p.is_dir())


def check_log_spaced(steps: list[int]) -> None:
    """From 0 (the initialisation), then about every doubling: each step at most twice the one before."""
    assert steps[0] == 0 and len(steps) >= 3
    assert all(b > a for a, b in zip(steps, steps[1:]))
    assert all(b <= 2 * a for a, b in zip(steps[1:], steps[2:]))


def check_frames(folder: Path, parent: Path, sentence: str) -> list[FrameModel]:
    infos = list_frames(folder)
    check_log_spaced([i.step for i in infos])
    parent_info = read_parent(parent)
    models = []
    for info in infos:
        lm = load_frame(info.path, parent_info)
        assert lm.frame == info and lm.name.endswith(f"@ step {info.step}")
        assert info.updates_total >= info.step and info.lr >= 0 and info.val_loss > 0 and info.train_loss > 0
        tr = translate(lm, sentence, DecodeOptions(max_len=20))
        assert tr.output_ids and (tr.output_ids[-1] == lm.model.cfg.eos_id or len(tr.output_ids) == 20)
        models.append(lm)
    return models


def test_tiny_run_frames_load_translate_and_carry_metadata(framed_run):
    models = check_frames(framed_run.frames, framed_run.ckpt, framed_run.splits["val"][0])
    steps = [m.frame.step for m in models]
    hist = framed_run.history()
    assert steps == [0, 4, 8, 16, 32, hist[-1]["step"]]
    assert all(m.frame.updates_total == hist[-1]["step"] for m in models)
    # the last frame is the exported model (one epoch averaged = the last weights), bit for bit in fp16: stored
    # copies of the same numbers, nothing recomputed
    last, ckpt = models[-1], load_checkpoint(framed_run.ckpt)
    assert all(torch.equal(v, ckpt.model.state_dict()[k]) for k, v in last.model.state_dict().items())
    assert last.frame.val_loss == pytest.approx(hist[-1]["val_loss"], abs=1e-3)
    assert last.frame.epoch == pytest.approx(hist[-1]["epoch"])
    assert last.frame.averaged_epochs == (hist[-1]["epoch"],) and models[-2].frame.averaged_epochs == ()
    assert last.frame.label == f"step {last.frame.step:,} of {last.frame.step:,}"  # one epoch: nothing averaged
    two = dataclasses.replace(last.frame, averaged_epochs=(33, 42))
    assert two.label.endswith("(averaged over epochs 33–42)")
    # step 0 is the initialisation: not the trained weights, a higher validation loss
    w_q = lambda lm: lm.model.encoder.layers[0].self_attn.w_q.weight  # noqa: E731
    assert not torch.equal(w_q(models[0]), w_q(last))
    assert models[0].frame.val_loss > last.frame.val_loss


@pytest.mark.parametrize("folder", SHIPPED, ids=lambda p: p.parent.name)
def test_shipped_frames_load_translate_and_carry_metadata(folder):
    models = check_frames(folder, folder.parent, "Ein Mann fährt Fahrrad.")
    assert all(m.frame.updates_total == models[-1].frame.updates_total for m in models)
    assert all(m.path.stat().st_size < 10_000_000 for m in models)


def test_the_de_en_run_ends_at_its_planned_update_and_the_run_bar_says_whose_it_is():
    from model.families.frames import run_note
    from ui.present import run_bar
    folder = ROOT / "checkpoints" / "de-en" / "frames"
    infos = list_frames(folder)
    last = infos[-1]
    assert [i.step for i in infos][-3:] == [2480, 4096, 8060]
    assert last.step == last.updates_total == 8060 and last.averaged_epochs == tuple(range(121, 131))
    lm = load_frame(last.path, read_parent(folder.parent))
    tr = translate(lm, "Ein Hund läuft.", DecodeOptions(max_len=20))
    reg = type("Reg", (), {"models": {"de-en@8060": lm}})()
    bar = run_bar("de-en@8060", tr, reg)
    assert "step 8,060 of 8,060 (averaged over epochs 121–130)" in bar
    note = run_note(folder)
    assert "retraining" in note and "default" in note and note in bar.replace("\\", "")
    assert run_note(ROOT / "checkpoints" / "en-de") == ""  # no note: nothing added


def _copy_frame(framed_run, tmp_path: Path, step: int = 4) -> Path:
    dst = tmp_path / "frames" / f"step_{step:05d}.safetensors"
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(framed_run.frames / "step_00004.safetensors", dst)
    return dst


def _rewrite(path: Path, meta: dict) -> None:
    save_file(load_file(str(path)), str(path), metadata=meta)


def test_bad_frames_get_clear_messages(framed_run, tmp_path):
    path = _copy_frame(framed_run, tmp_path)
    meta = {"model_config": json.dumps(load_checkpoint(framed_run.ckpt).model.cfg.to_dict())}
    _rewrite(path, meta)
    with pytest.raises(FrameError, match="no 'frame' metadata"):
        load_frame(path, framed_run.ckpt)
    _rewrite(path, meta | {"frame": '{"step": 4, "epoch": 1.0'})
    with pytest.raises(FrameError, match="'frame' metadata is corrupt"):
        list_frames(path.parent)
    _rewrite(path, meta | {"frame": json.dumps({"step": 4, "epoch": 1.0, "lr": 0.1})})
    with pytest.raises(FrameError, match="missing train_loss, val_loss, updates_total"):
        read_info(path)
    good = json.dumps({"step": 4, "epoch": 1.0, "lr": 0.1, "train_loss": 2.0, "val_loss": 2.0, "updates_total": 9})
    _rewrite(path, {"frame": good})
    with pytest.raises(FrameError, match="no 'model_config' metadata"):
        load_frame(path, framed_run.ckpt)
    path.write_bytes(path.read_bytes()[:100])
    with pytest.raises(FrameError, match="not a readable safetensors file"):
        load_frame(path, framed_run.ckpt)
    with pytest.raises(FrameError, match="not inside a checkpoint folder"):
        load_frame(_copy_frame(framed_run, tmp_path, 8))
    with pytest.raises(FrameError, match="frames folder not found"):
        list_frames(tmp_path / "nowhere")


def test_a_frame_of_another_vocabulary_is_refused(framed_run, tmp_path):
    other = tmp_path / "other"
    shutil.copytree(framed_run.ckpt, other)
    vocab = json.loads((other / "vocab.json").read_text())
    key = next(k for k in vocab if isinstance(vocab[k], list))
    vocab[key] = vocab[key][:-1]
    (other / "vocab.json").write_text(json.dumps(vocab))
    with pytest.raises(FrameError, match="another run's frame"):
        load_frame(framed_run.frames / "step_00004.safetensors", other)


def test_frames_are_offered_like_added_models(framed_run):
    from model.families import catalog
    from model.families import load_all
    from model.families.frames import offer_frames
    reg = catalog.with_added_models(load_all(framed_run.ckpt), [], max_loaded=2)
    keys = offer_frames(reg, framed_run.frames, framed_run.ckpt)
    assert keys == [f"de-en@{s}" for s in (0, 4, 8, 16, 32, 48)]
    assert not any(catalog.is_loaded(reg, k) for k in keys)          # described now, loaded on first use
    for k in keys[:3]:
        assert reg.models[k].frame.step == int(k.split("@")[1])
    assert [k for k in keys if catalog.is_loaded(reg, k)] == keys[1:3]  # the least recently used went
    assert catalog.is_loaded(reg, "de-en")                               # the checkpoint itself stays
    assert catalog.infos(reg)[keys[0]].source.endswith("step_00000.safetensors")


def test_evaluate_takes_a_frame_file_and_names_a_bad_one(framed_run, tmp_path, capsys):
    from model.training.evaluate import main as evaluate
    ckpt = tmp_path / "ckpt"
    shutil.copytree(framed_run.ckpt, ckpt)
    (ckpt / "frames").mkdir()
    frame = ckpt / "frames" / "step_00008.safetensors"
    shutil.copy(framed_run.frames / frame.name, frame)
    flags = ["--data", str(framed_run.data), "--split", "val", "--beam", "2", "--limit", "5", "--json"]
    assert evaluate(["--checkpoint", str(frame)] + flags) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["checkpoint"] == str(frame) and res["sentences"] == 5 and 0 <= res["lowercased"]["bleu"] <= 100
    frame.write_bytes(b"not a frame")
    with pytest.raises(SystemExit) as e:
        evaluate(["--checkpoint", str(frame)] + flags)
    assert e.value.code == 2 and "step_00008" in capsys.readouterr().err


def test_a_run_goes_on_from_a_frame_when_its_state_is_lost(framed_run, tmp_path, train_flags):
    """--init-frame: the new run starts at the frame's step and epoch, from its weights, not from scratch."""
    from model.training.train import main
    last = list_frames(framed_run.frames)[-1]
    first_loss = list_frames(framed_run.frames)[0].train_loss
    args = train_flags + ["--data", str(framed_run.data), "--work", str(tmp_path / "work"), "--out",
                          str(tmp_path / "ckpt"), "--average", "1", "--epochs", str(int(last.epoch) + 2)]
    assert main(args + ["--init-frame", str(last.path)]) == 0
    hist = json.loads((tmp_path / "work" / "history.json").read_text())
    assert [h["epoch"] for h in hist] == [int(last.epoch) + 1, int(last.epoch) + 2]
    per_epoch = hist[1]["step"] - hist[0]["step"]
    assert hist[0]["step"] == last.step + per_epoch
    assert hist[0]["train_loss"] < 0.5 * first_loss  # trained weights, not a fresh initialisation
    # a frame inside an epoch cannot start a run: the data order is per epoch
    meta = {"frame": json.dumps(dict(json.loads(_frame_meta(last.path)["frame"]), epoch=last.epoch - 0.5))}
    odd = tmp_path / "odd.safetensors"
    save_file(load_file(str(last.path)), str(odd), metadata=_frame_meta(last.path) | meta)
    with pytest.raises(SystemExit, match="not an epoch boundary"):
        main(args + ["--work", str(tmp_path / "work2"), "--init-frame", str(odd)])


def _frame_meta(path: Path) -> dict:
    from safetensors import safe_open
    with safe_open(str(path), "pt") as f:
        return dict(f.metadata())


def test_a_frames_record_is_read_again_only_when_its_file_changes(tmp_path):
    """Each run redraws the training curves from every frame's record: read once while the file is unchanged."""
    from ui.present import learn as present_learn
    calls = []

    def reader(path):
        calls.append(path)
        return Path(path).read_text()
    f = tmp_path / "frame.json"
    f.write_text("step 256")
    first = present_learn._read(reader, str(f), present_learn._stamp(f))
    again = present_learn._read(reader, str(f), present_learn._stamp(f))
    assert first == again == "step 256" and len(calls) == 1
    f.write_text("step 1024, rewritten")
    assert present_learn._read(reader, str(f), present_learn._stamp(f)) == "step 1024, rewritten"
    assert len(calls) == 2
    assert present_learn._stamp(tmp_path) is None and present_learn._stamp(tmp_path / "missing") is None
