"""The app serving an NLLB-shaped many-to-many model named in ATTN_MODELS: listed as one model with its
languages, any pair of them translated under the name ``model@src-tgt`` (the API, a link), the pair's
languages framing the source and forcing the output's first token, and the language pickers following
Direction."""
from __future__ import annotations

import shutil
from urllib.parse import parse_qs, urlparse

import pytest
from gradio_client import Client

pytest.importorskip("transformers")  # builds the tiny random model (a development requirement)

from model.families import catalog  # noqa: E402
from model.families import load_checkpoint  # noqa: E402
from model.engine.decoding import DecodeOptions, translate  # noqa: E402
from model.families.m2m100 import with_languages  # noqa: E402
from tests.app_fixtures import launch, make_checkpoint  # noqa: E402
from tests.model.test_m2m100 import build_m2m100  # noqa: E402
from ui import languages  # noqa: E402
from ui import calls  # noqa: E402
from ui.state import ModelShape, RunInputs, Selection, from_query, link_url  # noqa: E402

DE = "Zwei Hunde spielen im Schnee!"
PAIR = "nllb-200-tiny@deu_Latn-fra_Latn"


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    root = tmp_path_factory.mktemp("checkpoints")
    make_checkpoint(root / "de-en", "de", "en", seed=0)
    models = tmp_path_factory.mktemp("models")
    good = build_m2m100("nllb", models / "nllb-200-tiny")
    broken = models / "nllb-broken"
    shutil.copytree(good, broken)
    (broken / "sentencepiece.bpe.model").unlink()
    mp = pytest.MonkeyPatch()
    mp.setenv("ATTN_MODELS", f"{good},{broken}")
    mp.delenv("ATTN_ALLOW_ANY_MODEL", raising=False)
    demo, url = launch(root, warm=False)
    try:
        yield demo, Client(url, verbose=False), url, good
    finally:
        demo.close()
        mp.undo()


def test_the_model_is_listed_once_with_its_languages_and_a_bad_folder_is_skipped(served):
    demo, client, _, _ = served
    listing = {m["direction"]: m for m in client.predict(api_name="/models")}
    assert list(listing) == ["de-en", "nllb-200-tiny"] and listing["nllb-200-tiny"]["family"] == "NLLB-200"
    info = catalog.infos(demo.registry)["nllb-200-tiny"]
    assert info.many_to_many and {"deu_Latn", "eng_Latn", "fra_Latn"} <= set(info.languages)
    assert any("nllb-broken" in p and "sentencepiece.bpe.model is missing" in p for p in demo.registry.problems)


def test_any_pair_translates_under_its_name(served):
    demo, client, _, folder = served
    out = client.predict(DE, PAIR, 1, 12, api_name="/translate")
    direct = translate(with_languages(load_checkpoint(folder), "deu_Latn", "fra_Latn"), DE,
                       DecodeOptions(beam=1, max_len=12))
    assert out["model"] == PAIR and out["output_tokens"] == direct.output_tokens
    assert out["src_tokens"][0] == "deu_Latn" and out["output_tokens"][0] == "fra_Latn"
    other = client.predict(DE, "nllb-200-tiny@deu_Latn-eng_Latn", 1, 12, api_name="/translate")
    assert other["output_tokens"][0] == "eng_Latn"
    # the pairs share one loaded network
    reg = demo.registry
    assert reg.models[PAIR].model is reg.models["nllb-200-tiny"].model
    with pytest.raises(Exception, match="not offered|only its listed models"):
        client.predict(DE, "nllb-200-tiny@deu_Latn-xxx_Yyyy", 1, 12, api_name="/translate")


def test_a_link_carries_both_languages_and_restores_them(served):
    demo, _, _, _ = served
    reg = demo.registry
    url = link_url("http://x/", RunInputs("nllb-200-tiny@fra_Latn-deu_Latn", DE), Selection())
    params = {k: v[0] for k, v in parse_qs(urlparse(url).query).items()}
    assert params["model"] == "nllb-200-tiny@fra_Latn-deu_Latn"
    # as the page does on load: the link's model offered (a pair of a listed model is), then the link read
    reg_key = next(k for k, r in calls.REGISTRIES.items() if r is reg)
    assert calls.request_model(reg_key, params["model"]) == params["model"]
    shapes = {n: ModelShape(i.cfg.n_encoder_layers, i.cfg.n_decoder_layers, i.cfg.encoder_heads, i.cfg.decoder_heads)
              for n, i in catalog.infos(reg).items()}
    restored = from_query(params, shapes)
    assert restored.inputs.model == params["model"] and not restored.problems
    lm = reg.models[restored.inputs.model]
    assert (lm.src_lang, lm.tgt_lang) == ("fra_Latn", "deu_Latn")


def test_the_language_pickers_follow_direction(served):
    demo, _, _, _ = served
    reg = demo.registry
    src, tgt = languages.values(reg, "nllb-200-tiny")
    assert src["visible"] and src["value"] == "deu_Latn" and tgt["value"] == "eng_Latn"
    assert {"deu_Latn", "eng_Latn", "fra_Latn"} <= {v for _, v in src["choices"]} == {v for _, v in tgt["choices"]}
    assert not languages.values(reg, "de-en")[0]["visible"]  # a one-pair model has no pickers
    picked = languages.picked(reg, "nllb-200-tiny", "eng_Latn", "deu_Latn")
    assert picked.value == "nllb-200-tiny@eng_Latn-deu_Latn"
    assert "nllb-200-tiny@eng_Latn-deu_Latn" in [v for _, v in picked.choices]
    assert languages.values(reg, picked.value)[1]["value"] == "deu_Latn"
