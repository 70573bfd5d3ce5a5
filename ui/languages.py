"""Source and target language for a many-to-many model (M2M100, NLLB-200): under Direction, shown only
when the chosen model knows more than one pair. Picking a pair makes Direction that pair's name
(``model@src-tgt``, see ``catalog.pair_name``), which the run, the link and the API carry: a link names
both languages and restores them."""
from __future__ import annotations

import gradio as gr

from model.families import catalog

from .present import LANG_NAMES, model_choices


def _label(code: str) -> str:
    name = LANG_NAMES.get(code)
    return f"{name} ({code})" if name else code


def values(reg, name: str | None) -> tuple[dict, dict]:
    """(source, target) dropdown updates for the model ``name``: hidden for a one-pair model."""
    langs = catalog.pairs_of(reg, name) if name else ()
    if not langs:
        return gr.update(visible=False), gr.update(visible=False)
    info = catalog.infos(reg)[name]
    choices = [(_label(c), c) for c in langs]
    return (gr.update(visible=True, choices=choices, value=info.src_lang),
            gr.update(visible=True, choices=choices, value=info.tgt_lang))


def build(shell) -> tuple:
    """The two dropdowns, set for the default model."""
    src, tgt = values(shell.reg, shell.default_model)
    with gr.Row(elem_id="language-pair"):
        source = gr.Dropdown(label="Source language", elem_id="src-lang", interactive=True, **_kw(src))
        target = gr.Dropdown(label="Target language", elem_id="tgt-lang", interactive=True, **_kw(tgt))
    return source, target


def _kw(update: dict) -> dict:
    return {k: v for k, v in update.items() if k in ("visible", "choices", "value")}


def picked(reg, name: str | None, src: str | None, tgt: str | None):
    """Direction's update after a language was picked: the pair's name (offered from now on)."""
    if not name or not src or not tgt or src == tgt:
        return gr.skip()
    parts = catalog.split_pair(name)
    pair = catalog.pair_name(parts[0] if parts else name, src, tgt)
    if not catalog.offer_pair(reg, pair):
        return gr.skip()
    return gr.Dropdown(choices=model_choices(reg), value=pair)


def wire(shell, source, target) -> None:
    """Direction -> the languages it has; a language picked -> Direction becomes that pair."""
    shell.direction.change(lambda name: values(shell.reg, name), shell.direction, [source, target],
                           api_visibility="private", queue=False, show_progress="hidden")
    for dd in (source, target):
        dd.input(lambda name, s, t: picked(shell.reg, name, s, t), [shell.direction, source, target],
                 shell.direction, api_visibility="private", queue=False, show_progress="hidden")
