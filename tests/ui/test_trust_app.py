"""The trust signals in the launched app (gradio_client): /translate returns them beside its existing
payload, the panel under the translation shows them, and exports record them."""
from __future__ import annotations

import json

import pytest
from gradio_client import Client

from model.families import load_checkpoint
from model.engine.decoding import DecodeOptions, translate
from model.analysis.trust_signals import SHOWN, Flag, reference_of, save_reference, signals
from tests.app_fixtures import SENTENCES, launch, make_checkpoint, named

DE = "Ein Mann fährt mit dem Fahrrad durch die Stadt."
EN = "Two dogs are playing in the snow."
# /translate's payload before the signals were added: every key must stay
TRANSLATE_KEYS = {"model", "src_text", "src_tokens", "output_tokens", "decoder_input_tokens", "translation",
                  "replaced", "truncated", "score", "interventions", "notices", "steps", "src_word_spans",
                  "src_words", "output_word_spans", "output_words", "decoder_input_word_spans",
                  "decoder_input_words", "attention", "attention_shape", "attention_mask", "precision"}
ENDPOINTS = {"/translate": ["text", "direction", "beam", "max_len", "decimals", "trust"],
             "/compare": None, "/attribution": None, "/models": [], "/continue_from": None}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("checkpoints")
    make_checkpoint(root / "de-en", "de", "en", seed=0)
    make_checkpoint(root / "en-de", "en", "de", seed=1)   # no validation reference: values only
    lm = load_checkpoint(root / "de-en")
    runs = [signals(lm, translate(lm, s)) for s in SENTENCES["de"][1:]]
    ref = reference_of(lm, "de-en", runs, "four test sentences")
    ref.flag = Flag(signal="seq_logprob", worse_than=90.0, precision=0.85, recall=0.7)
    save_reference(ref, lm)
    demo, url = launch(root)
    yield demo, url, lm
    demo.close()


@pytest.fixture(scope="module")
def client(server):
    return Client(server[1], verbose=False)


def test_api_endpoints_keep_their_names_and_parameters(client):
    named_ = client.view_api(print_info=False, return_format="dict")["named_endpoints"]
    assert set(ENDPOINTS) <= set(named_)
    for name, params in ENDPOINTS.items():
        if params is not None:
            assert [p["parameter_name"] for p in named_[name]["parameters"]] == params, name


def test_translate_api_returns_the_signals_when_asked(server, client):
    _, _, lm = server
    plain = client.predict(DE, "de-en", 1, 25, api_name="/translate")
    assert set(plain) - TRANSLATE_KEYS == {"trust"} and TRANSLATE_KEYS <= set(plain)
    assert plain["trust"] is None  # not asked for: ALTI+ is not computed
    out = client.predict(DE, "de-en", 1, 25, None, True, api_name="/translate")
    assert {k: v for k, v in out.items() if k != "trust"} == {k: v for k, v in plain.items() if k != "trust"}
    trust = out["trust"]
    expected = signals(lm, translate(lm, DE, DecodeOptions(max_len=25)))
    for name in ("seq_logprob", "alti_source_share", "attn_eos", "attn_ign_src", "entropy_mean", "entropy_max"):
        assert trust["signals"][name] == pytest.approx(getattr(expected, name), abs=1e-6), name
    assert [r["name"] for r in trust["readings"]] == list(SHOWN)
    assert all(0 <= r["worse_than"] <= 100 for r in trust["readings"])
    assert "validation sentences" in trust["readings"][0]["sentence"]
    assert isinstance(trust["flagged"], bool) and "labelled set" in trust["flag"]
    assert trust["note"] == ""


def test_a_model_without_reference_gets_values_only(client):
    out = client.predict(EN, "en-de", 1, 25, trust=True, api_name="/translate")
    trust = out["trust"]
    assert all(r["worse_than"] is None for r in trust["readings"])
    assert trust["flagged"] is None and "no validation reference" in trust["note"]
    assert trust["signals"]["output_tokens"] == len(out["output_tokens"])


def test_empty_input_keeps_its_answer(client):
    out = client.predict("   ", "de-en", 1, 25, trust=True, api_name="/translate")
    assert out["translation"] == "" and out["trust"] is None


def test_panel_beside_the_translation_and_the_export(server, client):
    _, url, _ = server
    c = Client(url, verbose=False)
    out = c.predict(DE, "de-en", "greedy", 4, 30, api_name="/translate_stream")
    panel = named(c, url, out)["trust_signals"]
    assert "Can I trust this translation?" in panel and "Logprob" in panel  # markdown-escaped: Seq\\-Logprob
    assert "% of validation sentences" in panel and "labelled set" in panel
    files = c.predict("greedy", 4, 30, api_name="/export_run")
    meta = json.loads(open(next(f for f in files if str(f).endswith(".json")), encoding="utf-8").read())
    assert [r["name"] for r in meta["trust"]["readings"]] == list(SHOWN)
    assert meta["trust"]["signals"]["output_tokens"] == len(meta["output_tokens"])
