"""Training (``python -m model.train``): learning a copy task, resuming, DDP on CPU, data download."""
from __future__ import annotations

import functools
import gzip
import json
import os
import signal
import subprocess
import sys
import threading
import time
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file

from model.engine.data import token_batches, with_specials
from model.engine.decoding import translate_batch
from model.engine.vocab import load_vocabs, tokenize_corpus
from model.families import load_checkpoint
from model.engine.corpus import ensure_file, load_pairs
from model.training.train import lr_at, main

from tests.app_fixtures import free_port

ROOT = Path(__file__).resolve().parents[2]


def sub_env() -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def history(path: Path) -> list[dict]:
    return json.loads((path / "history.json").read_text())


def saved_meta(work: Path) -> dict:
    with safe_open(str(work / "state.safetensors"), "pt") as f:
        return json.loads(f.metadata()["json"])


# -- small pieces --------------------------------------------------------------------------
def test_lr_schedule():
    assert lr_at(1, 1e-3, 100) == pytest.approx(1e-5)
    assert lr_at(100, 1e-3, 100) == pytest.approx(1e-3)
    assert lr_at(400, 1e-3, 100) == pytest.approx(5e-4)
    assert lr_at(50, 1e-3, 100) < lr_at(100, 1e-3, 100) > lr_at(101, 1e-3, 100)


def test_token_batches_cover_everything_within_budget():
    lens = [3, 9, 4, 12, 7, 7, 2, 15, 5, 8] * 5
    src = [[5] * n for n in lens]
    tgt = [[6] * (n + (i % 3)) for i, n in enumerate(lens)]
    for seed in (None, 7):
        batches = token_batches(src, tgt, 40, seed=seed)
        flat = sorted(i for b in batches for i in b)
        assert flat == list(range(len(lens)))
        for b in batches:
            longest = max(max(len(src[i]), len(tgt[i])) for i in b)
            assert longest * len(b) <= 40 or len(b) == 1
    assert token_batches(src, tgt, 40, seed=7) == token_batches(src, tgt, 40, seed=7)
    assert token_batches(src, tgt, 40, seed=7) != token_batches(src, tgt, 40, seed=8)


# -- learning --------------------------------------------------------------------------------
def test_copy_task_is_learned(trained_copy):
    hist = history(trained_copy["ckpt"])
    assert hist == history(trained_copy["work"])
    assert [h["epoch"] for h in hist] == list(range(1, 41))
    assert hist[-1]["train_loss"] < 0.4 * hist[0]["train_loss"]
    assert hist[-1]["val_loss"] < 0.4 * hist[0]["val_loss"]
    assert all(b["step"] > a["step"] for a, b in zip(hist, hist[1:]))
    lm = load_checkpoint(trained_copy["ckpt"])
    assert lm.meta["training"]["averaged_epochs"] == [40]
    assert lm.meta["training"]["updates"] == hist[-1]["step"]
    train = trained_copy["splits"]["train"]
    hyps = translate_batch(lm, train, beam=1, replace_unk=False)
    exact = sum(h == s for h, s in zip(hyps, train))
    assert exact >= 0.9 * len(train), f"only {exact}/{len(train)} copied exactly"
    val = trained_copy["splits"]["val"]  # unseen sentences of the same kind still come out mostly right
    hyps_val = translate_batch(lm, val, beam=3, replace_unk=False)
    assert sum(h == s for h, s in zip(hyps_val, val)) >= len(val) // 4


# -- resuming --------------------------------------------------------------------------------
def test_resume_after_stop_continues_exactly(tmp_path, make_corpus, train_flags, capsys):
    """Stopped after epoch 1 and rerun == one uninterrupted run (same history, same weights)."""
    make_corpus(tmp_path / "data", n_train=60, n_val=8)
    base = train_flags + ["--data", str(tmp_path / "data"), "--epochs", "3", "--average", "2",
                          "--dropout", "0.1", "--attn-dropout", "0.1"]  # dropout: the RNG state must resume too
    a = base + ["--work", str(tmp_path / "wa"), "--out", str(tmp_path / "ca")]
    assert main(a + ["--stop-after", "1"]) == 0
    assert [h["epoch"] for h in history(tmp_path / "wa")] == [1]
    assert saved_meta(tmp_path / "wa")["epoch"] == 1
    assert not (tmp_path / "ca").exists()
    steps_1 = history(tmp_path / "wa")[0]["step"]
    capsys.readouterr()
    assert main(a) == 0
    assert f"resumed from {tmp_path / 'wa' / 'state.safetensors'} at epoch 1, step {steps_1}" in capsys.readouterr().out
    hist_a = history(tmp_path / "wa")
    assert [h["epoch"] for h in hist_a] == [1, 2, 3]
    assert hist_a[0]["step"] == steps_1 and hist_a[1]["step"] > steps_1
    assert load_checkpoint(tmp_path / "ca").meta["training"]["averaged_epochs"] == [2, 3]

    b = base + ["--work", str(tmp_path / "wb"), "--out", str(tmp_path / "cb")]
    assert main(b) == 0
    hist_b = history(tmp_path / "wb")
    strip = lambda h: [{k: v for k, v in e.items() if "seconds" not in k} for e in h]  # noqa: E731
    assert strip(hist_a) == strip(hist_b)
    wa, wb = load_file(str(tmp_path / "ca" / "model.safetensors")), load_file(str(tmp_path / "cb" / "model.safetensors"))
    assert wa.keys() == wb.keys()
    for k in wa:
        torch.testing.assert_close(wa[k], wb[k], atol=1e-6, rtol=0, msg=k)


def test_resume_after_kill_9(tmp_path, make_corpus, train_flags, capsys):
    make_corpus(tmp_path / "data", n_train=60, n_val=8)
    work, out = tmp_path / "work", tmp_path / "ckpt"
    flags = train_flags + ["--data", str(tmp_path / "data"), "--work", str(work), "--out", str(out)]
    log = open(tmp_path / "train.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "model.train", *flags, "--epochs", "200"], cwd=ROOT,
                            env=sub_env(), stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + 90
        while not (work / "state.safetensors").exists():
            assert proc.poll() is None, (tmp_path / "train.log").read_text()
            assert time.time() < deadline, "no training state written in 90 s"
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        log.close()
    assert proc.returncode == -signal.SIGKILL
    assert not out.exists()
    saved = saved_meta(work)
    k = saved["epoch"]
    assert 1 <= k < 200
    capsys.readouterr()
    assert main(flags + ["--epochs", str(k + 2)]) == 0
    assert f"at epoch {k}, step {saved['step']}" in capsys.readouterr().out
    hist = history(work)
    assert [h["epoch"] for h in hist] == list(range(1, k + 3))
    assert [h["step"] for h in hist][k - 1] == saved["step"]
    assert all(b["step"] > a["step"] for a, b in zip(hist, hist[1:]))
    assert saved_meta(work)["epoch"] == k + 2
    assert load_checkpoint(out).meta["training"]["updates"] == hist[-1]["step"]


# -- DistributedDataParallel on CPU -------------------------------------------------------------
def test_ddp_two_processes_gloo(tmp_path, make_corpus, train_flags):
    make_corpus(tmp_path / "data", n_train=80, n_val=8)
    work, out = tmp_path / "work", tmp_path / "ckpt"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
           "--master_port", str(free_port()), "-m", "model.train", *train_flags, "--data", str(tmp_path / "data"),
           "--work", str(work), "--out", str(out), "--epochs", "2", "--max-tokens", "100", "--device", "cpu"]
    res = subprocess.run(cmd, cwd=ROOT, env=sub_env(), capture_output=True, text=True, timeout=240)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    lm = load_checkpoint(out)
    assert lm.model.cfg.d_model == 64
    hist = history(out)
    assert [h["epoch"] for h in hist] == [1, 2]
    # each rank took half of every epoch's batches, so the step counter counts half of them
    src_vocab, tgt_vocab = load_vocabs(work / "vocab.json")
    src, tgt = load_pairs(tmp_path / "data", "train", "de", "en")
    s_ids = [with_specials(src_vocab.encode(t)) for t in tokenize_corpus(src, "de")]
    t_ids = [with_specials(tgt_vocab.encode(t)) for t in tokenize_corpus(tgt, "en")]
    per_epoch = [len(token_batches(s_ids, t_ids, 100, seed=1000 + e)) // 2 for e in (1, 2)]
    assert [h["step"] for h in hist] == [per_epoch[0], sum(per_epoch)]
    assert hist[1]["train_loss"] < hist[0]["train_loss"]


# -- downloading missing Multi30k files ------------------------------------------------------
@pytest.fixture
def remote(tmp_path, make_corpus):
    """A folder standing for the Multi30k repository, plus broken files."""
    root = tmp_path / "remote"
    splits = make_corpus(root, n_train=30, n_val=5)
    good = (root / "val.de.gz").read_bytes()
    (root / "trunc.de.gz").write_bytes(good[: len(good) // 2])
    (root / "plain.de.gz").write_bytes(b"this is not gzip\n")
    return root, splits


@pytest.fixture
def http_server(remote, monkeypatch):
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    handler = functools.partial(SimpleHTTPRequestHandler, directory=str(remote[0]))
    handler.log_message = lambda *a, **k: None
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def no_partial_files(folder: Path) -> bool:
    return not folder.exists() or not any(p.suffix == ".part" for p in folder.iterdir())


def test_download_from_file_url(tmp_path, remote):
    root, splits = remote
    data = tmp_path / "data"
    src, tgt = load_pairs(data, "val", "de", "en", base_url=root.as_uri())
    assert src == splits["val"] and tgt == splits["val"]
    assert (data / "val.de.gz").read_bytes() == (root / "val.de.gz").read_bytes()
    assert no_partial_files(data)
    # present files are used as they are, without asking the server
    assert ensure_file(data, "val", "de", base_url="file:///nonexistent") == data / "val.de.gz"


def test_download_from_http_server_and_train(tmp_path, remote, http_server, train_flags):
    root, splits = remote
    data = tmp_path / "data"
    path = ensure_file(data, "train", "en", base_url=http_server)
    assert path == data / "train.en.gz"
    with gzip.open(path, "rt", encoding="utf-8") as f:
        assert f.read().splitlines() == splits["train"]
    # training on an empty folder fetches what it needs
    empty = tmp_path / "empty"
    assert main(train_flags + ["--data", str(empty), "--base-url", http_server, "--work", str(tmp_path / "w"),
                               "--out", str(tmp_path / "c"), "--epochs", "1"]) == 0
    assert sorted(p.name for p in empty.iterdir()) == ["train.de.gz", "train.en.gz", "val.de.gz", "val.en.gz"]
    assert (tmp_path / "c" / "model.safetensors").is_file()


@pytest.mark.parametrize("split", ["trunc", "plain", "missing"])
@pytest.mark.parametrize("how", ["http", "file"])
def test_bad_download_raises_and_leaves_nothing(tmp_path, remote, request, split, how):
    base = request.getfixturevalue("http_server") if how == "http" else remote[0].as_uri()
    data = tmp_path / "data"
    with pytest.raises(RuntimeError, match=rf"could not download .*{split}\.de\.gz"):
        ensure_file(data, split, "de", base_url=base)
    assert not (data / f"{split}.de.gz").exists()
    assert no_partial_files(data)
