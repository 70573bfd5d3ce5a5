"""The app under the real ``spaces`` package (requirements-dev.txt pins it) with SPACES_ZERO_GPU=true,
against a loopback stand-in for ZeroGPU's control plane (tests/zerogpu_emulation/control_plane.py).

What it shows: the app starts; a real GPU function (attribution) is registered, so the start-up report is
sent; a GPU call goes through /schedule, /allow and /release; the CPU views keep working. On a machine
without CUDA the GPU call stops inside the forked worker, at the package's ``torch.init``
(``torch.Tensor([0]).cuda()``, after /allow): the call is released with fail=True and the client gets
a short error. With CUDA the call completes and is released with fail=False.
"""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from gradio_client import Client

from tests.app_fixtures import free_port, make_checkpoint, wait_ready
from tests.zerogpu_emulation.control_plane import ControlPlane

ROOT = Path(__file__).resolve().parents[2]
DE = "Zwei Hunde spielen im Schnee."


def real_spaces() -> bool:
    spec = importlib.util.find_spec("spaces")
    return spec is not None and "zerogpu_emulation" not in (spec.origin or "")


pytestmark = pytest.mark.skipif(not real_spaces(), reason="the real `spaces` package is not installed "
                                                          "(pip install -r requirements-dev.txt)")


@pytest.fixture(scope="module")
def zero(tmp_path_factory):
    root = tmp_path_factory.mktemp("checkpoints")
    make_checkpoint(root / "de-en", "de", "en", seed=0)
    work = tmp_path_factory.mktemp("zerogpu")
    cgroup = work / "cgroup"
    cgroup.write_text("0::/rehearsal\n")  # cgroup v2 form: the package sends the path to /schedule
    port = free_port()
    with ControlPlane() as cp:
        env = dict(os.environ, SPACES_ZERO_GPU="true", SPACES_ZERO_DEVICE_API_URL=cp.url,
                   ZEROGPU_PROC_SELF_CGROUP_PATH=str(cgroup), ZEROGPU_OFFLOAD_DIR=str(work / "offload"),
                   ATTN_CHECKPOINTS=str(root), GRADIO_SERVER_NAME="127.0.0.1", GRADIO_SERVER_PORT=str(port),
                   ATTN_TORCH_THREADS="1", PYTHONUNBUFFERED="1")
        env.pop("ATTN_GPU_CALLS", None)
        env.pop("ATTN_DEVICE", None)
        log = open(work / "server.log", "w")
        proc = subprocess.Popen([sys.executable, "app.py"], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_ready(f"http://127.0.0.1:{port}/", proc=proc)
            yield Client(f"http://127.0.0.1:{port}/", verbose=False), cp, work / "server.log"
        finally:
            proc.terminate()
            proc.wait(30)
            log.close()


def test_the_app_starts_and_reports_its_gpu_function(zero):
    client, cp, log = zero
    assert cp.paths()[:1] == ["/startup-report"], cp.paths()  # sent at launch: a GPU function is registered
    assert "No @spaces.GPU function detected" not in log.read_text()


def test_cpu_views_work_and_take_no_gpu(zero):
    client, cp, _ = zero
    before = len(cp.calls)
    out = client.predict(DE, "de-en", 1, 12, api_name="/translate")
    assert out["output_tokens"] and out["translation"].strip()
    assert len(cp.calls) == before  # the models stay on the Space's CPU: no GPU was asked for


def test_a_gpu_call_goes_through_schedule_allow_and_release(zero):
    client, cp, log = zero
    before = len(cp.calls)
    if torch.cuda.is_available():
        out = client.predict(DE, "de-en", 0, 8, api_name="/attribution")
        assert out["output_tokens"]
    else:
        with pytest.raises(Exception) as e:
            client.predict(DE, "de-en", 0, 8, api_name="/attribution")
        assert "attribution failed" in str(e.value) and "Traceback" not in str(e.value)
    calls = cp.calls[before:]
    assert [c.path for c in calls] == ["/schedule", "/allow", "/release"], calls
    schedule, allow, release = calls
    assert schedule.params["cgroupPath"] == "/rehearsal" and int(schedule.params["durationSeconds"]) == 60
    assert allow.params["allowToken"] == release.params["allowToken"] == "token-1"
    assert int(allow.params["pid"]) != os.getpid()  # the forked worker asked, not the server
    assert release.params["fail"] == str(not torch.cuda.is_available()).lower()
    if not torch.cuda.is_available():  # where a CPU-only machine stops: the worker's first CUDA touch
        text = log.read_text()
        assert "NVIDIA driver" in text or "CUDA" in text, text[-2000:]
    out = client.predict(DE, "de-en", 1, 12, api_name="/translate")  # the CPU views still work
    assert out["translation"].strip()
