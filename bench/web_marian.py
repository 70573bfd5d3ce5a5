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

SENTENCE = "Ein Mann in einem blauen Hemd steht auf einer Leiter und putzt ein großes Fenster."  # 15 words
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


def one_sentence(site: Path, folder: Path, steps: int = 14, reps: int = 3) -> dict:
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


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.web_marian", description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path(__file__).with_suffix(".json"))
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        folder = base_folder(tmp / "hf" / "opus-mt-de-en")
        figures = {"export": export(folder, tmp / "site")}
        site = tmp / "site" / "fp16" / "models" / "opus-mt-de-en"
        figures["tokenizer"] = tokenizer(site, tmp)
        figures["one_sentence_ort_python"] = one_sentence(site, folder)
    figures["load"] = os.getloadavg()
    print(json.dumps(figures, indent=1))
    args.out.write_text(json.dumps(figures, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
