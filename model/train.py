"""Train a translation Transformer on Multi30k: ``python -m model.train --src de --tgt en``.

Resumable: the full training state is written atomically after every epoch to ``--work``;
rerunning the same command continues from there (a ``kill -9`` loses at most one epoch).
A resumed run keeps its saved hyperparameters; only --epochs, --data, --device, --threads and
--out may change.
Multi-GPU / multi-node with ``torchrun`` (DistributedDataParallel; gloo on CPU, nccl on CUDA).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from dataclasses import asdict
from pathlib import Path

import torch
import torch.nn.functional as F

from .checkpoint import LoadedModel, save_checkpoint
from .data import MULTI30K_URL, load_pairs, pad_batch, token_batches, with_specials
from .transformer import PAD_ID, Transformer, TransformerConfig
from .vocab import Vocab, load_vocabs, save_vocabs, tokenize_corpus

STATE, HISTORY, VOCAB = "state.safetensors", "history.json", "vocab.json"
# Options a resumed run may change; every other option is taken from the saved state.
RUN_CONTROL = {"data", "base_url", "out", "work", "epochs", "average", "threads", "device", "no_bleu", "stop_after",
               "export_only"}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--src", default="de")
    p.add_argument("--tgt", default="en")
    p.add_argument("--data", default="../shared/multi30k", help="folder with {split}.{lang}.gz")
    p.add_argument("--base-url", default=MULTI30K_URL, help="where to download missing Multi30k files")
    p.add_argument("--out", default=None, help="final checkpoint folder (default checkpoints/SRC-TGT)")
    p.add_argument("--work", default=None, help="resumable training state (default runs/SRC-TGT)")
    p.add_argument("--train-split", default="train")
    p.add_argument("--val-split", default="val")
    p.add_argument("--max-train", type=int, default=0, help="use only the first N training pairs (0 = all)")
    p.add_argument("--min-freq", type=int, default=2)
    p.add_argument("--d-model", type=int, default=256)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--enc-layers", type=int, default=3)
    p.add_argument("--dec-layers", type=int, default=3)
    p.add_argument("--d-ff", type=int, default=512)
    p.add_argument("--dropout", type=float, default=0.1)
    p.add_argument("--attn-dropout", type=float, default=0.1)
    p.add_argument("--max-len", type=int, default=256)
    p.add_argument("--no-tie", action="store_true", help="separate decoder embedding and generator")
    p.add_argument("--epochs", type=int, default=30)
    p.add_argument("--max-tokens", type=int, default=4096, help="padded tokens per batch (per process)")
    p.add_argument("--lr", type=float, default=1e-3, help="peak learning rate")
    p.add_argument("--warmup", type=int, default=1000, help="warmup updates, then inverse-sqrt decay")
    p.add_argument("--label-smoothing", type=float, default=0.1)
    p.add_argument("--clip", type=float, default=1.0)
    p.add_argument("--average", type=int, default=5, help="average the last N epochs' weights")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0 = torch default)")
    p.add_argument("--device", default="auto", help="auto, cpu or cuda")
    p.add_argument("--no-bleu", action="store_true", help="skip validation BLEU (tests)")
    p.add_argument("--export-only", action="store_true",
                   help="write the checkpoint from the epochs saved so far in --work, without training")
    p.add_argument("--stop-after", type=int, default=0, help="stop this process after N epochs (tests)")
    args = p.parse_args(argv)
    state = Path(args.work or f"runs/{args.src}-{args.tgt}") / STATE
    if state.exists():  # a run's model shape comes from its saved state, not from the new command line
        from safetensors import safe_open
        with safe_open(str(state), "pt") as f:
            saved = json.loads(f.metadata()["json"])["args"]
        for key, value in saved.items():  # only where data, devices and epochs may change
            if key not in RUN_CONTROL:
                setattr(args, key, value)
    args.out = args.out or f"checkpoints/{args.src}-{args.tgt}"
    args.work = args.work or f"runs/{args.src}-{args.tgt}"
    return args


def lr_at(step: int, peak: float, warmup: int) -> float:
    step = max(step, 1)
    return peak * min(step / warmup, math.sqrt(warmup / step))


# -- resumable state: weights, optimizer and counters in one safetensors file ---------------
def save_state(path: Path, model, opt, meta: dict) -> None:
    from safetensors.torch import save_file
    tensors = {f"model.{k}": v.detach().cpu().contiguous() for k, v in model.state_dict().items()
               if not (model.cfg.tie_embeddings and k == "generator.weight")}
    osd = opt.state_dict()
    for idx, st in osd["state"].items():
        for name, val in st.items():
            tensors[f"opt.{idx}.{name}"] = torch.as_tensor(val).detach().cpu().contiguous()
    tensors["rng.torch"] = torch.get_rng_state()
    meta = dict(meta, param_groups=osd["param_groups"])
    tmp = path.with_suffix(".tmp")
    save_file(tensors, str(tmp), metadata={"json": json.dumps(meta)})
    os.replace(tmp, path)  # atomic: a kill leaves either the old or the new state


def load_state(path: Path, model, opt) -> dict:
    from safetensors import safe_open
    with safe_open(str(path), "pt") as f:
        meta = json.loads(f.metadata()["json"])
        tensors = {k: f.get_tensor(k) for k in f.keys()}
    model.load_state_dict({k[6:]: v for k, v in tensors.items() if k.startswith("model.")}, strict=False)
    state: dict = {}
    for k, v in tensors.items():
        if k.startswith("opt."):
            _, idx, name = k.split(".", 2)
            state.setdefault(int(idx), {})[name] = v
    opt.load_state_dict({"state": state, "param_groups": meta.pop("param_groups")})
    torch.set_rng_state(tensors["rng.torch"])
    return meta


def average_weights(paths: list[Path]) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file
    total = None
    for p in paths:
        sd = load_file(str(p))
        total = {k: v.double() for k, v in sd.items()} if total is None else {k: total[k] + sd[k] for k in total}
    return {k: (v / len(paths)).float() for k, v in total.items()}


@torch.no_grad()
def validation_loss(model, batches, src_ids, tgt_ids, device) -> float:
    model.eval()
    total, n = 0.0, 0
    for b in batches:
        src = pad_batch([src_ids[i] for i in b]).to(device)
        tgt = pad_batch([tgt_ids[i] for i in b]).to(device)
        logits = model(src, tgt[:, :-1])
        total += F.cross_entropy(logits.reshape(-1, logits.size(-1)).float(), tgt[:, 1:].reshape(-1),
                                 ignore_index=PAD_ID, reduction="sum").item()
        n += (tgt[:, 1:] != PAD_ID).sum().item()
    return total / max(n, 1)


def bleu(lm: LoadedModel, sources: list[str], refs: list[str]) -> dict:
    import sacrebleu
    from .decoding import translate_batch
    hyps = translate_batch(lm, sources, beam=1, replace_unk=False)
    cased = sacrebleu.corpus_bleu(hyps, [refs])
    lower = sacrebleu.corpus_bleu(hyps, [refs], lowercase=True)
    return {"bleu": round(cased.score, 2), "bleu_lc": round(lower.score, 2)}


def main(argv=None) -> int:
    args = parse_args(argv)
    from tqdm import tqdm
    world, rank = int(os.environ.get("WORLD_SIZE", 1)), int(os.environ.get("RANK", 0))
    use_cuda = torch.cuda.is_available() and args.device != "cpu"
    device = torch.device(f"cuda:{int(os.environ.get('LOCAL_RANK', 0))}" if use_cuda else "cpu")
    if world > 1:
        import torch.distributed as dist
        dist.init_process_group("nccl" if use_cuda else "gloo")
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    work, out = Path(args.work), Path(args.out)
    work.mkdir(parents=True, exist_ok=True)
    log = (lambda *a: print(*a, flush=True)) if rank == 0 else (lambda *a: None)

    train_src, train_tgt = load_pairs(args.data, args.train_split, args.src, args.tgt, args.base_url)
    val_src, val_tgt = load_pairs(args.data, args.val_split, args.src, args.tgt, args.base_url)
    if args.max_train:
        train_src, train_tgt = train_src[: args.max_train], train_tgt[: args.max_train]
    tok_train_src, tok_train_tgt = tokenize_corpus(train_src, args.src), tokenize_corpus(train_tgt, args.tgt)
    if (work / VOCAB).exists():
        src_vocab, tgt_vocab = load_vocabs(work / VOCAB)
    else:
        src_vocab = Vocab.build(tok_train_src, args.min_freq)
        tgt_vocab = Vocab.build(tok_train_tgt, args.min_freq)
        if rank == 0:
            save_vocabs(work / VOCAB, src_vocab, tgt_vocab)
    room = args.max_len - 2
    pairs = [(with_specials(src_vocab.encode(s)), with_specials(tgt_vocab.encode(t)))
             for s, t in zip(tok_train_src, tok_train_tgt) if 0 < len(s) <= room and 0 < len(t) <= room]
    tr_src, tr_tgt = [p[0] for p in pairs], [p[1] for p in pairs]
    va_src = [with_specials(src_vocab.encode(s)[:room]) for s in tokenize_corpus(val_src, args.src)]
    va_tgt = [with_specials(tgt_vocab.encode(t)[:room]) for t in tokenize_corpus(val_tgt, args.tgt)]
    log(f"train pairs {len(tr_src)}, val {len(va_src)}, vocab {args.src} {len(src_vocab)} / {args.tgt} {len(tgt_vocab)}")

    cfg = TransformerConfig(len(src_vocab), len(tgt_vocab), args.d_model, args.heads, args.enc_layers,
                            args.dec_layers, args.d_ff, args.dropout, args.attn_dropout, args.max_len,
                            not args.no_tie)
    model = Transformer(cfg).to(device)
    log(f"parameters: {model.num_parameters():,}")
    opt = torch.optim.Adam(model.parameters(), lr=args.lr, betas=(0.9, 0.98), eps=1e-9)
    meta = {"epoch": 0, "step": 0, "train_seconds": 0.0, "args": vars(args)}
    history = []
    if (work / STATE).exists():
        meta = load_state(work / STATE, model, opt)
        meta["args"] = vars(args)
        history = json.loads((work / HISTORY).read_text()) if (work / HISTORY).exists() else []
        log(f"resumed from {work / STATE} at epoch {meta['epoch']}, step {meta['step']}")
    if args.export_only:
        export(args, work, out, cfg, src_vocab, tgt_vocab, meta, history, val_src, val_tgt, device)
        return 0
    ddp_model = model
    if world > 1:
        from torch.nn.parallel import DistributedDataParallel
        ddp_model = DistributedDataParallel(model, device_ids=[device.index] if use_cuda else None)
    amp = torch.autocast("cuda", dtype=torch.bfloat16) if use_cuda else torch.autocast("cpu", enabled=False)
    val_batches = token_batches(va_src, va_tgt, args.max_tokens)
    done_here = 0
    while meta["epoch"] < args.epochs:
        epoch = meta["epoch"] + 1
        batches = token_batches(tr_src, tr_tgt, args.max_tokens, seed=args.seed * 1000 + epoch)
        if world > 1:
            batches = batches[: len(batches) // world * world][rank::world]
        model.train()
        t0, tot_loss, tot_tok = time.time(), 0.0, 0
        bar = tqdm(batches, desc=f"epoch {epoch}/{args.epochs}", disable=rank != 0, mininterval=10,
                   file=sys.stderr, dynamic_ncols=False, ncols=100)
        for b in bar:
            src = pad_batch([tr_src[i] for i in b]).to(device)
            tgt = pad_batch([tr_tgt[i] for i in b]).to(device)
            meta["step"] += 1
            for g in opt.param_groups:
                g["lr"] = lr_at(meta["step"], args.lr, args.warmup)
            with amp:
                logits = ddp_model(src, tgt[:, :-1])
            gold = tgt[:, 1:].reshape(-1)
            n_tok = (gold != PAD_ID).sum()
            loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)).float(), gold, ignore_index=PAD_ID,
                                   label_smoothing=args.label_smoothing, reduction="sum") / n_tok
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
            opt.step()
            tot_loss += loss.item() * n_tok.item()
            tot_tok += n_tok.item()
            bar.set_postfix(loss=f"{tot_loss / tot_tok:.3f}", lr=f"{opt.param_groups[0]['lr']:.2e}", refresh=False)
        meta["train_seconds"] += time.time() - t0
        meta["epoch"] = epoch
        if rank == 0:
            from safetensors.torch import save_file
            entry = {"epoch": epoch, "step": meta["step"], "train_loss": round(tot_loss / max(tot_tok, 1), 4),
                     "val_loss": round(validation_loss(model, val_batches, va_src, va_tgt, device), 4),
                     "train_seconds": round(meta["train_seconds"], 1), "epoch_seconds": round(time.time() - t0, 1)}
            if not args.no_bleu:
                lm = LoadedModel(model.eval(), src_vocab, tgt_vocab, args.src, args.tgt)
                entry.update({f"val_{k}": v for k, v in bleu(lm, val_src, val_tgt).items()})
            sd = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items() if k != "generator.weight"}
            save_file(sd, str(work / f"epoch_{epoch}.safetensors"))
            for old in work.glob("epoch_*.safetensors"):
                if int(old.stem.split("_")[1]) <= epoch - args.average:
                    old.unlink()
            history = [h for h in history if h["epoch"] < epoch] + [entry]
            (work / HISTORY).write_text(json.dumps(history, indent=1))
            save_state(work / STATE, model, opt, meta)
            log(json.dumps(entry))
        if world > 1:
            torch.distributed.barrier()
        done_here += 1
        if args.stop_after and done_here >= args.stop_after and meta["epoch"] < args.epochs:
            log(f"stopping after {done_here} epoch(s) as asked; rerun to resume")
            return 0
    if rank == 0:
        export(args, work, out, cfg, src_vocab, tgt_vocab, meta, history, val_src, val_tgt, device)
    if world > 1:
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()
    return 0


def export(args, work, out, cfg, src_vocab, tgt_vocab, meta, history, val_src, val_tgt, device) -> None:
    """Average the last epochs' weights and write the checkpoint folder (fp16 weights)."""
    last = sorted(work.glob("epoch_*.safetensors"), key=lambda p: int(p.stem.split("_")[1]))[-args.average:]
    model = Transformer(cfg).to(device)
    model.load_state_dict(average_weights(last), strict=False)
    model.eval()
    lm = LoadedModel(model, src_vocab, tgt_vocab, args.src, args.tgt)
    averaged = {} if args.no_bleu else {f"val_{k}": v for k, v in bleu(lm, val_src, val_tgt).items()}
    info = {"averaged_epochs": [int(p.stem.split("_")[1]) for p in last], "train_seconds": round(meta["train_seconds"], 1),
            "updates": meta["step"], "parameters": model.num_parameters(), "train_args": vars(args),
            "averaged_val": averaged}
    save_checkpoint(out, model, src_vocab, tgt_vocab, args.src, args.tgt, {"training": info})
    (out / "history.json").write_text(json.dumps(history, indent=1))
    print(f"wrote {out} (averaged epochs {info['averaged_epochs']}; {averaged})", flush=True)


if __name__ == "__main__":
    sys.exit(main())
