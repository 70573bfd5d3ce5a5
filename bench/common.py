"""What the benchmarks share: options, data, timing, the app as a server and as a browser, results files.

Every benchmark's entry is merged into ``bench/results.json`` (entries of benchmarks not run this time
are kept) and the whole table is rewritten into ``bench/RESULTS.md``. Each entry records the date, the
command, the machine, ``os.getloadavg()`` before and after, and the CPU other processes used just before.
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import gc
import json
import math
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from model.engine.data import head_lines
from model.families import load_checkpoint

ROOT = Path(__file__).resolve().parents[1]
RESULTS_JSON, RESULTS_MD = ROOT / "bench" / "results.json", ROOT / "bench" / "RESULTS.md"
TEST = "test_2016_flickr"


def free_port() -> int:
    """A TCP port on the loopback interface that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Config:
    checkpoint: str = "checkpoints/de-en"  # the timed model; app benchmarks serve its parent folder (every model)
    quick: bool = False
    threads: int = 1                       # torch threads: 1 gives steady figures on a shared 2-core machine
    reps: int = 0                          # 0: each benchmark's default
    data: str = str(ROOT.parent / "shared" / "multi30k")
    notes: list = field(default_factory=list)

    @property
    def app_root(self) -> Path:
        return (ROOT / self.checkpoint).parent

    @property
    def direction(self) -> str:
        c = json.loads((ROOT / self.checkpoint / "config.json").read_text(encoding="utf-8"))
        return f"{c['src_lang']}-{c['tgt_lang']}"


def parser(prog: str, doc: str | None = None) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--checkpoint", default=Config.checkpoint, help="checkpoint folder (default %(default)s)")
    p.add_argument("--quick", action="store_true", help="fewer sentences and repetitions (a smoke run)")
    p.add_argument("--threads", type=int, default=1, help="torch threads (0: torch's default)")
    p.add_argument("--reps", type=int, default=0, help="repetitions (0: each benchmark's default)")
    p.add_argument("--data", default=Config.data, help="folder with Multi30k {split}.{lang}.gz")
    p.add_argument("--no-save", action="store_true", help="print only")
    return p


def config(args) -> Config:
    return Config(args.checkpoint, args.quick, args.threads, args.reps, args.data)


# --------------------------------------------------------------------------- model and data
_MODELS: dict = {}


def model(cfg: Config):
    if cfg.checkpoint not in _MODELS:
        _MODELS[cfg.checkpoint] = load_checkpoint(ROOT / cfg.checkpoint, "cpu")
    return _MODELS[cfg.checkpoint]


def sentences(cfg: Config, lang: str, n: int, split: str = TEST) -> list[str]:
    lines = head_lines(Path(cfg.data) / f"{split}.{lang}.gz", n)
    if not lines:
        raise SystemExit(f"error: no {split}.{lang}.gz under {cfg.data} (pass --data)")
    return lines


# --------------------------------------------------------------------------- timing
def percentile(xs, q: float) -> float:
    return float(np.percentile(xs, q)) if len(xs) else math.nan


def stats(xs) -> dict:
    return {"n": len(xs), "p50": round(percentile(xs, 50), 3), "p95": round(percentile(xs, 95), 3),
            "mean": round(statistics.fmean(xs), 3), "max": round(max(xs), 3)}


def interleaved(fns: dict, reps: int, warmup: int = 1, offset: int = 0) -> tuple[dict, dict]:
    """Time each variant ``reps`` times, rotating the order each round so slow spells from other processes
    fall on all alike; GC paused. Returns (wall ms, thread CPU ms) per variant: with one torch thread the
    CPU time is the work done, whatever else runs on the machine."""
    keys = list(fns)
    for _ in range(warmup):
        for k in keys:
            fns[k]()
    wall, cpu = {k: [] for k in keys}, {k: [] for k in keys}
    gc.collect()
    gc.disable()
    try:
        for r in range(reps):
            s = (r + offset) % len(keys)
            for k in keys[s:] + keys[:s]:
                c0, t0 = time.thread_time(), time.perf_counter()
                fns[k]()
                wall[k].append((time.perf_counter() - t0) * 1e3)
                cpu[k].append((time.thread_time() - c0) * 1e3)
    finally:
        gc.enable()
    return wall, cpu


def paired_ratio(num, den) -> float:
    return statistics.median(a / b for a, b in zip(num, den))


# --------------------------------------------------------------------------- the app as a server and a browser
class AppServer:
    """``python app.py`` on 127.0.0.1 and a free port, serving ``root``; its output kept, time-stamped."""

    def __init__(self, root: Path, env: dict | None = None, cwd: Path = ROOT):
        # ``cwd``: the source tree whose app.py runs (another checkout imports its own code, not this one's)
        self.root, self.cwd, self.port, self.extra_env = root, cwd, free_port(), dict(env or {})
        self.url = f"http://127.0.0.1:{self.port}/"
        self.lines: list[tuple[float, str]] = []

    def __enter__(self):
        env = dict(os.environ, ATTN_CHECKPOINTS=str(self.root), ATTN_DEVICE="cpu", GRADIO_SERVER_NAME="127.0.0.1",
                   GRADIO_SERVER_PORT=str(self.port), GRADIO_ANALYTICS_ENABLED="False", PYTHONUNBUFFERED="1", **self.extra_env)
        self.t0 = time.perf_counter()
        self.proc = subprocess.Popen([sys.executable, "app.py"], cwd=self.cwd, env=env, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        threading.Thread(target=self._drain, daemon=True).start()
        return self

    def _drain(self):
        for raw in self.proc.stdout:
            self.lines.append((time.perf_counter() - self.t0, raw.decode("utf-8", "replace").rstrip()))

    def wait_ready(self, timeout: float = 180) -> float:
        """Seconds from the spawn until GET /gradio_api/info answers."""
        while time.perf_counter() - self.t0 < timeout:
            if self.proc.poll() is not None:
                raise RuntimeError("app.py exited:\n" + "\n".join(line for _, line in self.lines[-20:]))
            try:
                with urllib.request.urlopen(self.url + "gradio_api/info", timeout=5) as r:
                    if r.status == 200:
                        return time.perf_counter() - self.t0
            except OSError:
                time.sleep(0.1)
        raise TimeoutError(f"{self.url} did not answer within {timeout} s")

    def cpu_s(self) -> float:
        """CPU seconds the app has used (user + system)."""
        f = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")

    def errors(self) -> list[str]:
        return [line for _, line in self.lines if "Traceback" in line or line.startswith(("ERROR", "CRITICAL"))]

    def __exit__(self, *exc):
        self.proc.terminate()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)


@contextlib.contextmanager
def worktree(rev: str):
    """A detached git worktree of ``rev``, removed afterwards: an older tree to run beside this one."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "tree"
        subprocess.run(["git", "worktree", "add", "-q", "--detach", str(path), rev], cwd=ROOT, check=True)
        try:
            yield path
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(path)], cwd=ROOT, check=False)


def rss_kb(pid: int) -> dict:
    """VmRSS and VmHWM (the kernel's high-water mark) of ``pid`` in kB."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(("VmRSS:", "VmHWM:")):
            out[line[2:5].lower()] = int(line.split()[1])
    return out


class Browser:
    """The Gradio front end's event protocol (POST queue/join, then the SSE stream of queue/data), counting
    the bytes received: response bodies as they came off the socket, plus status lines and headers."""

    def __init__(self, url: str):
        import httpx
        self.http = httpx.Client(timeout=120, headers={"Accept-Encoding": "gzip, deflate, br"})
        self.url = url
        self.cfg = self.http.get(url + "config").json()
        self.comps = {c["id"]: c for c in self.cfg["components"]}
        self.deps = {d["api_name"]: d for d in self.cfg["dependencies"] if d.get("api_name")}
        self.session = "bench"

    @staticmethod
    def _head(r) -> int:
        return len(f"HTTP/1.1 {r.status_code} {r.reason_phrase}\r\n") + sum(len(k) + len(v) + 4
                                                                           for k, v in r.headers.raw) + 2

    def event(self, api_name: str, values: dict | None = None) -> dict:
        """Run one event with the components' defaults and ``values`` (by elem_id); its bytes and outputs. A
        value for one of the bar's controls first goes through the selection's builder, which every view
        reads, as a pick on the page does; its bytes and time are counted with the event's."""
        values = values or {}
        sel = self.deps.get("selection")
        if sel is None or api_name == "selection" or not any(
                self.comps[i]["props"].get("elem_id") in values for i in sel["inputs"]):
            return self._event(api_name, values)
        first, out = self._event("selection", values), self._event(api_name, values)
        return out | {"bytes": out["bytes"] + first["bytes"], "seconds": out["seconds"] + first["seconds"]}

    def _event(self, api_name: str, values: dict) -> dict:
        dep = self.deps[api_name]
        data = [values.get(self.comps[i]["props"].get("elem_id"), self.comps[i]["props"].get("value"))
                if self.comps[i]["type"] != "state" else None for i in dep["inputs"]]
        body = {"data": data, "fn_index": dep["id"], "trigger_id": (dep.get("targets") or [[None]])[0][0],
                "event_data": None, "session_hash": self.session}
        base, t0 = self.url + "gradio_api/queue/", time.perf_counter()
        r = self.http.post(base + "join", json=body)
        r.raise_for_status()
        n, done = r.num_bytes_downloaded + self._head(r), None
        with self.http.stream("GET", base + "data", params={"session_hash": self.session}) as s:
            buf, closed = b"", False
            for chunk in s.iter_bytes():
                *events, buf = (buf + chunk).split(b"\n\n")
                for raw in events:
                    msg = json.loads(raw[5:]) if raw.startswith(b"data:") else {}
                    done = msg if msg.get("msg") == "process_completed" else done
                    closed = closed or msg.get("msg") == "close_stream"
                if closed:
                    break
            n += s.num_bytes_downloaded + self._head(s)
        if done is None or not done.get("success", True):
            raise RuntimeError(f"{api_name} failed: {json.dumps(done)[:300]}")
        out = dict(zip([self.comps[i]["props"].get("elem_id") or str(i) for i in dep["outputs"]],
                       done["output"]["data"]))
        return {"bytes": n, "seconds": time.perf_counter() - t0, "outputs": out}

    def close(self):
        self.http.close()


# --------------------------------------------------------------------------- the app in process
def ms(fn) -> float:
    """Wall-clock milliseconds of ``fn()``."""
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1e3


@dataclass
class Event:
    ms: float       # wall clock, every frame
    cpu_ms: float   # this process's CPU time
    bytes: int      # the JSON of every frame's data
    frames: int


class InProcessApp:
    """The app as ``python app.py`` builds it (every model of ``cfg.app_root``, warmed), its events run the
    way the server runs them: ``Blocks.process_api`` once per frame, no HTTP, no queue."""

    def __init__(self, cfg: Config):
        import asyncio

        import app
        from ui import calls
        from ui.present import views
        self.demo = app.build_app(cfg.app_root, "cpu", warm=False)
        self.key = next(k for k, r in calls.REGISTRIES.items() if r is self.demo.registry)
        views.warm_up(self.key)
        self.fns = {}
        for f in self.demo.fns.values():
            self.fns.setdefault(f.api_name, f)
        self.loop = asyncio.new_event_loop()

    def session(self):
        from gradio.state_holder import SessionState
        return SessionState(self.demo)

    def inputs(self, api: str, values: dict) -> list:
        """``api``'s inputs: ``values`` by elem_id, else each component's default."""
        return [values.get(c.elem_id, getattr(c, "value", None)) for c in self.fns[api].inputs]

    def event(self, state, api: str, values: dict) -> Event:
        """One event in ``state``'s session; a value for one of the bar's controls first goes through the
        selection's builder (as Browser.event), counted with it."""
        sel = self.fns.get("selection")
        if sel is None or api == "selection" or not any(c.elem_id in values for c in sel.inputs):
            return self._event(state, api, values)
        first, ev = self._event(state, "selection", values), self._event(state, api, values)
        return Event(ms=ev.ms + first.ms, cpu_ms=ev.cpu_ms + first.cpu_ms, bytes=ev.bytes + first.bytes,
                     frames=ev.frames)

    def _event(self, state, api: str, values: dict) -> Event:
        fn, args, it, size, frames = self.fns[api], self.inputs(api, values), None, 0, 0
        c0, t0 = time.process_time(), time.perf_counter()
        while True:
            out = self.loop.run_until_complete(self.demo.process_api(fn, args, state=state, iterator=it,
                                                                     session_hash="b", event_id="e"))
            size, frames, it = size + len(json.dumps(out["data"])), frames + 1, out["iterator"]
            if not out["is_generating"]:
                return Event(ms=(time.perf_counter() - t0) * 1e3, cpu_ms=(time.process_time() - c0) * 1e3,
                             bytes=size, frames=frames)

    def close(self):
        self.loop.close()


# --------------------------------------------------------------------------- results
def figure(key: str, label: str, value: float, unit: str, op: str | None = None, limit: float | None = None) -> dict:
    """One line of the table; with ``op`` ("<=" or ">=") and ``limit`` it is judged against the target."""
    ok = None if op is None or value != value else bool(value <= limit if op == "<=" else value >= limit)
    return {"key": key, "label": label, "value": round(float(value), 4), "unit": unit,
            "target": f"{'≤' if op == '<=' else '≥'} {limit:g} {unit}".replace(" x", "×").strip() if op else None,
            "pass": ok}


def others_cpu(seconds: float = 1.0) -> float:
    """Cores' worth of CPU that other processes used over ``seconds`` while this one slept."""
    def busy():
        f = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        return sum(f) - f[3] - f[4]
    b0 = busy()
    time.sleep(seconds)
    return round((busy() - b0) / os.sysconf("SC_CLK_TCK") / seconds, 2)


def machine() -> str:
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    return (f"{cpu}, {len(os.sched_getaffinity(0))} cores, {platform.system()} {platform.release()}; "
            f"Python {platform.python_version()}, torch {torch.__version__}")


def command() -> str:
    mod = Path(sys.argv[0]).stem
    return " ".join(["python -m", "bench" if mod == "__main__" else f"bench.{mod}", *sys.argv[1:]])


def run_one(name: str, run, cfg: Config) -> dict:
    """Run one benchmark: its entry with the load around it."""
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    torch.manual_seed(0)
    before, others, t0 = [round(x, 2) for x in os.getloadavg()], others_cpu(), time.perf_counter()
    e = run(cfg)
    e.update(bench=name, seconds=round(time.perf_counter() - t0, 1), load_average_before=before,
             load_average_after=[round(x, 2) for x in os.getloadavg()], others_cpu_before=others,
             date=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), command=command(),
             machine=machine(), threads=torch.get_num_threads(), quick=cfg.quick, notes=cfg.notes)
    return e


def entry(figures: list[dict], **details) -> dict:
    return {"figures": figures, "details": details}


def fmt(f: dict) -> str:
    v, u = f["value"], f["unit"]
    return {"x": f"{v:.2f}×", "%": f"{v:+.1f} %", "ms": f"{v:.1f} ms" if v >= 10 else f"{v:.2f} ms"}.get(
        u, f"{v:g} {u}".strip())


def show(e: dict) -> None:
    print(f"\n== {e['bench']} ({e['date']}; load average {e['load_average_before']} → {e['load_average_after']}; "
          f"other processes {e['others_cpu_before']} cores)")
    for f in e["figures"]:
        verdict = "" if f["pass"] is None else ("pass" if f["pass"] else "FAIL")
        print(f"  {f['label']:<70} {fmt(f):>12}  {f['target'] or '':<12} {verdict}")
    for n in e["notes"]:
        print("  note:", n)


def save(entries: dict[str, dict]) -> None:
    """Merge ``entries`` into results.json and rewrite RESULTS.md."""
    from . import BENCHES
    try:
        doc = json.loads(RESULTS_JSON.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        doc = {}
    benches = {**doc.get("benches", {}), **entries}
    doc = {"benches": {b.name: benches[b.name] for b in BENCHES if b.name in benches}}
    RESULTS_JSON.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    lines = ["# Benchmark results", "", "Written by `python -m bench` from `bench/results.json`. Wall-clock times "
             "on the machine of each run; judged ratios use the timing thread's CPU time (one torch thread), "
             "which other processes do not inflate. `others` is the CPU other processes used in the second "
             "before a benchmark started (in cores; the machine has 2).", "",
             "| Benchmark | Figure | Value | Target | Result |", "| --- | --- | --- | --- | --- |"]
    for name, e in doc["benches"].items():
        for f in e["figures"]:
            verdict = "—" if f["pass"] is None else ("**pass**" if f["pass"] else "**FAIL**")
            lines.append(f"| {name} | {f['label']} | {fmt(f)} | {f['target'] or '—'} | {verdict} |")
    lines += ["", "## Runs", ""]
    for name, e in doc["benches"].items():
        lines += [f"### {name}", "", f"- {e['date']}, `{e['command']}`{' (quick)' if e.get('quick') else ''}, "
                  f"{e['seconds']} s; {e['machine']}; {e.get('threads')} torch thread(s)",
                  f"- Load average (1/5/15 min) {e['load_average_before']} before, {e['load_average_after']} "
                  f"after; others {e.get('others_cpu_before')} cores"]
        lines += [f"- {k.capitalize()}: {e['details'][k]}" for k in ("model", "data", "method", "summary")
                  if k in e["details"]]
        lines += [f"- Note: {n}" for n in e["notes"]] + [""]
    RESULTS_MD.write_text("\n".join(lines).rstrip() + "\n", encoding="utf-8")


def standalone(name: str, run, argv=None, options: dict | None = None) -> int:
    """``python -m bench.<name>``: run one benchmark, print it, save it. ``options``: its own flags (flag →
    argparse keywords), handed to ``run`` as keyword arguments."""
    p = parser(f"python -m bench.{name}", sys.modules[run.__module__].__doc__)
    for flag, kw in (options or {}).items():
        p.add_argument(flag, **kw)
    args = p.parse_args(argv)
    own = {k: getattr(args, k) for k in (f.lstrip("-").replace("-", "_") for f in options or {})}
    e = run_one(name, lambda cfg: run(cfg, **own), config(args))
    show(e)
    if not args.no_save:
        save({name: e})
    return 0
