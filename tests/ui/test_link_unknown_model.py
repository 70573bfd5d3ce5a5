"""A link naming a model this server does not serve: the page opens the default model (never the first folder
found) and says so in a visitor's words, with or without a sentence in the link, naming what opened and what is
served, and nothing about the owner's settings."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from tests.app_fixtures import SENTENCES, make_checkpoint
from ui.present import md_escape

DE = SENTENCES["de"][1]


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    import app as app_module
    root = tmp_path_factory.mktemp("checkpoints")
    make_checkpoint(root / "cs-en", "cs", "en", seed=3)  # found before the default de-en
    make_checkpoint(root / "de-en", "de", "en", seed=0)
    d = app_module.build_app(root, device="cpu", warm=False)
    yield d
    d.close()


def _load(demo, query: dict) -> dict:
    load = next(f for f in demo.fns.values() if f.api_name == "deep_link").fn
    values = load(1440, SimpleNamespace(query_params=query, headers={}))
    return {getattr(c, "elem_id", None) or type(v).__name__: v for c, v in values.items()}


@pytest.mark.parametrize("query", [{"model": "xx-yy"}, {"model": "xx-yy", "text": DE}, {"text": DE}],
                         ids=["model only", "model and sentence", "sentence only"])
def test_an_unknown_model_opens_the_default_and_says_so(demo, monkeypatch, query):
    monkeypatch.delenv("ATTN_ALLOW_ANY_MODEL", raising=False)
    assert demo.registry.names[0] == "cs-en"  # the first found is not the default
    values = _load(demo, query)
    assert values["Run"].model == "de-en"
    notice = values["link-notice"]
    if "model" in query:
        said = [md_escape(x) for x in ("The link asks for the model 'xx-yy', which is not served here.",
                                       "The page opened German → English (de-en) instead.",
                                       "The models served here: cs-en, de-en.")]
        assert notice == "⚠️ " + " ".join(said)
        assert "ATTN_" not in notice and "owner" not in notice
    else:
        assert notice == ""
    if "text" in query:
        assert values["Run"].tr.src_text == DE
