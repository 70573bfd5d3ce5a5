"""N app processes behind nginx with sticky sessions, when one process is not enough.

``python -m bench.replicas --replicas 2 --port 8080 [--checkpoints DIR]`` starts N ``python app.py``
on free loopback ports and Debian's nginx (``apt-get install nginx``) on ``--port``, and serves until
Ctrl-C. ``python -m bench.replicas --measure`` instead times 16 gradio_client users against one replica
and against two behind the proxy, and saves the figures (bench/results.json).

Gradio keeps each session's state (``gr.State``, the queue's event stream) in the process that served it,
so every request of a session must reach the same replica. nginx (open source) has no sticky-cookie
module; the same effect comes from hashing a cookie: a request without a ``route`` cookie is hashed by
its random request id, and the answer sets ``route`` to that id, so the session's later requests hash to
the same replica. Browsers keep the cookie; gradio_client keeps the cookies of its first answer for this
very purpose. ``ip_hash`` would also be sticky, but sends every visitor behind one address (a school's
NAT, or this loopback test) to one replica.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def nginx_conf(app_ports: list[int], port: int, work: Path) -> str:
    servers = "\n".join(f"    server 127.0.0.1:{p} max_fails=0;" for p in app_ports)
    temp = " ".join(f"{k}_temp_path {work / k};" for k in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
    user = "user root;\n" if os.geteuid() == 0 else ""
    return f"""{user}worker_processes 1;
pid {work / 'nginx.pid'};
error_log {work / 'error.log'} warn;
events {{ worker_connections 1024; }}
http {{
  {temp}
  log_format routed '$upstream_addr $cookie_route $request_uri $status';
  access_log {work / 'access.log'} routed;
  map $cookie_route $route_key {{ "" $request_id; default $cookie_route; }}
  upstream app {{
    hash $route_key consistent;
{servers}
  }}
  server {{
    listen 127.0.0.1:{port};
    client_max_body_size 20m;
    location / {{
      proxy_pass http://app;
      proxy_http_version 1.1;
      proxy_set_header Host $http_host;
      proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
      proxy_set_header Connection "";
      proxy_buffering off;            # the queue streams server-sent events
      proxy_read_timeout 600s;
      add_header Set-Cookie "route=$route_key; Path=/; HttpOnly; SameSite=Lax" always;
    }}
  }}
}}
"""


@dataclass
class Replicas:
    """``with Replicas(n, port, env) as r:`` N apps and nginx; ``r.url`` is the proxy."""
    n: int
    port: int = 0
    env: dict = field(default_factory=dict)
    work: Path | None = None
    app_ports: list[int] = field(default_factory=list)
    procs: list = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    def __enter__(self) -> "Replicas":
        nginx = shutil.which("nginx") or ("/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else None)
        if nginx is None:
            raise FileNotFoundError("nginx is not installed (Debian: apt-get install nginx)")
        self.work = Path(self.work or tempfile.mkdtemp(prefix="replicas-"))
        self.work.mkdir(parents=True, exist_ok=True)
        self.port = self.port or free_port()
        self.app_ports = [free_port() for _ in range(self.n)]
        try:
            for i, p in enumerate(self.app_ports):
                env = dict(os.environ, **self.env, GRADIO_SERVER_NAME="127.0.0.1", GRADIO_SERVER_PORT=str(p),
                           PYTHONUNBUFFERED="1")
                log = open(self.work / f"app{i}.log", "w")
                self.procs.append(subprocess.Popen([sys.executable, "app.py"], cwd=ROOT, env=env, stdout=log,
                                                   stderr=subprocess.STDOUT))
            conf = self.work / "nginx.conf"
            conf.write_text(nginx_conf(self.app_ports, self.port, self.work))
            self.procs.append(subprocess.Popen([nginx, "-c", str(conf), "-p", str(self.work), "-g", "daemon off;"],
                                               stdout=subprocess.DEVNULL, stderr=open(self.work / "nginx.out", "w")))
            for p in self.app_ports:
                wait_ready(f"http://127.0.0.1:{p}/", self.procs)
            wait_ready(self.url, self.procs)
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc) -> None:
        for proc in reversed(self.procs):
            proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()

    def routes(self) -> list[tuple[str, str]]:
        """(replica address, route cookie) of every proxied request, from nginx's access log."""
        lines = (self.work / "access.log").read_text().splitlines() if (self.work / "access.log").exists() else []
        return [tuple(line.split()[:2]) for line in lines if len(line.split()) >= 2]


def wait_ready(url: str, procs: list, timeout: float = 180) -> None:
    t0 = time.time()
    while time.time() - t0 < timeout:
        if any(p.poll() is not None for p in procs):
            raise RuntimeError("a replica or nginx exited while starting")
        try:
            with urllib.request.urlopen(url + "gradio_api/info", timeout=5) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.2)
    raise TimeoutError(f"{url} did not answer within {timeout} s")


def run(cfg) -> dict:
    """16 gradio_client users, /translate and /compare on different test sentences (bench.serving's
    load), against 1 and then 2 replicas behind the same nginx."""
    from gradio_client import Client

    from .common import entry, figure, sentences
    from .serving import Fresh, api_request, drive
    duration = 8.0 if cfg.quick else 25.0
    pool = {"de-en": sentences(cfg, "de", 1000), "en-de": sentences(cfg, "en", 1000)}
    out = {}
    for n in (1, 2):
        with Replicas(n, env={"ATTN_CHECKPOINTS": str(cfg.app_root), "ATTN_DEVICE": "cpu"}) as r:
            clients = [Client(r.url, verbose=False, download_files=False, httpx_kwargs={"timeout": 300})
                       for _ in range(16)]
            for u in range(16):  # warm-up: every client (and so every replica) once
                api_request(clients[u], {d: t[-5:] for d, t in pool.items()}, u, 0)
            time.sleep(2)
            fresh = Fresh({d: t[:-5] for d, t in pool.items()})
            out[n] = drive(16, duration, lambda u, k: api_request(clients[u], fresh, u, k))
            print(f"  {n} replica(s), 16 users: {out[n]}", flush=True)
    figures = [figure(f"replicas.r{n}.rps", f"{n} replica(s) behind nginx, 16 users: throughput", out[n]["rps"],
                      "req/s") for n in out]
    figures += [figure(f"replicas.r{n}.p95_s", f"{n} replica(s) behind nginx, 16 users: latency p95",
                       out[n]["p95_s"], "s") for n in out]
    figures.append(figure("replicas.gain", "2 replicas / 1 replica, throughput", out[2]["rps"] / out[1]["rps"], "x"))
    return entry(figures, model=f"`python app.py` x N serving {cfg.app_root.name}/ behind nginx (hashed route "
                 f"cookie)", method=f"16 gradio_client users, {duration:.0f} s, different sentences", results=out)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--replicas", type=int, default=2)
    p.add_argument("--port", type=int, default=8080)
    p.add_argument("--checkpoints", default="", help="checkpoint root (default: checkpoints/)")
    p.add_argument("--measure", action="store_true", help="time one replica against two, then exit "
                   "(the options after it are the benchmarks', e.g. --quick)")
    args, rest = p.parse_known_args(argv)
    if args.measure:
        from .common import standalone
        return standalone("replicas", run, rest)
    env = {"ATTN_CHECKPOINTS": args.checkpoints} if args.checkpoints else {}
    with Replicas(args.replicas, args.port, env) as r:
        print(f"{args.replicas} replicas on ports {r.app_ports} behind nginx at {r.url} (logs in {r.work})",
              flush=True)
        try:
            while all(proc.poll() is None for proc in r.procs):
                time.sleep(1)
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
