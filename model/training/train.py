"""Train a translation Transformer on Multi30k: ``python -m model.train --src de --tgt en``.

Resumable: the full training state is written atomically after every epoch to ``--work``;
rerunning the same command continues from there (a ``kill -9`` loses at most one epoch).
A resumed run keeps its saved hyperparameters; only --epochs, --data, --prepared, --device,
--threads, --out and the BLEU options may change.

Two data paths: word-level (spaCy here, ``--data``) or a folder written by ``model.prepare``
(``--prepared DIR``: joint subword vocabulary, piece ids; neither spaCy nor the data folder needed).
A subword model shares one embedding matrix between encoder, decoder and generator.
Multi-GPU / multi-node with ``torchrun`` (DistributedDataParallel; gloo on CPU, nccl on CUDA).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from model.engine.config import PAD_ID, TransformerConfig
from model.engine.data import pad_batch, token_batches, with_specials
from model.engine.loaded import LoadedModel
from model.engine.transformer import Transformer
from model.engine.vocab import Vocab, load_vocabs, save_vocabs, tokenize_corpus
from model.families.ours import WEIGHTS_CONFIG_KEY, save_checkpoint, state_dict_for_save, tied_keys
from model.engine.corpus import MULTI30K_URL, load_pairs
from .bleu import sacre_bleu, tokenized_bleu

STATE, HISTORY, VOCAB = "state.safetensors", "history.json", "vocab.json"
# Options a resumed run may change; every other option is taken from the saved state.
RUN_CONTROL = {"data", "base_url", "out", "work", "epochs", "average", "threads", "device", "no_bleu", "stop_after",
               "export_only", "prepared", "bleu_every", "export_beam", "eval_batch", "time_budget"}


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
    p.add_argument("--prepared", default=None, help="folder written by model.prepare (subword; no spaCy needed)")
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
    p.add_argument("--no-share", action="store_true", help="subword: separate encoder and decoder embeddings")
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
    p.add_argument("--bleu-every", type=int, default=1, help="greedy val BLEU every N epochs (and the last)")
    p.add_argument("--export-beam", type=int, default=0,
                   help="at export also score the averaged model with this beam on val (and test when prepared)")
    p.add_argument("--eval-batch", type=int, default=64, help="sentences per batched greedy decode")
    p.add_argument("--export-only", action="store_true",
                   help="write the checkpoint from the epochs saved so far in --work, without training")
    p.add_argument("--time-budget", type=float, default=0,
                   help="seconds: after the epoch that passes it, stop training and export (0 = no limit)")
    p.add_argument("--stop-after", type=int, default=0, help="stop this process after N epochs (tests)")
    p.add_argument("--frames", default="", help="updates after which to save a training frame: "
                   "comma-separated steps, or 'log' for 0, 4, 8, 16, ... and the last update")
    p.add_argument("--frames-dir", default=None, help="where frames go (default WORK/frames)")
    p.add_argument("--init-frame", default=None, help="a new run starts from this frame's weights, step and epoch "
                   "(the optimizer's moments start at zero): how a run whose state was lost goes on")
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


def frame_steps(spec: str, total: int) -> frozenset[int]:
    """The updates after which a frame is saved: 'log' doubles from 4 (step 0 is the initialisation)."""
    if not spec:
        return frozenset()
    if spec == "log":
        return frozenset([0, total] + [2 ** k for k in range(2, 40) if 2 ** k < total])
    return frozenset(int(x) for x in spec.split(","))


def save_frame(folder: Path, model, step: int, info: dict) -> Path:
    """One frame: fp16 weights with the model config and the training state in the metadata."""
    from safetensors.torch import save_file
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"step_{step:05d}.safetensors"
    meta = {WEIGHTS_CONFIG_KEY: json.dumps(model.cfg.to_dict(), sort_keys=True),
            "frame": json.dumps(dict(info, step=step), sort_keys=True)}
    save_file(state_dict_for_save(model), str(path.with_suffix(".tmp")), metadata=meta)
    os.replace(path.with_suffix(".tmp"), path)
    return path


def frame_info(args, model, data: TrainData, device, val_batches, step: int, epoch: float, train_loss: float,
               total: int) -> dict:
    """A frame's training state: where the run is, its losses (validation measured now) and learning rate."""
    return {"epoch": round(epoch, 3), "train_loss": round(train_loss, 4), "lr": lr_at(step, args.lr, args.warmup),
            "val_loss": round(validation_loss(model, val_batches, data.val.src, data.val.tgt, device), 4),
            "updates_total": total}


def start_from_frame(model, path, cfg: TransformerConfig) -> dict:
    """Load a frame's weights into ``model``; its step and epoch (an epoch boundary) become the run's."""
    from model.families.frames import _config, _weights, read_info
    info, frame_cfg = read_info(path), _config(Path(path))
    if frame_cfg != cfg:
        raise SystemExit(f"--init-frame {path}: its model shape differs from this run's ({frame_cfg} vs {cfg})")
    if abs(info.epoch - round(info.epoch)) > 1e-6:
        raise SystemExit(f"--init-frame {path}: epoch {info.epoch} is not an epoch boundary")
    model.load_state_dict(_weights(Path(path), cfg).state_dict())
    return {"epoch": int(round(info.epoch)), "step": info.step, "init_frame": str(path)}


def lr_at(step: int, peak: float, warmup: int) -> float:
    step = max(step, 1)
    return peak * min(step / warmup, math.sqrt(warmup / step))


# -- resumable state: weights, optimizer and counters in one safetensors file ---------------
def save_state(path: Path, model, opt, meta: dict) -> None:
    from safetensors.torch import save_file
    skip = tied_keys(model.cfg)
    tensors = {f"model.{k}": v.detach().cpu().contiguous() for k, v in model.state_dict().items() if k not in skip}
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


@dataclass
class Split:
    """Encoded sentences (<bos> ... <eos>) and, for scoring, the raw and official tokenized references."""
    src: list[list[int]]
    tgt: list[list[int]]
    refs: list[str]
    tok_refs: list[str] | None = None


@dataclass
class TrainData:
    src_vocab: Vocab
    tgt_vocab: Vocab
    train: Split
    val: Split
    test: Split | None = None


def _word_data(args, work: Path, rank: int) -> TrainData:
    """spaCy words, one vocabulary per language (min_freq cut)."""
    from .bleu import read_official_refs
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
    va_src = [with_specials(src_vocab.encode(s)[:room]) for s in tokenize_corpus(val_src, args.src)]
    va_tgt = [with_specials(tgt_vocab.encode(t)[:room]) for t in tokenize_corpus(val_tgt, args.tgt)]
    return TrainData(src_vocab, tgt_vocab, Split([p[0] for p in pairs], [p[1] for p in pairs], []),
                     Split(va_src, va_tgt, val_tgt, read_official_refs(args.data, args.val_split, args.tgt)))


def _prepared_data(args, work: Path, rank: int) -> TrainData:
    """A model.prepare folder: one joint subword vocabulary, piece ids already encoded."""
    from .prepare import load_prepared, prepared_vocab
    if (work / VOCAB).exists():
        vocab = load_vocabs(work / VOCAB)[0]
    else:
        vocab = prepared_vocab(args.prepared)
        if rank == 0:
            save_vocabs(work / VOCAB, vocab, vocab)
    room, langs = args.max_len - 2, (args.src, args.tgt)
    splits = {}
    for split in (args.train_split, args.val_split, "test_2016_flickr"):
        if split != args.train_split and not (Path(args.prepared) / f"{split}.npz").is_file():
            continue
        d = load_prepared(args.prepared, split, langs)
        src, tgt = d.ids[args.src], d.ids[args.tgt]
        if split == args.train_split:
            n = args.max_train or len(src)
            keep = [i for i in range(n) if 0 < len(src[i]) <= room and 0 < len(tgt[i]) <= room]
            splits[split] = Split([with_specials(src[i]) for i in keep], [with_specials(tgt[i]) for i in keep], [])
        else:
            splits[split] = Split([with_specials(x[:room]) for x in src], [with_specials(x[:room]) for x in tgt],
                                  d.raw[args.tgt], d.tok_refs[args.tgt])
    return TrainData(vocab, vocab, splits[args.train_split], splits[args.val_split], splits.get("test_2016_flickr"))


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


def bleu(lm: LoadedModel, split: Split, beam: int = 1, batch_size: int = 64) -> dict:
    """Detokenized sacreBLEU (cased, lowercased) and tokenized lowercased BLEU of encoded sources."""
    from model.engine.decoding import translate_ids
    hyps = translate_ids(lm, split.src, beam=beam, batch_size=batch_size)
    sb = sacre_bleu(hyps, split.refs)
    tok = tokenized_bleu(hyps, lm.tgt_lang, split.refs, split.tok_refs)
    return {"bleu": sb["cased"]["bleu"], "bleu_lc": sb["lowercased"]["bleu"], "bleu_tok": tok.bleu}


def main(argv=None) -> int:
    args = parse_args(argv)
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

    data = (_prepared_data if args.prepared else _word_data)(args, work, rank)
    sv, tv = data.src_vocab, data.tgt_vocab
    log(f"train pairs {len(data.train.src)}, val {len(data.val.src)}, vocab {sv.kind} "
        f"{args.src} {len(sv)} / {args.tgt} {len(tv)}")
    cfg = TransformerConfig(len(sv), len(tv), args.d_model, args.heads, args.enc_layers,
                            args.dec_layers, args.d_ff, args.dropout, args.attn_dropout, args.max_len,
                            not args.no_tie, share_embeddings=sv.kind == "subword" and not args.no_share)
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
    elif args.init_frame:
        meta.update(start_from_frame(model, args.init_frame, cfg))
        log(f"started from frame {args.init_frame} at epoch {meta['epoch']}, step {meta['step']}")
    if not args.export_only:
        history = train_epochs(args, data, model, opt, meta, history, device, world, rank, log)
        if history is None:  # stopped early (--stop-after)
            return 0
    if rank == 0:
        export(args, work, out, cfg, data, meta, history, device)
    if world > 1:
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()
    return 0


def train_epochs(args, data: TrainData, model, opt, meta, history, device, world, rank, log) -> list | None:
    """Run epochs until args.epochs; after each, write history, the epoch's weights and the state."""
    from tqdm import tqdm
    tr = data.train
    use_cuda = device.type == "cuda"
    ddp_model = model
    if world > 1:
        from torch.nn.parallel import DistributedDataParallel
        ddp_model = DistributedDataParallel(model, device_ids=[device.index] if use_cuda else None)
    amp = torch.autocast("cuda", dtype=torch.bfloat16) if use_cuda else torch.autocast("cpu", enabled=False)
    val_batches = token_batches(data.val.src, data.val.tgt, args.max_tokens)
    total = args.epochs * len(token_batches(tr.src, tr.tgt, args.max_tokens, seed=args.seed * 1000 + 1)) // world
    frames = frame_steps(args.frames, total) if rank == 0 else frozenset()
    frames_dir = Path(args.frames_dir or Path(args.work) / "frames")

    def frame(loss: float, epoch: float) -> None:
        info = frame_info(args, model, data, device, val_batches, meta["step"], epoch, loss, total)
        log(f"frame at step {meta['step']}: {info}")
        save_frame(frames_dir, model, meta["step"], info)
        model.train()
    done_here, started = 0, time.time()
    while meta["epoch"] < args.epochs:
        if args.time_budget and time.time() - started > args.time_budget:
            log(f"time budget of {args.time_budget:.0f} s used after epoch {meta['epoch']}: exporting")
            break
        epoch = meta["epoch"] + 1
        batches = token_batches(tr.src, tr.tgt, args.max_tokens, seed=args.seed * 1000 + epoch)
        if world > 1:
            batches = batches[: len(batches) // world * world][rank::world]
        model.train()
        t0 = time.time()
        tot_loss = torch.zeros((), device=device)
        tot_tok = torch.zeros((), device=device, dtype=torch.long)
        bar = tqdm(batches, desc=f"epoch {epoch}/{args.epochs}", disable=rank != 0, mininterval=10,
                   file=sys.stderr, dynamic_ncols=False, ncols=100)
        for k, b in enumerate(bar):
            src = pad_batch([tr.src[i] for i in b]).to(device)
            tgt = pad_batch([tr.tgt[i] for i in b]).to(device)
            meta["step"] += 1
            for g in opt.param_groups:
                g["lr"] = lr_at(meta["step"], args.lr, args.warmup)
            with amp:
                logits = ddp_model(src, tgt[:, :-1])
            gold = tgt[:, 1:].reshape(-1)
            n_tok = (gold != PAD_ID).sum()
            loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)).float(), gold, ignore_index=PAD_ID,
                                   label_smoothing=args.label_smoothing, reduction="sum") / n_tok
            if meta["step"] == 1 and 0 in frames:  # the initialisation, with its first batch's loss
                meta["step"] = 0
                frame(loss.item(), 0.0)
                meta["step"] = 1
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
            opt.step()
            tot_loss += loss.detach() * n_tok  # stays on the device: no sync per step
            tot_tok += n_tok
            if meta["step"] in frames:
                frame((tot_loss / tot_tok).item(), epoch - 1 + (k + 1) / len(batches))
            if k % 50 == 49:
                bar.set_postfix(loss=f"{(tot_loss / tot_tok).item():.3f}", lr=f"{opt.param_groups[0]['lr']:.2e}",
                                refresh=False)
        train_loss = (tot_loss / tot_tok.clamp(min=1)).item()
        meta["train_seconds"] += time.time() - t0
        meta["epoch"] = epoch
        if rank == 0:
            history = _end_epoch(args, data, model, opt, meta, history, epoch, train_loss, t0, val_batches, device)
            log(json.dumps(history[-1]))
        if world > 1:
            torch.distributed.barrier()
        done_here += 1
        if args.stop_after and done_here >= args.stop_after and meta["epoch"] < args.epochs:
            log(f"stopping after {done_here} epoch(s) as asked; rerun to resume")
            return None
    return history


def _end_epoch(args, data: TrainData, model, opt, meta, history, epoch, train_loss, t0, val_batches, device):
    from safetensors.torch import save_file
    work = Path(args.work)
    entry = {"epoch": epoch, "step": meta["step"], "train_loss": round(train_loss, 4),
             "val_loss": round(validation_loss(model, val_batches, data.val.src, data.val.tgt, device), 4),
             "train_seconds": round(meta["train_seconds"], 1), "epoch_seconds": round(time.time() - t0, 1)}
    if not args.no_bleu and (epoch % max(args.bleu_every, 1) == 0 or epoch == args.epochs):
        lm = LoadedModel(model.eval(), data.src_vocab, data.tgt_vocab, args.src, args.tgt)
        entry.update({f"val_{k}": v for k, v in bleu(lm, data.val, batch_size=args.eval_batch).items()})
    skip = tied_keys(model.cfg)
    sd = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items() if k not in skip}
    save_file(sd, str(work / f"epoch_{epoch}.safetensors"))
    for old in work.glob("epoch_*.safetensors"):
        if int(old.stem.split("_")[1]) <= epoch - args.average:
            old.unlink()
    history = [h for h in history if h["epoch"] < epoch] + [entry]
    (work / HISTORY).write_text(json.dumps(history, indent=1))
    save_state(work / STATE, model, opt, meta)
    return history


def export(args, work, out, cfg, data: TrainData, meta, history, device) -> None:
    """Average the last epochs' weights and write the checkpoint folder (fp16 weights)."""
    last = sorted(work.glob("epoch_*.safetensors"), key=lambda p: int(p.stem.split("_")[1]))[-args.average:]
    model = Transformer(cfg).to(device)
    model.load_state_dict(average_weights(last), strict=False)
    model.eval()
    lm = LoadedModel(model, data.src_vocab, data.tgt_vocab, args.src, args.tgt)
    averaged = {} if args.no_bleu else {f"val_{k}": v for k, v in bleu(lm, data.val, 1, args.eval_batch).items()}
    info = {"averaged_epochs": [int(p.stem.split("_")[1]) for p in last], "train_seconds": round(meta["train_seconds"], 1),
            "updates": meta["step"], "parameters": model.num_parameters(), "train_args": vars(args),
            "averaged_val": averaged, "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"}
    if args.export_beam > 1 and not args.no_bleu:
        beam = {"beam": args.export_beam, "length_penalty": 0.6,
                **{f"val_{k}": v for k, v in bleu(lm, data.val, args.export_beam).items()}}
        if data.test is not None:
            beam.update({f"test_{k}": v for k, v in bleu(lm, data.test, args.export_beam).items()})
        info["averaged_beam"] = beam
    save_checkpoint(out, model, data.src_vocab, data.tgt_vocab, args.src, args.tgt, {"training": info})
    if args.frames:  # the run's last frame is the model it exports: the averaged weights
        loss = history[-1]["train_loss"] if history else float("nan")
        val_batches = token_batches(data.val.src, data.val.tgt, args.max_tokens)
        save_frame(Path(args.frames_dir or work / "frames"), model, meta["step"],
                   frame_info(args, model, data, device, val_batches, meta["step"], meta["epoch"], loss,
                              meta["step"]) | {"averaged_epochs": info["averaged_epochs"]})
    (out / "history.json").write_text(json.dumps(history, indent=1))
    print(f"wrote {out} (averaged epochs {info['averaged_epochs']}; {averaged}; {info.get('averaged_beam', '')})",
          flush=True)


if __name__ == "__main__":
    sys.exit(main())
