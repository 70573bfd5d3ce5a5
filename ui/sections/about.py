"""The About view: what the models are, the hook points, and how to call the API."""
from __future__ import annotations

import html
import json
from dataclasses import asdict
from pathlib import Path

from model.engine.hooks import hook_names
from model.families import catalog
from model.families.ours import Registry

from ..present import direction_label, md_escape


def about_markdown(reg: Registry) -> str:
    """(Inside <details>, markdown escapes are not undone: names there are HTML-escaped instead.)"""
    out = ["## What you are looking at",
           "An encoder-decoder Transformer (Vaswani et al. 2017, pre-norm) trained from scratch on Multi30k "
           "(about 29,000 image captions with German, English, French and Czech translations; tokenized with spaCy's "
           "rule-based tokenizer, then split into pieces of a joint SentencePiece vocabulary per language pair, "
           "marked ▁ where a word starts; older checkpoints use whole-word vocabularies). After the decode, the "
           "model runs once more, teacher-forced on the source and the tokens it chose, and the attention, masks, "
           "embeddings and activations in the views are captured there from named hook points: `hook_pattern` is "
           "the attention after softmax, `hook_mask` the mask as applied (True = attend), `hook_embed`/`hook_pos` "
           "the scaled token embeddings and the positional encoding that was added. Rollout, the norm-based "
           "weights, ALTI+ and the logit lens are computed from those captures; gradient × input and integrated "
           "gradients come from forward and backward passes of their own. With the causal mask on (the "
           "default), the step view's per-step rows come from that teacher-forced pass (equal to what the cached "
           "decode computed at each step, which a test checks); with it off they are recorded during the decode."]
    if reg.models:
        sums = {name: {**asdict(s), "heads": s.heads_label, "ff": s.ff_label}
                for name, s in catalog.summaries(reg).items()}
        rows = [("parameters", lambda s: f"{s['parameters']:,}"), ("d_model", lambda s: s["d_model"]),
                ("heads per layer", lambda s: s["heads"]), ("encoder layers", lambda s: s["encoder_layers"]),
                ("decoder layers", lambda s: s["decoder_layers"]), ("feed-forward size", lambda s: s["ff"]),
                ("vocabulary (source / target)", lambda s: f"{s['src_vocab']:,} / {s['tgt_vocab']:,}"),
                ("max positions", lambda s: s["max_len"]), ("tied embeddings", lambda s: s["tied_embeddings"]),
                ("headline BLEU", lambda s: "n/a" if s["bleu"] is None else f"{s['bleu']:.2f} ({s['bleu_source']})"),
                ("checkpoint", lambda s: Path(str(s["path"])).name)]  # its folder's name: no server path
        out.append("## The models")
        out.append("| | " + " | ".join(md_escape(direction_label(n, reg)) for n in sums) + " |\n|---|" +
                   "---|" * len(sums) + "\n" + "\n".join(
                       f"| {label} | " + " | ".join(md_escape(f(s)) for s in sums.values()) + " |"
                       for label, f in rows))
        for name, lm in catalog.loaded(reg).items():
            if lm.metrics:
                out.append(f"<details><summary>Metrics from the {html.escape(name)} model card</summary>\n\n```json\n" +
                           json.dumps(lm.metrics, indent=1, ensure_ascii=False)[:6000] + "\n```\n</details>")
        names = hook_names(next(iter(catalog.loaded(reg).values())).model) if catalog.loaded(reg) else []
        if names:
            out.append(f"<details><summary>The {len(names)} hook points (same names in every model)</summary>\n\n"
                       "```\n" + "\n".join(names) + "\n```\n</details>")
    if reg.problems:  # a model that failed, at start-up or on first use: why, by name
        out.append("## Models that could not be served\n" + "\n".join(f"- {md_escape(p)}" for p in reg.problems))
    out.append("## Calling the API\n"
               "The main events have stable names. With the Python client:\n\n```python\n"
               "from gradio_client import Client\n"
               "client = Client(URL)  # this page's address (or the Space's id, \"user/space\")\n"
               "out = client.predict(\"Zwei Hunde spielen im Schnee.\", \"de-en\", 1, 100, api_name=\"/translate\")\n"
               "print(out[\"translation\"], out[\"src_tokens\"], out[\"output_tokens\"])\n"
               "out[\"attention\"][\"cross\"]  # layers x heads x output steps x source tokens\n"
               "cmp = client.predict(\"Zwei Hunde spielen im Schnee.\", \"de-en\", 1, 100, 0, True, False, True,\n"
               "                     [\"cross L0 H0\"], [], \"cross\", 0, 0, api_name=\"/compare\")\n"
               "```\n\n"
               "`/translate` returns the source and output tokens, the translation, the per-step top-k and the "
               "attention arrays (`encoder_self`, `decoder_self`, `cross`) at the model's float32 precision; a fifth "
               "argument `decimals` rounds every number to that many places for a smaller answer. "
               "`attention_mask` gives, per kind, queries × keys booleans (True = attended, the same for every "
               "layer and head): a masked cell has weight 0 and `false` there, so it is never confused with a "
               "weight that is, or rounds to, 0. `/compare` returns both translations, the differing tokens, "
               "per-step probabilities and one head's maps with their difference and masks (`decimals` last). "
               "`/attribution` (text, direction, output position, starting integrated-gradient points) scores the "
               "source tokens six ways and reports `ig_steps`, `ig_gap` and `ig_converged`. `/models` lists the "
               "loaded directions. Inputs are capped at 2,000 characters.")
    return "\n\n".join(out)
