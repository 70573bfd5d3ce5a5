"""A corpus analysis on Ray Data: the corpus cut into shards, the shards through a pool of model replicas
(``map_batches`` with an actor class: one replica per GPU where the cluster has GPUs, else one per few
cores), each finished shard written by the driver as Parquet and recorded in the manifest.

An embedded local Ray is started when none is running and ``RAY_ADDRESS`` is not set; with ``RAY_ADDRESS``
the run joins that cluster (the project's code shipped to it as the job's working directory). A replica
that dies is restarted and its shard run again (Ray Data's actor pools retry by default); the driver keeps
each sentence's row once, by its line number. A rerun reads the manifest and skips the finished shards.
"""
from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from model.analysis.trust_signals import weights_fingerprint
from model.families import load_checkpoint
from model.families.m2m100 import with_languages
from model.families.ours import CheckpointError

from . import shards as sh
from .analyses import Sentence, rows_for, summarise
from .inputs import Corpus, CorpusError, read_corpus

ROOT = Path(__file__).resolve().parents[2]
SHARD_SIZE = 64          # sentences per shard: the unit of resuming and of one replica's batch
CPUS_PER_REPLICA = 4     # without GPUs, one replica per this many cores
LOCAL_OBJECT_STORE = 256 * 1024 ** 2   # the rows are small: a small store starts faster
CLUSTER_EXCLUDES = ["checkpoints/", "web/", ".git/", "docs/", "tests/", "bench/", "**/__pycache__/"]


class Interrupted(RuntimeError):
    """The run stopped before every shard was written (a rerun resumes it)."""


@dataclass(frozen=True)
class Report:
    analysis: str
    out: str
    sentences: int
    shards: int
    shards_skipped: int      # found finished
    shards_computed: int     # written by this run
    workers: int
    seconds: float           # the whole run: inputs, model, Ray, shards, summary
    compute_seconds: float   # first sentence back to last (0 when every shard was finished before)
    summary: dict


def load_model(source, langs: str | None = None, device: str = "cpu"):
    """The model (its languages set by ``langs``, "SRC-TGT", for a many-to-many model), loaded once on the
    driver before any work: a source that cannot be loaded is a message."""
    try:
        lm = load_checkpoint(source, device)
    except CheckpointError as e:
        raise CorpusError(f"the model cannot be loaded: {e}") from None
    except (OSError, ValueError, RuntimeError) as e:
        raise CorpusError(f"the model {source} cannot be loaded: {e}") from None
    if not langs:
        return lm
    src, _, tgt = langs.partition("-")
    try:
        return with_languages(lm, src, tgt)
    except (ValueError, KeyError) as e:
        raise CorpusError(f"--langs {langs}: {e}") from None


def identity(analysis: str, model, lm, corpus: Corpus, shard_size: int) -> dict:
    """What a run's results depend on; a rerun into the same folder must match it."""
    return {"format": sh.FORMAT, "analysis": analysis, "model": str(model), "weights": weights_fingerprint(lm),
            "langs": f"{lm.src_lang}-{lm.tgt_lang}",
            "inputs": {k: {"sha256": v["sha256"], "lines": v["lines"]} for k, v in corpus.files.items()},
            "shard_size": shard_size}


def plan(corpus: Corpus, shard_size: int) -> list[list[Sentence]]:
    s = corpus.sentences
    return [list(s[i:i + shard_size]) for i in range(0, len(s), shard_size)]


class Replica:
    """One model replica of the pool: a shard's sentences in (as JSON), their rows out (as JSON)."""

    def __init__(self, model: str, analysis: str, device: str = "cpu", threads: int = 0,
                 crash_marker: str | None = None, langs: str | None = None):
        import torch
        if threads:
            torch.set_num_threads(threads)
        self.lm = load_model(model, langs, device)
        self.analysis = analysis
        self.crash_marker = crash_marker

    def __call__(self, batch: dict) -> dict:
        if self.crash_marker and not os.path.exists(self.crash_marker):
            Path(self.crash_marker).write_text(str(os.getpid()))  # for tests: this replica dies, once, mid-run
            os._exit(1)
        shard_ids, rows = [], []
        for shard, payload in zip(batch["shard"], batch["sentences"]):
            sentences = [Sentence(**d) for d in json.loads(str(payload))]
            for row in rows_for(self.lm, self.analysis, sentences):
                shard_ids.append(int(shard))
                rows.append(json.dumps(row))
        import numpy as np
        return {"shard": np.asarray(shard_ids, dtype=np.int64), "row": np.asarray(rows, dtype=object)}


def start_ray() -> bool:
    """Join the running Ray, the cluster at RAY_ADDRESS, or start an embedded one; True when this call started
    it (and the run shuts it down)."""
    import ray
    if ray.is_initialized():
        return False
    address = os.environ.get("RAY_ADDRESS")
    try:
        if address:
            ray.init(runtime_env={"working_dir": str(ROOT), "excludes": CLUSTER_EXCLUDES}, logging_level="WARNING")
        else:
            ray.init(include_dashboard=False, object_store_memory=LOCAL_OBJECT_STORE, logging_level="WARNING",
                     runtime_env={"env_vars": {"PYTHONPATH": str(ROOT)}})
    except Exception as e:  # Ray raises a bare Exception when its node does not come up
        where = f"the Ray cluster at RAY_ADDRESS={address}" if address else "an embedded Ray on this machine"
        raise CorpusError(f"{where} did not start: {e}") from None
    return True


def pool(workers: int | None) -> tuple[int, dict]:
    """How many replicas, and each one's resources: a GPU each where the cluster has GPUs, else a share of
    the cores (CPUS_PER_REPLICA each unless ``workers`` says how many)."""
    import ray
    res = ray.cluster_resources()
    gpus, cpus = int(res.get("GPU", 0)), max(1, int(res.get("CPU", 1)))
    if gpus:
        n = min(workers or gpus, gpus)
        return n, {"num_gpus": 1, "num_cpus": 1, "device": "cuda", "threads": 0}
    n = workers or max(1, cpus // CPUS_PER_REPLICA)
    share = max(1, cpus // n)
    return n, {"num_gpus": 0, "num_cpus": min(share, cpus) if n > 1 else cpus, "device": "cpu", "threads": share}


def stream(model, analysis: str, todo: list[tuple[int, list[Sentence]]], workers: int | None,
           crash_marker: str | None, langs: str | None = None):
    """(shard, row) pairs as the replicas hand them back, in any order; and the pool's size first."""
    import ray.data
    n, r = pool(workers)
    yield n
    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = False  # our own progress line says it in words
    ctx.print_on_execution_start = False
    items = [{"shard": k, "sentences": json.dumps([asdict(s) for s in sents])} for k, sents in todo]
    ds = ray.data.from_items(items, override_num_blocks=len(items))
    ds = ds.map_batches(Replica, batch_size=1, batch_format="numpy", compute=ray.data.ActorPoolStrategy(size=n),
                        num_cpus=r["num_cpus"], num_gpus=r["num_gpus"],
                        fn_constructor_kwargs={"model": str(model), "analysis": analysis, "device": r["device"],
                                               "threads": r["threads"], "crash_marker": crash_marker,
                                               "langs": langs})
    for batch in ds.iter_batches(batch_size=None, batch_format="numpy"):
        for shard, row in zip(batch["shard"], batch["row"]):
            yield int(shard), json.loads(str(row))


class Progress:
    """A line a person can read, at most every ``every`` seconds: sentences done, rate, time left. The rate
    is counted from the first sentence back (the pool's start and the model loads are not work)."""

    def __init__(self, total: int, done: int, write=None, every: float = 5.0):
        self.total, self.done = total, done
        self.write = write or (lambda line: print(line, file=sys.stderr, flush=True))
        self.first: tuple[float, int] | None = None   # (when, sentences done) at the first sentence back
        self.last = time.monotonic()
        self.every = every

    def add(self, n: int, force: bool = False) -> None:
        now = time.monotonic()
        if self.first is None and n:
            self.first = (now, self.done)
        self.done += n
        if force or now - self.last >= self.every:
            self.last = now
            self.write(self.line(now))

    def line(self, now: float | None = None) -> str:
        when, base = self.first or (now or time.monotonic(), self.done)
        spent = (now or time.monotonic()) - when
        rate = (self.done - base - 1) / spent if spent > 0 and self.done - base > 1 else 0.0
        left = (self.total - self.done) / rate if rate > 0 else float("inf")
        return (f"{self.done}/{self.total} sentences ({100 * self.done / self.total:.1f} %), "
                f"{rate:.1f} sentences/s, {_left(left)}")


def _left(s: float) -> str:
    if s == float("inf"):
        return "time left not yet known"
    s = int(round(s))
    return (f"about {s // 3600} h {s % 3600 // 60} min" if s >= 3600 else
            f"about {s // 60} min {s % 60} s" if s >= 60 else f"about {s} s") + " left"


def open_folder(out: Path, ident: dict) -> dict:
    """The manifest of ``out``: a new one, or the one there when it is of the same run."""
    old = sh.read_manifest(out)
    if old is not None and old.get("identity") != ident:
        raise CorpusError(f"{out} holds the results of another run (other inputs, model, analysis or shard "
                          "size): choose another --out, or delete that folder to start over")
    if old is not None:
        return old
    out.mkdir(parents=True, exist_ok=True)
    return {"identity": ident, "shards": {}, "finished": False}


def run_corpus(analysis: str, model, src, out, ref=None, align=None, shard_size: int = SHARD_SIZE,
               workers: int | None = None, write=None, interrupt_after: int | None = None,
               crash_marker: str | None = None, langs: str | None = None) -> Report:
    """Run ``analysis`` over the corpus into ``out`` (see the module docstring). ``interrupt_after``: stop
    after writing that many shards (a stand-in for Ctrl-C); ``crash_marker``: a file path, for tests — the
    first replica to take a shard while it is absent creates it and dies."""
    t0 = time.monotonic()
    corpus = read_corpus(analysis, src, ref, align)      # every input checked before any work
    lm = load_model(model, langs)
    out = Path(out)
    manifest = open_folder(out, identity(analysis, model, lm, corpus, shard_size))
    manifest["inputs"] = corpus.files
    shards = plan(corpus, shard_size)
    finished = sh.finished_shards(out, manifest)
    todo = [(k, s) for k, s in enumerate(shards) if k not in finished]
    progress = Progress(len(corpus.sentences), sum(len(shards[k]) for k in finished), write)
    workers_used, compute_s = 0, 0.0
    if todo:
        workers_used, compute_s = _compute(out, manifest, model, analysis, todo, workers, progress,
                                           interrupt_after, crash_marker, langs)
    rows = collect(out, len(shards), len(corpus.sentences))
    cfg = lm.model.cfg
    summary = summarise(analysis, rows, {"layers": cfg.n_decoder_layers, "heads": cfg.decoder_heads})
    summary["model"] = str(model)
    sh.write_json(out / sh.SUMMARY, summary)
    manifest["finished"] = True
    sh.write_json(out / sh.MANIFEST, manifest)
    return Report(analysis, str(out), len(corpus.sentences), len(shards), len(finished), len(todo), workers_used,
                  round(time.monotonic() - t0, 3), round(compute_s, 3), summary)


def _compute(out: Path, manifest: dict, model, analysis: str, todo, workers, progress: Progress,
             interrupt_after, crash_marker, langs) -> tuple[int, float]:
    """Run the shards in ``todo`` on Ray, writing each as soon as all its rows are in; the pool's size, and
    the seconds from the first sentence back to the last."""
    started = start_ray()
    try:
        sizes = {k: len(s) for k, s in todo}
        pending: dict[int, dict[int, dict]] = {k: {} for k in sizes}
        gen = stream(model, analysis, todo, workers, crash_marker, langs)
        n = next(gen)
        progress.write(f"{analysis}: {len(todo)} shards to compute on {n} replica{'s' * (n > 1)}; "
                       f"{progress.done} sentences already done")
        written, first = 0, None
        for shard, row in gen:
            first = first or time.monotonic()
            if shard not in pending or row["index"] in pending[shard]:
                continue  # a shard run again after a replica died: its rows are kept once
            pending[shard][row["index"]] = row
            progress.add(1)
            if len(pending[shard]) == sizes[shard]:
                got = pending.pop(shard)
                rows = [got[i] for i in sorted(got)]
                sh.write_shard(out, shard, rows)
                manifest["shards"][str(shard)] = {"first": rows[0]["index"], "rows": len(rows)}
                sh.write_json(out / sh.MANIFEST, manifest)
                written += 1
                if interrupt_after is not None and written >= interrupt_after and pending:
                    raise Interrupted(f"stopped after {written} shards; run the same command again to resume")
        progress.add(0, force=True)
        return n, time.monotonic() - (first or time.monotonic())
    finally:
        if started:
            import ray
            ray.shutdown()



def collect(out: Path, n_shards: int, n_sentences: int) -> list[dict]:
    """Every sentence's row from the shards, each line number exactly once (else the folder is damaged)."""
    rows = [r for k in range(n_shards) for r in sh.read_shard(out / sh.SHARDS / sh.shard_name(k))]
    seen = [r["index"] for r in rows]
    if sorted(seen) != list(range(n_sentences)):
        raise CorpusError(f"{out}: the shards do not hold each of the {n_sentences} sentences once; "
                          "delete the folder and run again")
    return rows
