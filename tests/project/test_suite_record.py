"""Each test run records its test durations beside the screenshots (test-artifacts/durations.json, or
$ARTIFACTS_DIR), slowest first, so the suite's budget is read from a file rather than guessed."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_a_run_writes_its_durations_slowest_first(tmp_path):
    (tmp_path / "test_pair.py").write_text(
        "import time\n\ndef test_quick():\n    pass\n\ndef test_slow():\n    time.sleep(0.3)\n", encoding="utf-8")
    env = dict(os.environ, ARTIFACTS_DIR=str(tmp_path / "artifacts"))
    # the project's conftest is loaded as a plugin, so the hook under test is the one every run uses
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "tests.conftest", "-p", "no:cacheprovider",
                           "-o", "addopts=", "-q", str(tmp_path / "test_pair.py"), "--rootdir", str(tmp_path)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    record = json.loads((tmp_path / "artifacts" / "durations.json").read_text(encoding="utf-8"))
    names = list(record["tests"])
    assert [n.split("::")[1] for n in names] == ["test_slow", "test_quick"]
    assert record["tests"][names[0]] >= 0.3  # the sleep is a floor, never a ceiling
    assert record["total_s"] >= record["tests"][names[0]]
    assert list(record["files"]) == [names[0].split("::")[0]]
