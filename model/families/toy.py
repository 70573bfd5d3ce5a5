"""A toy Transformer trained live, as the tutorial does: a few sentence pairs, words split on spaces, a
vocabulary built on the spot, a tiny model, full-batch Adam for a fixed number of steps, frames kept in
memory on the log schedule (0, 4, 8, 16, ... and the last step).

The same pairs, seed and settings give the same model: the seed fixes the initialisation and there is no
dropout and no shuffling. :class:`ToyGate` holds the limits a shared server needs: one toy training per
session, and a global cap on trainings running at once (a refusal, never a queue that blocks others).
"""
from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from model.engine.config import BOS_ID, EOS_ID, PAD_ID, TransformerConfig
from model.engine.transformer import Transformer
from model.engine.vocab import SPECIALS, Vocab
from .frames import FrameInfo, FrameModel, Offer, frame_key, offer, withdraw
from .ours import Registry

DEFAULT_PAIRS = (("我 有 一 个 好 朋 友", "I have a good friend ."),
                 ("我 有 一 只 猫", "I have a cat ."),
                 ("他 是 我 的 好 朋 友", "He is my good friend ."))
MAX_PAIRS, MAX_WORDS = 50, 20
SRC_LANG, TGT_LANG = "zh", "en"


class ToyError(ValueError):
    """Pairs the toy trainer cannot take, or a training the limits refuse (the message says which)."""


class SpaceVocab(Vocab):
    """Words split on spaces, joined with spaces: the tutorial's tokenisation, for any script."""

    def tokens(self, text: str, lang: str) -> list[str]:
        return text.split()

    def to_text(self, tokens: list[str], lang: str) -> str:
        return " ".join(w for w in tokens if w not in SPECIALS[1:])


@dataclass(frozen=True)
class ToySettings:
    steps: int = 100
    seed: int = 0
    d_model: int = 64
    heads: int = 4
    layers: int = 2
    d_ff: int = 128
    lr: float = 3e-3
    max_seconds: float = 30.0     # training stops here even if steps remain (the page's promise)
    threads: int = 1              # intra-op threads of the training thread only (OpenMP's count is per
                                  # thread): a second thread only fights the server's own on two cores


def parse_pairs(text: str) -> tuple[tuple[str, str], ...]:
    """One pair a line, source and target separated by a tab or '|||'; empty lines ignored."""
    pairs = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split("|||") if "|||" in line else line.split("\t")
        if len(parts) != 2 or not parts[0].split() or not parts[1].split():
            raise ToyError(f"line {n}: write a source and a target separated by a tab or '|||'")
        if max(len(parts[0].split()), len(parts[1].split())) > MAX_WORDS:
            raise ToyError(f"line {n}: at most {MAX_WORDS} words a side")
        pairs.append((" ".join(parts[0].split()), " ".join(parts[1].split())))
    if not pairs:
        raise ToyError("no sentence pairs: write at least one line 'source ||| target'")
    if len(pairs) > MAX_PAIRS:
        raise ToyError(f"{len(pairs)} pairs: the toy trainer takes at most {MAX_PAIRS}")
    return tuple(pairs)


def build_vocab(sentences) -> SpaceVocab:
    words = sorted({w for s in sentences for w in s.split()} - set(SPECIALS))
    return SpaceVocab(list(SPECIALS) + words)


@dataclass(frozen=True)
class ToyFrame:
    step: int
    loss: float
    state: dict             # the weights at this step (fp32 copies)


@dataclass(frozen=True)
class ToyRun:
    pairs: tuple[tuple[str, str], ...]
    settings: ToySettings
    src_vocab: SpaceVocab
    tgt_vocab: SpaceVocab
    cfg: TransformerConfig
    losses: tuple[float, ...]       # every step's training loss (plain cross-entropy)
    frames: tuple[ToyFrame, ...]
    seconds: float
    stopped_early: bool             # max_seconds came before the last step

    def model_at(self, index: int = -1) -> FrameModel:
        """Frame ``index`` (default the last) as a model every view can show."""
        f = self.frames[index]
        model = Transformer(self.cfg)
        model.load_state_dict(f.state)
        info = FrameInfo(path=None, step=f.step, epoch=float(f.step), train_loss=f.loss, val_loss=f.loss,
                         lr=self.settings.lr, updates_total=self.frames[-1].step)
        return FrameModel(model=model.eval(), src_vocab=self.src_vocab, tgt_vocab=self.tgt_vocab, src_lang=SRC_LANG,
                          tgt_lang=TGT_LANG, meta={"toy": {"pairs": [list(p) for p in self.pairs],
                                                           "seed": self.settings.seed}}, frame=info)


def _batch(vocab: Vocab, sentences, specials: bool) -> torch.Tensor:
    seqs = [vocab.encode(s.split()) for s in sentences]
    seqs = [[BOS_ID] + s + [EOS_ID] if specials else s + [EOS_ID] for s in seqs]
    width = max(map(len, seqs))
    return torch.tensor([s + [PAD_ID] * (width - len(s)) for s in seqs])


def frame_steps(steps: int) -> set[int]:
    return {0, steps} | {2 ** k for k in range(2, 30) if 2 ** k < steps}


def train_toy(pairs=DEFAULT_PAIRS, settings: ToySettings = ToySettings(),
              progress: Callable[[int, int, float], None] | None = None) -> ToyRun:
    """Train the toy model; ``progress(step, steps, loss)`` after each step (for a bar and a live curve)."""
    before = torch.get_num_threads()
    torch.set_num_threads(settings.threads)
    try:
        return _train(tuple(pairs), settings, progress)
    finally:
        torch.set_num_threads(before)


def _train(pairs, settings: ToySettings, progress) -> ToyRun:
    sv, tv = build_vocab(p[0] for p in pairs), build_vocab(p[1] for p in pairs)
    width = max(max(len(s.split()), len(t.split())) for s, t in pairs) + 2
    cfg = TransformerConfig(len(sv), len(tv), settings.d_model, settings.heads, settings.layers, settings.layers,
                            settings.d_ff, 0.0, 0.0, max(16, width))
    gen = torch.Generator().manual_seed(settings.seed)
    with torch.random.fork_rng():            # a seeded initialisation that leaves the server's RNG alone
        torch.manual_seed(int(torch.randint(0, 2 ** 31, (1,), generator=gen)))
        model = Transformer(cfg)
    src, gold = _batch(sv, [p[0] for p in pairs], True), _batch(tv, [p[1] for p in pairs], False)
    dec_in = torch.cat([torch.full((len(pairs), 1), BOS_ID), gold[:, :-1]], 1)
    dec_in[dec_in == EOS_ID] = PAD_ID
    opt = torch.optim.Adam(model.parameters(), lr=settings.lr, betas=(0.9, 0.98), eps=1e-9)
    keep, frames, losses, t0 = frame_steps(settings.steps), [], [], time.perf_counter()

    def snap(at: int, loss: float) -> None:
        frames.append(ToyFrame(at, loss, {k: v.detach().clone() for k, v in model.state_dict().items()}))
    step = 0
    for step in range(1, settings.steps + 1):
        model.train()
        loss = F.cross_entropy(model(src, dec_in).reshape(-1, len(tv)), gold.reshape(-1), ignore_index=PAD_ID)
        if step == 1:
            snap(0, loss.item())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if progress is not None:
            progress(step, settings.steps, losses[-1])
        if step in keep:
            snap(step, losses[-1])
        if time.perf_counter() - t0 > settings.max_seconds:
            break
    if frames[-1].step != step:
        snap(step, losses[-1])
    return ToyRun(pairs, settings, sv, tv, cfg, tuple(losses), tuple(frames), time.perf_counter() - t0,
                  step < settings.steps)


class ToyGate:
    """The limits: one toy training per session and at most ``cap`` at once over the whole server."""

    def __init__(self, cap: int = 1):
        self._running = threading.BoundedSemaphore(cap)
        self._sessions: set[str] = set()
        self._lock = threading.Lock()

    def train(self, session: str, pairs=DEFAULT_PAIRS, settings: ToySettings = ToySettings(),
              progress=None) -> ToyRun:
        with self._lock:
            if session in self._sessions:
                raise ToyError("this session has already trained its toy model (one per session): explore it, "
                               "or open the page in a new session to train another")
            if not self._running.acquire(blocking=False):
                raise ToyError("another visitor's toy model is training right now; try again in a few seconds")
            self._sessions.add(session)
        try:
            return train_toy(pairs, settings, progress)
        finally:
            self._running.release()



class ToyShelf:
    """Toy runs offered as models ('toy-<id>@<step>'), the oldest withdrawn past ``keep`` runs (they live
    only in memory)."""

    def __init__(self, reg: Registry, keep: int = 16):
        self.reg, self.keep = reg, keep
        self._runs: OrderedDict[str, list[str]] = OrderedDict()
        self._lock = threading.Lock()

    def put(self, name: str, run: ToyRun) -> list[str]:
        """Offer every frame of ``run``; the keys, in step order."""
        offers = [Offer(frame_key(name, f.step), f"toy model {name}", SRC_LANG, TGT_LANG, run.cfg,
                        lambda k=k: run.model_at(k)) for k, f in enumerate(run.frames)]
        with self._lock:
            keys = offer(self.reg, offers)
            self._runs[name] = keys
            while len(self._runs) > self.keep:
                withdraw(self.reg, self._runs.popitem(last=False)[1])
        return keys
