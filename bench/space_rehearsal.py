"""Rehearse what Hugging Face Spaces does with this repo, from a clean checkout, and time it.

``python -m bench.space_rehearsal`` clones the repo (committed files only) into a temporary folder,
builds a fresh virtual environment from ``requirements.txt`` alone plus ``gradio==<sdk_version>``,
starts ``python app.py`` with GRADIO_SERVER_NAME=0.0.0.0 on a free port (Spaces uses 7860;
``--port 7860`` asks for it), waits for ``/gradio_api/info``, and translates one sentence in every
direction through gradio_client. Prints and saves (bench/space_rehearsal.json) install time,
installed size and time to ready. It downloads packages, so it is not part of .ci/run.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .common import ROOT, free_port

SENTENCES = {"de": "Zwei Hunde spielen im Schnee.", "en": "A black dog runs on the beach.",
             "fr": "Un chien noir court sur la plage."}


def sdk_version() -> str:
    m = re.search(r"^sdk_version:\s*\"?([\w.]+)", (ROOT / "README.md").read_text(encoding="utf-8"), re.M)
    return m.group(1)


def folder_mb(path: Path) -> float:
    return round(sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 2**20, 1)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--keep", action="store_true", help="keep the temporary folder")
    args = p.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="space-rehearsal-"))
    repo, venv = work / "repo", work / "venv"
    out: dict = {"sdk_version": sdk_version()}
    subprocess.run(["git", "clone", "-q", str(ROOT), str(repo)], check=True)
    t0 = time.time()
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    py = venv / "bin" / "python"
    subprocess.run([str(py), "-m", "pip", "install", "-q", "-r", "requirements.txt", f"gradio=={out['sdk_version']}"],
                   cwd=repo, check=True)
    out["install_seconds"] = round(time.time() - t0, 1)
    out["venv_mb"] = folder_mb(venv)
    port = args.port or free_port()
    env = dict(os.environ, GRADIO_SERVER_NAME="0.0.0.0", GRADIO_SERVER_PORT=str(port))
    t1 = time.time()
    server = subprocess.Popen([str(py), "app.py"], cwd=repo, env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        out.update(drive(py, repo, port, t1))
    finally:
        server.terminate()
        server.wait(30)
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(out, indent=1))
    (ROOT / "bench" / "space_rehearsal.json").write_text(json.dumps(out, indent=1))
    return 0


def drive(py: Path, repo: Path, port: int, started: float) -> dict:
    """Wait for the server, then translate once per direction with the venv's own gradio_client."""
    script = f"""
import json, time, urllib.request
from gradio_client import Client
url = "http://127.0.0.1:{port}/"
for _ in range(1200):
    try:
        urllib.request.urlopen(url + "gradio_api/info", timeout=2); break
    except Exception:
        time.sleep(0.25)
ready = time.time()
c = Client(url, verbose=False)
res = {{}}
for m in c.predict(api_name="/models"):
    name = m["direction"]
    res[name] = c.predict({json.dumps(SENTENCES)}[name.split("-")[0]], name, 5, 100, api_name="/translate")["translation"]
print(json.dumps({{"ready": ready, "translations": res}}))
"""
    done = subprocess.run([str(py), "-c", script], cwd=repo, capture_output=True, text=True, check=True)
    got = json.loads(done.stdout.strip().splitlines()[-1])
    return {"seconds_to_ready": round(got["ready"] - started, 1), "translations": got["translations"]}


if __name__ == "__main__":
    raise SystemExit(main())
