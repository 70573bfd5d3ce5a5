"""Two app processes behind nginx (bench/replicas.py): 32 gradio_client users, each with its own sentence
and its own session state, none lost, every answer its own user's, both replicas used."""
from __future__ import annotations

import shutil
import threading
import time
from collections import defaultdict
from pathlib import Path

import pytest
from gradio_client import Client

from bench.replicas import Replicas
from tests.app_fixtures import make_checkpoint, named

NGINX = shutil.which("nginx") or ("/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else None)
WORDS = ["Hund", "Katze", "Mann", "Frau", "Kind", "Ball", "Haus", "Baum"]

pytestmark = pytest.mark.skipif(NGINX is None, reason="nginx is not installed (Debian: apt-get install nginx; "
                                                      ".ci/run installs it)")


def test_two_replicas_keep_32_sessions_apart(tmp_path):
    root = tmp_path / "checkpoints"
    make_checkpoint(root / "de-en", "de", "en", seed=0)
    env = {"ATTN_CHECKPOINTS": str(root), "ATTN_DEVICE": "cpu", "ATTN_TORCH_THREADS": "1"}
    with Replicas(2, env=env, work=tmp_path / "work") as r:
        results, errors = {}, []
        # one client (one session) per user, made one after another: 32 config downloads at once on a
        # loaded 2-core machine outlast httpx's timeouts, which is not what this test is about
        clients = [Client(r.url, verbose=False, httpx_kwargs={"timeout": 120}) for _ in range(32)]

        def user(u: int) -> None:
            try:
                c = clients[u]
                text = f"Ein {WORDS[u % 8]} und ein {WORDS[(u // 8) % 8]} spielen {u}."
                out = named(c, r.url, c.predict(text, "de-en", "greedy", 4, 12, api_name="/translate_stream"))
                c.predict(api_name="/open_generation")  # reads the session's run: lost state = no run
                _, md, *_ = c.predict(2, api_name="/step_view")
                own = c.predict(text, "de-en", 1, 12, api_name="/translate")["output_tokens"]  # the same decode
                results[u] = (out["run_status"], out["translation"], md, own, c.cookies.get("route"))
            except Exception as e:  # reported below, with the user
                errors.append(f"user {u}: {type(e).__name__}: {e}")

        threads = [threading.Thread(target=user, args=(u,), daemon=True) for u in range(32)]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 400  # a lost session leaves its client waiting: fail, do not hang
        for t in threads:
            t.join(max(0.0, deadline - time.monotonic()))
        assert not errors, errors[:3]
        assert len(results) == 32, f"{32 - len(results)} user(s) never got their step view (sessions lost?)"
        for u, (status, translation, md, own, route) in results.items():
            assert status.startswith("✓") and translation.strip(), (u, status)
            # the step view reads this session's own run, held by the replica that made it
            assert f"Step 2 of 0–{len(own) - 1}**" in md and f"produces **{own[2]}**" in md, (u, md, own)
            assert route, u
        replicas_of = defaultdict(set)
        for addr, route in r.routes():
            if route != "-":
                replicas_of[route].add(addr)
        sessions = {route for *_, route in results.values()}
        assert sessions <= set(replicas_of) and len(sessions) == 32
        assert all(len(replicas_of[s]) == 1 for s in sessions)  # sticky: one replica per session
        used = {a for s in sessions for a in replicas_of[s]}
        assert used == {f"127.0.0.1:{p}" for p in r.app_ports}  # and both replicas served sessions
