"""Each direction's first screen, computed when the site is built: the example sentence's run, as much of it
as the page's views and tour read, from the very graphs the page loads (ONNX Runtime in Python, one thread).

The page draws it at once, before ONNX Runtime Web has compiled and the graphs have loaded (seconds on a
slow machine), then loads the model in the background; every sentence typed afterwards runs in the browser.
The page checks that its own tokenizer gives the stored source ids, and runs the model itself otherwise.
"""
from __future__ import annotations

import base64

import numpy as np

from .runtime import Graphs

# the tour's tensors beside the patterns: stops 1-2 (embeddings), 3's sentences (one head's scores); its
# figure's q, K, V and output are left to the page, which runs the encoder when a pick redraws it
TOUR_TENSORS = ("enc_embed", "enc_pos", "enc_scores_0")

TOP_K = 10  # page/engine.js TOP_K


def top_k(logits: np.ndarray, never: list[int], k: int = TOP_K) -> dict:
    """page/engine.js topK: the chosen token (the argmax among those decoding may choose) and the k best, with
    their probabilities over the whole vocabulary (in float64, as JavaScript computes them)."""
    x = logits.astype(np.float64)
    allowed = x.copy()
    allowed[never] = -np.inf
    p = np.exp(x - x.max())
    p /= p.sum()
    ids = np.argsort(-x, kind="stable")[:k]
    choice = int(np.argmax(allowed))
    return {"choice": choice, "prob": float(p[choice]), "ids": ids.tolist(), "probs": p[ids].tolist(),
            "logits": x[ids].tolist()}


def tensor(a: np.ndarray) -> dict:
    """A tensor as the page reads one: dims and little-endian float32 data, base64."""
    return {"dims": list(a.shape), "data": base64.b64encode(np.ascontiguousarray(a, "<f4").tobytes()).decode("ascii")}


def read_by_page(name: str) -> bool:
    """The graph outputs the page's views and tour read (patterns, the tour's tensors), not the cache."""
    return name.endswith("_norms") or name in TOUR_TENSORS or "_pattern_" in name


def first_screen(graphs: Graphs, text: str, src_ids: list[int]) -> dict:
    """The run of ``text`` (source ids ``src_ids``), greedy as the page decodes, with the whole prefix's
    outputs as the page's views read them (page/app.js runOf)."""
    m = graphs.meta
    ids, logits = graphs.greedy_steps(src_ids)
    enc = graphs.encode(src_ids)
    dec = graphs.decode([m["decoder_start_id"], *ids[:-1]], enc["memory"], src_ids)
    return {"text": text, "srcIds": src_ids, "ids": ids,
            "steps": [top_k(x, m["never_generated"]) for x in logits],
            "enc": {n: tensor(v) for n, v in enc.items() if read_by_page(n)},
            "dec": {n: tensor(v) for n, v in dec.items() if read_by_page(n)}}
