"""What one browser session keeps between events (in gr.State; never shared between sessions), and the
link that reproduces it.

Two typed values describe the screen: ``RunInputs`` (what made the current run: model, sentence,
decoding, forced reference, the intervention toggles) and ``Selection`` (which head, step, query, units,
view, colour scale, section and sub-view every view points at). A link serialises exactly these two
(``to_query``) and ``from_query`` restores them, naming every parameter it could not use. ``Run`` is
the current run itself: plain dataclasses of Translations, so they pickle across the ZeroGPU boundary.
"""
from __future__ import annotations

import re
import uuid
from dataclasses import dataclass, field, fields, replace
from urllib.parse import urlencode

from model.analysis.computation import Forced
from model.engine.beams import BeamTree
from model.engine.config import Interventions
from model.engine.decoding import Translation
from model.engine.hooks import Trace
from model.engine.names import SHORT_NAMES, HeadRef, Kind
from model.engine.transformer import ATTN_KINDS, CROSS, ENC_SELF

# Sections and the sub-views (inner tabs) of each, in page order; "" is a section without sub-tabs.
SUBVIEWS: dict[str, tuple[str, ...]] = {
    "translate": ("",), "attention": ("maps", "alignment", "rollout"), "generation": ("steps", "beam-tree"),
    "interventions": ("",), "computation": ("encodings", "inside", "residual", "lens", "attribution", "forced",
                                                       "decoderlens"),
    "analysis": ("profiles", "pair", "export", "about", "sidebyside", "corpus"), "learn": ("",)}
SECTIONS = tuple(SUBVIEWS)
VIEWS = ("grid", "head", "scores", "mean")
SCALES = ("shared", "head")
UNITS = ("words", "pieces")
DECODINGS = ("greedy", "beam")
MAX_STEP = 1000
TOUR_STOPS = 11  # the guided tour's stops (ui/present/tour.py); a link's tour=N opens stop N (1-based)


@dataclass(frozen=True)
class ModelShape:
    """What a control's choices depend on: the model's layers and heads (per side: a distilled or
    converted model's decoder may have fewer layers or other heads than its encoder)."""
    n_encoder_layers: int
    n_decoder_layers: int
    n_heads: int                       # the encoder's heads per layer
    n_decoder_heads: int | None = None  # None: as the encoder

    @classmethod
    def of(cls, lm) -> "ModelShape":
        cfg = lm.model.cfg
        return cls(cfg.n_encoder_layers, cfg.n_decoder_layers, cfg.encoder_heads, cfg.decoder_heads)

    def layers(self, kind: str) -> int:
        return self.n_encoder_layers if kind == ENC_SELF else self.n_decoder_layers

    def heads(self, kind: str) -> int:
        """Heads per layer of one attention kind (the decoder's serve its self- and cross-attention)."""
        return self.n_heads if kind == ENC_SELF or self.n_decoder_heads is None else self.n_decoder_heads

    @property
    def max_heads(self) -> int:
        return max(self.n_heads, self.n_decoder_heads or self.n_heads)

    @property
    def max_layers(self) -> int:
        return max(self.n_encoder_layers, self.n_decoder_layers)


@dataclass(frozen=True)
class Toggles:
    """The Masks & interventions settings: what Compare changes in the model."""
    pad_to: int = 0
    padding: bool = True
    causal: bool = True
    positional: bool = True
    heads: tuple[tuple[str, int, int], ...] = ()   # (kind, layer, head), sorted
    src: tuple[int, ...] = ()                       # source positions hidden, sorted

    @property
    def changed(self) -> bool:
        return self != Toggles()

    def interventions(self) -> Interventions:
        return Interventions(src_padding_mask=self.padding, causal_mask=self.causal,
                             positional_encoding=self.positional, ablate_heads=frozenset(self.heads),
                             ablate_src_tokens=frozenset(self.src))


@dataclass(frozen=True)
class RunInputs:
    """What makes the current run: decoding ``text`` with ``model``, or teacher-forcing it on ``reference``."""
    model: str
    text: str
    decoding: str = "greedy"
    beam: int = 4          # the beam size when ``decoding`` is "beam"
    max_len: int = 100
    reference: str | None = None
    toggles: Toggles = Toggles()
    prefix: tuple[int, ...] = ()   # a branch: output ids forced before the decoding goes on

    def __post_init__(self):  # a greedy run has no beam size: one spelling per run
        if self.decoding != "beam":
            object.__setattr__(self, "beam", 4)
        object.__setattr__(self, "prefix", tuple(int(i) for i in self.prefix))

    @property
    def kind(self) -> str:
        """greedy, beam, teacher-forced, a branch (and intervened, where Compare's toggles are set)."""
        base = "teacher-forced" if self.reference is not None else self.decoding
        if self.prefix and self.reference is None:
            base = f"forced prefix up to step {len(self.prefix) - 1}, then {base}"
        return base + (", intervened" if self.toggles.changed else "")


@dataclass(frozen=True)
class Selection:
    """What every view points at. ``query`` None is each view's own default query. ``kind`` is the engine's
    :class:`Kind` (made one where a value enters, in :meth:`of` and the link reader)."""
    kind: Kind = CROSS
    layer: int = 0
    head: int = 0
    step: int = 0
    query: int | None = None
    units: str = "words"
    view: str = "grid"
    scale: str = "shared"
    section: str = "translate"
    subview: str = ""

    @classmethod
    def of(cls, kind=CROSS, layer=0, head=0, step=0, query=None, units="words", view="grid", scale="shared",
           section="translate", subview="") -> "Selection":
        """From control values as Gradio sends them (None, floats, labels): each field made valid."""
        section = section if section in SUBVIEWS else "translate"
        return cls(kind=_kind(kind) or CROSS, layer=read_index(layer), head=read_index(head),
                   step=read_index(step), query=None if query in (None, "") else read_index(query),
                   units=units if units in UNITS else "words",
                   view=view if view in VIEWS else "grid", scale=scale if scale in SCALES else "shared",
                   section=section, subview=subview if subview in SUBVIEWS[section] else SUBVIEWS[section][0])

    @classmethod
    def held(cls, value) -> "Selection":
        """The selection a handler reads from the session's state: the one normalising of it (a fresh
        session's default where the state holds none, as an API call or a test may send)."""
        return value if isinstance(value, cls) else cls()

    @property
    def head_ref(self) -> HeadRef:
        """The head the selection points at."""
        return HeadRef(self.kind, self.layer, self.head)

    def fit(self, shape: ModelShape) -> "Selection":
        """The selection with its layer and head inside ``shape`` (another model may have fewer)."""
        return replace(self, layer=min(self.layer, shape.layers(self.kind) - 1),
                       head=min(self.head, shape.heads(self.kind) - 1))

    def within(self, n_steps: int, step: int | None = None) -> "Selection":
        """The selection at ``step`` (default: its own) inside a run of ``n_steps`` steps."""
        return replace(self, step=read_index(self.step if step is None else step, 0, n_steps))


def read_index(value, default: int = 0, n: int | None = None) -> int:
    """The one reading of a layer, head, step or position from a control, a link or a call: a whole number
    from 0 (below ``n`` where given); ``default`` where ``value`` is none (below ``n`` too)."""
    try:
        i = max(0, int(value))
    except (TypeError, ValueError):
        i = default
    return i if n is None else max(0, min(i, n - 1))


def _kind(value) -> Kind | None:
    """The engine's Kind for a value from a control or a link (Kind.of knows the short names); None if none."""
    try:
        return Kind.of(str(value or ""))
    except ValueError:
        return None


# --------------------------------------------------------------------------- links

def to_query(inputs: RunInputs, sel: Selection) -> dict[str, str]:
    """The query parameters of a link to this screen (defaults left out)."""
    q = {"text": inputs.text, "model": inputs.model}
    if inputs.decoding == "beam":
        q["beam"] = str(inputs.beam)
    if inputs.max_len != RunInputs.max_len:
        q["max_len"] = str(inputs.max_len)
    if inputs.reference is not None:
        q["ref"] = inputs.reference
    if inputs.prefix:
        q["prefix"] = ",".join(map(str, inputs.prefix))
    t = inputs.toggles
    for key, on in (("padding", t.padding), ("causal", t.causal), ("positional", t.positional)):
        if not on:
            q[key] = "off"
    if t.pad_to:
        q["pad"] = str(t.pad_to)
    if t.heads:
        q["ablate"] = ",".join(HeadRef(*h).key for h in t.heads)
    if t.src:
        q["hide"] = ",".join(map(str, t.src))
    default = Selection()
    for f in fields(Selection):
        value = getattr(sel, f.name)
        if value != getattr(default, f.name) and not (f.name == "subview" and value == SUBVIEWS[sel.section][0]):
            q[f.name] = SHORT_NAMES[value] if f.name == "kind" else str(value)
    return q


def link_url(base_url: str, inputs: RunInputs, sel: Selection, whatif: "WhatIf | None" = None) -> str:
    q = to_query(inputs, sel) | (whatif_query(whatif) if whatif is not None else {})
    return base_url.split("?")[0].split("#")[0] + "?" + urlencode(q)


@dataclass
class Restored:
    """What a link restores, and a sentence for every parameter it could not use."""
    inputs: RunInputs
    sel: Selection
    problems: list[str] = field(default_factory=list)
    tour: int | None = None  # the guided tour's stop the link opens (1-based), if any


class _Reader:
    """Reads query parameters one by one, noting each one it cannot use (and keeping the default)."""

    def __init__(self, params: dict):
        self.params, self.problems = params, []

    def bad(self, key: str, why: str) -> None:
        self.problems.append(f"The link's {key}={str(self.params.get(key))[:40]!r} {why}; the default is used.")

    def int(self, key: str, default: int, lo: int, hi: int) -> int:
        if key not in self.params:
            return default
        try:
            value = int(str(self.params[key]))
        except ValueError:
            self.bad(key, "is not a whole number")
            return default
        if not lo <= value <= hi:
            self.bad(key, f"is outside {lo}–{hi}")
            return default
        return value

    def choice(self, key: str, default: str, allowed) -> str:
        value = self.params.get(key, default)
        if value not in allowed:
            self.bad(key, "is not one of " + ", ".join(a or '""' for a in allowed))
            return default
        return value

    def switch(self, key: str) -> bool:
        return self.choice(key, "on", ("on", "off")) == "on"


def _toggles(r: _Reader, shape: ModelShape | None) -> Toggles:
    heads = []
    for item in filter(None, str(r.params.get("ablate", "")).split(",")):
        try:
            kind, l, h = HeadRef.parse(item)
        except ValueError:
            r.bad("ablate", f"names a head ({item[:20]!r}) not written kind.layer.head")
            continue
        if shape is not None and not (0 <= l < shape.layers(kind) and 0 <= h < shape.heads(kind)):
            r.bad("ablate", f"names a head ({item[:20]!r}) this model does not have")
            continue
        heads.append((kind, l, h))
    src = []
    for item in filter(None, str(r.params.get("hide", "")).split(",")):
        if not item.isdigit() or int(item) > 1000:
            r.bad("hide", f"names a position ({item[:20]!r}) that is not a number")
            continue
        src.append(int(item))
    return Toggles(pad_to=r.int("pad", 0, 0, 64), padding=r.switch("padding"), causal=r.switch("causal"),
                   positional=r.switch("positional"), heads=tuple(sorted(set(heads))), src=tuple(sorted(set(src))))


def _selection(r: _Reader, shape: ModelShape | None) -> Selection:
    kind = CROSS
    if "kind" in r.params:
        kind = _kind(r.params["kind"]) or CROSS
        if _kind(r.params["kind"]) is None:
            r.bad("kind", "is not enc, dec or cross")
    n_layers = shape.layers(kind) if shape else 64
    n_heads = shape.heads(kind) if shape else 64
    section = r.choice("section", "translate", SECTIONS)
    query = r.int("query", -1, 0, MAX_STEP) if "query" in r.params else -1
    return Selection(kind=kind, layer=r.int("layer", 0, 0, n_layers - 1), head=r.int("head", 0, 0, n_heads - 1),
                     step=r.int("step", 0, 0, MAX_STEP), query=None if query < 0 else query,
                     units=r.choice("units", "words", UNITS), view=r.choice("view", "grid", VIEWS),
                     scale=r.choice("scale", "shared", SCALES), section=section,
                     subview=r.choice("subview", SUBVIEWS[section][0], SUBVIEWS[section]))


def _prefix(r: _Reader) -> tuple[int, ...]:
    """A branch's forced prefix: comma-separated token ids (whether the model has them is checked on load)."""
    items = [x.strip() for x in str(r.params.get("prefix", "")).split(",") if x.strip()]
    if len(items) > MAX_STEP or not all(x.isdigit() and int(x) < 10**7 for x in items):
        r.bad("prefix", "is not a list of token ids (whole numbers, comma-separated)")
        return ()
    return tuple(int(x) for x in items)


def from_query(params, shapes: dict[str, ModelShape], max_beam: int = 8, max_len: int = 250) -> Restored | None:
    """Query parameters -> what the link restores (None without a text). ``shapes``: the loaded models."""
    params = {k: v for k, v in dict(params or {}).items()}
    text = params.get("text")
    if not text or not str(text).strip():
        return None
    r = _Reader(params)
    models = list(shapes)
    model = params.get("model", models[0] if models else "")
    if model not in shapes:
        if "model" in params:
            r.bad("model", "is not a loaded model")
        model = models[0] if models else ""
    shape = shapes.get(model)
    beam = r.int("beam", 0, 2, max_beam)
    ref = params.get("ref")
    inputs = RunInputs(model=model, text=str(text), decoding="beam" if beam else "greedy", beam=beam or 4,
                       max_len=r.int("max_len", 100, 1, max_len),
                       reference=str(ref) if ref not in (None, "") else None, toggles=_toggles(r, shape),
                       prefix=_prefix(r))
    known = {"text", "model", "beam", "max_len", "ref", "pad", "padding", "causal", "positional", "ablate", "hide",
             "prefix", "tour", "tpick", *WHATIF_KEYS,
             *(f.name for f in fields(Selection))}
    sel = _selection(r, shape)
    tour = r.int("tour", 0, 1, TOUR_STOPS)
    r.problems += [f"The link's parameter {k[:20]!r} is unknown; it was ignored." for k in params if k not in known]
    return Restored(inputs, sel, r.problems, tour or None)


CLOSED = -1  # the tour's stop state when no stop is open


def tour_stop(params) -> int | None:
    """The tour stop a link opens, 0-based (None: no tour, or a value ``from_query`` already names)."""
    value = str(dict(params or {}).get("tour", "")).strip()
    return int(value) - 1 if value.isdigit() and 1 <= int(value) <= TOUR_STOPS else None


def tour_shown(stop, seen: bool, params) -> bool:
    """Whether the tour covers the sections: a stop is open (``stop`` not CLOSED), or the page's link opens one
    that has not been drawn yet (``seen`` False)."""
    return stop not in (None, CLOSED) or (not seen and tour_stop(params) is not None)


def tour_pick(params) -> str | None:
    """The tour stop's pick a link names (its trial's value: a token, a head, a step), if any."""
    value = str(dict(params or {}).get("tpick", "")).strip()[:40]
    return value or None


def tour_url(base_url: str, inputs: RunInputs, sel: Selection, stop: int, pick: str | None = None) -> str:
    """The link to tour stop ``stop`` (0-based) on this run: the explorer's link plus tour=stop+1, and the
    stop's pick where one is made."""
    return link_url(base_url, inputs, sel) + f"&tour={stop + 1}" + (f"&{urlencode({'tpick': pick})}" if pick else "")


# --------------------------------------------------------------------------- "what if" in a link

PATCH_SCANS = ("none", "heads", "positions")
MAX_LINK_TEXT = 400
# query key -> PatchLink field; each written only where it differs from the default
_PATCH_KEYS = {"pa": "text_a", "pb": "text_b", "psite": "site", "pkind": "kind", "ppart": "part", "ppoint": "point",
               "player": "layer", "phead": "head", "ppos": "positions", "pscan": "scan", "pstep": "step",
               "pout": "output", "pfoil": "foil", "pwith": "ablation"}
WHATIF_KEYS = (*_PATCH_KEYS, "apos", "foil", "model2", "dlayer", "corpus")
MAX_CORPUS_PATH = 500


@dataclass(frozen=True)
class PatchLink:
    """The clean/corrupted bench on screen, as its controls hold it (positions as typed, e.g. "1, 3-5")."""
    text_a: str
    text_b: str
    site: str = "z"
    kind: str = CROSS
    part: str = "decoder"
    point: str = "post"
    layer: int = 0
    head: int = 0
    positions: str = ""
    scan: str = "heads"
    step: int = 0
    output: str = ""      # the target text both runs are forced on (empty: B's own translation)
    foil: str = ""
    ablation: str = "patch"


@dataclass(frozen=True)
class WhatIf:
    """What a link restores beyond the run and the selection: the patch bench, Attribution's output
    token and foil, the model Two models shows beside the run, and the encoder layer DecoderLens shows the
    cross-attention of. Serialised only where set."""
    patch: PatchLink | None = None
    attr_pos: int | None = None
    foil: str | None = None
    second: str | None = None  # Analysis › Two models: the model beside the run's
    lens_layer: int | None = None  # Computation › DecoderLens: the encoder layer its cross-attention reads
    corpus: str | None = None  # Analysis › Corpus: the output folder open there (relative to the corpus root)

    @property
    def empty(self) -> bool:
        return self == WhatIf()


def whatif_query(w: WhatIf) -> dict[str, str]:
    q = {}
    if w.patch is not None:
        default = PatchLink("", "")
        for key, name in _PATCH_KEYS.items():
            value = getattr(w.patch, name)
            if key in ("pa", "pb") or value != getattr(default, name):
                q[key] = SHORT_NAMES.get(value, value) if name == "kind" else str(value)
    if w.attr_pos is not None:
        q["apos"] = str(w.attr_pos)
    if w.foil:
        q["foil"] = w.foil
    if w.second:
        q["model2"] = w.second
    if w.lens_layer is not None:
        q["dlayer"] = str(w.lens_layer)
    if w.corpus:
        q["corpus"] = w.corpus
    return q


def _patch_link(r: _Reader, shape: ModelShape | None) -> PatchLink | None:
    from model.analysis.patching import ABLATIONS, RESID_POINTS, SITES
    a, b = (str(r.params.get(k) or "").strip() for k in ("pa", "pb"))
    if not any(k in r.params for k in _PATCH_KEYS):
        return None
    if not a or not b or len(a) > MAX_LINK_TEXT or len(b) > MAX_LINK_TEXT:
        r.problems.append("The link's patch bench needs both sentences (pa and pb, up to "
                          f"{MAX_LINK_TEXT} characters); the bench is not restored.")
        return None
    kind = _kind(r.params.get("pkind", "cross"))
    if kind is None:
        r.bad("pkind", "is not enc, dec or cross")
        kind = CROSS
    part = r.choice("ppart", "decoder", tuple(RESID_POINTS))
    pos = str(r.params.get("ppos", "")).strip()
    if pos and not all(re.fullmatch(r"\d{1,4}(-\d{1,4})?", x) for x in re.split(r"[,\s]+", pos) if x):
        r.bad("ppos", "is not positions such as '1, 3-5'")
        pos = ""
    n_layers, n_heads = (shape.max_layers, shape.max_heads) if shape else (64, 64)
    return PatchLink(a, b, site=r.choice("psite", "z", SITES), kind=kind, part=part,
                     point=r.choice("ppoint", "post", RESID_POINTS[part]),
                     layer=r.int("player", 0, 0, n_layers - 1), head=r.int("phead", 0, 0, n_heads - 1),
                     positions=pos[:200], scan=r.choice("pscan", "heads", PATCH_SCANS),
                     step=r.int("pstep", 0, 0, MAX_STEP), output=str(r.params.get("pout", ""))[:MAX_LINK_TEXT],
                     foil=str(r.params.get("pfoil", ""))[:80].strip(), ablation=r.choice("pwith", "patch", ABLATIONS))


def whatif_from_query(params, shape: ModelShape | None = None) -> tuple[WhatIf, list[str]]:
    """The link's bench and foil, and a sentence for every value it could not use."""
    r = _Reader({k: v for k, v in dict(params or {}).items()})
    patch = _patch_link(r, shape)
    apos = r.int("apos", -1, 0, MAX_STEP) if "apos" in r.params else -1
    foil = str(r.params.get("foil") or "").strip()[:80] or None
    second = str(r.params.get("model2") or "").strip()[:200] or None
    n_enc = shape.n_encoder_layers if shape else 64
    dlayer = r.int("dlayer", -1, 0, n_enc - 1) if "dlayer" in r.params else -1
    corpus = str(r.params.get("corpus") or "").strip()[:MAX_CORPUS_PATH] or None
    return WhatIf(patch=patch, attr_pos=None if apos < 0 else apos, foil=foil, second=second,
                  lens_layer=None if dlayer < 0 else dlayer, corpus=corpus), r.problems


# --------------------------------------------------------------------------- runs


@dataclass
class Run:
    """One translation: the model, the result, what the user was told, and word spans."""
    model: str
    tr: Translation
    notices: list[str] = field(default_factory=list)
    # subword models: which pieces form each word of the source and the output (None: a token is a word)
    src_spans: list[list[int]] | None = None
    out_spans: list[list[int]] | None = None
    src_words: list[str] | None = None
    out_words: list[str] | None = None
    forced: bool = False  # teacher-forced on a reference rather than decoded
    id: str = field(default_factory=lambda: uuid.uuid4().hex[:6])
    inputs: RunInputs | None = None      # what made it: a link and an export say so
    forced_loss: list[float] | None = None   # a forced run's cross-entropy per reference token (nats)
    forced_detail: Forced | None = None      # a forced run's per-token readout (Forced decoding draws it)

    @classmethod
    def of(cls, lm, name: str, tr: Translation, notices: list[str] | None = None, forced: bool = False,
           inputs: RunInputs | None = None, forced_loss: list[float] | None = None,
           forced_detail: Forced | None = None) -> "Run":
        extra = dict(inputs=inputs, forced_loss=forced_loss, forced_detail=forced_detail)
        if lm.src_vocab.kind == "word":
            return cls(name, tr, list(notices or []), forced=forced, **extra)
        w = tr.words(lm)
        return cls(name, tr, list(notices or []), w.src_spans, w.output_spans, w.src, w.output, forced, **extra)

    def by_word(self, units: str) -> bool:
        return units == "words" and self.src_spans is not None

    @property
    def n_steps(self) -> int:
        return len(self.tr.steps)


@dataclass
class CompareRun:
    """The current run beside a modified model on the same source."""
    model: str
    base: Translation
    mod: Translation
    mod_on_base: Trace  # the modified model teacher-forced on the baseline's output: rows line up
    iv: Interventions
    run_id: str = ""    # the Run it compared against


@dataclass
class BeamView:
    """The beam search the Generation section shows."""
    model: str
    tr: Translation
    tree: BeamTree
    run_id: str = ""


@dataclass
class PairRun:
    model: str
    a: Translation
    b: Translation


__all__ = ["ATTN_KINDS", "SUBVIEWS", "SECTIONS", "ModelShape", "Toggles", "RunInputs", "Selection", "to_query",
           "link_url", "from_query", "Restored", "PatchLink", "WhatIf", "whatif_query", "whatif_from_query", "Run",
           "CompareRun", "BeamView", "PairRun"]
