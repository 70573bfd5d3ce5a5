"""Shared pieces of the app benchmarks (server, payload, cold_start, load).

- Which checkpoints the app is benchmarked with (:func:`resolve_root`), in this order:
  ``--checkpoints DIR`` of a standalone run (``python -m bench.load --checkpoints DIR``) or
  ``$BENCH_CHECKPOINTS`` (the way to pass it to ``python -m bench``); ``--checkpoint DIR`` (a
  single checkpoint folder or a folder of them); ``$ATTN_CHECKPOINTS``; ``checkpoints/`` when it
  holds a model; ``/tmp/bench-ckpt`` (real-shaped models exported from the training runs with
  ``python -m model.train ... --export-only --out /tmp/bench-ckpt/SRC-TGT``).
- :class:`AppServer`: ``python app.py`` as a subprocess on 127.0.0.1 and a free port, its output
  drained and time-stamped, stopped by its own pid.
- :func:`rss_kb` / :class:`RssSampler`: resident memory of the server from ``/proc/PID/status``
  (VmRSS, and the kernel's high-water mark VmHWM), psutil not needed.
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections import deque
from pathlib import Path

from .common import (ROOT, BenchConfig, add_common_args, config_from_args, load_average, print_figures,
                     run_bench, save)

CHECKPOINTS_ENV = "BENCH_CHECKPOINTS"
FALLBACK_ROOT = Path("/tmp/bench-ckpt")
HOST = "127.0.0.1"  # the benchmarks only ever talk to this machine
APP_FILE = ROOT / "app.py"


# --------------------------------------------------------------------------- checkpoints
def _is_checkpoint(p: Path) -> bool:
    return (p / "config.json").is_file() and (p / "model.safetensors").is_file()


def has_models(root: Path) -> bool:
    root = Path(root)
    if not root.is_dir():
        return False
    if _is_checkpoint(root):
        return True
    return any(_is_checkpoint(c) for c in root.iterdir() if c.is_dir() and not c.name.startswith((".", "_")))


def resolve_root(cfg: BenchConfig) -> tuple[Path | None, str]:
    """(checkpoint root for the app, how it was chosen); (None, why) when there is none."""
    tried = []
    for value, how in ((os.environ.get(CHECKPOINTS_ENV), f"--checkpoints / ${CHECKPOINTS_ENV}"),
                       (cfg.checkpoint, "--checkpoint"),
                       (os.environ.get("ATTN_CHECKPOINTS"), "$ATTN_CHECKPOINTS")):
        if value:
            p = Path(value).expanduser()
            p = p if p.is_absolute() else (Path.cwd() / p)
            if has_models(p):
                return p.resolve(), how
            tried.append(f"{how} = {value} holds no checkpoint")
    shipped = ROOT / "checkpoints"
    if has_models(shipped):
        return shipped, "checkpoints/ (the shipped models)"
    tried.append("checkpoints/ holds no model")
    if has_models(FALLBACK_ROOT):
        return FALLBACK_ROOT, (f"{FALLBACK_ROOT} (checkpoints/ is empty: real-shaped models exported from the "
                               "training runs with --export-only)")
    tried.append(f"{FALLBACK_ROOT} holds no model")
    return None, "; ".join(tried)


def models_used(root: Path) -> list[dict]:
    """What is in the checkpoint folders the app will load (read from their config.json)."""
    root = Path(root)
    dirs = [root] if _is_checkpoint(root) else sorted(
        c for c in root.iterdir() if c.is_dir() and not c.name.startswith((".", "_")) and _is_checkpoint(c))
    out = []
    for d in dirs:
        try:
            c = json.loads((d / "config.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            out.append({"path": str(d), "error": "config.json unreadable"})
            continue
        m, tr = c.get("model", {}), c.get("training", {}) or {}
        out.append({"path": str(d), "direction": f"{c.get('src_lang')}-{c.get('tgt_lang')}",
                    "d_model": m.get("d_model"), "heads": m.get("n_heads"),
                    "layers": f"{m.get('n_encoder_layers')}+{m.get('n_decoder_layers')}", "d_ff": m.get("d_ff"),
                    "vocab": f"{m.get('src_vocab_size')}/{m.get('tgt_vocab_size')}",
                    "parameters": tr.get("parameters"), "averaged_epochs": tr.get("averaged_epochs"),
                    "updates": tr.get("updates"),
                    "bleu": (tr.get("bleu") or tr.get("test_bleu") or (c.get("metrics") or {}).get("bleu"))})
    return out


def models_line(models: list[dict]) -> str:
    parts = []
    for m in models:
        if "error" in m:
            parts.append(f"{m['path']} ({m['error']})")
            continue
        ep = m.get("averaged_epochs")
        parts.append(f"{m['direction']} from {m['path']} (d_model {m['d_model']}, {m['layers']} layers × "
                     f"{m['heads']} heads, d_ff {m['d_ff']}, vocab {m['vocab']}"
                     + (f", {m['parameters']:,} parameters" if m.get("parameters") else "")
                     + (f", averaged epochs {ep}" if ep else "") + ")")
    return "; ".join(parts)


def unavailable(cfg: BenchConfig, need_server: bool = False, need_module: str | None = None) -> str | None:
    if need_server and not APP_FILE.is_file():
        return f"{APP_FILE} not found"
    if need_module:
        import importlib.util
        if importlib.util.find_spec(need_module) is None:
            return f"{need_module} is not installed"
    root, why = resolve_root(cfg)
    if root is None:
        return (f"no checkpoints for the app ({why}); pass --checkpoints DIR or set ${CHECKPOINTS_ENV}, or export "
                f"models with `python -m model.train --src de --tgt en --export-only --work runs/de-en "
                f"--out {FALLBACK_ROOT}/de-en --no-bleu`")
    return None


# --------------------------------------------------------------------------- processes and memory
def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def _status_kb(pid: int) -> dict[str, int]:
    out = {}
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(("VmRSS:", "VmHWM:")):
                k, v = line.split(":", 1)
                out[k] = int(v.split()[0])
    except (OSError, ValueError, IndexError):
        pass
    return out


def _children(pid: int) -> list[int]:
    kids = []
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            try:
                kids += [int(x) for x in (task / "children").read_text().split()]
            except (OSError, ValueError):
                pass
    except OSError:
        pass
    return kids


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds used so far by ``pid`` (and its waited-for children), from /proc/PID/stat."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        ticks = sum(int(x) for x in fields[11:15])  # utime, stime, cutime, cstime
        return ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def rss_kb(pid: int) -> dict[str, int]:
    """VmRSS / VmHWM (kB) of ``pid``, plus the VmRSS of its descendant processes (if any)."""
    own = _status_kb(pid)
    desc, todo, seen = 0, _children(pid), set()
    while todo and len(seen) < 256:
        c = todo.pop()
        if c in seen:
            continue
        seen.add(c)
        desc += _status_kb(c).get("VmRSS", 0)
        todo += _children(c)
    return {"rss": own.get("VmRSS", 0), "hwm": own.get("VmHWM", 0), "children_rss": desc,
            "children": len(seen)}


class RssSampler:
    """Samples the server's VmRSS every ``interval`` s in a thread; ``mark()`` starts a new phase."""

    def __init__(self, pid: int, interval: float = 0.25, max_samples: int = 200_000):
        self.pid, self.interval, self.max_samples = pid, interval, max_samples
        self.samples: list[tuple[float, int]] = []   # (time, VmRSS + children kB)
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._loop, name="rss-sampler", daemon=True)
        self.t0 = time.perf_counter()

    def __enter__(self):
        self._t.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._t.join(timeout=5)

    def _loop(self):
        while not self._stop.is_set() and len(self.samples) < self.max_samples:
            r = rss_kb(self.pid)
            if r["rss"]:
                self.samples.append((time.perf_counter(), r["rss"] + r["children_rss"]))
            self._stop.wait(self.interval)

    def peak_kb(self, since: float = 0.0, until: float = float("inf")) -> int:
        xs = [v for t, v in self.samples if since <= t <= until]
        return max(xs) if xs else 0


class AppServer:
    """``python app.py`` on 127.0.0.1:<free port> with ``ATTN_CHECKPOINTS=root``; its output is drained
    by a thread and kept (time-stamped) for the report. Use as a context manager."""

    def __init__(self, root: Path, device: str = "cpu", port: int | None = None, extra_env: dict | None = None):
        self.root, self.device = Path(root), device
        self.port = port or free_port()
        self.url = f"http://{HOST}:{self.port}/"
        self.proc: subprocess.Popen | None = None
        self.lines: deque[tuple[float, str]] = deque(maxlen=4000)
        self.t_start = 0.0
        self.extra_env = extra_env or {}
        self._reader: threading.Thread | None = None

    def start(self) -> None:
        env = dict(os.environ)
        env.update({"ATTN_CHECKPOINTS": str(self.root), "GRADIO_SERVER_NAME": HOST,
                    "GRADIO_SERVER_PORT": str(self.port), "GRADIO_ANALYTICS_ENABLED": "False",
                    "PYTHONUNBUFFERED": "1"})
        if self.device and self.device != "auto":
            env["ATTN_DEVICE"] = self.device
        env.update(self.extra_env)
        self.t_start = time.perf_counter()
        self.proc = subprocess.Popen([sys.executable, str(APP_FILE)], cwd=str(ROOT), env=env,
                                     stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        self._reader = threading.Thread(target=self._drain, name="app-output", daemon=True)
        self._reader.start()

    def _drain(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for raw in self.proc.stdout:
            self.lines.append((round(time.perf_counter() - self.t_start, 3), raw.decode("utf-8", "replace").rstrip()))

    def wait_ready(self, timeout: float = 180.0, poll: float = 0.1) -> float:
        """Seconds from start until GET /gradio_api/info answers 200."""
        deadline = time.perf_counter() + timeout
        last = None
        while time.perf_counter() < deadline:
            if self.proc is None or self.proc.poll() is not None:
                raise RuntimeError(f"app.py exited with code {self.proc.returncode if self.proc else None}:\n"
                                   + self.tail())
            try:
                with urllib.request.urlopen(self.url + "gradio_api/info", timeout=5) as r:
                    if r.status == 200:
                        r.read()
                        return time.perf_counter() - self.t_start
            except Exception as e:  # not up yet
                last = e
            time.sleep(poll)
        raise TimeoutError(f"{self.url} did not answer /gradio_api/info within {timeout:.0f} s ({last}):\n"
                           + self.tail())

    def first_line(self, needle: str) -> float | None:
        for t, line in list(self.lines):
            if needle in line:
                return round(t, 3)
        return None

    def tail(self, n: int = 25) -> str:
        return "\n".join(line for _, line in list(self.lines)[-n:])

    def errors_logged(self) -> list[str]:
        return [line for _, line in list(self.lines) if "Traceback" in line or line.startswith(("ERROR", "CRITICAL"))]

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        if self._reader is not None:
            self._reader.join(timeout=5)

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop()


def load_note(cfg: BenchConfig, where: str = "at start") -> None:
    la = load_average()
    if la:
        n = (f"1/5/15-min load average {where}: {la[0]:.2f} / {la[1]:.2f} / {la[2]:.2f} on "
             f"{os.cpu_count()} cores (a lagging figure: it also counts the benchmarks that ran just before)")
        if n not in cfg.notes:
            cfg.notes.append(n)


# --------------------------------------------------------------------------- standalone runs
def standalone(name: str, module, argv=None) -> int:
    """``python -m bench.<name> [--checkpoints DIR] ...``: like :func:`bench.common.standalone`, plus
    ``--checkpoints`` (a folder of checkpoint folders, as the app's ``ATTN_CHECKPOINTS``)."""
    p = add_common_args(argparse.ArgumentParser(prog=f"python -m bench.{name}", description=module.__doc__,
                                                formatter_class=argparse.RawDescriptionHelpFormatter))
    p.add_argument("--checkpoints", default=None,
                   help=f"folder of checkpoint folders for the app (default: ${CHECKPOINTS_ENV}, --checkpoint, "
                        f"$ATTN_CHECKPOINTS, checkpoints/ when it has models, else {FALLBACK_ROOT})")
    args = p.parse_args(argv)
    if args.checkpoints:
        os.environ[CHECKPOINTS_ENV] = args.checkpoints
    cfg = config_from_args(args)
    reason = module.available(cfg) if hasattr(module, "available") else None
    if reason:
        print(f"skipped {name}: {reason}", file=sys.stderr)
        return 2
    e = run_bench(name, module.run, cfg)
    print_figures(e)
    if not args.no_save:
        save({name: e}, cfg, args.results, args.markdown)
        print(f"\nwrote {args.results} and {args.markdown}")
    return 0


def load_app(cfg: BenchConfig):
    """Import app.py and load its models as the server does: (app, reg_key, registry, direction, root, how)."""
    root, how = resolve_root(cfg)
    if root is None:
        raise SystemExit(f"error: {how}")
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    import app  # noqa: E402  (the app under test; imports gradio)
    from ui import calls

    load_note(cfg)
    app.demo = app.build_app(root, cfg.device, warm=False)  # the Blocks, for the benchmarks that drive its handlers
    reg = app.demo.registry
    reg_key = next(k for k, r in calls.REGISTRIES.items() if r is reg)
    if not reg.models:
        raise SystemExit(f"error: the app loaded no model from {root}: {reg.problems}")
    name = cfg.direction if cfg.direction in reg.models else reg.names[0]
    if name != cfg.direction:
        cfg.notes.append(f"direction {cfg.direction} not loaded; timed {name}")
    return app, reg_key, reg, name, root, how
