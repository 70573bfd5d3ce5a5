"""A Hub id in ATTN_MODELS, fetched through huggingface_hub from a loopback stand-in of the Hub
(tests/hub_standin.py; HF_ENDPOINT points at it, HF_HOME is a temporary folder): at start-up only the
config and tokenizer files come, the weights on first use; the translation equals the folder's own."""
from __future__ import annotations

import os

import pytest
from gradio_client import Client

pytest.importorskip("transformers")  # builds the tiny random Marian folder (a development requirement)

from model.engine.decoding import DecodeOptions, translate  # noqa: E402
from model.families import load_checkpoint  # noqa: E402
from tests.app_fixtures import app_process, free_port, make_checkpoint  # noqa: E402
from tests.hub_standin import HubStandIn  # noqa: E402
from tests.model.test_marian import build_marian  # noqa: E402

DE = "Zwei Hunde spielen im Schnee!"
REPO, MISSING = "Helsinki-NLP/opus-mt-de-en", "Helsinki-NLP/opus-mt-xx-yy"


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    root = tmp_path_factory.mktemp("checkpoints")
    make_checkpoint(root / "de-en", "de", "en", seed=0)
    folder = build_marian(tmp_path_factory.mktemp("hub") / "opus-mt-de-en", eos_bias=1.5)
    home = tmp_path_factory.mktemp("hf_home")
    port = free_port()
    with HubStandIn({REPO: folder}) as hub:
        env = dict(os.environ, HF_ENDPOINT=hub.url, HF_HOME=str(home), ATTN_CHECKPOINTS=str(root),
                   ATTN_MODELS=f"{REPO},{MISSING}", ATTN_DEVICE="cpu", GRADIO_SERVER_NAME="127.0.0.1",
                   GRADIO_SERVER_PORT=str(port), ATTN_TORCH_THREADS="1", PYTHONUNBUFFERED="1",
                   HF_HUB_DISABLE_TELEMETRY="1")
        for name in ("HF_HUB_OFFLINE", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "ATTN_GPU_CALLS", "HF_TOKEN"):
            env.pop(name, None)
        with app_process(env, home / "server.log", port) as url:
            yield Client(url, verbose=False), hub, folder, home


def test_a_hub_id_is_listed_at_start_up_and_its_weights_come_on_first_use(served):
    client, hub, folder, home = served
    listing = {m["direction"]: m for m in client.predict(api_name="/models")}
    assert list(listing) == ["de-en", REPO] and listing[REPO]["label"].startswith("German → English · OPUS-MT")
    fetched = [r for r in hub.requests if r.startswith("GET") and "/resolve/" in r]
    assert any(r.endswith("/config.json") for r in fetched) and any(r.endswith("/target.spm") for r in fetched)
    assert not any("model.safetensors" in r for r in fetched)  # not at start-up
    out = client.predict(DE, REPO, 1, 10, api_name="/translate")
    assert any("model.safetensors" in r for r in hub.requests if r.startswith("GET"))
    direct = translate(load_checkpoint(folder), DE, DecodeOptions(beam=1, max_len=10))
    assert out["model"] == REPO and out["output_tokens"] == direct.output_tokens and out["translation"] == direct.text
    # into huggingface_hub's own cache under HF_HOME
    cached = list((home / "hub").glob("models--Helsinki-NLP--opus-mt-de-en/snapshots/*/model.safetensors"))
    assert len(cached) == 1


def test_an_id_the_hub_does_not_have_is_skipped_with_its_reason(served):
    client, _, _, home = served
    assert MISSING not in {m["direction"] for m in client.predict(api_name="/models")}
    log = (home / "server.log").read_text(encoding="utf-8")
    line = next(x for x in log.splitlines() if MISSING in x and "WARNING" in x)
    assert "could not fetch" in line and line.endswith("skipped") and "Traceback" not in log
    with pytest.raises(Exception) as e:
        client.predict(DE, MISSING, 1, 4, api_name="/translate")
    assert "offers only its listed models" in str(e.value)
