"""Hugging Face Spaces: the README front matter parses and matches requirements.txt; app.py is Spaces-ready."""
from __future__ import annotations

import os
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


ZEROGPU_PYTHONS = {"3.10.13", "3.12.12"}
ZEROGPU_TORCH = {"2.8.0", "2.9.1", "2.10.0", "2.11.0"}


def front_matter(text: str) -> dict:
    """The YAML block between the leading '---' lines (flat keys, as Spaces uses)."""
    lines = text.lstrip("\ufeff").splitlines()
    assert lines and lines[0].strip() == "---", "README.md must start with a '---' front-matter block"
    end = next((i for i in range(1, len(lines)) if lines[i].strip() == "---"), None)
    assert end is not None, "the front-matter block is not closed by '---'"
    block = "\n".join(lines[1:end])
    try:
        import yaml
    except ImportError:  # a flat key: value parser is enough for this block
        out = {}
        for line in block.splitlines():
            if line.strip() and not line.lstrip().startswith("#"):
                key, _, value = line.partition(":")
                out[key.strip()] = value.strip().strip("\"'")
        return out
    data = yaml.safe_load(block)
    assert isinstance(data, dict), "front matter is not a mapping"
    return data


def pinned(requirements: str, package: str) -> str | None:
    for line in requirements.splitlines():
        m = re.match(rf"^\s*{re.escape(package)}\s*==\s*([\w.]+)", line, re.I)
        if m:
            return m.group(1)
    return None


def test_readme_front_matter_matches_requirements():
    meta = front_matter((ROOT / "README.md").read_text(encoding="utf-8"))
    gradio_pin = pinned((ROOT / "requirements.txt").read_text(encoding="utf-8"), "gradio")
    assert gradio_pin, "requirements.txt must pin gradio==X.Y.Z"
    assert meta.get("sdk") == "gradio"
    assert str(meta.get("sdk_version")) == gradio_pin
    assert re.fullmatch(r"\d+\.\d+\.\d+", str(meta["sdk_version"])), "sdk_version must be a full semver"
    assert meta.get("app_file") == "app.py" and (ROOT / "app.py").is_file()
    # ZeroGPU (the hardware a free account gets) runs only these Pythons and these torch releases
    assert str(meta.get("python_version")) in ZEROGPU_PYTHONS, "python_version must be quoted, e.g. \"3.12.12\""
    assert pinned((ROOT / "requirements.txt").read_text(encoding="utf-8"), "torch") in ZEROGPU_TORCH


def test_app_imports_spaces_before_torch():
    src = (ROOT / "app.py").read_text(encoding="utf-8")
    assert "spaces.GPU" in (ROOT / "ui" / "calls.py").read_text(encoding="utf-8")  # the model calls are wrapped there
    i_spaces = src.index("import spaces")
    for mod in ("import torch", "import gradio", "from ui", "from ui.sections"):
        assert src.index(mod) > i_spaces, f"{mod!r} comes before 'import spaces'"
    # the import is guarded so the app runs where `spaces` is absent
    before = [line.strip() for line in src[:i_spaces].splitlines() if line.strip()][-1]
    assert before.startswith("try:")


def test_no_file_over_10_mb():
    # never pushed: git's own folder, outputs, and the environments (.ci/run builds .ci-venv in the tree)
    skip = {".git", "runs", ".pytest_cache", "__pycache__", ".hypothesis", "test-artifacts", ".benchmarks",
            ".ci-venv", ".venv", "node_modules", "site"}
    big = []
    for folder, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if d not in skip]  # pruned, not walked and filtered
        for name in files:
            path = Path(folder) / name
            if path.is_file() and path.stat().st_size > 10 * 1024 * 1024:
                big.append(str(path.relative_to(ROOT)))
    assert not big, f"files over 10 MB need Git LFS on Spaces: {big}"


def _names(path: Path) -> set[str]:
    lines = [ln.split("#")[0].strip() for ln in path.read_text(encoding="utf-8").splitlines()]
    return {re.split(r"[<>=!~\[; ]", ln, maxsplit=1)[0].lower() for ln in lines if ln and not ln.startswith("-")}


def test_runtime_and_development_requirements_are_apart():
    """A Space installs requirements.txt alone: no test tools there; .ci/run installs the dev file on top."""
    runtime, dev = _names(ROOT / "requirements.txt"), _names(ROOT / "requirements-dev.txt")
    assert {"torch", "gradio", "plotly", "spacy", "sentencepiece", "sacremoses", "safetensors"} <= runtime
    assert not runtime & {"pytest", "hypothesis", "playwright"}
    assert {"pytest", "hypothesis", "playwright"} <= dev
    assert "-r requirements.txt" in (ROOT / "requirements-dev.txt").read_text(encoding="utf-8")
    assert "pip install -q -r requirements-dev.txt" in (ROOT / ".ci" / "run").read_text(encoding="utf-8")


def test_code_runs_on_every_zerogpu_python():
    """vermin (static) finds no syntax or library use newer than the oldest Python ZeroGPU offers (3.10)."""
    import subprocess
    import sys
    from importlib.metadata import entry_points
    # this interpreter's vermin, not whatever PATH finds (the suite may run from a venv not activated);
    # vermin has no __main__, so its console script's entry point is called the way the script would
    script = entry_points(group="console_scripts", name="vermin")
    assert script, "vermin is missing: pip install -r requirements-dev.txt"
    module, func = next(iter(script)).value.split(":")
    exe = [sys.executable, "-c", f"import sys; from {module} import {func}; sys.exit({func}())"]
    files = ["app.py", "ui", "model", "viz", "bench", "tests"]
    ok = subprocess.run([*exe, "-t=3.10-", "--violations", "--no-tips", *files], cwd=ROOT, capture_output=True,
                        text=True)
    assert ok.returncode == 0, ok.stdout[-2000:] + ok.stderr[-2000:]
    # the same check does fail where the code really needs more than the target (3.6 lacks
    # `from __future__ import annotations`), so a pass above means something
    strict = subprocess.run([*exe, "-t=3.6-", "--violations", "--no-tips", "model"], cwd=ROOT, capture_output=True,
                            text=True)
    assert strict.returncode != 0 and "__future__.annotations" in strict.stdout, strict.stdout[-500:] + strict.stderr
    assert sys.version_info[:2] in ((3, 10), (3, 11), (3, 12)), "CI runs a Python between ZeroGPU's two"
