"""The app serving an OPUS-MT-sized Marian folder added with ATTN_MODELS: cold start, server time and bytes.

``python -m bench --only marian_app`` (or ``python -m bench.marian_app [--quick]``). The folder is built
here, once, under ``$TMPDIR/attn-bench-marian-opus``: transformers' random ``MarianMTModel`` of
``bench.marian.HF_CONFIG`` (d 512, 6 + 6 layers, 8 heads, d_ff 2048, a 58,101-token vocabulary; 74 M
parameters, 296 MB of fp32 safetensors), a source and a target SentencePiece model trained on the first
2,000 Multi30k training sentences, and a vocab.json holding their pieces, padded to 58,101 entries.

- Cold start: ``python app.py`` on checkpoints/ with ATTN_MODELS naming the folder: spawn → the server
  answering (the folder is described, not loaded), then the first Marian translation (which loads it),
  then one of another sentence; beside it, interleaved, the same start without ATTN_MODELS. Median of
  ``--reps`` (default 2) fresh processes of each.
- Per interaction, as bench.payload measures it (a new browser session per sentence, the front end's own
  queue/join + SSE protocol, every byte on the wire): translate_stream, its replay and the views a visitor
  opens next, with the Marian model picked. Wall time per event (what the visitor waits) and the server's
  CPU time (/proc). A random model rarely ends a sentence, so output is capped at 32 tokens (max-len).
"""
from __future__ import annotations

import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from .common import ROOT, AppServer, Browser, entry, figure, sentences, standalone
from .marian import HF_CONFIG

FOLDER = Path(tempfile.gettempdir()) / "attn-bench-marian-opus"
KEY = FOLDER.name
N, N_QUICK, MAX_LEN = 8, 3, 32
EVENTS = {"translate_stream": {}, "on_replay": {}, "open_generation": {}, "open_interventions": {},
          "attention_view": {"attn-kind": "encoder.self_attn"}, "step_view": {"step-slider": 1},
          "compare_ui": {"tog-positional": False}, "open_computation": {}, "head_computation": {"head-query": 1}}


def _spm(lines: list[str], prefix: Path) -> None:
    import sentencepiece as spm
    spm.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_prefix=str(prefix), vocab_size=4000,
                                   character_coverage=1.0, minloglevel=2, num_threads=1, hard_vocab_limit=False)


def build_folder(cfg) -> Path:
    """The OPUS-MT-sized random Marian folder (built once, then reused)."""
    if (FOLDER / "model.safetensors").is_file():
        return FOLDER
    import sentencepiece as spm
    import torch
    from transformers import MarianConfig, MarianMTModel
    work = FOLDER.with_name(FOLDER.name + "-spm")
    work.mkdir(parents=True, exist_ok=True)
    for side, lang in (("source", "de"), ("target", "en")):
        _spm(sentences(cfg, lang, 2000, split="train"), work / side)
    pieces = set()
    for side in ("source", "target"):
        sp = spm.SentencePieceProcessor(model_file=str(work / f"{side}.model"))
        pieces |= {sp.id_to_piece(i) for i in range(sp.get_piece_size())}
    V = HF_CONFIG["vocab_size"]
    itos = ["</s>", "<unk>"] + sorted(pieces - {"<unk>", "<s>", "</s>"})
    itos += [f"<unused{i}>" for i in range(len(itos), V - 1)] + ["<pad>"]
    torch.manual_seed(0)
    hf = MarianMTModel(MarianConfig(**{k: v for k, v in HF_CONFIG.items() if k != "model_type"},
                                    forced_eos_token_id=None, bad_words_ids=None))
    hf.save_pretrained(FOLDER)
    for side in ("source", "target"):
        (FOLDER / f"{side}.spm").write_bytes((work / f"{side}.model").read_bytes())
    (FOLDER / "vocab.json").write_text(json.dumps({t: i for i, t in enumerate(itos)}, ensure_ascii=False))
    (FOLDER / "tokenizer_config.json").write_text(json.dumps({"source_lang": "de", "target_lang": "en"}))
    return FOLDER


def cold_start(cfg, folder: Path, texts: list[str]) -> list[dict]:
    """Fresh processes, without and with the Marian added (interleaved: the machine's load falls on both)."""
    runs = []
    for i in range(cfg.reps or 2):
        with AppServer(ROOT / "checkpoints") as srv:
            plain = srv.wait_ready()
        with AppServer(ROOT / "checkpoints", {"ATTN_MODELS": str(folder)}) as srv:
            ready = srv.wait_ready()
            b = Browser(srv.url)
            first = b.event("translate_stream", {"input-text": texts[0], "direction": KEY, "max-len": MAX_LEN})
            first_s = time.perf_counter() - srv.t0
            second = b.event("translate_stream", {"input-text": texts[1], "direction": KEY, "max-len": MAX_LEN})
            b.close()
            rss = _rss_mb(srv.proc.pid)
        if not first["outputs"].get("translation"):
            raise RuntimeError(f"no translation came back: {str(first['outputs'])[:300]}")
        runs.append({"ready_plain_s": round(plain, 2), "ready_s": round(ready, 2),
                     "first_marian_translation_s": round(first_s, 2), "first_event_s": round(first["seconds"], 2),
                     "second_event_s": round(second["seconds"], 2), "rss_mb": rss})
        print(f"  cold start {i + 1}: {runs[-1]}", flush=True)
    return runs


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024, 1)
    return float("nan")


def interactions(cfg, folder: Path, texts: list[str]) -> tuple[dict, dict, dict]:
    kb, wall, cpu = ({a: [] for a in EVENTS} for _ in range(3))
    with AppServer(ROOT / "checkpoints", {"ATTN_MODELS": str(folder)}) as srv:
        srv.wait_ready()
        b = Browser(srv.url)
        # loads the model (a sentence of its own: the measured ones are not in the result cache)
        b.event("translate_stream", {"input-text": "Guten Morgen.", "direction": KEY, "max-len": MAX_LEN})
        for i, text in enumerate(texts):
            b.session = f"marian{i:06d}"
            for a, values in EVENTS.items():
                c0 = srv.cpu_s()
                out = b.event(a, {"input-text": text, "direction": KEY, "max-len": MAX_LEN, **values})
                kb[a].append(out["bytes"] / 1e3)
                wall[a].append(out["seconds"] * 1e3)
                cpu[a].append((srv.cpu_s() - c0) * 1e3)
            print(f"  {i + 1}: " + ", ".join(f"{a} {wall[a][-1]:.0f} ms {kb[a][-1]:.0f} kB" for a in EVENTS),
                  flush=True)
        b.close()
        if srv.errors():
            cfg.notes.append(f"the server logged {len(srv.errors())} error line(s), e.g. {srv.errors()[0][:200]}")
    return kb, wall, cpu


def run(cfg) -> dict:
    t0 = time.perf_counter()
    folder = build_folder(cfg)
    built = time.perf_counter() - t0
    texts = sentences(cfg, "de", 2 + (N_QUICK if cfg.quick else N))
    runs = cold_start(cfg, folder, texts)
    kb, wall, cpu = interactions(cfg, folder, texts[2:])
    med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    figures = [figure("marian_app.ready_plain_s", "cold start, checkpoints/ only: spawn → server answering, median",
                      med["ready_plain_s"], "s"),
               figure("marian_app.ready_s", "cold start with the Marian added: spawn → server answering, median",
                      med["ready_s"], "s"),
               figure("marian_app.first_translation_s", "spawn → first Marian translation answered (loads it), "
                      "median", med["first_marian_translation_s"], "s"),
               figure("marian_app.first_event_s", "that first translate_stream alone (load + decode + views)",
                      med["first_event_s"], "s"),
               figure("marian_app.second_event_s", "the next translate_stream, another sentence (loaded)",
                      med["second_event_s"], "s"),
               figure("marian_app.rss_mb", "server memory (RSS) with the Marian loaded", med["rss_mb"], "MB")]
    for a in EVENTS:
        figures += [figure(f"marian_app.{a}.p50_ms", f"{a}: wall time p50", statistics.median(wall[a]), "ms"),
                    figure(f"marian_app.{a}.cpu_p50_ms", f"{a}: server CPU p50", statistics.median(cpu[a]), "ms"),
                    figure(f"marian_app.{a}.p50_kb", f"{a}: bytes p50", statistics.median(kb[a]), "kB")]
    visit = [sum(x) for x in zip(*kb.values())]
    figures.append(figure("marian_app.visit.p50_kb", "all of the above in one visit: p50", statistics.median(visit),
                          "kB"))
    return entry(figures, model=f"checkpoints/ plus ATTN_MODELS={KEY} (random OPUS-MT-sized Marian, 74 M)",
                 data=f"first {len(texts)} Multi30k test_2016_flickr.de sentences, max-len {MAX_LEN}",
                 method="fresh `python app.py` per cold start; per event the join response and the SSE stream",
                 folder_built_s=round(built, 1), cold_runs=runs, os_cpus=os.cpu_count(),
                 wall_ms={a: [round(v) for v in x] for a, x in wall.items()})


if __name__ == "__main__":
    raise SystemExit(standalone("marian_app", run))
