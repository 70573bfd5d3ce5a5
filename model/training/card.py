"""Evaluate a trained checkpoint and write its model card (``MODEL_CARD.md`` + ``metrics.json``).

``python -m model.card --checkpoint checkpoints/de-en --data ../shared/multi30k``

The length penalty is chosen on the validation split (beam search), never on test; it is
stored in ``config.json`` so the CLIs and the app use it.
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import torch

from model.engine.decoding import DecodeOptions, translate
from model.engine.hooks import hook_names
from model.engine.vocab import detokenize
from model.families import load_checkpoint
from model.families.ours import CONFIG
from model.engine.corpus import load_pairs
from .bleu import read_official_refs
from .evaluate import score

LP_GRID = (0.3, 0.6, 1.0)


_WORKER: dict = {}


def _init_worker(path: str, threads: int) -> None:
    torch.set_num_threads(threads)
    _WORKER["lm"] = load_checkpoint(path)


def _decode_chunk(job) -> list[tuple[str, str]]:
    """(with <unk> replacement, without) for each sentence: one decode gives both."""
    texts, beam, alpha = job
    lm = _WORKER["lm"]
    opts = DecodeOptions(beam=beam, length_penalty=alpha, replace_unk=True, record=False, trace=False)
    out = []
    for text in texts:
        if not text.strip():
            out.append(("", ""))
            continue
        t = translate(lm, text, opts)
        if lm.tgt_vocab.kind != "word":  # no <unk> to replace
            out.append((t.text, t.text))
            continue
        plain = detokenize([w for w in t.output_tokens if w not in ("<eos>", "<pad>", "<bos>")], lm.tgt_lang)
        out.append((t.text, plain))
    return out


def decode_all(pool, texts: list[str], beam: int, alpha: float, workers: int) -> tuple[list[str], list[str]]:
    n = max(1, len(texts) // (workers * 4))
    chunks = [texts[i:i + n] for i in range(0, len(texts), n)]
    pairs = [p for part in pool.map(_decode_chunk, [(c, beam, alpha) for c in chunks]) for p in part]
    return [p[0] for p in pairs], [p[1] for p in pairs]


def _scored(pool, src, refs, beam, alpha, workers, lang, tok_refs) -> tuple[dict, dict]:
    t0 = time.time()
    with_unk, without = decode_all(pool, src, beam, alpha, workers)
    secs = round(time.time() - t0, 1)
    return (dict(score(with_unk, refs, lang, tok_refs), seconds=secs),
            dict(score(without, refs, lang, tok_refs), seconds=secs))


def history_at(history: list[dict], seconds: float) -> dict | None:
    """The last epoch finished within ``seconds`` of training time."""
    if not history or history[-1].get("train_seconds", 0) < seconds:
        return None  # training never ran that long
    done = [h for h in history if h.get("train_seconds", 1e18) <= seconds]
    return done[-1] if done else None


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--data", default="../shared/multi30k")
    p.add_argument("--beam", type=int, default=5)
    p.add_argument("--lp-grid", default=",".join(map(str, LP_GRID)))
    p.add_argument("--limit", type=int, default=0, help="only the first N sentences of each split (smoke runs)")
    p.add_argument("--workers", type=int, default=2, help="decoding processes")
    p.add_argument("--hardware", default=None, help="how training hardware is described in the card")
    p.add_argument("--selection", default=None,
                   help="how the shipped epochs were chosen (kept in config.json's training record, shown in the card)")
    args = p.parse_args(argv)
    path = Path(args.checkpoint)
    lm = load_checkpoint(path)
    training = dict(lm.meta.get("training", {}))
    if args.selection:
        training["selection"] = args.selection
    val_src, val_ref = load_pairs(args.data, "val", lm.src_lang, lm.tgt_lang)
    test_src, test_ref = load_pairs(args.data, "test_2016_flickr", lm.src_lang, lm.tgt_lang)
    val_tok = read_official_refs(args.data, "val", lm.tgt_lang)
    test_tok = read_official_refs(args.data, "test_2016_flickr", lm.tgt_lang)
    if args.limit:
        val_src, val_ref, test_src, test_ref = (x[: args.limit] for x in (val_src, val_ref, test_src, test_ref))
        val_tok, test_tok = (None if x is None else x[: args.limit] for x in (val_tok, test_tok))

    from concurrent.futures import ProcessPoolExecutor
    import multiprocessing as mp
    results: dict = {"val": {}, "test_2016_flickr": {}}
    beam = f"beam{args.beam}"
    lp_scores, lp_runs = {}, {}
    with ProcessPoolExecutor(args.workers, mp.get_context("fork"), _init_worker, (str(path), 1)) as pool:
        for alpha in (float(a) for a in args.lp_grid.split(",")):
            lp_runs[alpha] = _scored(pool, val_src, val_ref, args.beam, alpha, args.workers, lm.tgt_lang, val_tok)
            lp_scores[alpha] = lp_runs[alpha][0]["cased"]["bleu"]
            print(f"val beam {args.beam} lp {alpha}: {lp_scores[alpha]}", flush=True)
        best_lp = max(lp_scores, key=lambda a: (lp_scores[a], -abs(a - 0.6)))
        splits = {"val": (val_src, val_ref, val_tok), "test_2016_flickr": (test_src, test_ref, test_tok)}
        for split, (src, ref, tok) in splits.items():
            greedy, greedy_plain = _scored(pool, src, ref, 1, best_lp, args.workers, lm.tgt_lang, tok)
            beamed, beamed_plain = lp_runs[best_lp] if split == "val" else \
                _scored(pool, src, ref, args.beam, best_lp, args.workers, lm.tgt_lang, tok)
            results[split] = {"greedy": greedy, "greedy_no_unk_replacement": greedy_plain,
                              beam: beamed, f"{beam}_no_unk_replacement": beamed_plain}
            print(split, json.dumps(results[split]), flush=True)

    history = json.loads((path / "history.json").read_text()) if (path / "history.json").exists() else []
    size = sum(f.stat().st_size for f in path.iterdir() if f.is_file())
    metrics = {
        "model": lm.name, "parameters": lm.model.num_parameters(), "config": lm.model.cfg.to_dict(),
        "weights_dtype": "float16", "folder_bytes_before_card": size,
        "length_penalty": best_lp, "length_penalty_val_bleu": lp_scores, "beam": args.beam,
        "bleu": results, "training": training,
        "val_bleu_after_1h": history_at(history, 3600), "val_bleu_after_2h": history_at(history, 7200),
        "evaluated_on": platform.platform(), "torch": torch.__version__,
    }
    (path / "metrics.json").write_text(json.dumps(metrics, indent=1, ensure_ascii=False))
    cfg = json.loads((path / CONFIG).read_text())
    cfg["length_penalty"] = best_lp
    if args.selection:
        cfg.setdefault("training", {})["selection"] = args.selection
    (path / CONFIG).write_text(json.dumps(cfg, indent=2, ensure_ascii=False))
    (path / "MODEL_CARD.md").write_text(render_card(lm, metrics, args, hook_names(lm.model)), encoding="utf-8")
    print(f"wrote {path / 'metrics.json'} and {path / 'MODEL_CARD.md'}")
    return 0


def _reproduce(lm, c: dict, ta: dict, subword: bool) -> str:
    shape = (f"--d-model {c['d_model']} --heads {c['n_heads']} --enc-layers {c['n_encoder_layers']} "
             f"--dec-layers {c['n_decoder_layers']} --d-ff {c['d_ff']} --dropout {ta.get('dropout')} "
             f"--attn-dropout {ta.get('attn_dropout')} --lr {ta.get('lr')} --warmup {ta.get('warmup')} "
             f"--label-smoothing {ta.get('label_smoothing')} --max-tokens {ta.get('max_tokens')} "
             f"--epochs {ta.get('epochs')} --average {ta.get('average')} --seed {ta.get('seed')}")
    if not subword:
        return (f"python -m model.train --src {lm.src_lang} --tgt {lm.tgt_lang} --data ../shared/multi30k "
                f"--out checkpoints/{lm.name} {shape} --min-freq {ta.get('min_freq')} --threads {ta.get('threads')}")
    pair = Path(str(ta.get("prepared") or f"prepared/{lm.name}")).name
    a, b = pair.split("-") if "-" in pair else (lm.src_lang, lm.tgt_lang)
    budget = f" --time-budget {ta['time_budget']:.0f}" if ta.get("time_budget") else ""
    return (f"python -m model.prepare --langs {a} {b} --data ../shared/multi30k --out prepared/{pair}\n"
            f"python -m model.train --prepared prepared/{pair} --src {lm.src_lang} --tgt {lm.tgt_lang} "
            f"--out checkpoints/{lm.name} {shape} --bleu-every {ta.get('bleu_every')} "
            f"--eval-batch {ta.get('eval_batch')} --device {ta.get('device')}{budget}")


def _bleu_lines(m: dict, subword: bool) -> list[str]:
    beam = f"beam{m['beam']}"
    kinds = ("greedy", beam) if subword else \
        ("greedy", "greedy_no_unk_replacement", beam, f"{beam}_no_unk_replacement")

    def row(split, kind):
        r = m["bleu"][split][kind]
        tok = r.get("tokenized", {}).get("bleu")
        return (f"| {split} | {kind} | {r['cased']['bleu']:.2f} | {r['lowercased']['bleu']:.2f} | "
                f"{'' if tok is None else f'{tok:.2f}'} |")
    test = m["bleu"]["test_2016_flickr"][beam]
    lines = [
        "## BLEU", "sacreBLEU on detokenized output (cased, lowercased), and the Multi30k literature's tokenized "
        "lowercased BLEU (output lowercased, Moses-normalised and Moses-tokenized with sacremoses, scored with "
        f"sacreBLEU `tokenize=\"none\"` against {test.get('tokenized', {}).get('refs', 'the references')}).", "",
        f"Length penalty {m['length_penalty']} (GNMT alpha), chosen on val with beam {m['beam']} from "
        f"{m['length_penalty_val_bleu']} (cased val BLEU); never tuned on test.", "",
        "| split | decoding | cased | lowercased | tokenized lowercased |", "|---|---|---|---|---|",
        *(row(s, k) for s in ("val", "test_2016_flickr") for k in kinds), "",
        "Signatures: " + " ; ".join(test[k]["signature"] for k in ("cased", "lowercased", "tokenized") if k in test),
        ""]
    if not subword:
        lines += ["Unknown-word replacement (on by default): an output `<unk>` is replaced by the source word with "
                  "the most cross-attention at that step, averaged over the last layer's heads. Its effect is the "
                  f"difference between the `{beam}` and `{beam}_no_unk_replacement` rows.", ""]
    return lines


def render_card(lm, m: dict, args, hooks: list[str]) -> str:
    c, t = m["config"], m["training"]
    ta = t.get("train_args", {})
    subword = lm.src_vocab.kind != "word"
    vocab = (f"a joint SentencePiece {ta.get('prepared') and 'BPE' or 'subword'} vocabulary of "
             f"{c['src_vocab_size']} pieces (byte fallback: no `<unk>`) learnt over the spaCy words of both "
             "languages; encoder embedding, decoder embedding and generator are one matrix" if subword else
             f"word vocabularies with min_freq {ta.get('min_freq')} (source {c['src_vocab_size']}, target "
             f"{c['tgt_vocab_size']} types including 4 specials)")
    device = ta.get("device") if ta.get("device") not in (None, "auto") else "cpu"
    hardware = args.hardware or (f"a {device} device" if device != "cpu" else
                                 f"a 2-core x86-64 CPU (no GPU), torch.set_num_threads({ta.get('threads')})")
    lines = [
        f"# Model card: {lm.name} ({lm.src_lang} → {lm.tgt_lang}) Transformer trained on Multi30k", "",
        "## Data", "Multi30k task 1 (Elliott et al. 2016; French: Elliott et al. 2017; Czech: Barrault et al. 2018): "
        "29,000 training pairs of "
        f"Flickr image captions, val 1,014, test_2016_flickr 1,000. Tokenized with spaCy's blank pipelines; {vocab}.",
        "", "## Recipe", f"- Pre-norm encoder-decoder Transformer: d_model {c['d_model']}, {c['n_heads']} heads, "
        f"{c['n_encoder_layers']}+{c['n_decoder_layers']} layers, d_ff {c['d_ff']}, dropout {c['dropout']} "
        f"(attention {c['attn_dropout']}), decoder embedding tied to the generator: {c['tie_embeddings']}, "
        f"encoder embedding shared too: {c.get('share_embeddings', False)}.",
        f"- Parameters: {m['parameters']:,}; weights stored as {m['weights_dtype']} and loaded back in fp32.",
        f"- Adam (0.9, 0.98), peak lr {ta.get('lr')} with {ta.get('warmup')} warmup updates then inverse-sqrt "
        f"decay; label smoothing {ta.get('label_smoothing')}; about {ta.get('max_tokens')} padded tokens per "
        f"update; seed {ta.get('seed')}.",
        f"- {t.get('updates')} updates; the final weights average epochs {t.get('averaged_epochs')}.",
        f"- Training time: {t.get('train_seconds', 0) / 3600:.2f} h of training steps on {hardware}.",
        "", "Reproduce:", "", f"```\n{_reproduce(lm, c, ta, subword)}\n"
        f"python -m model.card --checkpoint checkpoints/{lm.name}\n```", "",
        *(["## Checkpoint selection", t["selection"], ""] if t.get("selection") else []),
        *_bleu_lines(m, subword),
        f"Validation BLEU (greedy, before averaging) after 1 h of training: {_h(m['val_bleu_after_1h'])}; "
        f"after 2 h: {_h(m['val_bleu_after_2h'])}.", "",
        "## Known limits",
        "- Domain: short descriptive image captions (people, animals, sports, streets). News, dialogue, "
        "questions and long sentences translate poorly.",
        ("- Subword pieces: a rare word is split into several pieces, and attention is over pieces. Names "
         "are rebuilt piece by piece rather than copied." if subword else
         "- Word-level vocabulary: rare words, names and numbers are often `<unk>`; replacement copies the "
         "attended source word, which is right for names and wrong for words that need translating."),
        f"- Inputs longer than {c['max_len'] - 2} tokens are truncated.",
        "- Trained from scratch on 29k sentences; it reflects the gender and cultural biases of the captions.",
        "", "## Hook points", f"{len(hooks)} named hook points, e.g. `{hooks[0]}`, `{hooks[-1]}`.", "",
    ]
    return "\n".join(lines)


def _h(entry):
    if not entry:
        return "not reached"
    return f"{entry.get('val_bleu', '?')} (epoch {entry['epoch']}, {entry['train_seconds'] / 3600:.2f} h)"


if __name__ == "__main__":
    sys.exit(main())
