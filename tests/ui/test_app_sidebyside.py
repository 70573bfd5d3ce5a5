"""Analysis › Two models in the app, on tiny random checkpoints: a link naming a second model of another depth
restores both (each grid with its own layer count), the link on screen names the second model again, each side
shows its own trust signals read against its own model's validation reference, a second model whose source
language differs is refused with a sentence, and an export records the second model, its translation and its
signals."""
from __future__ import annotations

import html

import pytest

from model.analysis.trust_signals import SHOWN, load_reference, reference_of, report, save_reference, signals
from model.engine.decoding import DecodeOptions, translate
from model.families import load_checkpoint
from tests.app_fixtures import SENTENCES, launch, make_checkpoint
from tests.ui.test_whatif_links import DE, _load, _query
from ui.present import whatif
from ui.present import md_escape
from ui.present.sidebyside import SecondModel
from ui.present.trust import trust_markdown
from ui.state import RunInputs, Selection, WhatIf, link_url, whatif_from_query

SEL = Selection(section="analysis", subview="sidebyside")


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    root = tmp_path_factory.mktemp("checkpoints")
    make_checkpoint(root / "de-en", "de", "en", seed=0)
    make_checkpoint(root / "de-en-deep", "de", "en", seed=2, layers=3)
    make_checkpoint(root / "en-de", "en", "de", seed=1)
    # only the deeper model has a validation reference: its side shows percentiles, the other values only
    deep = load_checkpoint(root / "de-en-deep")
    runs = [signals(deep, translate(deep, s)) for s in SENTENCES["de"]]
    save_reference(reference_of(deep, "de-en-deep", runs, "five test sentences"), deep)
    app, _ = launch(root, warm=False)
    app.deep = next(k for k in app.registry.names if "deep" in k)  # the key the registry gives that folder
    yield app
    app.close()


def _panels(fig) -> int:
    return sum(1 for t in fig.data if t.type == "heatmap")


def test_a_link_restores_both_models_each_with_its_own_grid(demo):
    url = link_url("http://h/", RunInputs(model="de-en", text=DE, max_len=12), SEL, WhatIf(second=demo.deep))
    values = _load(demo, url)
    run = values["Run"]
    assert values["sbs-model"].value == demo.deep
    md = values["sbs-md"]
    assert f"| model | {md_escape('de-en')} | {md_escape(demo.deep)} |" in md
    assert f"| layers (enc + dec) × heads | {md_escape('2 + 2 × 4')} | {md_escape('3 + 3 × 4')} |" in md
    assert run.tr.text.split()[0] in md
    a, b = _panels(values["sbs-grid-a"]), _panels(values["sbs-grid-b"])
    assert a > 0 and b > a  # the deeper model's grid has more panels
    assert (values["SecondModel"].run_id, values["SecondModel"].name) == (run.id, demo.deep)
    # the link on screen names both models again
    again = whatif_from_query(_query(values["link-box"]))[0]
    assert again.second == demo.deep and _query(values["link-box"])["model"] == "de-en"


def test_each_side_shows_its_own_models_trust_signals(demo):
    values = _load(demo, link_url("http://h/", RunInputs(model="de-en", text=DE, max_len=12), SEL,
                                  WhatIf(second=demo.deep)))
    a, b = values["sbs-trust-a"], values["sbs-trust-b"]
    assert a.startswith(f"**This run: {md_escape('de-en')}**") and "no validation reference" in a
    assert "worse than" not in a
    # the second side: the deeper model's own translation read against the deeper model's own reference
    lm = demo.registry.models[demo.deep]
    ref, note = load_reference(lm)
    assert ref is not None and note == ""
    expected = report(signals(lm, translate(lm, DE, DecodeOptions(max_len=12))), ref)
    assert all(r.worse_than is not None for r in expected.readings) and len(expected.readings) == len(SHOWN)
    assert b == f"**Second model: {md_escape(demo.deep)}**\n\n" + trust_markdown(expected)


def test_a_second_model_of_another_source_language_is_refused(demo):
    values = _load(demo, link_url("http://h/", RunInputs(model="de-en", text=DE, max_len=12), SEL,
                                  WhatIf(second="en-de")))
    md = values["sbs-md"]
    assert md.startswith("⚠️") and md_escape("en-de reads English, but this run's sentence is in German.") in md
    assert md.rstrip().endswith(".")  # whole sentences
    # a placeholder that breaks its lines to fit (read as shown: entities unescaped)
    refused = html.unescape(values["sbs-grid-b"].layout.annotations[0].text)
    assert max(len(x) for x in refused.split("<br>")) <= 52 and "Pick a model that reads the same" in \
        refused.replace("<br>", " ")
    assert values.get("SecondModel") is None
    assert values["sbs-trust-a"] == values["sbs-trust-b"] == ""


def test_a_german_run_is_offered_every_model_that_reads_german(demo):
    """The list follows the run: German models beside a German run, English ones beside an English run."""
    from ui.present import sidebyside as sbs
    values = _load(demo, link_url("http://h/", RunInputs(model="de-en", text=DE, max_len=12), SEL))
    keys = [k for _, k in sbs.candidates(demo.registry, values["Run"])]
    assert keys == [demo.deep]                        # en-de reads English; de-en is the run itself
    english = _load(demo, link_url("http://h/", RunInputs(model="en-de", text="Two dogs play.", max_len=12), SEL))
    assert [k for _, k in sbs.candidates(demo.registry, english["Run"])] == []
    offered = values["sbs-model"]                      # the dropdown the run refreshed
    assert [k for _, k in offered.choices] == keys


def test_the_export_records_the_second_model(demo):
    values = _load(demo, link_url("http://h/", RunInputs(model="de-en", text=DE, max_len=12), SEL,
                                  WhatIf(second=demo.deep)))
    run = values["Run"]
    held = values["SecondModel"]
    settings = whatif.export_settings(run, None, None, held)
    assert settings["second_model"] == demo.deep and set(settings) == {"second_model", "second_model_output"}
    recorded = settings["second_model_output"]
    assert recorded["translation"] and md_escape(recorded["translation"]) in values["sbs-md"]
    # the second model's signals, read against its own reference (the first model has none)
    assert [r["name"] for r in recorded["trust"]["readings"]] == list(SHOWN)
    assert all(r["worse_than"] is not None for r in recorded["trust"]["readings"])
    assert whatif.export_settings(run, None, None, SecondModel("another-run", demo.deep)) == {}


def test_readers_of_german_include_snapshots_and_a_many_to_many_pair(monkeypatch):
    """A German run may stand beside: the other German readers, every training snapshot of its direction, an
    OPUS-MT model (three-letter code) and an NLLB model under its German pair, into the run's target language."""
    from types import SimpleNamespace as NS

    from ui.present import sidebyside as sbs

    def info(key, src, tgt, languages=()):
        return NS(key=key, src_lang=src, tgt_lang=tgt, languages=languages, base=None,
                  many_to_many=len(languages) > 1)
    infos = {i.key: i for i in (
        info("de-en", "de", "en"), info("de-en@256", "de", "en"), info("de-en@2480", "de", "en"),
        info("en-de", "en", "de"), info("fr-en", "fr", "en"), info("Helsinki-NLP/opus-mt-de-fr", "deu", "fra"),
        info("facebook/nllb-200", "eng_Latn", "fra_Latn", ("eng_Latn", "deu_Latn", "fra_Latn")),
        info("facebook/m2m100", "en", "fr", ("en", "fr")))}
    monkeypatch.setattr(sbs.catalog, "infos", lambda reg: infos)
    keys = [k for _, k in sbs.readers(None, "de", "en", own="de-en")]
    assert keys == ["de-en@256", "de-en@2480", "Helsinki-NLP/opus-mt-de-fr", "facebook/nllb-200@deu_Latn-eng_Latn"]
    labels = dict((k, label) for label, k in sbs.readers(None, "de", "en", own="de-en"))
    assert labels["de-en@256"] == "de-en@256 (snapshot after 256 updates)"
    assert labels["facebook/nllb-200@deu_Latn-eng_Latn"].endswith("(German → English)")
