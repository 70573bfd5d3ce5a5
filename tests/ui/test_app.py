"""The launched app, driven through gradio_client (tiny random-weight checkpoints made in tmp_path).

One server per module: de-en and en-de checkpoints plus a corrupt and an incomplete folder that
must be named at startup while the good ones work.
"""
from __future__ import annotations

import json
import threading
import urllib.request

import numpy as np
import pytest

from gradio_client import Client

from tests.app_fixtures import all_strings, launch, make_checkpoint, named, select, shown
from ui import present
from ui import calls

# Outputs of the UI translate event, in order (the gr.State output is not sent to clients).
C_OUT = ["cmp_notice", "cmp_stale", "base_chips", "mod_chips", "prob_plot", "cmp_plot", "masks_plot", "kind", "layer", "head"]
DE = "Ein Mann fährt mit dem Fahrrad durch die Stadt."
EN = "Two dogs are playing in the snow."


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("checkpoints")
    make_checkpoint(root / "de-en", "de", "en", seed=0)
    make_checkpoint(root / "en-de", "en", "de", seed=1)
    (root / "broken").mkdir()
    (root / "broken" / "config.json").write_text("{ not json", encoding="utf-8")
    (root / "broken" / "model.safetensors").write_bytes(b"garbage")
    (root / "broken" / "vocab.json").write_text("{}", encoding="utf-8")
    make_checkpoint(root / "incomplete", "de", "en")
    (root / "incomplete" / "model.safetensors").unlink()
    demo, url = launch(root)
    yield demo, url, root
    demo.close()


def ui_translate(client, text, direction="de-en", decoding="greedy", beam=4, max_len=30,
                 kind="decoder.cross_attn", view="grid"):
    select(client, kind, view=view)
    out = client.predict(text, direction, decoding, beam, max_len, api_name="/translate_stream")
    return named(client, client.src, out)


def open_generation(client) -> dict:
    """Generation's Step by step opened: the step slider and the selected step's views of the current run."""
    keys = ("step", "step_md", "prefix", "strip_plot", "topk_plot", "cross_plot", "self_plot")
    return dict(zip(keys, client.predict(api_name="/open_generation")))


def plot_json(value) -> dict:
    assert isinstance(value, dict) and value["type"] == "plotly", value
    return json.loads(value["plot"])


def chip_tokens(value) -> list[tuple[str, str | None]]:
    return [(c["token"], c["class_or_confidence"]) for c in value]


# --------------------------------------------------------------------------- startup

def test_startup_names_bad_checkpoints_and_keeps_good_ones(server, client):
    demo, url, root = server
    reg = demo.registry
    assert sorted(reg.models) == ["de-en", "en-de"]
    problems = "\n".join(reg.problems)
    assert str(root / "broken") in problems and str(root / "incomplete") in problems
    assert "model.safetensors is missing" in problems
    models = client.predict(api_name="/models")
    assert sorted(m["direction"] for m in models) == ["de-en", "en-de"]
    with urllib.request.urlopen(url + "config", timeout=30) as r:  # what the page is built from
        page = r.read().decode("utf-8")
    assert "broken" in page and "incomplete" in page and "German" in page


def test_startup_message_on_stderr(tmp_path, capsys):
    import app
    make_checkpoint(tmp_path / "de-en", "de", "en")
    (tmp_path / "empty-dir").mkdir()
    _, reg = calls.load_registry(tmp_path / "nope", "cpu")
    _, reg2 = calls.load_registry(tmp_path, "cpu")
    err = capsys.readouterr().err
    assert f"checkpoint folder not found: {tmp_path / 'nope'}" in err
    assert "empty-dir" in err and "loaded de-en" in err
    assert not reg.models and list(reg2.models) == ["de-en"]
    assert "No model is available" in present.header_markdown(reg)


def test_api_lists_stable_names(client):
    named = client.view_api(print_info=False, return_format="dict")["named_endpoints"]
    assert {"/translate", "/compare", "/models"} <= set(named)


# --------------------------------------------------------------------------- translate

@pytest.mark.parametrize("direction,text", [("de-en", DE), ("en-de", EN)])
def test_translate_api_both_directions(client, direction, text):
    out = client.predict(text, direction, 1, 25, api_name="/translate")
    src, outp = out["src_tokens"], out["output_tokens"]
    assert src[0] == "<bos>" and src[-1] == "<eos>" and len(src) > 5
    assert out["model"] == direction and isinstance(out["translation"], str)
    assert 1 <= len(outp) <= 25 and len(out["steps"]) == len(outp)
    att = out["attention"]
    enc, dec, cross = (np.array(att[k]) for k in ("encoder_self", "decoder_self", "cross"))
    S, T = len(src), len(outp)
    assert enc.shape == (2, 4, S, S) and dec.shape == (2, 4, T, T) and cross.shape == (2, 4, T, S)
    assert np.allclose(cross.sum(-1), 1, atol=1e-3) and np.allclose(np.triu(dec, 1), 0)
    assert out["decoder_input_tokens"] == ["<bos>"] + outp[:-1]


def test_translate_ui_fills_every_view(client):
    r = ui_translate(client, DE)
    assert r["notice"] is not None
    src = chip_tokens(r["src_chips"])
    assert src[0] == ("<bos>", "special") and src[-1] == ("<eos>", "special")
    assert [t for t, _ in src][1:4] == ["Ein", "Mann", "fährt"]
    assert r["run_status"].startswith("✓") and "Current run" in r["run_bar"] and "de→en" in r["run_bar"]
    for name in ("attn_plot", "watch_heads"):
        fig = plot_json(r[name])
        assert fig["data"], name
    grid = plot_json(r["attn_plot"])
    assert len([d for d in grid["data"] if d.get("name") != "masked"]) >= 2 * 4  # every layer x head
    assert "head 3" in json.dumps(grid["layout"]["annotations"])
    assert [t for t, _ in chip_tokens(r["watch_strip"])][:2] == ["<bos>", "Ein"]  # shaded by attention
    g = open_generation(client)  # the Generation section draws the same run when opened
    for name in ("strip_plot", "topk_plot", "cross_plot", "self_plot"):
        assert plot_json(g[name])["data"], name
    step = {**shown(r["step_slider"]), **shown(g["step"])}  # the run set the maximum; opening keeps it
    assert step["value"] == 0 and step["maximum"] >= 1  # slider reset to the new decode
    masks, choices, stale, base, mod, probs, maps = client.predict(api_name="/open_interventions")
    assert len(plot_json(masks)["data"]) >= 4 and stale == ""
    # before any Compare: the baseline is the current run, and the empty panels say how to fill them
    assert base["label"].startswith("Baseline (the current run)") and chip_tokens(base["value"])
    assert mod["value"] is None and "not run yet" in mod["label"]
    for fig in (probs, maps):
        assert "press Compare" in json.dumps(plot_json(fig)["layout"])
    select(client, "decoder.cross_attn", query=0)
    _, norms, heat, *_ = client.predict(32, "0, 1", "encoder", 1, api_name="/open_computation")
    assert plot_json(norms)["data"] and plot_json(heat)["data"]


def test_translate_beam(client):
    ui_translate(client, "Zwei Hunde spielen im Schnee.", decoding="beam", beam=3, max_len=12)
    assert plot_json(open_generation(client)["topk_plot"])["data"]
    out = client.predict("Zwei Hunde spielen im Schnee.", "de-en", 3, 12, api_name="/translate")
    assert len(out["output_tokens"]) <= 12


def test_attention_views(client):
    ui_translate(client, "Die Kinder spielen am Strand.", max_len=8)
    for kind in ("encoder.self_attn", "decoder.self_attn", "decoder.cross_attn"):
        for view, n in (("grid", 8), ("head", 1), ("mean", 2), ("scores", 3)):
            select(client, kind, 1, 3, view=view)
            fig, layer = client.predict(api_name="/attention_view")
            fig = plot_json(fig)
            assert len([d for d in fig["data"] if d.get("name") != "masked"]) == n, (kind, view)
            assert fig["layout"]["yaxis"]["autorange"] == "reversed"
            if view == "head":
                assert "layer 1, head 3" in fig["data"][0]["hovertemplate"]
                src = ["&lt;bos&gt;", "Die", "Kinder", "spielen", "am", "Strand", ".", "&lt;eos&gt;"]
                if kind == "encoder.self_attn":
                    assert fig["layout"]["xaxis"]["ticktext"] == src
                    assert fig["layout"]["yaxis"]["ticktext"] == src


def test_step_view(client):
    r = ui_translate(client, "Zwei Hunde spielen im Schnee.", max_len=10)
    n = len(chip_tokens(r["out_chips"]))
    open_generation(client)
    _, md, prefix, strip, topk, cross, self_ = client.predict(2, api_name="/step_view")  # the box keeps it
    assert "Step 2" in md
    chips = chip_tokens(prefix)
    assert chips[0] == ("<bos>", "special") and chips[-1][1] == "new" and len(chips) == 4
    assert [c for _, c in chips].count("new") == 1  # exactly one new token per frame
    bars = plot_json(topk)["data"][0]
    assert len(bars["y"]) >= 1 if isinstance(bars["y"], list) else True
    cross_fig = plot_json(cross)
    assert cross_fig["layout"]["yaxis"]["ticktext"][:2] == ["L0 H0", "L0 H1"]
    assert len(plot_json(self_)["layout"]["xaxis"]["ticktext"]) == 3  # <bos> and two output tokens
    _, md, prefix, *_ = client.predict(n - 1, api_name="/step_view")
    assert f"Step {n - 1}" in md and len(chip_tokens(prefix)) == n + 1


# --------------------------------------------------------------------------- compare

def compare(client, **kw):
    args = dict(text=DE, direction="de-en", beam=1, max_len=15, pad_to=0, src_padding_mask=True, causal_mask=True,
                positional_encoding=True, ablate_heads=[], ablate_src_tokens=[], kind="cross", layer=0, head=0)
    args.update(kw)
    out = client.predict(*args.values(), api_name="/compare")
    m = out["map"]
    base, mod, diff = (np.array(m[k]) for k in ("baseline", "modified", "difference"))
    assert base.shape == mod.shape == diff.shape == (len(m["query_tokens"]), len(m["key_tokens"]))
    assert np.allclose(mod - base, diff, atol=2e-4)
    return out, base, mod


def test_compare_nothing_changed(client):
    out, base, mod = compare(client)
    assert out["interventions"] == [] and np.allclose(base, mod, atol=1e-4)
    assert out["baseline"]["output_tokens"] == out["modified"]["output_tokens"]
    assert not any(out["modified"]["differs"])


def test_compare_padding_mask_off(client):
    out, base, mod = compare(client, pad_to=20, src_padding_mask=False)
    src = out["src_tokens"]
    assert len(src) == 20 and src[-1] == "<pad>"
    pads = [i for i, t in enumerate(src) if t == "<pad>"]
    assert np.allclose(base[:, pads], 0) and mod[:, pads].sum() > 0.01
    assert "source padding mask off" in out["interventions"]


def test_compare_causal_mask_off(client):
    out, base, mod = compare(client, causal_mask=False, kind="decoder.self_attn", layer=1, head=2)
    assert out["map"]["layer"] == 1 and out["map"]["head"] == 2
    if base.shape[0] > 1:
        assert np.allclose(np.triu(base, 1), 0) and np.triu(mod, 1).sum() > 0.01


def test_compare_positional_encoding_off(client):
    out, base, mod = compare(client, positional_encoding=False, kind="encoder")
    assert "positional encoding off" in out["interventions"]
    assert not np.allclose(base, mod, atol=1e-4)


def test_compare_ablate_heads(client):
    out, base, mod = compare(client, ablate_heads=["cross L0 H1", "enc L1 H0"], kind="cross", layer=1, head=0)
    assert {"cross L0 H1 ablated", "enc L1 H0 ablated"} <= set(out["interventions"])
    assert len(out["modified"]["probs"]) == len(out["modified"]["output_tokens"])


def test_compare_ablate_source_tokens(client):
    out, base, mod = compare(client, ablate_src_tokens=[2, 3])
    assert np.allclose(mod[:, [2, 3]], 0) and base[:, [2, 3]].sum() > 0.01
    assert "source positions 2, 3 hidden" in out["interventions"]


def test_compare_rejects_unknown_head(client):
    with pytest.raises(Exception) as e:
        compare(client, ablate_heads=["cross L9 H0"])
    assert "no head" in str(e.value) or "layer 9" in str(e.value)


def test_compare_ui_event(client):
    ui_translate(client, DE, max_len=12)
    client.predict(api_name="/open_interventions")  # the source tokens to ablate are offered once it opens
    select(client, "decoder.cross_attn", 0, 0)
    out = client.predict(16, False, False, True, ["dec L0 H0"], ["1: Ein"], api_name="/compare_ui")
    r = dict(zip(C_OUT, out))
    assert "causal mask off" in r["cmp_notice"] and "source padding mask off" in r["cmp_notice"]
    assert plot_json(r["prob_plot"])["data"] and len(plot_json(r["cmp_plot"])["data"]) >= 3
    assert r["kind"] == "decoder.self_attn"  # the selection follows the causal toggle
    assert "deleted" in r["cmp_notice"] or "substituted" in r["cmp_notice"] or "identical" in r["cmp_notice"]
    mod_chips = r["mod_chips"]["value"] if "__type__" in r["mod_chips"] else r["mod_chips"]
    assert all(label in ("token", "differs") for _, label in chip_tokens(mod_chips))
    masks = plot_json(r["masks_plot"])
    assert len(masks["data"]) == 4
    select(client, "encoder.self_attn", 1, 1)
    fig = client.predict(api_name="/compare_maps")
    assert len(plot_json(fig)["data"]) >= 3
    select(client, "decoder.cross_attn")
    masks, stale, kind = client.predict(10, True, False, True, [], [], api_name="/masks")
    assert plot_json(masks)["data"] and "Stale" in stale and kind == "decoder.self_attn"


# --------------------------------------------------------------------------- bad input

@pytest.mark.parametrize("text", ["", "   \n\t  ", "\x00\x01\x02"])
def test_empty_input_is_a_friendly_message(client, text):
    r = ui_translate(client, text)
    assert "Type a sentence" in r["notice"]
    out = client.predict(text, "de-en", 1, 10, api_name="/translate")
    assert out["translation"] == "" and "empty" in " ".join(out["notices"])
    cmp = client.predict(text, "de-en", 1, 10, 0, True, True, True, [], [], "cross", 0, 0, api_name="/compare")
    assert cmp["baseline"] is None and cmp["notices"]


def test_very_long_input_is_truncated_with_notice(client):
    text = ("Ein Mann fährt mit dem Fahrrad durch die Stadt. " * 250)[:10_000]
    r = ui_translate(client, text, max_len=5)
    assert "2,000" in r["notice"] and "10,000" in r["notice"]
    assert "maximum" in r["notice"]  # the tiny model holds 64 positions: the sentence is cut there too
    out = client.predict(text, "de-en", 1, 5, api_name="/translate")
    assert len(out["src_tokens"]) == 64 and any("2,000" in n for n in out["notices"])


def test_html_and_script_are_text(client):
    text = 'Ein <script>alert("x")</script> <b>Mann</b> <img src=x onerror=alert(1)>'
    r = ui_translate(client, text, max_len=6)
    toks = [t for t, _ in chip_tokens(r["src_chips"])]
    assert any("script" in t for t in toks)  # kept as plain text for the chip component
    masks = client.predict(api_name="/open_interventions")[0]
    select(client, "decoder.cross_attn", query=0)
    norms = client.predict(32, "0, 1", "encoder", 1, api_name="/open_computation")[1]
    for name, fig in (("attn_plot", r["attn_plot"]), ("watch_heads", r["watch_heads"]), ("masks", masks),
                      ("norms", norms)):
        strings = list(all_strings(plot_json(fig)))
        assert not any("<script" in s or "<img" in s or "<b>M" in s for s in strings), name
        assert any("&lt;" in s for s in strings), name
    assert "<script" not in r["run_bar"] and "&lt;script" in r["run_bar"]
    t = client.predict(0, api_name="/step_view")
    for fig in t[3:]:
        assert not any("<script" in s for s in all_strings(plot_json(fig)))


def test_emoji_control_and_unknown_scripts_become_unk(client):
    text = "Ein Mann 😀 fährt \x07 durch Москва 東京\u200b."
    r = ui_translate(client, text, max_len=6)
    chips = chip_tokens(r["src_chips"])
    unk = [t for t, label in chips if label == "<unk>"]
    assert "😀" in unk and "Москва" in unk and "東京" in unk
    assert not any("\x07" in t or "\u200b" in t for t, _ in chips)
    out = client.predict(text, "en-de", 1, 6, api_name="/translate")
    assert out["src_tokens"][0] == "<bos>"


def test_unknown_direction_is_an_error_message(client):
    with pytest.raises(Exception) as e:
        client.predict(DE, "xx-yy", 1, 5, api_name="/translate")
    assert "Unknown direction" in str(e.value)


# --------------------------------------------------------------------------- sessions

def test_two_sessions_get_their_own_runs(server):
    url = server[1]
    a, b = Client(url, verbose=False), Client(url, verbose=False)
    results = {}

    def go(name, c, text):
        results[name] = (ui_translate(c, text, max_len=8), open_generation(c) and c.predict(1, api_name="/step_view"))

    threads = [threading.Thread(target=go, args=("a", a, "Zwei Hunde spielen im Schnee.")),
               threading.Thread(target=go, args=("b", b, "Eine Frau liest ein Buch im Park."))]
    for th in threads:
        th.start()
    for th in threads:
        th.join(60)
    src_a = [t for t, _ in chip_tokens(results["a"][0]["src_chips"])]
    src_b = [t for t, _ in chip_tokens(results["b"][0]["src_chips"])]
    assert "Hunde" in src_a and "Frau" in src_b
    # each session's step view reads its own translation
    cross_a = plot_json(results["a"][1][5])["layout"]["xaxis"]["ticktext"]
    cross_b = plot_json(results["b"][1][5])["layout"]["xaxis"]["ticktext"]
    assert "Hunde" in cross_a and "Frau" in cross_b


def test_positional_tab(client):
    heat, curves, sim, variants = client.predict("de-en", 20, "0, 1, 3", api_name="/positional")
    h = plot_json(heat)
    assert h["data"][0]["z"]["shape"].replace(" ", "") in ("20,32",)
    assert len(plot_json(curves)["data"]) == 3
    assert len(plot_json(variants)["data"]) == 6
    assert plot_json(sim)["data"]


# --------------------------------------------------------------------------- no model / python app.py

def test_app_without_any_checkpoint_starts_with_a_message(tmp_path):
    demo, url = launch(tmp_path / "missing")
    try:
        with urllib.request.urlopen(url + "config", timeout=30) as r:
            page = r.read().decode("utf-8")
        assert "No model is available" in page and "checkpoint folder not found" in page
        c = Client(url, verbose=False)
        out = c.predict(DE, None, "greedy", 4, 10, api_name="/translate_stream")
        assert "No model is loaded" in out[1]
        with pytest.raises(Exception) as e:
            c.predict(DE, "", 1, 10, api_name="/translate")
        assert "No model" in str(e.value)
    finally:
        demo.close()


def test_python_app_py_honours_env(tmp_path):
    """`python app.py` serves on GRADIO_SERVER_NAME:GRADIO_SERVER_PORT and names a missing checkpoint folder."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from tests.app_fixtures import free_port, wait_ready

    make_checkpoint(tmp_path / "ck" / "de-en", "de", "en")
    (tmp_path / "ck" / "half").mkdir()
    (tmp_path / "ck" / "half" / "config.json").write_text("{}", encoding="utf-8")
    port = free_port()
    env = dict(os.environ, ATTN_CHECKPOINTS=str(tmp_path / "ck"), GRADIO_SERVER_NAME="127.0.0.1",
               GRADIO_SERVER_PORT=str(port), GRADIO_ANALYTICS_ENABLED="False")
    log = open(tmp_path / "app.log", "w+", encoding="utf-8")
    proc = subprocess.Popen([sys.executable, "app.py"], cwd=Path(__file__).resolve().parents[2], env=env,
                            stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_ready(f"http://127.0.0.1:{port}/", proc=proc)
        out = Client(f"http://127.0.0.1:{port}/", verbose=False).predict("Zwei Hunde.", "de-en", 1, 5,
                                                                         api_name="/translate")
        assert out["src_tokens"] == ["<bos>", "Zwei", "Hunde", ".", "<eos>"]
    finally:
        proc.terminate()
        proc.wait(30)
    log.seek(0)
    text = log.read()
    assert "loaded de-en" in text and str(tmp_path / "ck" / "half") in text and "WARNING" in text


def test_a_new_run_draws_the_map_on_the_colour_scale_shown(client):
    """The colour scale is part of the selection a run is drawn with: "this head's maximum" stays so."""
    def attn(scale):
        select(client, "decoder.cross_attn", view="head", scale=scale)
        out = client.predict("Zwei Hunde spielen im Schnee.", "de-en", "greedy", 4, 12, api_name="/translate_stream")
        return json.dumps(plot_json(named(client, client.src, out)["attn_plot"]), ensure_ascii=False)
    shared, own = attn("shared"), attn("head")
    assert "the same in every panel" in shared or "0–1" in shared
    assert shared != own and "maximum" in own
