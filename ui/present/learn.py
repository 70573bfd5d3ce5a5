"""Watch it learn, without gradio: which training frames a server offers, the curves they draw, the words
that name a frame, and one head's map in every frame.

Frames are offered in the registry like added models, under '<pair>@<step>' keys (model/families/frames.py): a run
of a frame is an ordinary run, so every view, link and export works on it unchanged.
"""
from __future__ import annotations

import functools
import math
import stat
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from model.analysis.dynamics import DYNAMICS, Dynamics, read_dynamics
from model.engine.names import DEC_SELF, ENC_SELF, HeadRef, hook_name
from model.engine.results import decoder_input
from model.families import catalog
from model.families.frames import FRAMES_DIR, FrameError, offer_frames, read_info, run_note
from model.families.ours import Registry
from viz.learning import Curve, HeadPanel

from ..state import read_index


@dataclass(frozen=True)
class FrameSet:
    """One checkpoint's frames as offered: their keys in step order, and the dynamics measured on them."""
    pair: str
    keys: tuple[str, ...]
    steps: tuple[int, ...]
    train_loss: tuple[float, ...]
    val_loss: tuple[float, ...]
    updates_total: int
    dynamics: Dynamics | None
    notes: tuple[str, ...] = ()  # per frame: what else it is ("averaged over epochs 31–40"), or ""
    run: str = ""  # which run the frames come from beside the default model (run.json's line), or ""

    def key_at(self, index: int) -> str:
        return self.keys[read_index(index, 0, len(self.keys))]

    def index_of(self, key: str) -> int | None:
        return self.keys.index(key) if key in self.keys else None


def step_of(key: str) -> int | None:
    """The step a '<pair>@<step>' key names (None for any other model)."""
    head, sep, tail = key.rpartition("@")
    return int(tail) if sep and head and tail.isdigit() else None


def offer_shipped(reg: Registry, problems: list[str] | None = None) -> list[FrameSet]:
    """Offer the frames shipped beside each of ``reg``'s checkpoints (``<checkpoint>/frames``)."""
    sets = []
    for name, lm in list(catalog.loaded(reg).items()):
        folder = Path(lm.path) / FRAMES_DIR if lm.path and Path(lm.path).is_dir() else None
        if folder is None or not folder.is_dir() or step_of(name) is not None:
            continue
        try:
            offer_frames(reg, folder, lm.path)
            sets.append(frame_set(reg, name))
        except (FrameError, ValueError, KeyError, OSError) as e:
            (problems if problems is not None else reg.problems).append(f"frames of {name}: {e}")
    return sets


def family_keys(reg: Registry, model: str) -> list[str]:
    """The frames of the run that ``model`` belongs to ('de-en' or 'de-en@512' -> every 'de-en@<step>'), in
    step order; empty when it has none."""
    base = model.rpartition("@")[0] if step_of(model) is not None else model
    return sorted((k for k in catalog.infos(reg) if k.rpartition("@")[0] == base and step_of(k) is not None),
                  key=step_of)


def _info(reg: Registry, key: str):
    source = Path(catalog.infos(reg)[key].source)
    stamp = _stamp(source)
    return _read(read_info, str(source), stamp) if stamp else reg.models[key].frame  # a toy frame: in memory


def _stamp(path: Path) -> tuple[int, int] | None:
    """The file's identity for the cache below (modified, size); None when it is not a file."""
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size) if stat.S_ISREG(st.st_mode) else None


@functools.lru_cache(maxsize=512)
def _read(reader, path: str, stamp: tuple[int, int]):
    """A frame's or a run's record, read once while the file stays as it was (each run redraws the curves,
    which read every frame's header: 12 to 20 ms a run)."""
    return reader(path)


def frame_set(reg: Registry, model: str) -> FrameSet | None:
    """The frames of ``model``'s run offered in ``reg`` (None when it has none), with the dynamics measured
    on them when they were shipped beside the frames."""
    keys = family_keys(reg, model)
    if not keys:
        return None
    meta = [_info(reg, k) for k in keys]
    dyn, folder = None, meta[0].path.parent if meta[0].path is not None else None
    stamp = _stamp(folder / DYNAMICS) if folder is not None else None
    if stamp:
        try:
            dyn = _read(read_dynamics, str(folder / DYNAMICS), stamp)
        except (OSError, ValueError, KeyError, TypeError):
            dyn = None
    return FrameSet(pair=keys[0].rpartition("@")[0], keys=tuple(keys), steps=tuple(m.step for m in meta),
                    train_loss=tuple(m.train_loss for m in meta), val_loss=tuple(m.val_loss for m in meta),
                    updates_total=meta[-1].updates_total, dynamics=dyn,
                    notes=tuple(_averaged(m.averaged_epochs) for m in meta),
                    run=run_note(folder) if folder is not None else "")


def account(fs: FrameSet) -> str:
    """The one sentence on where the frames come from, said alike by the tour, Watch it learn and the run bar
    (which shows run.json's line itself): empty where no line ships, for nothing is known then."""
    return (f"These {len(fs.steps)} snapshots are of {fs.run}, so the default model is not one of them."
            if fs.run else "")


def _averaged(epochs: tuple[int, ...]) -> str:
    return f"averaged over epochs {epochs[0]}–{epochs[-1]}" if len(epochs) > 1 else ""


def _by_step(fs: FrameSet, field: str, scale: float = 1.0) -> tuple[float, ...]:
    got = {f.step: getattr(f, field) for f in fs.dynamics.frames} if fs.dynamics else {}
    return tuple(got[s] * scale if s in got and got[s] is not None else math.nan for s in fs.steps)


def curves(fs: FrameSet) -> list[Curve]:
    """The losses (left axis, nats), and where the dynamics were measured the competences and shares (right)."""
    out = [Curve("training loss", fs.train_loss)]
    if fs.val_loss != fs.train_loss:  # a toy run has no validation set: its frames carry the training loss twice
        out.append(Curve("validation loss", fs.val_loss))
    if fs.dynamics is None:
        return out
    return out + [Curve("target-side LM loss (empty source)", _by_step(fs, "lm_loss")),
                  Curve("greedy BLEU / 100", _by_step(fs, "bleu", 0.01), "y2"),
                  Curve("lexical accuracy", _by_step(fs, "lexical_accuracy"), "y2"),
                  Curve("reordering (Kendall's tau)", _by_step(fs, "reordering_tau"), "y2"),
                  Curve("ALTI+ source share", _by_step(fs, "source_share"), "y2")]


def frame_markdown(fs: FrameSet, index: int) -> str:
    k = read_index(index, 0, len(fs.steps))
    bleu = _by_step(fs, "bleu")[k] if fs.dynamics else math.nan
    note = fs.notes[k] if k < len(fs.notes) else ""
    return (f"**Frame {k + 1} of {len(fs.steps)}** · {fs.pair} at step **{fs.steps[k]:,}** of {fs.updates_total:,}"
            + (f" ({note})" if note else "")
            + f" · train loss {fs.train_loss[k]:.2f} · validation loss {fs.val_loss[k]:.2f}"
            + ("" if math.isnan(bleu) else f" · greedy validation BLEU {bleu:.1f}"))


def head_panel(step: int, tr, ref: HeadRef) -> HeadPanel:
    """One frame's map of the watched head on its own translation of the sentence (teacher-forced trace)."""
    kind, layer, head = ref
    w = tr.trace[hook_name("pattern", kind, layer)][0, head].float().numpy()
    if kind == ENC_SELF:
        queries, keys = tr.src_tokens, tr.src_tokens
    else:
        dec_in = decoder_input(tr.start_token, list(tr.output_tokens))[:w.shape[0]]
        queries = dec_in
        keys = dec_in if kind == DEC_SELF else tr.src_tokens
    return HeadPanel(step=step, weights=np.asarray(w)[:len(queries), :len(keys)], queries=list(queries),
                     keys=list(keys), translation=tr.text)
