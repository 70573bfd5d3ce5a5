"""The app serving Marian (OPUS-MT) folders named in ATTN_MODELS beside its own checkpoints, end to end
through gradio_client: listed with languages and size, loaded on first use, evicted least recently used,
bad folders skipped with their reason, a model nobody listed refused unless the owner allows any."""
from __future__ import annotations

import json
import shutil

import pytest
from gradio_client import Client

pytest.importorskip("transformers")  # builds the tiny random Marian folders (a development requirement)

from model.engine.decoding import DecodeOptions, translate  # noqa: E402
from model.families import catalog  # noqa: E402
from model.families import load_checkpoint  # noqa: E402
from tests.app_fixtures import launch, make_checkpoint, named  # noqa: E402
from tests.model.test_marian import build_marian, cut, damage  # noqa: E402

DE = "Zwei Hunde spielen im Schnee!"
BAD = {"not-marian": "not a Marian model (model_type 'bart'", "no-target-spm": "target.spm is missing",
       "bad-activation": "unknown activation 'wobble'", "truncated": "model.safetensors is corrupt or truncated"}


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    root = tmp_path_factory.mktemp("checkpoints")
    make_checkpoint(root / "de-en", "de", "en", seed=0)
    models = tmp_path_factory.mktemp("models")
    good = build_marian(models / "opus-mt-de-en", d_model=32, layers=2, heads=4, ffn=64, eos_bias=1.5)
    for name in ("opus-mt-second", "opus-mt-late", "opus-mt-unlisted", *BAD):
        shutil.copytree(good, models / name)
    for name in BAD:
        damage(models / name, name)
    listed = [good, models / "opus-mt-second", models / "opus-mt-late", *(models / n for n in BAD)]
    mp = pytest.MonkeyPatch()
    mp.setenv("ATTN_MODELS", ",".join(map(str, listed)))
    mp.setenv("ATTN_MAX_MODELS", "1")
    mp.delenv("ATTN_ALLOW_ANY_MODEL", raising=False)
    demo, url = launch(root, warm=False)
    try:
        yield demo, Client(url, verbose=False), url, models, mp
    finally:
        demo.close()
        mp.undo()


def test_listed_models_have_languages_and_size_and_bad_ones_are_skipped_with_a_reason(served):
    demo, client, url, models, _ = served
    listing = {m["direction"]: m for m in client.predict(api_name="/models")}
    assert list(listing) == ["de-en", "opus-mt-de-en", "opus-mt-second", "opus-mt-late"]
    m = listing["opus-mt-de-en"]
    n = catalog.parameter_count(load_checkpoint(models / "opus-mt-de-en").model.cfg)
    assert m["family"] == "OPUS-MT" and m["parameters"] == n and (m["n_heads"], m["encoder_layers"]) == (4, 2)
    assert m["label"] == f"German → English · OPUS-MT · {n / 1e3:.0f} k"
    assert not m["loaded"] and listing["de-en"]["loaded"]  # added models load on first use
    problems = demo.registry.problems
    assert len(problems) == len(BAD)
    for name, reason in BAD.items():
        assert any(name in p and reason in p and p.endswith("skipped") for p in problems), (name, problems)
    with __import__("urllib.request").request.urlopen(url + "config") as r:
        cfg = json.load(r)
    about = next(c["props"]["value"] for c in cfg["components"] if c["props"].get("elem_id") == "about")
    choices = next(c["props"]["choices"] for c in cfg["components"] if c["props"].get("elem_id") == "direction")
    assert all(reason.replace("'", "") in about.replace("\\", "").replace("'", "") for reason in
               ("target.spm is missing", "unknown activation", "corrupt or truncated", "not a Marian model"))
    assert [c[1] for c in choices] == list(listing) and choices[1][0] == m["label"]


def test_translate_compare_and_attribution_on_a_marian_folder(served):
    demo, client, _, models, _ = served
    out = client.predict(DE, "opus-mt-de-en", 1, 12, api_name="/translate")
    lm = load_checkpoint(models / "opus-mt-de-en")
    direct = translate(lm, DE, DecodeOptions(beam=1, max_len=12))
    assert out["model"] == "opus-mt-de-en" and out["output_tokens"] == direct.output_tokens
    assert out["translation"] == direct.text and out["src_tokens"][-1] == "</s>"
    cross = out["attention"]["cross"]
    assert (len(cross), len(cross[0]), len(cross[0][0]), len(cross[0][0][0])) == (2, 4, len(direct.output_ids),
                                                                                  len(direct.src_ids))
    cmp = client.predict(DE, "opus-mt-de-en", 1, 12, 0, True, True, True, ["cross L0 H1"], [], "cross", 1, 2,
                         api_name="/compare")
    assert cmp["baseline"]["output_tokens"] == direct.output_tokens and cmp["interventions"] == ["cross L0 H1 ablated"]
    # layer 0's head 1 silenced: what layer 1 attends to changes
    assert any(abs(v) > 1e-6 for row in cmp["map"]["difference"] for v in row)
    try:
        attr = client.predict(DE, "opus-mt-de-en", 0, 8, api_name="/attribution")
    except Exception as e:  # a method derived for pre-norm models only: the answer says so, in one line
        assert "post-norm" in str(e) and "does not apply" in str(e) and "Traceback" not in str(e), str(e)[:300]
    else:  # every method given for this post-norm model
        assert attr["model"] == "opus-mt-de-en" and len(attr["src_tokens"]) == len(direct.src_ids)
        assert attr["scores"] and all(len(v) == len(direct.src_ids) for v in attr["scores"].values())


def test_the_ui_loads_a_model_on_first_use_and_evicts_the_least_recently_used(served):
    demo, client, url, _, _ = served
    client.predict(DE, "opus-mt-de-en", 1, 4, api_name="/translate")
    assert set(catalog.loaded(demo.registry)) == {"de-en", "opus-mt-de-en"}
    out = named(client, url, client.predict(DE, "opus-mt-second", "greedy", 4, 8, api_name="/translate_stream"))
    assert out["run_status"].startswith("✓") and out["translation"].strip()
    assert "was loaded for this run" in out["notice"]
    # at most ATTN_MAX_MODELS (1) added models in memory; our own stay
    assert set(catalog.loaded(demo.registry)) == {"de-en", "opus-mt-second"}
    again = named(client, url, client.predict(DE, "opus-mt-second", "greedy", 4, 8, api_name="/translate_stream"))
    assert "was loaded" not in again["notice"]


def test_a_model_nobody_listed_is_refused_unless_any_model_is_allowed(served):
    demo, client, _, models, mp = served
    unlisted = str(models / "opus-mt-unlisted")
    with pytest.raises(Exception) as e:
        client.predict(DE, unlisted, 1, 4, api_name="/translate")
    msg = str(e.value)
    assert "offers only its listed models" in msg and "ATTN_ALLOW_ANY_MODEL" in msg and "Traceback" not in msg
    assert "opus-mt-unlisted" not in demo.registry.models
    mp.setenv("ATTN_ALLOW_ANY_MODEL", "1")
    try:
        out = client.predict(DE, unlisted, 1, 4, api_name="/translate")
    finally:
        mp.delenv("ATTN_ALLOW_ANY_MODEL")
    assert out["model"] == "opus-mt-unlisted" and out["translation"] is not None
    info = catalog.infos(demo.registry)["opus-mt-unlisted"]
    assert not info.listed and not info.pinned


def test_a_model_that_breaks_after_start_up_gets_a_message_and_the_others_keep_serving(served):
    demo, client, url, models, _ = served
    cut(models / "opus-mt-late" / "model.safetensors")
    with pytest.raises(Exception) as e:
        client.predict(DE, "opus-mt-late", 1, 4, api_name="/translate")
    assert "could not be loaded" in str(e.value) and "corrupt or truncated" in str(e.value)
    assert "Traceback" not in str(e.value)
    out = named(client, url, client.predict(DE, "opus-mt-late", "greedy", 4, 8, api_name="/translate_stream"))
    assert out["run_status"].startswith("✗") and "could not be loaded" in out["notice"]
    assert "Traceback" not in out["notice"]
    for name in ("de-en", "opus-mt-de-en"):
        assert client.predict(DE, name, 1, 4, api_name="/translate")["model"] == name


def test_a_link_keeps_a_listed_model_and_refuses_an_unlisted_one_by_name(served):
    from types import SimpleNamespace

    from ui import calls
    from ui.sections import translate as section
    demo, _, _, models, _ = served
    key = next(k for k, r in calls.REGISTRIES.items() if r is demo.registry)
    shell = SimpleNamespace(reg=demo.registry, reg_key=key)
    params = {"text": DE, "model": "opus-mt-second"}
    assert section._linked_model(shell, params) == (params, None)
    other = str(models / "opus-mt-unlisted-too")
    kept, refused = section._linked_model(shell, {"text": DE, "model": other})
    assert kept == {"text": DE} and "is not served here" in refused and "ATTN_ALLOW_ANY_MODEL" not in refused
