"""Build the static site: ``python -m web.build --out DIR`` (and ``--space DIR`` for a static Space).

Every direction found in checkpoints/ (a folder with config.json and spm.model) is exported to ONNX from
the engine (web/export.py), its tokenizer written as data, and the page (web/page/) copied beside the
pinned ONNX Runtime Web and Plotly.js from web/node_modules (``cd web && npm ci`` first).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
import tempfile
from pathlib import Path

import onnx

from model.families.ours import CheckpointError

from . import marian as opus
from .compact import WEIGHTS, borrow_weights, share_weights, store
from .export import FLAGS, DecoderGraph, EncoderGraph, export_model
from .figures import write_figures
from .first import first_screen
from .runtime import Graphs
from .sentencepiece_spec import spm_spec
from .spacy_rules import tokenizer_rules

ROOT = Path(__file__).resolve().parent
PRECISION = "fp16"  # the stored weights' precision, chosen by bench/web_int8.py's measurement (docs/web.md)
PAGE = ROOT / "page"
FIRST = "first.json"  # a direction's first screen (web/first.py)
TOUR = "tour.json"  # the tour's titles and sentence templates, from the app's presenter
ALTI = "alti.onnx"  # ALTI+ of a run (web/export.py AltiGraph): the tour's "What moved the output"
APP_URL = "http://127.0.0.1:7860/"  # where `python app.py` serves the app; --app names a deployed one
WASM = "vendor/ort-wasm-simd-threaded.wasm"
PHONE = "phone.js"  # written by the build from the app's own phone script
SW_FILES = "const FILES = {};"  # the line of page/sw.js that the build fills with every file's content hash
LFS_MB = 10  # the Hub refuses a file over 10 MB pushed without Git LFS
VENDOR = {  # node_modules path -> name in the site's vendor/ folder
    "onnxruntime-web/dist/ort.wasm.min.mjs": "ort.wasm.min.mjs",
    "onnxruntime-web/dist/ort-wasm-simd-threaded.mjs": "ort-wasm-simd-threaded.mjs",
    "onnxruntime-web/dist/ort-wasm-simd-threaded.wasm": "ort-wasm-simd-threaded.wasm",
    "plotly.js-cartesian-dist-min/plotly-cartesian.min.js": "plotly.min.js",  # heatmaps and lines: a third of the full bundle
}
SPACE_README = """---
title: Inside a translation Transformer (in your browser)
emoji: 🔍
colorFrom: indigo
colorTo: green
sdk: static
app_file: index.html
pinned: false
license: mit
custom_headers:
  cross-origin-embedder-policy: require-corp
  cross-origin-opener-policy: same-origin
  cross-origin-resource-policy: cross-origin
---

Our small translation Transformers ({directions}) running in the visitor's browser with ONNX Runtime Web:
the translation, every attention head, step-by-step decoding, the masks and the positional encoding.
Built by `python -m web.build --space DIR` from the project's repository.
"""


def directions(checkpoints: Path) -> list[Path]:
    """Our own checkpoint folders (config.json with src_lang/tgt_lang, and spm.model), sorted by name."""
    found = []
    for cfg in sorted(checkpoints.glob("*/config.json")):
        meta = json.loads(cfg.read_text(encoding="utf-8"))
        if {"src_lang", "tgt_lang", "model"} <= meta.keys() and (cfg.parent / "spm.model").is_file():
            found.append(cfg.parent)
    return found


def example(name: str, src_lang: str, checkpoints: Path) -> str:
    """The app's first example sentence for a direction (its Examples table's first row): the page's default."""
    from ui.present.payload import examples_for  # gradio-free: the app's example sentences
    rows = examples_for([name], {name: src_lang}, [checkpoints / "multi30k"])
    return rows[0][0] if rows else ""


def model_meta(lm, enc: EncoderGraph, dec: DecoderGraph, checkpoints: Path) -> dict:
    cfg = lm.model.cfg
    metrics = lm.metrics or {}
    return {"name": lm.name, "src_lang": lm.src_lang, "tgt_lang": lm.tgt_lang, "d_model": cfg.d_model,
            "d_ff": cfg.d_ff, "norm_first": cfg.norm_first,
            "encoder_layers": cfg.n_encoder_layers, "decoder_layers": cfg.n_decoder_layers,
            "encoder_heads": cfg.encoder_heads, "decoder_heads": cfg.decoder_heads, "max_len": cfg.max_len,
            "pad_id": cfg.pad_id, "bos_id": cfg.src_bos_id, "eos_id": cfg.eos_id,
            "decoder_start_id": cfg.decoder_start_id, "never_generated": list(cfg.never_generated),
            "parameters": lm.model.num_parameters(), "flags": list(FLAGS), "token_scale": float(cfg.token_scale),
            "tgt_vocab_size": cfg.tgt_vocab_size, "example": example(lm.name, lm.src_lang, checkpoints),
            "encoder_outputs": list(enc.names.outputs), "decoder_outputs": list(dec.names.outputs),
            "decoder_inputs": list(dec.names.inputs),
            "metrics": {k: v for k, v in metrics.items() if isinstance(v, (int, float))}}


def build_direction(folder: Path, out: Path, precision: str = PRECISION, checkpoints: Path | None = None) -> dict:
    """models/<name>/: encoder.onnx and decoder.onnx with their weights (stored at ``precision``; "auto": the
    smaller that keeps the greedy-token rule, web/marian.py) in one weights.bin, each tensor once, split into
    parts under the Hub's limit when larger; spm.json, meta.json. An OPUS-MT folder or Hub id has its
    tokenizer written by web/marian.py instead."""
    from model.families import load_checkpoint
    lm = load_checkpoint(folder)
    name = opus.site_name(folder) if opus.owns(lm) else lm.name
    target = out / "models" / name
    target.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        fp32 = {part: onnx.load(str(path)) for part, path in export_model(lm.model, Path(tmp)).items()}
    meta = model_meta(lm, EncoderGraph(lm.model), DecoderGraph(lm.model), checkpoints or Path(folder).parent)
    check = None
    if precision == "auto":
        precision, check = opus.choose_precision(lm, fp32, meta)
    borrow_weights(fp32["alti"], [fp32["encoder"], fp32["decoder"]])  # its weights are theirs
    graphs = {part: store(graph, precision) for part, graph in fp32.items()}
    weights = write_weights(target, share_weights(list(graphs.values())))
    for part, graph in graphs.items():
        onnx.save(graph, str(target / f"{part}.onnx"))
    if opus.owns(lm):
        opus.write_tokenizer(Path(lm.path), target)
    else:
        spec = spm_spec(folder / "spm.model")
        (target / "spm.json").write_text(json.dumps(spec, ensure_ascii=False), encoding="utf-8")
    meta = {**meta, "name": name, "precision": precision, "weights": weights,
            **({"precision_check": check} if check else {}), **(opus.meta(lm, folder) if opus.owns(lm) else {})}
    # what the page downloads to run it: its progress bar's total
    meta["bytes"] = {f: (target / f).stat().st_size for f in ("encoder.onnx", "decoder.onnx", *weights)}
    meta["alti_bytes"] = (target / ALTI).stat().st_size  # fetched when a tour first needs it (not in the model's bar)
    if (out / WASM).is_file():
        meta["bytes"][WASM] = (out / WASM).stat().st_size
    (target / "meta.json").write_text(json.dumps(meta, indent=1), encoding="utf-8")
    if meta["example"]:
        write_first_screen(lm, target, meta)
        write_tour(lm, target, meta["example"])
    return meta


PART_BYTES = 9 * 2**20  # a weights file's largest part: under the Hub's 10 MB a file (LFS_MB)


def write_weights(target: Path, blob: bytes) -> list[str]:
    """The weights as weights.bin, or, when larger than PART_BYTES, as weights-00.bin, weights-01.bin, ...
    which the page (worker.js) and web/runtime.py join in order. Returns the files' names."""
    for old in target.glob("weights*.bin"):
        old.unlink()
    if len(blob) <= PART_BYTES:
        (target / WEIGHTS).write_bytes(blob)
        return [WEIGHTS]
    names = [f"weights-{i:02d}.bin" for i in range(-(-len(blob) // PART_BYTES))]
    for i, part in enumerate(names):
        (target / part).write_bytes(blob[i * PART_BYTES:(i + 1) * PART_BYTES])
    return names


def write_first_screen(lm, target: Path, meta: dict) -> None:
    """models/<name>/first.json: the example sentence's run, drawn before the model loads (web/first.py)."""
    from model.engine.decoding import DecodeOptions, translate
    src_ids = translate(lm, meta["example"], DecodeOptions(beam=1, record=False, trace=False)).src_ids
    run = first_screen(Graphs(target, meta), meta["example"], src_ids)
    (target / FIRST).write_text(json.dumps(run, ensure_ascii=False), encoding="utf-8")


# the app's stops drawn for the example sentence: all but Watch it learn, whose frames the app's registry finds
STORED_STOPS = (0, 1, 2, 3, 4, 5, 6, 7, 8, 10)
MASKS = 4  # the masks stop: its "off" figure drawn without the model call its text makes
MANY_HEADS = 3  # its pick is a layer: each layer's figure has its own title and hovers


def pick_skeletons(lm) -> tuple[tuple[int, str], ...]:
    """(stop index, pick) of the picks whose figure has another title than the stop's own: their skeletons."""
    layers = tuple((MANY_HEADS, str(layer)) for layer in range(1, lm.model.cfg.n_encoder_layers))
    return ((1, "off"),) + layers  # positional encoding switched off: the figure says so in its title


def numbers_left_out(fig: dict) -> dict:
    """A skeleton only ever filled (never shown as stored): its heatmaps' weights left out, the page writes its own."""
    for trace in fig["data"]:
        if trace.get("type") == "heatmap":
            trace["z"] = []
    return fig


def write_tour(lm, target: Path, text: str) -> None:
    """models/<name>/tour.json: the app's tour of the example sentence (ui/present/tour.py), each stop's sentences,
    its "Try it" and its figure as the app's viz/ draws it: the skeleton the page fills for any sentence
    (page/stops.js), and, for this sentence, the figures the page cannot compute."""
    from model.engine.decoding import DecodeOptions, translate
    from ui.present import tour
    from ui.state import Run, RunInputs
    tr = translate(lm, text, DecodeOptions(max_len=RunInputs.max_len))
    t = tour.TourRun(Run.of(lm, lm.name, tr, inputs=RunInputs(model=lm.name, text=text)), lm, "words")
    stops = {i + 1: tour.stop(t, i) for i in STORED_STOPS}
    figure = lambda s: json.loads(s.figure.to_json())  # noqa: E731
    stored = {"text": text, "output_ids": list(tr.output_ids), "plot_px": tour.TOUR_PLOT_PX, "stops": {
        n: {"sentences": s.sentences, "figure": figure(s),
            "trial": {"label": s.trial.label, "choices": s.trial.choices, "value": s.trial.default}}
        for n, s in stops.items()}}
    for i, pick in pick_skeletons(lm):  # a pick whose figure has another title: its own skeleton
        fig = figure(tour.stop(t, i, pick))
        stored["stops"][i + 1].setdefault("picks", {})[pick] = numbers_left_out(fig) if i == MANY_HEADS else fig
    stored["stops"][MASKS + 1]["picks"] = {"off": json.loads(tour.masks_figure(t, True).to_json())}
    (target / TOUR).write_text(json.dumps(stored, ensure_ascii=False), encoding="utf-8")


def tour_texts() -> dict:
    """The app's tour as the page fills it: the stops' titles, every sentence's template with its named slots
    (ui/present/tour.py's SAY) and the words those sentences pick from; and the model's overview
    (ui/present's MODEL_PARTS)."""
    from model.engine.names import SHORT_NAMES
    from ui.present import MODEL_PARTS, tour  # gradio-free: the app's own presenters
    # an attention kind as the link names it (the page's pageKind reads it)
    overview = {stack: {"title": title, "parts": [[SHORT_NAMES.get(view, view), words] for view, words in parts]}
                for stack, (title, parts) in MODEL_PARTS.items()}
    return {"titles": list(tour.TITLES), "say": tour.SAY, "residual_verbs": tour.RESIDUAL_VERBS,
            "sublayers": list(tour.SUBLAYER_NAMES), "overview": overview}


def copy_page(out: Path, node_modules: Path) -> None:
    missing = [p for p in VENDOR if not (node_modules / p).is_file()]
    if missing:
        raise SystemExit(f"{node_modules} lacks {missing[0]}: run `cd web && npm ci` first")
    shutil.copytree(PAGE, out, dirs_exist_ok=True)
    (out / "vendor").mkdir(exist_ok=True)
    for src, name in VENDOR.items():
        shutil.copyfile(node_modules / src, out / "vendor" / name)
    (out / PHONE).write_text(phone_script(), encoding="utf-8")


def phone_script() -> str:
    """The app's own script that fits every figure to a phone once drawn (titles wrapped, bars thinned, panels
    stacked), as a file the page loads: written once, in ui/style.py."""
    from ui.style import PHONE_JS  # gradio-free: the app's head as strings
    body = PHONE_JS.strip()
    if not (body.startswith("<script>") and body.endswith("</script>")):
        raise ValueError("ui.style.PHONE_JS should be one <script> element")
    return body[len("<script>"):-len("</script>")].strip() + "\n"


def build_site(out: Path, checkpoints: Path, node_modules: Path = ROOT / "node_modules", marian=(),
               app: str = APP_URL, marian_precision: str = "auto") -> list[dict]:
    out.mkdir(parents=True, exist_ok=True)
    copy_page(out, node_modules)
    write_figures(out)
    metas = [build_direction(folder, out) for folder in directions(checkpoints)]
    if not metas:
        raise SystemExit(f"no checkpoint with config.json and spm.model under {checkpoints}")
    extra = [build_direction(src, out, marian_precision, checkpoints) for src in opus.sources(marian, metas)]
    langs = sorted({m["src_lang"] for m in metas})
    for lang in langs:
        (out / "models" / f"spacy_{lang}.json").write_text(
            json.dumps(tokenizer_rules(lang), ensure_ascii=False), encoding="utf-8")
    manifest = {"directions": [m["name"] for m in metas], "languages": langs,
                "examples": {m["name"]: m["example"] for m in metas + extra}, "marian": [m["name"] for m in extra],
                "about": {m["name"]: opus.about(m) for m in extra}, "app": app}
    (out / TOUR).write_text(json.dumps(tour_texts(), ensure_ascii=False), encoding="utf-8")
    (out / "models" / "manifest.json").write_text(json.dumps(manifest, indent=1), encoding="utf-8")
    list_files(out)
    return metas + extra


def content_hash(path: Path) -> str:
    """sha-256 of a file's bytes, hex, first 16: what sw.js checks a copy against before keeping it."""
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()[:16]


def list_files(out: Path) -> dict[str, str]:
    """Every file of the site with its content hash, written into its sw.js (which serves them cache first, so
    a new build changes sw.js and the browser installs it)."""
    sw = out / "sw.js"
    files = {p.relative_to(out).as_posix(): content_hash(p) for p in sorted(out.rglob("*"))
             if p.is_file() and p != sw and p.suffix != ".gz" and p.name not in ("README.md", ".gitattributes")}
    text = sw.read_text(encoding="utf-8")
    if SW_FILES not in text:
        raise SystemExit(f"{sw} lacks the line {SW_FILES!r} that the build fills")
    sw.write_text(text.replace(SW_FILES, f"const FILES = {json.dumps(files, indent=0)};"), encoding="utf-8")
    return files


LFS_KINDS = (".bin", ".onnx", ".wasm")  # the weights, the graphs and ONNX Runtime: binary, some over the limit


def git_attributes(out: Path, limit_mb: int = LFS_MB) -> str:
    """A Space's .gitattributes: the binary kinds, and any other file over ``limit_mb``, kept with Git LFS,
    so that ``git push`` to the Hub takes the WASM and the weights."""
    big = sorted(p.relative_to(out).as_posix() for p in out.rglob("*")
                 if p.is_file() and p.suffix not in LFS_KINDS and p.stat().st_size > limit_mb * 1e6)
    text = "".join(f"{pattern} filter=lfs diff=lfs merge=lfs -text\n" for pattern in [f"*{k}" for k in LFS_KINDS] + big)
    (out / ".gitattributes").write_text(text, encoding="utf-8")
    return text


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m web.build", description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, help="write the site into this folder")
    ap.add_argument("--space", type=Path, help="write a static Hugging Face Space (README.md + the site)")
    ap.add_argument("--app", default=APP_URL, help="the Gradio app's address, for the stops and links the page "
                    "sends there (default: %(default)s)")
    ap.add_argument("--checkpoints", type=Path, default=ROOT.parent / "checkpoints")
    ap.add_argument("--marian", action="append", default=[], metavar="DIR_OR_HUB_ID",
                    help="also an OPUS-MT model: a Marian folder or a Hub id (repeatable)")
    ap.add_argument("--marian-precision", choices=("auto", "fp16", "int8"), default="auto",
                    help="the OPUS-MT models' stored weights; auto: the smaller that keeps >= 98 %% of greedy "
                    "outputs identical to the engine's (default: %(default)s)")
    args = ap.parse_args(argv)
    if not (args.out or args.space):
        ap.error("give --out DIR, --space DIR or both")
    for target in (args.out, args.space):
        if target is None:
            continue
        try:
            metas = build_site(target, args.checkpoints, marian=args.marian, app=args.app,
                               marian_precision=args.marian_precision)
        except (CheckpointError, opus.MarianSiteError) as e:  # a bad --marian folder or Hub id: its reason
            raise SystemExit(f"python -m web.build: {e}") from None
        if target == args.space:
            names = ", ".join(m["name"] for m in metas)
            readme = SPACE_README.format(directions=names) + opus.space_note([m for m in metas if "family" in m])
            (target / "README.md").write_text(readme, encoding="utf-8")
            git_attributes(target)
        print(f"built {target}: {', '.join(m['name'] for m in metas)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
