"""Shared pieces of the benchmarks: options, model and data loading, timing, results files.

Figures are written to ``bench/results.json`` (merged: entries of benchmarks not run this
time are kept) and summarised in ``bench/RESULTS.md``.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import gc
import gzip
import json
import math
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent       # the repository
BENCH_DIR = Path(__file__).resolve().parent
RESULTS_JSON = BENCH_DIR / "results.json"
RESULTS_MD = BENCH_DIR / "RESULTS.md"
DEFAULT_DATA = ROOT.parent / "shared" / "multi30k"
DEFAULT_DIRECTION = "de-en"
# CPU that other processes use (in cores, sampled for 1 s while the benchmark waits) above which its
# figures are flagged "taken under load". Not the load average: that lags, and counts the previous benchmark.
LOADED_OTHERS_CORES = 0.3

# Used only when ../shared/multi30k is absent: aligned de/en pairs in the style of Multi30k.
BUILTIN_PAIRS = [
    ("Ein Mann mit einem roten Hut sitzt auf einer Bank.", "A man in a red hat sits on a bench."),
    ("Zwei Hunde rennen über eine grüne Wiese.", "Two dogs run across a green meadow."),
    ("Eine Frau liest ein Buch in einem Park.", "A woman reads a book in a park."),
    ("Ein kleiner Junge spielt mit einem Ball am Strand.", "A little boy plays with a ball on the beach."),
    ("Mehrere Menschen warten an einer Bushaltestelle.", "Several people wait at a bus stop."),
    ("Ein Radfahrer fährt eine steile Straße hinauf.", "A cyclist rides up a steep road."),
    ("Ein Mädchen in einem blauen Kleid tanzt auf der Bühne.", "A girl in a blue dress dances on the stage."),
    ("Ein Koch bereitet in einer Küche Essen zu.", "A cook prepares food in a kitchen."),
    ("Drei Kinder springen in einen See.", "Three children jump into a lake."),
    ("Ein älterer Mann verkauft Obst auf einem Markt.", "An older man sells fruit at a market."),
    ("Eine Gruppe von Freunden sitzt um ein Lagerfeuer.", "A group of friends sits around a campfire."),
    ("Ein schwarzer Hund fängt eine Frisbeescheibe.", "A black dog catches a frisbee."),
    ("Ein Arbeiter repariert das Dach eines Hauses.", "A worker repairs the roof of a house."),
    ("Eine Frau mit Sonnenbrille geht eine belebte Straße entlang.",
     "A woman with sunglasses walks along a busy street."),
    ("Zwei Männer spielen Schach in einem Café.", "Two men play chess in a cafe."),
    ("Ein Baby schläft in den Armen seiner Mutter.", "A baby sleeps in its mother's arms."),
    ("Ein Skateboarder springt über eine Treppe.", "A skateboarder jumps over a staircase."),
    ("Leute in bunten Kostümen laufen bei einer Parade mit.", "People in colorful costumes march in a parade."),
    ("Ein Fußballspieler schießt den Ball auf das Tor.", "A soccer player shoots the ball at the goal."),
    ("Eine Musikerin spielt Gitarre vor einem Publikum.", "A musician plays guitar in front of an audience."),
]


# --------------------------------------------------------------------------- options
@dataclass
class BenchConfig:
    checkpoint: str | None = None   # checkpoint folder; None = checkpoints/<direction> or fallbacks
    direction: str = DEFAULT_DIRECTION
    quick: bool = False
    threads: int = 1                # torch intra-op threads (1: steady figures on a shared 2-core box)
    device: str = "cpu"
    data: str = str(DEFAULT_DATA)
    reps: int = 0                   # 0 = the benchmark's default (smaller with --quick)
    notes: list[str] = field(default_factory=list)  # things to say in RESULTS.md (fallbacks used, ...)


def add_common_args(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    p.add_argument("--checkpoint", default=None,
                   help="checkpoint folder (default: checkpoints/DIRECTION, else the training state "
                        "in runs/DIRECTION, else an untrained model)")
    p.add_argument("--direction", default=DEFAULT_DIRECTION, help="used when --checkpoint is not given")
    p.add_argument("--quick", action="store_true", help="fewer repetitions (a smoke run, noisier figures)")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (0 = torch default)")
    p.add_argument("--device", default="cpu", help="cpu or cuda (the targets are about the CPU)")
    p.add_argument("--data", default=str(DEFAULT_DATA), help="folder with Multi30k {split}.{lang}.gz")
    p.add_argument("--reps", type=int, default=0, help="repetitions (0 = each benchmark's default)")
    p.add_argument("--results", default=str(RESULTS_JSON), help="results JSON (merged)")
    p.add_argument("--markdown", default=str(RESULTS_MD), help="Markdown summary")
    p.add_argument("--no-save", action="store_true", help="print only; do not touch the results files")
    return p


def config_from_args(args: argparse.Namespace) -> BenchConfig:
    return BenchConfig(args.checkpoint, args.direction, args.quick, args.threads, args.device, args.data,
                       args.reps)


def setup_torch(cfg: BenchConfig) -> None:
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    torch.manual_seed(0)


def sync(device) -> None:
    if str(device).startswith("cuda"):
        torch.cuda.synchronize()


# --------------------------------------------------------------------------- machine
def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith(("model name", "hardware", "processor\t: arm")):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def load_average() -> list[float] | None:
    try:
        return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]
    except (OSError, ValueError):
        return None


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def machine_info(device: str = "cpu") -> dict:
    info = {
        "platform": platform.platform(),
        "cpu": cpu_model(),
        "cores": usable_cores(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "device": str(device),
        "load_average": load_average(),
    }
    if str(device).startswith("cuda") and torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name()
    try:
        mem = next(l for l in Path("/proc/meminfo").read_text().splitlines() if l.startswith("MemTotal"))
        info["memory_gb"] = round(int(mem.split()[1]) / 2**20, 1)
    except (OSError, StopIteration, ValueError):
        pass
    return info


def others_cpu(seconds: float = 1.0) -> float | None:
    """Cores' worth of CPU busy over ``seconds`` while this process sleeps: what other processes use."""
    def busy() -> int:
        f = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
        return sum(f) - f[3] - (f[4] if len(f) > 4 else 0)  # all but idle and iowait
    try:
        b0, t0 = busy(), time.perf_counter()
        time.sleep(seconds)
        b1, t1 = busy(), time.perf_counter()
    except (OSError, ValueError, IndexError):
        return None
    return round((b1 - b0) / os.sysconf("SC_CLK_TCK") / (t1 - t0), 2)


def is_loaded(others: float | None) -> bool:
    return others is not None and others > LOADED_OTHERS_CORES


def now_utc() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


# --------------------------------------------------------------------------- model and data
_MODEL_CACHE: dict = {}


def _from_training_state(work: Path):
    """The newest weights in a training folder (state.safetensors + vocab.json), in memory."""
    from safetensors import safe_open

    from model.checkpoint import LoadedModel
    from model.transformer import Transformer, TransformerConfig
    from model.vocab import load_vocabs
    with safe_open(str(work / "state.safetensors"), "pt") as f:
        meta = json.loads(f.metadata()["json"])
        weights = {k[6:]: f.get_tensor(k).float() for k in f.keys() if k.startswith("model.")}
    a = meta["args"]
    src_vocab, tgt_vocab = load_vocabs(work / "vocab.json")
    mcfg = TransformerConfig(len(src_vocab), len(tgt_vocab), a["d_model"], a["heads"], a["enc_layers"],
                             a["dec_layers"], a["d_ff"], a["dropout"], a["attn_dropout"], a["max_len"],
                             not a.get("no_tie", False))
    model = Transformer(mcfg)
    model.load_state_dict(weights, strict=False)
    return LoadedModel(model.eval(), src_vocab, tgt_vocab, a["src"], a["tgt"], work,
                       {"training_state_epoch": meta.get("epoch")}), meta.get("epoch")


def _untrained(work: Path, direction: str):
    from model.checkpoint import LoadedModel
    from model.transformer import Transformer, TransformerConfig
    from model.vocab import load_vocabs
    src_vocab, tgt_vocab = load_vocabs(work / "vocab.json")
    model = Transformer(TransformerConfig(len(src_vocab), len(tgt_vocab)))
    src, tgt = direction.split("-")
    return LoadedModel(model.eval(), src_vocab, tgt_vocab, src, tgt, None, {"untrained": True})


def load_model(cfg: BenchConfig):
    """(LoadedModel, description). Order: --checkpoint; checkpoints/DIR; runs/DIR training state;
    an untrained model of the default shape with runs/DIR's vocabulary. Fallbacks are reported
    (printed and added to ``cfg.notes``)."""
    key = (cfg.checkpoint, cfg.direction, cfg.device)
    if key in _MODEL_CACHE:
        lm, desc, notes = _MODEL_CACHE[key]
        cfg.notes.extend(n for n in notes if n not in cfg.notes)
        return lm, desc
    from model.checkpoint import CheckpointError, load_checkpoint
    notes: list[str] = []
    if cfg.checkpoint:
        try:
            lm = load_checkpoint(cfg.checkpoint, cfg.device)
        except CheckpointError as e:
            raise SystemExit(f"error: {e}") from None
        desc = f"checkpoint {cfg.checkpoint}"
    else:
        shipped = ROOT / "checkpoints" / cfg.direction
        work = ROOT / "runs" / cfg.direction
        try:
            lm = load_checkpoint(shipped, cfg.device)
            desc = f"checkpoint {shipped.relative_to(ROOT)}"
        except CheckpointError as e:
            notes.append(f"shipped checkpoint not usable ({e})")
            if (work / "state.safetensors").is_file() and (work / "vocab.json").is_file():
                lm, epoch = _from_training_state(work)
                lm.model.to(cfg.device)
                desc = f"training state {work.relative_to(ROOT)} (epoch {epoch}, not averaged)"
                notes.append(f"used the training state in {work.relative_to(ROOT)} (epoch {epoch}) instead; "
                             f"pass --checkpoint for the shipped model")
            elif (work / "vocab.json").is_file():
                lm = _untrained(work, cfg.direction)
                lm.model.to(cfg.device)
                desc = f"UNTRAINED model, default shape, vocabulary of {work.relative_to(ROOT)}"
                notes.append("no checkpoint or training state: an untrained model was timed "
                             "(decode lengths are then capped, not natural)")
            else:
                raise SystemExit(f"error: no checkpoint at {shipped} and no training folder {work}; "
                                 f"pass --checkpoint DIR") from None
    cfg.notes.extend(n for n in notes if n not in cfg.notes)
    lm.model.eval()
    _MODEL_CACHE[key] = (lm, desc, notes)
    return lm, desc


def model_summary(lm) -> dict:
    c = lm.model.cfg
    return {"direction": lm.name, "d_model": c.d_model, "heads": c.n_heads, "encoder_layers": c.n_encoder_layers,
            "decoder_layers": c.n_decoder_layers, "d_ff": c.d_ff, "src_vocab": c.src_vocab_size,
            "tgt_vocab": c.tgt_vocab_size, "parameters": lm.model.num_parameters()}


def read_lines(cfg: BenchConfig, split: str, lang: str, n: int) -> tuple[list[str], str]:
    """First ``n`` lines of Multi30k ``split``.``lang``; the built-in sentences when the file is absent."""
    path = Path(cfg.data) / f"{split}.{lang}.gz"
    if path.is_file():
        with gzip.open(path, "rt", encoding="utf-8") as f:
            lines = []
            for line in f:
                lines.append(line.rstrip("\n"))
                if len(lines) == n:
                    break
        return lines, f"first {len(lines)} lines of {path.name}"
    col = {"de": 0, "en": 1}.get(lang)
    if col is None:
        raise SystemExit(f"error: {path} not found and no built-in sentences for {lang!r}")
    note = f"{path} not found: used the built-in {lang} sentences"
    if note not in cfg.notes:
        cfg.notes.append(note)
    lines = [BUILTIN_PAIRS[i % len(BUILTIN_PAIRS)][col] for i in range(n)]
    return lines, f"built-in sentences ({len(BUILTIN_PAIRS)} distinct)"


# --------------------------------------------------------------------------- timing
class Timings(dict):
    """variant -> wall-clock ms per call; ``.cpu``: the same calls in this thread's CPU ms.

    With one torch thread every op runs in the calling thread, so its CPU time is the work done,
    whatever other processes do; time spent waiting for a core shows in wall-clock only.
    """

    def __init__(self, keys):
        super().__init__({k: [] for k in keys})
        self.cpu: dict[str, list[float]] = {k: [] for k in keys}


def time_call(fn: Callable[[], object], device="cpu") -> tuple[float, float]:
    """(wall ms, thread CPU ms) of one call."""
    sync(device)
    c0, t0 = time.thread_time(), time.perf_counter()
    fn()
    sync(device)
    return (time.perf_counter() - t0) * 1e3, (time.thread_time() - c0) * 1e3


def time_ms(fn: Callable[[], object], device="cpu") -> float:
    return time_call(fn, device)[0]


def interleaved(fns: dict[str, Callable[[], object]], reps: int, warmup: int = 1,
                device="cpu", offset: int = 0) -> Timings:
    """Time every variant ``reps`` times, rotating the order each round, so slow spells from other
    processes fall on all variants alike (``offset`` shifts the first order, for callers that
    call this once per item). GC is paused while timing. Returns ms per call (wall, and ``.cpu``)."""
    keys = list(fns)
    for _ in range(warmup):
        for k in keys:
            fns[k]()
    out = Timings(keys)
    gc.collect()
    was = gc.isenabled()
    gc.disable()
    try:
        for r in range(reps):
            s = (r + offset) % len(keys)
            for k in keys[s:] + keys[:s]:
                wall, cpu = time_call(fns[k], device)
                out[k].append(wall)
                out.cpu[k].append(cpu)
    finally:
        if was:
            gc.enable()
    return out


def paired_ratio(num: list[float], den: list[float]) -> float:
    """Median of the per-round ratios num[i] / den[i] (each pair was timed back to back)."""
    return statistics.median(a / b for a, b in zip(num, den))


def ratio_clock(cfg: "BenchConfig") -> str:
    """Which clock judged ratios use: thread CPU time with one torch thread on the CPU, else wall."""
    return "cpu" if cfg.threads == 1 and not str(cfg.device).startswith("cuda") else "wall"


def percentile(xs: list[float], q: float) -> float:
    s = sorted(xs)
    if not s:
        return math.nan
    pos = (len(s) - 1) * q / 100
    lo, hi = math.floor(pos), math.ceil(pos)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def stats(xs: list[float]) -> dict:
    return {"n": len(xs), "p50": round(percentile(xs, 50), 3), "p95": round(percentile(xs, 95), 3),
            "mean": round(sum(xs) / len(xs), 3) if xs else math.nan, "min": round(min(xs), 3),
            "max": round(max(xs), 3)}


# --------------------------------------------------------------------------- results
def figure(key: str, label: str, value: float, unit: str, target: str | None = None,
           op: str | None = None, limit: float | None = None) -> dict:
    """One line of the results table. With ``op`` ("<=" or ">=") and ``limit`` it is judged."""
    ok = None
    if op is not None and limit is not None and value == value:
        ok = bool(value <= limit) if op == "<=" else bool(value >= limit)
    return {"key": key, "label": label, "value": round(float(value), 4), "unit": unit, "target": target,
            "op": op, "limit": limit, "pass": ok}


def entry(name: str, cfg: BenchConfig, figures: list[dict], details: dict, load_before=None,
          seconds: float | None = None) -> dict:
    load_after = load_average()
    cores = usable_cores()
    return {
        "bench": name,
        "date": now_utc(),
        "command": command_line(),
        "machine": machine_info(cfg.device),
        "load_average_before": load_before,
        "load_average_after": load_after,
        "under_load": False,  # set by run_bench from others_cpu()
        "settings": {"quick": cfg.quick, "threads": cfg.threads, "device": cfg.device},
        "seconds": None if seconds is None else round(seconds, 1),
        "notes": list(cfg.notes),
        "figures": figures,
        "details": details,
    }


def command_line() -> str:
    """How this process was started, as ``python -m bench ...`` when it was."""
    if not sys.argv:
        return ""
    first = Path(sys.argv[0])
    if first.parent.resolve() == BENCH_DIR and first.suffix == ".py":
        first = Path("-m bench" if first.stem == "__main__" else f"-m bench.{first.stem}")
    return " ".join(["python", str(first), *sys.argv[1:]])


def _fmt_value(f: dict) -> str:
    v, unit = f["value"], f["unit"]
    if unit == "x":
        return f"{v:.2f}×"
    if unit == "%":
        return f"{v:+.1f} %"
    if unit == "ms":
        return f"{v:.1f} ms" if v >= 10 else f"{v:.2f} ms"
    return f"{v:g} {unit}".strip()


def _result(f: dict) -> str:
    return "—" if f["pass"] is None else ("**pass**" if f["pass"] else "**FAIL**")


def load_results(path: Path) -> dict:
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
        return doc if isinstance(doc, dict) and isinstance(doc.get("benches"), dict) else {"benches": {}}
    except (OSError, ValueError):
        return {"benches": {}}


def save(entries: dict[str, dict], cfg: BenchConfig, json_path=RESULTS_JSON, md_path=RESULTS_MD) -> dict:
    """Merge ``entries`` into the results JSON (keeping other benchmarks) and rewrite the Markdown."""
    from . import BENCHES
    json_path, md_path = Path(json_path), Path(md_path)
    doc = load_results(json_path)
    doc["benches"].update(entries)
    order = [b.name for b in BENCHES]
    doc["benches"] = dict(sorted(doc["benches"].items(),
                                 key=lambda kv: (order.index(kv[0]) if kv[0] in order else len(order), kv[0])))
    doc["updated"] = now_utc()
    doc["machine"] = machine_info(cfg.device)
    tmp = json_path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    os.replace(tmp, json_path)
    tmp = md_path.with_suffix(".md.tmp")
    tmp.write_text(markdown(doc), encoding="utf-8")
    os.replace(tmp, md_path)
    return doc


def _machine_line(m: dict) -> str:
    s = (f"{m.get('platform')}; CPU {m.get('cpu')}, {m.get('cores')} cores; Python {m.get('python')}; "
         f"torch {m.get('torch')}; device {m.get('device')}")
    return s + (f" ({m['gpu']})" if m.get("gpu") else "")


def markdown(doc: dict) -> str:
    benches = doc["benches"]
    lines = ["# Benchmark results", "",
             "Written by `python -m bench` (figures from `bench/results.json`; targets from issues 2, 4 and 6).",
             "Latencies are wall-clock on the machine below. Compared variants are timed interleaved, and the "
             "judged ratios use the timing thread's CPU time when benchmarks run with one torch thread "
             "(`--threads 1`, the default), so that other processes on the machine do not skew them.", "",
             f"- Updated: {doc.get('updated')}",
             f"- Machine: {_machine_line(doc.get('machine', {}))}"]
    loaded = [n for n, e in benches.items() if e.get("under_load")]
    if loaded:
        def why(e):
            if e.get("others_cpu_before") is not None:
                return f"other processes used {e['others_cpu_before']:.2f} cores"
            return f"1-min load average {e['load_average_before'][0]:.2f} (older rule; it counts earlier benchmarks too)"
        loads = "; ".join(f"{n}: {why(e)}" for n, e in benches.items() if e.get("under_load"))
        lines += ["", f"> **Taken under load.** When these started ({loads}; {doc.get('machine', {}).get('cores')} "
                      f"cores), absolute times may be inflated (p95s most). The ratios, timed interleaved and "
                      f"judged on CPU time, are the trustworthy figures."]
    lines += ["", "| Benchmark | Figure | Value | Target | Result |", "| --- | --- | --- | --- | --- |"]
    for name, e in benches.items():
        for f in e.get("figures", []):
            lines.append(f"| {name} | {f['label']} | {_fmt_value(f)} | {f.get('target') or '—'} | {_result(f)} |")
    from . import BENCHES
    pending = [b for b in BENCHES if b.name not in benches]
    if pending:
        lines += ["", "Not measured yet: " + "; ".join(f"`{b.name}` ({b.description})" for b in pending) + "."]
    lines += ["", "## Runs", ""]
    for name, e in benches.items():
        s = e.get("settings", {})
        la = e.get("load_average_before")
        lines.append(f"### {name}")
        lines.append("")
        lines.append(f"- Date: {e.get('date')}; command `{e.get('command')}`; "
                     f"{s.get('threads')} torch thread(s); {'quick' if s.get('quick') else 'full'} run"
                     + (f"; {e['seconds']} s" if e.get("seconds") is not None else ""))
        if e.get("machine") and _machine_line(e["machine"]) != _machine_line(doc.get("machine", {})):
            lines.append(f"- Machine: {_machine_line(e['machine'])}")
        if la:
            lines.append(f"- Load average at start: {' / '.join(f'{x:.2f}' for x in la)}"
                         + (" (**under load**)" if e.get("under_load") else ""))
        d = e.get("details", {})
        for k in ("model", "data", "method", "summary"):
            if k in d:
                v = d[k]
                if isinstance(v, dict):
                    v = ", ".join(f"{a} {b}" for a, b in v.items())
                lines.append(f"- {k.capitalize()}: {v}")
        for n in e.get("notes", []):
            lines.append(f"- Note: {n}")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def print_figures(e: dict) -> None:
    print(f"\n== {e['bench']} ({e['date']}, load {e.get('load_average_before')})")
    for f in e["figures"]:
        print(f"  {f['label']:<62} {_fmt_value(f):>12}  {f.get('target') or '':<28} {_result(f).strip('*')}")
    for n in e.get("notes", []):
        print("  note:", n)


def run_bench(name: str, run: Callable[[BenchConfig], dict], cfg: BenchConfig) -> dict:
    setup_torch(cfg)
    before = load_average()
    others = others_cpu()
    t0 = time.perf_counter()
    e = run(cfg)
    e["seconds"] = round(time.perf_counter() - t0, 1)
    e["load_average_before"] = before
    e["others_cpu_before"] = others
    e["under_load"] = is_loaded(others)
    return e


def standalone(name: str, run: Callable[[BenchConfig], dict], argv=None) -> int:
    """``python -m bench.<name>``: run one benchmark, print it, merge it into the results files."""
    p = add_common_args(argparse.ArgumentParser(prog=f"python -m bench.{name}", description=f"benchmark: {name}"))
    args = p.parse_args(argv)
    cfg = config_from_args(args)
    e = run_bench(name, run, cfg)
    print_figures(e)
    if not args.no_save:
        save({name: e}, cfg, args.results, args.markdown)
        print(f"\nwrote {args.results} and {args.markdown}")
    return 0

