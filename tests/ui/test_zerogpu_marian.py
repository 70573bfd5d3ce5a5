"""On ZeroGPU a large model's calls go through spaces.GPU and a small one's stay on the CPU.

The app runs as a Space runs it (``python app.py``, SPACES_ZERO_GPU=true) under the fork-and-pickle
stand-in for ``spaces`` (tests/zerogpu_emulation), which logs every GPU-wrapped call by name. The
threshold (ATTN_GPU_THRESHOLD_M) is set between our tiny checkpoint and a tiny Marian folder."""
from __future__ import annotations

import os

import pytest
from gradio_client import Client

pytest.importorskip("transformers")  # builds the tiny random Marian folder (a development requirement)

from model.engine.config import TransformerConfig  # noqa: E402
from model.families.catalog import ModelInfo, ModelStore  # noqa: E402
from model.families.ours import Registry  # noqa: E402
from tests.app_fixtures import app_process, free_port, make_checkpoint  # noqa: E402
from tests.model.test_marian import build_marian  # noqa: E402
from tests.ui.test_zerogpu import EMULATION, ROOT, logged  # noqa: E402
from ui import calls  # noqa: E402

DE = "Zwei Hunde spielen im Schnee."
THRESHOLD_M = 0.1


@pytest.fixture(scope="module")
def zero(tmp_path_factory):
    root = tmp_path_factory.mktemp("checkpoints")
    make_checkpoint(root / "de-en", "de", "en", seed=0)
    marian = build_marian(tmp_path_factory.mktemp("models") / "opus-mt-de-en", d_model=64, layers=2, heads=4,
                          ffn=256, eos_bias=1.5)
    work = tmp_path_factory.mktemp("emulation")
    port = free_port()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(EMULATION), str(ROOT)]), SPACES_ZERO_GPU="true",
               ATTN_CHECKPOINTS=str(root), ATTN_MODELS=str(marian), ATTN_GPU_THRESHOLD_M=str(THRESHOLD_M),
               GRADIO_SERVER_NAME="127.0.0.1", GRADIO_SERVER_PORT=str(port), SPACES_EMU_LOG=str(work / "calls.txt"),
               ATTN_TORCH_THREADS="1", PYTHONUNBUFFERED="1")
    for name in ("ATTN_GPU_CALLS", "ATTN_DEVICE", "ATTN_ALLOW_ANY_MODEL"):
        env.pop(name, None)
    with app_process(env, work / "server.log", port) as url:
        yield Client(url, verbose=False), work


def test_a_large_model_runs_in_gpu_calls_and_a_small_one_on_the_cpu(zero):
    client, work = zero
    sizes = {m["direction"]: m["parameters"] for m in client.predict(api_name="/models")}
    assert sizes["de-en"] < THRESHOLD_M * 1e6 <= sizes["opus-mt-de-en"]
    calls = work / "calls.txt"
    small = client.predict(DE, "de-en", 1, 6, api_name="/translate")
    assert small["model"] == "de-en" and "gpu_translate_one" not in logged(calls)
    big = client.predict(DE, "opus-mt-de-en", 1, 6, api_name="/translate")
    assert big["model"] == "opus-mt-de-en" and logged(calls).count("gpu_translate_one") == 1
    client.predict(DE, "opus-mt-de-en", 2, 6, api_name="/translate")  # beam search: not batched, GPU again
    client.predict(DE, "de-en", 2, 6, api_name="/translate")
    assert logged(calls).count("gpu_translate_one") == 2
    # loaded once, in the server's own process, before the first GPU call forked a worker from it
    log = (work / "server.log").read_text(encoding="utf-8")
    assert log.count("loaded opus-mt-de-en on first use") == 1
    assert {m["direction"]: m["loaded"] for m in client.predict(api_name="/models")}["opus-mt-de-en"]


def test_attribution_takes_a_gpu_call_for_every_model(zero):
    """Attribution is the GPU work ZeroGPU registers at start-up: it goes to the GPU whatever the size."""
    client, work = zero
    before = logged(work / "calls.txt").count("gpu_contrast")
    client.predict(DE, "de-en", 0, 8, api_name="/attribution")
    assert logged(work / "calls.txt").count("gpu_contrast") == before + 1


def test_attn_device_cpu_keeps_large_models_on_the_cpu(monkeypatch):
    """By size only where ATTN_DEVICE leaves the choice to the app; with cuda every call is wrapped anyway
    (gpu_calls_wrapped), and cpu keeps every model on the CPU."""
    cfg = TransformerConfig(src_vocab_size=10, tgt_vocab_size=10, d_model=8, n_heads=2, n_encoder_layers=1,
                            n_decoder_layers=1, d_ff=16)
    store = ModelStore(lambda info: None)
    store.add(ModelInfo("big", "big", "de", "en", "OPUS-MT", 80_000_000, cfg, pinned=False))
    store.add(ModelInfo("small", "small", "de", "en", "ours", 4_000_000, cfg))
    calls.REGISTRIES["routing-test"] = Registry(store)
    try:
        monkeypatch.delenv("ATTN_GPU_THRESHOLD_M", raising=False)
        for device, big in (("", True), ("auto", True), ("cpu", False), ("cuda", False)):
            monkeypatch.setenv("ATTN_DEVICE", device)
            assert calls.large_model("routing-test", "big") is big, device
            assert not calls.large_model("routing-test", "small")
        monkeypatch.setenv("ATTN_DEVICE", "auto")
        monkeypatch.setenv("ATTN_GPU_THRESHOLD_M", "100")
        assert not calls.large_model("routing-test", "big")
    finally:
        del calls.REGISTRIES["routing-test"]
