"""bench/gpu_check runs end to end (on the CPU here; the lead runs it with --device cuda) without spaCy inputs."""
from __future__ import annotations

import json

from bench import gpu_check
from tests.app_fixtures import make_checkpoint


def test_gpu_check_runs_on_cpu_with_random_sources(tmp_path):
    ck = make_checkpoint(tmp_path / "de-en", "de", "en")
    out = tmp_path / "gpu.json"
    assert gpu_check.main(["--checkpoint", str(ck), "--device", "cpu", "--sentences", "4", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    (m,) = report["models"]
    assert m["sources"] == "random ids" and m["sentences"] == 4
    assert m["max_abs_logit_diff_cpu_vs_device"] < 1e-5  # same device: the check itself adds no error
    assert m["max_abs_logit_diff_capture_vs_fused"] < 1e-4  # explicit softmax path agrees with SDPA
    assert m["hook_points_recorded"] > 0
    assert m["cached_equals_uncached_on_device"] is True
    assert m["bf16_train_step"]["grads_finite"] is True


def test_random_sources_are_seeded_and_inside_the_vocabulary(tmp_path):
    from model.families import load_checkpoint
    lm = load_checkpoint(make_checkpoint(tmp_path / "de-en", "de", "en"))
    a, b = gpu_check.random_sources(lm, 6), gpu_check.random_sources(lm, 6)
    assert a == b and len(a) == 6
    assert all(4 <= t < len(lm.src_vocab) for s in a for t in s[1:-1])
