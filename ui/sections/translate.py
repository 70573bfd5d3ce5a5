"""Translate & watch: the input, the translation, and the generation replayed step by step with the
source lighting up under each step's cross-attention, beside every head's map growing row by row."""
from __future__ import annotations

import time
import traceback
from dataclasses import dataclass, replace

import gradio as gr

from model.engine.branching import describe
from model.engine.decoding import DecodeOptions, check_prefix
from model.engine.transformer import CROSS
from model.families import catalog
from model.families.ours import CheckpointError

from . import VIEW, RunContext, Shell, layer_choices, link_notice_md, log, mounted_outputs, safe, subview_values
from .. import calls, languages, settings
from ..present import domain, inside, trust, views, whatif
from ..present.payload import examples_for
from ..present.shared import shared
from ..present import (DOMAIN_HINT, TRY_THIS, chips, choice_label, clean_input, default_direction, default_first,
                       direction_hint, is_blank, md_escape, model_choices, no_model_message, notice_md, output_marks,
                       run_bar, run_notices, source_marks)
from ..settings import DEFAULT_OUTPUT_TOKENS, MAX_BEAM, MAX_INPUT_CHARS, MAX_OUTPUT_TOKENS
from ..state import CLOSED, ModelShape, Run, RunInputs, Selection, from_query, tour_shown

CHIP_COLORS = {"token": "#dde7f7", "<unk>": "#f4a6a6", "replaced <unk>": "#ffd27f", "special": "#d9d9d9"}
# The replay shows at most REPLAY_FRAMES moments of the decode: Gradio's processing of a streamed frame
# costs more server time than drawing it (every output a frame leaves unchanged is rebuilt).
REPLAY_FRAMES = 8
WATCH_PACE = 0.4    # seconds between replayed frames: slow enough to follow the source lighting up
WATCH_FIGURES = 2   # intermediate heads figures among them (payload)
PHONE_WIDTH = 600   # px: narrower browsers open the attention view on one head


def opts_from(decoding: str, beam, max_len, pad_to: int = 0) -> DecodeOptions:
    b = int(beam or 1) if decoding == "beam" else 1
    return DecodeOptions(beam=max(1, min(b, MAX_BEAM)),
                         max_len=max(1, min(int(max_len or DEFAULT_OUTPUT_TOKENS), MAX_OUTPUT_TOKENS)),
                         pad_src_to=max(0, int(pad_to or 0)))


@dataclass(eq=False)
class TranslateParts:
    """The first screen's components."""
    language_pair: tuple  # languages.build's parts: a many-to-many model's pair
    translate_btn: gr.Button
    run_status: gr.Markdown  # "✓" and the run's id once its last value is on the page
    viewport: gr.Number  # the browser's width, read once on load
    out_text: gr.Textbox
    notice: gr.Markdown
    trust_md: gr.Markdown  # signals that say when not to trust the translation
    watch_step: gr.Markdown
    watch_strip: gr.HighlightedText
    src_chips: gr.HighlightedText
    out_chips: gr.HighlightedText
    watch_heads: gr.Plot
    examples_box: gr.Examples | None
    first_example: list | None  # [text, model] of the first example, or None
    load_event: tuple | None = None  # (fn, outputs) of the page's load: set by ``wire``, wired by ``wire_load``


def build(shell: Shell) -> TranslateParts:
    reg = shell.reg
    with gr.Row(elem_id="translate-top"):
        with gr.Column(scale=3):
            shell.text = gr.Textbox(label="Sentence", lines=1, max_lines=4, elem_id="input-text",
                                    placeholder="Ein Mann fährt mit dem Fahrrad durch die Stadt.",
                                    info=f"Enter or Translate · at most {MAX_INPUT_CHARS:,} characters · {DOMAIN_HINT}")
        with gr.Column(scale=2, min_width=240):
            with gr.Row():
                shell.direction = gr.Dropdown(model_choices(reg),
                                              value=shell.default_model, label="Direction", elem_id="direction")
                translate_btn = gr.Button("Translate", variant="primary", elem_id="translate-btn", scale=0,
                                          min_width=110)
            language_pair = languages.build(shell)  # a many-to-many model's pair (hidden otherwise)
            with gr.Accordion("More settings: decoding", open=False, elem_id="decoding-box"):
                shell.decoding = gr.Radio([("Greedy", "greedy"), ("Beam search", "beam")], value="greedy",
                                          label="Decoding", elem_id="decoding")
                shell.beam = gr.Slider(2, 8, value=4, step=1, label="Beam size", elem_id="beam", visible=False)
                shell.max_len = gr.Slider(1, 200, value=100, step=1, label="Max output tokens", elem_id="max-len")
    # "✓" plus a fresh id once the last value of a run is on the page: browser tests wait on it
    run_status = gr.Markdown(elem_id="run-status")
    # the browser's width, read once on load: a phone opens on one head instead of the grid of all heads
    viewport = gr.Number(0, elem_id="viewport", elem_classes="proxy", show_label=False, container=False)
    with gr.Row(equal_height=False, elem_id="watch-row"):
        with gr.Column(scale=2, min_width=300):
            out_text = gr.Textbox(label="Translation", interactive=False, elem_id="translation", lines=2)
            # what the notices say is about this translation: read after it (and a phone shows it first)
            notice = gr.Markdown(elem_id="notice")
            trust_md = gr.Markdown(elem_id="trust-signals")  # signals that say when not to trust it
            watch_step = gr.Markdown(elem_id="watch-step")
            watch_strip = gr.HighlightedText(label="Source, shaded by the cross-attention of the step being "
                                                   "generated (last layer, mean of heads)",
                                             show_legend=False, elem_id="watch-strip", interactive=False)
            with gr.Row():
                src_chips = gr.HighlightedText(label="Source tokens (▁ starts a word)", color_map=CHIP_COLORS,
                                               show_legend=False, show_inline_category=False,
                                               elem_id="src-chips")
                out_chips = gr.HighlightedText(label="Output tokens (▁ starts a word)", color_map=CHIP_COLORS,
                                               show_legend=False, show_inline_category=False,
                                               elem_id="out-chips")
        with gr.Column(scale=3, min_width=300):
            watch_heads = gr.Plot(label="Every head, row by row", elem_id="watch-heads", show_label=False)
            # under the map: on a desktop in the first screen, on a phone after the translation
            gr.Markdown(TRY_THIS, elem_id="try-this", elem_classes="explain")
    langs = {n: i.src_lang for n, i in catalog.infos(reg).items()}
    # an added model's examples come after ours (its first use loads it)
    examples = examples_for(default_first(reg), langs, calls.DATA_DIRS)
    examples_box = gr.Examples(examples, inputs=[shell.text, shell.direction], examples_per_page=8,
                               label="Examples: the Multi30k test set, then everyday sentences (click one to "
                                     "translate it)") if examples else None
    first_example = examples[0] if examples else None
    shell.on_run([notice, out_text, src_chips, out_chips, watch_step, watch_strip,
                  watch_heads, shell.run_state, shell.run_bar],
                 lambda run, ctx: _final(shell, run, 0 if ctx.replay else None,
                                         outlined(ctx.sel.kind, ctx.sel.layer, ctx.sel.head), ctx.sel.units))
    shell.on_run([trust_md], lambda run, ctx: [trust.panel(shell.reg_key, run)])
    return TranslateParts(language_pair=language_pair, translate_btn=translate_btn, run_status=run_status,
                          viewport=viewport, out_text=out_text, notice=notice, trust_md=trust_md,
                          watch_step=watch_step, watch_strip=watch_strip, src_chips=src_chips, out_chips=out_chips,
                          watch_heads=watch_heads, examples_box=examples_box, first_example=first_example)


def outlined(kind, layer, head) -> tuple[int, int] | None:
    """The head the thumbnails outline: the selected one, when the selection is a cross-attention head
    (the thumbnails show only cross-attention)."""
    sel = Selection.of(kind, layer, head)
    return (sel.layer, sel.head) if sel.kind == CROSS else None


def thumbnails(run: Run | None, kind, layer, head, units="words"):
    """The first screen's heads figure with the selected head outlined (no model call), in the units shown."""
    return heads_map(run, selected=outlined(kind, layer, head), units=units) if run is not None else gr.skip()


def heads_map(run: Run, t: int | None = None, selected: tuple[int, int] | None = None, units: str = "words"):
    """``views.watch_heads``, drawn once for every visitor of the same translation and picks."""
    return shared(run.tr, ("watch_heads", run.model, t, selected, units),
                  lambda: views.watch_heads(run, t, selected, units))


def _final(shell: Shell, run: Run, step: int | None = None, selected: tuple[int, int] | None = None,
           units: str = "words") -> list:
    """The run's values; the watch views at ``step`` (a replay follows) or at the end."""
    tr = run.tr
    t = len(tr.steps) - 1 if step is None else step
    strip = views.watch_strip(run, t) if tr.steps else []
    return [notice_md(run.notices), tr.text, chips(source_marks(tr)), chips(output_marks(tr)), "", strip,
            heads_map(run, None if step is None else t + 1, selected, units), run,
            run_bar(run.model, tr, shell.reg, run.forced)]


def replay_frames(shell: Shell, run: Run, animate: bool = True, selected: tuple[int, int] | None = None,
                  units: str = "words"):
    """The recorded decode in a few frames, after the run's own event: the caption grows token by token,
    the source lights up with each step's cross-attention, and the heads' map gains rows. Its own
    event, with three outputs: a streamed frame costs Gradio about 1 ms for every output it leaves
    unchanged, and the translate event has eleven."""
    p, tr = shell.translate, run.tr
    vocab = shell.model(run.model).tgt_vocab
    if not animate:  # the run's own event drew the end (RunContext.replay was off): only the caption is left
        yield {p.watch_step: _caption(run, len(tr.steps) - 1, vocab) if tr.steps else ""}
        return
    k = min(REPLAY_FRAMES, len(tr.steps) - 1)  # the last step is the final frame's
    shown = sorted({round(i * (len(tr.steps) - 2) / max(1, k - 1)) for i in range(k)})
    marks = {shown[len(shown) * (i + 1) // (WATCH_FIGURES + 1)] for i in range(WATCH_FIGURES)} if shown else set()
    for t in shown:
        frame = {p.watch_step: _caption(run, t, vocab), p.watch_strip: views.watch_strip(run, t)}
        if t in marks:
            frame[p.watch_heads] = heads_map(run, t + 1, selected, units)
        yield frame
        time.sleep(WATCH_PACE)
    end = _end(shell, run, selected, units)
    yield {p.watch_strip: end[p.watch_strip], p.watch_heads: end[p.watch_heads]}
    # last, a small frame: the end of a streamed event repeats its last frame
    yield {p.watch_step: end[p.watch_step]}


def _end(shell: Shell, run: Run, selected: tuple[int, int] | None, units: str) -> dict:
    """The watch views at the end of the decode, in one frame."""
    p, tr = shell.translate, run.tr
    last = len(tr.steps) - 1
    return {p.watch_step: _caption(run, last, shell.model(run.model).tgt_vocab) if tr.steps else "",
            p.watch_strip: views.watch_strip(run, last) if tr.steps else [],
            p.watch_heads: heads_map(run, selected=selected, units=units)}


def _params(request) -> dict:
    return dict(request.query_params) if request is not None else {}


def _caption(run: Run, t: int, vocab) -> str:
    tr = run.tr
    prefix = vocab.to_text(tr.output_tokens[:t], tr.tgt_lang)
    last = len(tr.steps) - 1  # steps count from 0, like layers and heads: say so, and which is the last
    where = " (the first; steps count from 0)" if t == 0 else " (the last)" if t == last else ""
    return (f"Step {t} of 0–{last}{where}: {md_escape(prefix)} **{md_escape(tr.output_tokens[t])}**"
            if t < len(tr.output_tokens) else "")


def read_inputs(text_in, name, decoding_in, beam_in, max_len_in, reference=None) -> tuple[RunInputs, list[str]]:
    """The run inputs of the controls' values (the text cleaned and capped), and what the user is told."""
    text, notices = clean_input(text_in)
    opts = opts_from(decoding_in, beam_in, max_len_in)
    ref = clean_input(reference)[0] if reference is not None else None
    return RunInputs(model=name or "", text=text, decoding="beam" if opts.beam > 1 else "greedy", beam=opts.beam,
                     max_len=opts.max_len, reference=ref), notices


def make_run(shell: Shell, inputs: RunInputs, notices: list[str]):
    """(Run, Forced or None) of ``inputs``: decoded, or teacher-forced on the reference. Raises on failure
    (CheckpointError: the model could not be loaded)."""
    notices = [*notices, *load_notice(shell, inputs.model)]
    lm = shell.model(inputs.model)
    if inputs.reference is not None:
        forced = calls.gpu_force(shell.reg_key, inputs.model, inputs.text, inputs.reference)
        note = f"Teacher-forced on the reference “{inputs.reference[:80]}” (perplexity {forced.perplexity:.2f})."
        return Run.of(lm, inputs.model, forced.translation, [*notices, note], forced=True, inputs=inputs,
                      forced_loss=[round(float(x), 6) for x in forced.loss], forced_detail=forced), forced
    opts = replace(opts_from(inputs.decoding, inputs.beam, inputs.max_len), prefix=inputs.prefix)
    tr = calls.gpu_translate(shell.reg_key, inputs.model, inputs.text, opts)
    if inputs.prefix:
        notices = [*notices, branch_notice(lm, tr, opts.beam)]
    far = domain.notice(shell.reg, inputs.model, lm, tr, lambda key: choice_label(key, shell.reg))
    return Run.of(lm, inputs.model, tr, [*([far] if far else []), *run_notices(tr, notices, lm)], inputs=inputs), None


def branch_notice(lm, tr, beam: int) -> str:
    """What a branch is, in the run's notices: which tokens were forced, and how the model went on."""
    forced = lm.tgt_vocab.to_text(tr.output_tokens[:tr.prefix_len], tr.tgt_lang)
    return (f"Branch: {describe(tr.prefix_len, beam)}. The first {tr.prefix_len} token(s) (“{forced[:80]}”) "
            "were forced; the model wrote the rest. Generation shows what it would have chosen at every step.")


SLOW_LOAD_PARAMETERS = 20_000_000  # from about this size a first load takes seconds (a toy or a frame: none)


def load_notice(shell: Shell, name: str) -> list[str]:
    """An added model is loaded on its first use (and again after it was evicted): say so while it loads,
    and how long it took, in the run's notices."""
    if catalog.is_loaded(shell.reg, name):
        return []
    label = choice_label(name, shell.reg)
    info = catalog.infos(shell.reg).get(name)
    slow = info is not None and info.parameters >= SLOW_LOAD_PARAMETERS
    gr.Info(f"Loading {label}" + (" (first use: a model this large takes a few seconds)…" if slow else "…"))
    took = calls.ensure_loaded(shell.reg_key, name)
    return [f"{label} was loaded for this run ({took:.1f} s, on first use)."] if took else []


def problem_of(shell: Shell, inputs: RunInputs) -> str | None:
    problem = no_model_message(shell.reg, inputs.model)
    if problem:
        return f"⚠️ {problem}"
    if is_blank(inputs.text) or (inputs.reference is not None and is_blank(inputs.reference)):
        return "✏️ Type a sentence to translate (the box is empty)."
    return None


def translate_values(shell: Shell, inputs: RunInputs, notices: list[str], ctx: RunContext) -> dict:
    """Every view of the new run, in one message (a streamed event sends its last frame twice); the replay
    follows as its own event. A problem comes back as a notice, never a stack trace."""
    p = shell.translate
    problem = problem_of(shell, inputs)
    if problem:
        return {p.notice: problem, p.run_status: "✗ " + ("no model" if problem[0] == "⚠" else "empty input")}
    try:
        run, forced = make_run(shell, inputs, notices)
    except CheckpointError as e:  # an added model that cannot be loaded: why, and the others keep serving
        log.warning("model %s could not be loaded: %s", inputs.model, e)
        return {p.notice: f"⚠️ This model could not be loaded: {md_escape(str(e)[:400])}. Pick another model.",
                p.run_status: "✗ model not loaded"}
    except Exception as e:
        if isinstance(e, ValueError) and inputs.prefix:  # a forced prefix the model cannot take: say why
            return {p.notice: f"⚠️ {md_escape(str(e)[:200])}", p.run_status: "✗ bad prefix"}
        log.error("translate failed: %s", traceback.format_exc())
        gr.Warning("The translation failed; please try another sentence.")
        return {p.notice: f"⚠️ The translation failed ({md_escape(type(e).__name__)}).", p.run_status: "✗ failed"}
    # with a replay to follow, the watch views start at the first step
    ctx = replace(ctx, replay=ctx.replay and run.n_steps > 1)
    values = shell.run_values(run, ctx) | {p.run_status: f"✓ {'forced' if forced else 'translated'} · run {run.id}"}
    if forced is not None:
        values |= {shell.computation.forced_md: inside.forced_markdown(forced),
                   shell.computation.forced_plot: inside.forced_figure(forced)}
    return values


def fitted_selection(shell: Shell, values: dict, sel: Selection) -> dict:
    """The stored selection fitted to the new run's model (it may have fewer layers or heads), written by the
    event that made the run, so that the replay chained after it reads it without a build step of its own."""
    run = values.get(shell.run_state)
    return {shell.sel_state: sel.fit(ModelShape.of(shell.lm(run)))} if run is not None else {}


def base_url(request) -> str:
    """The page's address (the event's referer), for the link; "/" when a client gives none."""
    try:
        return request.headers.get("referer") or "/"
    except Exception:
        return "/"


def replay_event(shell: Shell):
    """``replay(dep)`` chains the replay after an event that made a new run (animated on Translate & watch)."""
    p = shell.translate

    def on_replay(run, sel: Selection, stop, seen, request: gr.Request):
        if run is None:
            return
        sel = Selection.held(sel)
        selected = outlined(sel.kind, sel.layer, sel.head)
        if tour_shown(stop, seen, _params(request)):  # the sections are hidden: the end at once, never frames
            yield _end(shell, run, selected, sel.units)
            return
        yield from replay_frames(shell, run, animate=sel.section == "translate", selected=selected, units=sel.units)

    def chain(dep):
        for then in shell.after_run:  # e.g. the run history records the new run
            then(dep)
        # the event that made the run wrote the selection fitted to it (fitted_selection): no build step first,
        # which cost the first screen's replay 2.5 s
        return dep.then(on_replay, [shell.run_state, shell.sel_state, shell.tour.stop, shell.tour.link_seen],
                                    [p.watch_step, p.watch_strip, p.watch_heads],
                                    api_visibility="private", show_progress="hidden", concurrency_limit=16)
    return chain


def wire(shell: Shell) -> tuple:
    """The translate event, wired after every section is built (it refreshes them all): returns
    (fn, inputs, outputs) for another event that makes a run the same way."""
    p = shell.translate
    inputs = [shell.text, shell.direction, shell.decoding, shell.beam, shell.max_len, shell.sel_state]
    outputs = [p.run_status, *shell.run_outputs(), shell.sel_state]

    def translate_fn(text_in, name, decoding_in, beam_in, max_len_in, sel=None, request: gr.Request = None,
                     replay=True):
        run_in, notices = read_inputs(text_in, name, decoding_in, beam_in, max_len_in)
        # a new run starts at step 0, on each view's own default query
        sel = replace(Selection.held(sel), step=0, query=None)
        # animated only where it is seen (replay_frames): elsewhere this event draws the end itself
        ctx = RunContext(sel, replay and sel.section == "translate", base_url(request))
        values = translate_values(shell, run_in, notices, ctx)
        return values | fitted_selection(shell, values, sel)

    def on_translate(text_in, name, decoding_in, beam_in, max_len_in, sel=None, request: gr.Request = None):
        return translate_fn(text_in, name, decoding_in, beam_in, max_len_in, sel, request)

    event = (translate_fn, inputs, outputs)
    replay = replay_event(shell)
    replay(gr.on([p.translate_btn.click, shell.text.submit], on_translate, inputs, outputs,
                 api_name="translate_stream", api_visibility="undocumented", show_progress="minimal",
                 **shell.model_event()))
    ex = p.examples_box
    if ex is not None and getattr(ex, "load_input_event", None) is not None:
        replay(ex.load_input_event.then(on_translate, inputs, outputs, api_visibility="private",
                                        show_progress="minimal", **shell.model_event()))
    shell.decoding.change(lambda d: gr.Slider(visible=d == "beam"), shell.decoding, shell.beam,
                          api_visibility="private", queue=False, show_progress="hidden")
    # the user's pick only: an example, a link or Back set the direction with a run of their own, whose
    # notice must not be overwritten by a hint computed before it lands
    shell.direction.input(lambda run, name: direction_notice(shell, run, name), [shell.run_state, shell.direction],
                          p.notice, api_name="direction_hint", api_visibility="undocumented", **VIEW)
    languages.wire(shell, *p.language_pair)
    _wire_thumbnails(shell)
    _wire_first_screen(shell, outputs)
    return event


def direction_notice(shell: Shell, run: Run | None, name: str | None):
    """The notice once Direction changes: that the views still show the last run (until Translate), above
    that run's own notices; back on the run's direction, only its notices."""
    if run is None:
        return gr.skip()
    hint = direction_hint(run.model, name, shell.reg)
    return "\n\n".join(x for x in (hint, notice_md(run.notices)) if x)


def _wire_thumbnails(shell: Shell) -> None:
    """The thumbnails' outline follows the selected head: on a pick, and after a panel click opens one."""
    p = shell.translate

    def outline(run, sel: Selection):
        return thumbnails(run, sel.kind, sel.layer, sel.head, sel.units)

    shell.on_pick(("kind", "layer", "head", "units"), safe(outline, "heads' overview"), p.watch_heads,
                  api_name="thumbnails", api_visibility="undocumented", **VIEW)
    clicked = getattr(shell.attention, "head_click_event", None)
    if clicked is not None:  # after the click's head is built into the selection
        clicked.then(safe(outline, "heads' overview"), [shell.run_state, shell.sel_state], p.watch_heads,
                     api_visibility="private", **VIEW)


def _linked_model(shell: Shell, params: dict) -> tuple[dict, str | None]:
    """A link's model: a listed one as it is; another Hub id or folder is offered only where the owner
    allows any model, else the link opens on the default model and says so in a visitor's words."""
    name = params.get("model")
    if not name or name in shell.reg.models:
        return params, None
    try:
        return dict(params, model=calls.request_model(shell.reg_key, str(name))), None
    except calls.NotOffered as e:
        rest = {k: v for k, v in params.items() if k != "model"}
        default = default_direction(shell.reg)
        # where the owner lets links name any model, the reason it could not be loaded helps; else it is noise
        why = f" ({e})" if settings.read().allow_any_model else ""
        opened = f" The page opened {choice_label(default, shell.reg)} ({default}) instead." if default else ""
        return rest, (f"The link asks for the model {str(name)[:80]!r}, which is not served here{why}.{opened} "
                      f"The models served here: {', '.join(shell.reg.names)}.")


def _restore(shell: Shell, params: dict, width) -> tuple[RunInputs, Selection, list[str]] | None:
    """What the page opens on: the link's run and selection, or the first example."""
    params, refused = _linked_model(shell, params)
    if "model" not in params and default_direction(shell.reg):  # the default, never the first model found
        params = dict(params, model=default_direction(shell.reg))
    shapes = shell.shapes()
    restored = from_query(params, shapes, MAX_BEAM, MAX_OUTPUT_TOKENS)
    if restored is not None and refused:
        restored = replace(restored, problems=[refused, *restored.problems])
    first = shell.translate.first_example
    if restored is None and first is not None:  # no text: the first example, with the rest of the link
        linked = {k: v for k, v in params.items() if k != "text"}
        restored = from_query({"model": first[1], **linked, "text": first[0]}, shapes)
        if refused:
            restored.problems.insert(0, refused)
    if restored is None:
        return None
    sel, inputs = restored.sel, restored.inputs
    if inputs.prefix:  # checked against the model, loaded here only when a link forces a prefix
        try:
            lm = shell.model(inputs.model)
            check_prefix(lm.model, inputs.prefix)
        except (KeyError, CheckpointError):
            pass  # the run itself says the model cannot be served
        except ValueError as e:
            restored.problems.append(f"The link's prefix cannot be forced ({e}); the run is decoded from the start.")
            restored.inputs = replace(inputs, prefix=())
    # a phone, or a link made before views were linked that names a head, opens on one head
    if "view" not in params and ("layer" in params or "head" in params or 0 < (width or 0) < PHONE_WIDTH):
        sel = replace(sel, view="head")
    return restored.inputs, sel, restored.problems


def _controls(shell: Shell, inputs: RunInputs, sel: Selection) -> dict:
    """Every control set to what the link says."""
    shape = shell.shape(inputs.model)
    n_layers = shape.layers(sel.kind) if shape else 1
    # the choices too: a link may name a model this server offered since the page was built
    values = {shell.text: inputs.text, shell.decoding: inputs.decoding,
              shell.direction: gr.Dropdown(choices=model_choices(shell.reg), value=inputs.model),
              shell.beam: gr.Slider(value=inputs.beam, visible=inputs.decoding == "beam"),
              shell.max_len: inputs.max_len, shell.kind: sel.kind, shell.units: sel.units, shell.view: sel.view,
              shell.scale: sel.scale, shell.layer: gr.Dropdown(choices=layer_choices(n_layers), value=sel.layer),
              shell.tabs: gr.Tabs(selected=sel.section), shell.section: sel.section,
              shell.subviews: {sel.section: sel.subview} if sel.subview else {}}
    if sel.subview and sel.section in shell.subtabs:
        values[shell.subtabs[sel.section]] = gr.Tabs(selected=sel.subview)
    if inputs.reference is not None:
        values[shell.computation.ref_text] = inputs.reference
    return values


def _past_the_run(run: Run, inputs: RunInputs, sel: Selection, shown: Selection) -> list[str]:
    """What the link names past this run: a step after its last, source positions after its last."""
    out = []
    if shown.step != sel.step:
        out.append(f"The link's step {sel.step} is past this run's last step; step {shown.step} is shown.")
    n = len(run.tr.src_tokens)
    past = [i for i in inputs.toggles.src if i >= n]
    if past:
        out.append(f"The link's hide={','.join(map(str, past))} names source positions past this run's last "
                   f"({n - 1}); they are not hidden.")
    return out


def _wire_first_screen(shell: Shell, outputs: list) -> None:
    """On page load: the shared link's run and screen, or the first example, translated at once."""
    p = shell.translate
    head_outputs = [shell.link_notice, shell.text, shell.direction, shell.decoding, shell.beam, shell.max_len, shell.kind, shell.layer,
                    shell.head, shell.units, shell.step, shell.view, shell.scale, shell.tabs, shell.section,
                    shell.subviews, *shell.subtabs.values(), shell.computation.ref_text, shell.computation.forced_md,
                    shell.computation.forced_plot, *shell.interventions.toggles,
                    *shell.interventions.results]

    def on_load(width, request: gr.Request):
        params = _params(request)
        found = _restore(shell, params, width)
        if found is None:
            return {shell.text: gr.skip()}
        inputs, sel, problems = found
        # a link that opens the tour hides the sections: no replay there (replay_event says the same)
        ctx = RunContext(sel, replay=sel.section == "translate" and not tour_shown(CLOSED, False, params),
                         base_url=base_url(request))
        # the link's problems are said once, above the sections (never as this run's own notices, which
        # Masks' comparison and every later view of the run would repeat)
        values = translate_values(shell, inputs, [], ctx)
        run = values.get(shell.run_state)
        if run is None:
            return _controls(shell, inputs, sel) | values | {shell.link_notice: link_notice_md(problems)}
        sel = sel.fit(ModelShape.of(shell.lm(run)))
        shown = sel.within(run.n_steps)
        values |= subview_values(shell, run, shown) | shell.interventions.restore(shell, run, inputs, shown)
        extra, bad = whatif.restore(shell, run, params, shown)  # the bench and the foil the link names
        values |= extra
        link = whatif.link_after_load(shell, run, shown, ctx.base_url, extra)
        if link is not None:
            values[shell.bar.link_box] = link
        late = _past_the_run(run, inputs, sel, shown)
        values[shell.link_notice] = link_notice_md([*problems, *late, *bad])
        return _controls(shell, inputs, shown) | values | {shell.sel_state: shown, shell.step: gr.Slider(
            minimum=0, maximum=max(1, run.n_steps - 1), value=shown.step)}

    # controls set by the link are also refreshed by the run: each listed once
    p.load_event = (on_load, list(dict.fromkeys([*head_outputs, *mounted_outputs(shell), *outputs,
                                                 *whatif.load_outputs(shell)])))


def wire_load(shell: Shell, demo) -> None:
    fn, outputs = shell.translate.load_event
    first = demo.load(fn, shell.translate.viewport, outputs, js="() => [window.innerWidth]", api_name="deep_link",
                      api_visibility="undocumented", show_progress="minimal", **shell.model_event())
    replay_event(shell)(first)
