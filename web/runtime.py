"""The built graphs run by ONNX Runtime in Python (one thread), as the page runs them: the tests and the
precision benchmark read the very files the page loads through this."""
from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import numpy as np
import onnxruntime as ort


def flag(on: bool) -> np.ndarray:
    return np.array([1.0 if on else 0.0], np.float32)


class Graphs:
    """One direction's encoder.onnx and decoder.onnx (a folder of the site, or any folder holding both)."""

    def __init__(self, folder: Path, meta: dict):
        so = ort.SessionOptions()
        so.intra_op_num_threads = 1
        folder = self._joined(folder, meta.get("weights", ["weights.bin"]))
        self.folder, self.options, self._alti = folder, so, None
        self.enc = ort.InferenceSession(str(folder / "encoder.onnx"), so)
        self.dec = ort.InferenceSession(str(folder / "decoder.onnx"), so)
        self.meta = meta
        self.past = [i.name for i in self.dec.get_inputs() if i.name.startswith("past_")]
        self.d_k = meta["d_model"] // meta["decoder_heads"]

    def _joined(self, folder: Path, parts: list[str]) -> Path:
        """A folder whose weights.bin is ``parts`` joined in order (the build splits a large one), as the
        page joins them; ``folder`` itself when it holds one weights.bin."""
        if parts == ["weights.bin"]:
            return folder
        self._tmp = tempfile.TemporaryDirectory()  # kept as long as the sessions
        joined = Path(self._tmp.name)
        with (joined / "weights.bin").open("wb") as f:
            for part in parts:
                f.write((folder / part).read_bytes())
        for graph in ("encoder.onnx", "decoder.onnx", "alti.onnx"):
            if (folder / graph).is_file():
                shutil.copyfile(folder / graph, joined / graph)
        return joined

    def alti(self, src_ids: list[int], tgt: list[int], keep: list[float]) -> dict[str, np.ndarray]:
        """alti.onnx (made on first use): ALTI+ (T, S + T) over the decoder input ``tgt``, with the source tokens
        ``keep`` marks 0 hidden, and the last position's logits."""
        if self._alti is None:
            self._alti = ort.InferenceSession(str(self.folder / "alti.onnx"), self.options)
        out = self._alti.run(None, {"src": np.array([src_ids], np.int64), "tgt": np.array([tgt], np.int64),
                                    "keep": np.array([keep], np.float32)})
        return dict(zip([o.name for o in self._alti.get_outputs()], out))

    def empty_cache(self) -> dict[str, np.ndarray]:
        return {n: np.zeros((1, self.meta["decoder_heads"], 0, self.d_k), np.float32) for n in self.past}

    def encode(self, src_ids: list[int], padding=True, pos=True) -> dict[str, np.ndarray]:
        names = [o.name for o in self.enc.get_outputs()]
        out = self.enc.run(None, {"src": np.array([src_ids], np.int64), "use_padding_mask": flag(padding),
                                  "use_pos": flag(pos)})
        return dict(zip(names, out))

    def decode(self, tgt: list[int], memory, src_ids, cache=None, padding=True, causal=True, pos=True,
               outputs: list[str] | None = None) -> dict[str, np.ndarray]:
        """The decoder over new positions ``tgt`` after ``cache`` (default: empty, the whole prefix)."""
        names = outputs or [o.name for o in self.dec.get_outputs()]
        feeds = {"tgt": np.array([tgt], np.int64), "memory": memory, "src": np.array([src_ids], np.int64),
                 "use_padding_mask": flag(padding), "use_causal_mask": flag(causal), "use_pos": flag(pos),
                 **(cache if cache is not None else self.empty_cache())}
        return dict(zip(names, self.dec.run(names, feeds)))

    def greedy(self, src_ids: list[int], max_len: int = 100, causal: bool = True) -> list[int]:
        """Greedy ids as the page decodes: one cached step at a time with the look-ahead mask on, the whole
        prefix recomputed with it off (as model.engine.decoding.decoder_step)."""
        return self.greedy_steps(src_ids, max_len, causal)[0]

    def greedy_steps(self, src_ids: list[int], max_len: int = 100, causal: bool = True):
        """(ids, each step's logits over the whole vocabulary) of ``greedy``."""
        m = self.meta
        memory = self.encode(src_ids)["memory"]
        budget = max(1, min(max_len, m["max_len"] - 1, 2 * len(src_ids) + 10))
        ys, cache, steps = [m["decoder_start_id"]], self.empty_cache(), []
        present = [n.replace("past_", "present_") for n in self.past]
        for _ in range(budget):
            if causal:
                out = self.decode(ys[-1:], memory, src_ids, cache, outputs=["logits", *present])
                cache = {n: out[p] for n, p in zip(self.past, present)}
            else:
                out = self.decode(ys, memory, src_ids, causal=False, outputs=["logits"])
            steps.append(out["logits"][0])
            logits = out["logits"][0].copy()
            logits[m["never_generated"]] = -np.inf
            ys.append(int(logits.argmax()))
            if ys[-1] == m["eos_id"]:
                break
        return ys[1:], steps
