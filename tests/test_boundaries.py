"""The layers' import rules: model/ and viz/ never import gradio; viz/ never imports torch or model."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def imported(path: Path) -> set[str]:
    mods = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            mods |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            mods.add(node.module.split(".")[0])
        elif isinstance(node, ast.ImportFrom) and node.level > 0 and path.parent.name == "viz" and node.level > 1:
            mods.add("..")
    return mods


@pytest.mark.parametrize("package,forbidden", [("model", {"gradio", "ui", "viz"}),
                                               ("viz", {"gradio", "torch", "model", "ui", ".."})])
def test_layers_import_only_what_they_may(package, forbidden):
    bad = {str(p.relative_to(ROOT)): sorted(imported(p) & forbidden) for p in (ROOT / package).glob("*.py")}
    assert {k: v for k, v in bad.items() if v} == {}


def test_the_rule_catches_a_violation(tmp_path):
    (tmp_path / "viz").mkdir()
    f = tmp_path / "viz" / "x.py"
    f.write_text("import torch\nfrom gradio import Blocks\n", encoding="utf-8")
    assert {"torch", "gradio"} <= imported(f)
