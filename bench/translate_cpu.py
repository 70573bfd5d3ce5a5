"""Server CPU of one warm ``/translate``, an older tree against today's, side by side in one run.

Each tree runs ``python app.py`` on its own checkpoints folder (127.0.0.1), all of them at once, with the
result cache off (``ATTN_CACHE_MB=0``) so that every request is decoded. Once each server's start-up
warm-up has ended (its CPU time stops growing), one gradio_client per server sends the same N test
sentences (de-en, greedy, at most 100 tokens, full precision, as ``predict(text, "de-en", 1, 100,
api_name="/translate")``), the servers taking turns sentence by sentence (the order rotating), so that a
slow spell of this shared machine falls on all alike. A request's figure is its server's CPU time (user +
system, from /proc) over it, less what that server uses idle over the same wall time. R rounds; the
figure is the median over rounds of the mean per request. ``--base`` names the older commit (a git
worktree is made for it and removed afterwards); ``--trust`` adds today's server asked for the trust signals.
"""
from __future__ import annotations

import contextlib
import statistics
import time

from .common import ROOT, AppServer, entry, figure, sentences, standalone, worktree

BASE = "ed3d274"  # the tree where /translate last cost 97 ms of server CPU
N, ROUNDS = 30, 3


def cpu_rate(server: AppServer, seconds: float) -> float:
    """Cores' worth of CPU the server uses over ``seconds`` of wall time."""
    a = server.cpu_s()
    time.sleep(seconds)
    return (server.cpu_s() - a) / seconds


def settled(server: AppServer, timeout: float = 300) -> float:
    """Wait until the warm-up thread has finished (the server below a tenth of a core), then return the rate
    it keeps using while idle (Gradio's own loops): that is subtracted from the requests' time."""
    t0 = time.perf_counter()
    while cpu_rate(server, 2.0) > 0.1:
        if time.perf_counter() - t0 > timeout:
            raise TimeoutError("the server never went quiet")
    return cpu_rate(server, 10.0)


def one_request(server: AppServer, client, text: str, idle: float, extra: tuple) -> float:
    """Milliseconds of ``server``'s CPU for one /translate of ``text`` (its idle rate taken off)."""
    before, t0 = server.cpu_s(), time.perf_counter()
    out = client.predict(text, "de-en", 1, 100, *extra, api_name="/translate")
    assert out.get("output_tokens"), out
    return 1000 * (server.cpu_s() - before - idle * (time.perf_counter() - t0))


def run(cfg, base: str = BASE, trust: bool = False):
    from gradio_client import Client
    texts = sentences(cfg, "de", N)[1:] if not cfg.quick else sentences(cfg, "de", 8)[1:]
    with worktree(base) as old, contextlib.ExitStack() as stack:
        trees = {"old": (old, ()), "new": (ROOT, ())} | ({"new_trust": (ROOT, (None, True))} if trust else {})
        servers = {k: stack.enter_context(AppServer(tree / "checkpoints", env={"ATTN_CACHE_MB": "0"}, cwd=tree))
                   for k, (tree, _) in trees.items()}
        clients = {}
        for k, server in servers.items():
            server.wait_ready()
            clients[k] = Client(server.url, verbose=False)
            clients[k].predict(texts[0], "de-en", 1, 100, *trees[k][1], api_name="/translate")  # its first call
        idle = {k: settled(server) for k, server in servers.items()}
        keys, rounds = list(servers), {k: [] for k in servers}
        for r in range(1 if cfg.quick else cfg.reps or ROUNDS):
            ms = {k: [] for k in keys}
            for i, text in enumerate(texts):
                turn = (i + r) % len(keys)
                for k in keys[turn:] + keys[:turn]:
                    ms[k].append(one_request(servers[k], clients[k], text, idle[k], trees[k][1]))
            for k in keys:
                rounds[k].append(statistics.fmean(ms[k]))
    med = {k: statistics.median(v) for k, v in rounds.items()}
    figs = [figure("translate_cpu.old_ms", f"server CPU per warm /translate at {base} (median of rounds)",
                   med["old"], "ms"),
            figure("translate_cpu.new_ms", "server CPU per warm /translate today (median of rounds)", med["new"],
                   "ms", "<=", med["old"] * 1.05)]
    if trust:
        figs.append(figure("translate_cpu.trust_ms", "today, with trust=True (median of rounds)",
                           med["new_trust"], "ms"))
    return entry(figs, rounds_ms={k: [round(x, 1) for x in v] for k, v in rounds.items()}, requests=len(texts),
                 base=base, paired="servers side by side, taking turns sentence by sentence")


OPTIONS = {"--base": dict(default=BASE, help="the older commit to compare with"),
           "--trust": dict(action="store_true", help="also time today's server with trust=True")}

if __name__ == "__main__":
    raise SystemExit(standalone("translate_cpu", run, options=OPTIONS))
