"""An OPUS-MT-base-shaped Marian in the static site: its files, the page's tokenizer speed, and one sentence
run by the site's graphs.

    python -m bench.web_marian [--out bench/web_marian.json]

The model is built here (no download), as bench/marian.py builds it: a random ``MarianMTModel`` of
OPUS-MT base's shape (d_model 512, 6 + 6 layers, 8 heads, d_ff 2048, 58,101 tokens), saved with a
MarianTokenizer whose two SentencePiece unigram models are trained on Multi30k's test sentences (German
source, English target; vocab.json filled up to 58,101 entries). Then:

- export: ``web.build.build_direction`` (what ``python -m web.build --marian DIR`` runs) at fp16 and at
  int8: seconds, and the graphs plus their weights file, raw and gzip -6;
- tokenizer: page/marian.js in node, every validation sentence of German (1,014), and a 2,000-character
  input, each repeated after a warm-up pass: ms per sentence and characters per second;
- one sentence (12 words) in ONNX Runtime, Python, one thread (web/runtime.py, as the page runs the graphs):
  the encoder with every output, 14 cached greedy steps, then the whole prefix with every head's outputs.
  A Python stand-in for the page's figure, which needs a browser.
- page (``--only page`` runs this part alone): ``python -m web.build --out SITE --marian DIR`` (precision by the
  greedy-token rule) beside one of ours, served by nginx to Chromium; the model picked, a 12-word sentence
  typed and Enter pressed: the bytes nginx sent and the seconds until the model was loaded and until the
  page said "✓ translated", cold, then after a reload (warm: the service worker's copies); and the page's
  own time for the translation with every head (ONNX Runtime Web, one thread).
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import tempfile
import time
from pathlib import Path

from web.compact import WEIGHTS
from web.serve import ROOT, lines

from .marian import HF_CONFIG

TWELVE = "Ein Mann in einem blauen Hemd steht auf einer Leiter am Fenster."  # 12 words
SENTENCE = "Ein Mann in einem blauen Hemd steht auf einer Leiter und putzt ein großes Fenster."  # 15 words
STEPS = 14  # about the pieces a trained de-en model writes for TWELVE ("A man in a blue shirt stands on a ladder by
#             the window."), as one_sentence decodes
LONG = ("Ein Hund läuft über die Wiese. " * 70)[:2000]
NODE = r"""
import { MarianTokenizer } from "%s";
import { readFileSync } from "node:fs";
const [dir, file] = process.argv.slice(2);
const spec = JSON.parse(readFileSync(`${dir}/tokenizer.json`, "utf8"));
const maps = {};
for (const s of [spec.source, spec.target]) if (s.charsmap) maps[s.charsmap] = readFileSync(`${dir}/${s.charsmap}`);
let t = performance.now();
const tok = new MarianTokenizer(spec, maps);
const load = performance.now() - t;
const { sentences, long } = JSON.parse(readFileSync(file, "utf8"));
const time = (texts, reps) => {
  for (const s of texts) tok.encode(s);  // warm-up
  const t0 = performance.now();
  for (let r = 0; r < reps; r++) for (const s of texts) tok.encode(s);
  return (performance.now() - t0) / reps;
};
const all = time(sentences, 3), one = time([long], 20);
const chars = sentences.reduce((n, s) => n + s.length, 0);
process.stdout.write(JSON.stringify({ load_ms: load, sentences: sentences.length, ms_per_sentence: all / sentences.length,
  chars_per_s: chars / all * 1000, long_chars: long.length, long_ms: one }));
""" % (ROOT / "web" / "page" / "marian.js").as_uri()


def base_folder(folder: Path) -> Path:
    """A random OPUS-MT-base-shaped MarianMTModel with a MarianTokenizer trained here, saved as the Hub has it."""
    import sentencepiece as spm
    import torch
    from transformers import MarianConfig, MarianMTModel, MarianTokenizer
    work = folder.parent / "spm"
    work.mkdir(parents=True, exist_ok=True)
    pieces = set()
    for side, lang in (("src", "de"), ("tgt", "en")):
        spm.SentencePieceTrainer.train(sentence_iterator=iter(lines("test_2016_flickr", lang)), model_type="unigram",
                                       model_prefix=str(work / side), vocab_size=4000, hard_vocab_limit=False,
                                       minloglevel=2, num_threads=1)
        sp = spm.SentencePieceProcessor(model_file=str(work / f"{side}.model"))
        pieces |= {sp.id_to_piece(i) for i in range(sp.get_piece_size())}
    V = HF_CONFIG["vocab_size"]
    itos = ["</s>", "<unk>"] + sorted(pieces - {"<unk>", "<s>", "</s>"})
    itos += [f"<unused{i}>" for i in range(len(itos), V - 1)] + ["<pad>"]
    (work / "vocab.json").write_text(json.dumps({t: i for i, t in enumerate(itos)}, ensure_ascii=False))
    tok = MarianTokenizer(vocab=str(work / "vocab.json"), source_spm=str(work / "src.model"),
                          target_spm=str(work / "tgt.model"), source_lang="de", target_lang="en")
    torch.manual_seed(0)
    cfg = {k: v for k, v in HF_CONFIG.items() if k != "model_type"}
    MarianMTModel(MarianConfig(**{**cfg, "dropout": 0.0})).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def files(folder: Path) -> dict:
    paths = [folder / n for n in ("encoder.onnx", "decoder.onnx", WEIGHTS)]
    tok = [p for p in folder.iterdir() if p.name == "tokenizer.json" or p.name.startswith("charsmap-")]
    return {"graphs_bytes": sum(p.stat().st_size for p in paths),
            "graphs_gzip_bytes": sum(len(gzip.compress(p.read_bytes(), 6)) for p in paths),
            "largest_file_bytes": max(p.stat().st_size for p in paths),
            "tokenizer_bytes": sum(p.stat().st_size for p in tok),
            "tokenizer_gzip_bytes": sum(len(gzip.compress(p.read_bytes(), 6)) for p in tok)}


def export(folder: Path, out: Path) -> dict:
    from web.build import build_direction
    found = {}
    for precision in ("fp16", "int8"):
        t = time.perf_counter()
        meta = build_direction(folder, out / precision, precision, checkpoints=ROOT / "checkpoints")
        found[precision] = {"seconds": round(time.perf_counter() - t, 1),
                            **files(out / precision / "models" / meta["name"])}
    found["parameters"] = meta["parameters"]
    return found


def tokenizer(site: Path, tmp: Path) -> dict:
    (tmp / "bench.mjs").write_text(NODE, encoding="utf-8")
    (tmp / "texts.json").write_text(json.dumps({"sentences": lines("val", "de"), "long": LONG}), encoding="utf-8")
    done = subprocess.run(["node", str(tmp / "bench.mjs"), str(site), str(tmp / "texts.json")], capture_output=True,
                          text=True, timeout=900, check=True)
    return json.loads(done.stdout)


def one_sentence(site: Path, folder: Path, steps: int = STEPS, reps: int = 3) -> dict:
    """Seconds to run SENTENCE through the site's graphs as the page does, best of ``reps``."""
    from transformers import MarianTokenizer
    from web.runtime import Graphs
    meta = json.loads((site / "meta.json").read_text())
    src = MarianTokenizer.from_pretrained(folder)(SENTENCE).input_ids
    t = time.perf_counter()
    graphs = Graphs(site, meta)
    load = time.perf_counter() - t
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        enc = graphs.encode(src)
        ys, cache = [meta["decoder_start_id"]], graphs.empty_cache()
        present = [n.replace("past_", "present_") for n in graphs.past]
        for _ in range(steps):
            out = graphs.decode(ys[-1:], enc["memory"], src, cache, outputs=["logits", *present])
            cache = {n: out[p] for n, p in zip(graphs.past, present)}
            ys.append(int(out["logits"][0].argmax()))
        graphs.decode(ys[:-1], enc["memory"], src)  # the whole prefix, every head's outputs
        best = min(best, time.perf_counter() - t)
    return {"source_tokens": len(src), "words": len(SENTENCE.split()), "steps": steps,
            "session_load_s": round(load, 2), "seconds": round(best, 3)}


def build_page_site(folder: Path, tmp: Path, precision: str = "auto") -> tuple[Path, float]:
    """python -m web.build --out SITE --marian FOLDER beside our en-de; (site, seconds)."""
    import shutil
    import sys
    ckpt = tmp / "checkpoints"
    (ckpt / "en-de").mkdir(parents=True)
    for f in ("config.json", "spm.model", "model.safetensors", "vocab.json"):
        (ckpt / "en-de" / f).symlink_to(ROOT / "checkpoints" / "en-de" / f)
    (ckpt / "multi30k").symlink_to(ROOT / "checkpoints" / "multi30k")
    site = Path(tempfile.mkdtemp(prefix="bench-marian-site-"))  # readable by nginx's worker
    os.chmod(site, 0o755)
    t = time.perf_counter()
    subprocess.run([sys.executable, "-m", "web.build", "--out", str(site), "--checkpoints", str(ckpt),
                    "--marian", str(folder), "--marian-precision", precision], cwd=ROOT, check=True)
    seconds = time.perf_counter() - t
    shutil.rmtree(ckpt)
    return site, seconds


# the status line as it changes, with the page's clock (as the page's robustness test watches it)
WATCH_STATUS = """window.__status = []; document.addEventListener('DOMContentLoaded', () => {
  new MutationObserver(() => window.__status.push({ t: performance.now(),
    text: document.getElementById('status').textContent })).observe(document.getElementById('status'),
    { subtree: true, childList: true, characterData: true });
});"""


def _visit(page, log: Path, name: str) -> dict:
    """The model picked, TWELVE typed, Enter: bytes sent, seconds to the model loaded and to "✓ translated"."""
    before = log.read_text().splitlines()
    page.evaluate("window.__status.length = 0")
    page.select_option("#dir", name)
    page.fill("#text", TWELVE)
    t0 = page.evaluate("performance.now()")
    page.press("#text", "Enter")
    page.wait_for_function("document.getElementById('status').textContent.startsWith('✓ translated')")
    seen = page.evaluate("window.__status")
    last = max(i for i, s in enumerate(seen) if s["text"].startswith("loading"))
    loaded = seen[last + 1]["t"]  # the status after the last byte: the sessions are made, it translates
    done = next(s["t"] for s in seen if s["text"].startswith("✓ translated"))
    sent = log.read_text().splitlines()[len(before):]
    ms = page.inner_text("#timing")
    took, tokens = float(ms.split(" in ")[1].split(" ms")[0]), int(ms.split()[0])
    # random weights never write <eos>: the page decodes to its length limit. A trained model writes about
    # STEPS tokens for TWELVE; at the measured cost per token that is the 12-word figure (an estimate)
    return {"bytes_sent": sum(int(ln.split()[2]) for ln in sent), "requests": len(sent),
            "model_loaded_s": round((loaded - t0) / 1000, 2), "translated_s": round((done - t0) / 1000, 2),
            "page_translate_ms": took, "timing_line": ms, "output_tokens": tokens,
            "ms_per_output_token": round(took / tokens, 1), f"estimated_ms_for_{STEPS}_tokens": round(took / tokens * STEPS)}


def page(folder: Path, tmp: Path, precision: str = "auto") -> dict:
    """Cold and warm visits of the page with the OPUS-MT model (see the module's docstring)."""
    import shutil

    from web.serve import chromium, nginx_server, open_site
    site, build_s = build_page_site(folder, tmp, precision)
    name = folder.name
    meta = json.loads((site / "models" / name / "meta.json").read_text())
    log = tmp / "sent.log"
    found = {"build_s": round(build_s, 1), "precision": meta["precision"], "precision_check": meta.get("precision_check"),
             "model_bytes": sum(n for f, n in meta["bytes"].items() if not f.startswith("vendor/")),
             "largest_file_bytes": max(p.stat().st_size for p in site.rglob("*") if p.is_file() and "vendor" not in p.parts),
             "weight_files": len(meta["weights"]), "words": len(TWELVE.split())}
    try:
        with nginx_server(site, log=log) as base, chromium() as browser:
            context = browser.new_context(viewport={"width": 1440, "height": 900})
            context.add_init_script(WATCH_STATUS)
            pg = context.new_page()
            pg.set_default_timeout(900_000)
            open_site(pg, base + "/index.html")
            pg.wait_for_function("window.explorer.modelReady !== undefined")
            found["cold"] = _visit(pg, log, name)
            pg.wait_for_function(f"(document.body.dataset.offline || '').split(' ').includes('{name}')")
            pg.goto(base + "/index.html")  # a second visit (a reload would reopen the link, which preloads it)
            pg.wait_for_function("window.explorer.modelReady !== undefined")
            found["warm"] = _visit(pg, log, name)
            context.close()
    finally:
        shutil.rmtree(site, True)
    return found


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.web_marian", description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path(__file__).with_suffix(".json"))
    ap.add_argument("--only", choices=("page",), help="run only this part; the file's other figures are kept")
    ap.add_argument("--precision", choices=("auto", "fp16", "int8"), default="auto",
                    help="the page part's --marian-precision (auto measures the rule: 50 sentences twice)")
    args = ap.parse_args(argv)
    figures = json.loads(args.out.read_text()) if args.only and args.out.is_file() else {}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        folder = base_folder(tmp / "hf" / "opus-mt-de-en")
        if not args.only:
            figures["export"] = export(folder, tmp / "site")
            site = tmp / "site" / "fp16" / "models" / "opus-mt-de-en"
            figures["tokenizer"] = tokenizer(site, tmp)
            figures["one_sentence_ort_python"] = one_sentence(site, folder)
            figures["load"] = os.getloadavg()
        figures["page"] = {**page(folder, tmp, args.precision), "load": os.getloadavg()}
    print(json.dumps(figures, indent=1))
    args.out.write_text(json.dumps(figures, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
