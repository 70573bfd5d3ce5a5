"""One model lookup: every model call reads its model through calls.lm_for, which inside a ZeroGPU call
hands the call a CUDA copy, so that no GPU call runs the CPU weights. Read from the source (AST)."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
UI = sorted((ROOT / "ui").rglob("*.py"))
# presenters handed the Registry that read a model's tables (positional encodings, masks, a frame's label),
# never running it
TABLE_READS = {("ui/present/views.py", "masks_figure"), ("ui/present/views.py", "positional_figures"),
               ("ui/present/__init__.py", "run_bar"), ("ui/present/learn.py", "_info")}


def _is_model_call(dec) -> bool:
    f = dec.func if isinstance(dec, ast.Call) else dec
    return getattr(f, "attr", getattr(f, "id", None)) == "model_call"


def model_calls(path: Path) -> list[ast.FunctionDef]:
    return [n for n in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
            if isinstance(n, ast.FunctionDef) and any(_is_model_call(d) for d in n.decorator_list)]


def bypasses(fn: ast.AST) -> list[str]:
    """What in ``fn`` reads a model other than through lm_for: a registry's ``.models`` or REGISTRIES."""
    bad = []
    for node in ast.walk(fn):
        if isinstance(node, ast.Attribute) and node.attr == "models":
            bad.append(f"line {node.lineno}: .models")
        elif "REGISTRIES" in (getattr(node, "id", None), getattr(node, "attr", None)):
            bad.append(f"line {node.lineno}: REGISTRIES")
    return bad


def calls_lm_for(fn: ast.AST) -> bool:
    return any(isinstance(n, ast.Call) and getattr(n.func, "attr", getattr(n.func, "id", None)) == "lm_for"
               for n in ast.walk(fn))


def test_every_model_call_reads_its_model_through_lm_for():
    found = {f"{p.relative_to(ROOT)}:{fn.name}": fn for p in UI for fn in model_calls(p)}
    assert len(found) >= 15 and {"ui/align_heads.py:gpu_alignment_ranking", "ui/align_heads.py:gpu_sentence_ranking",
                                 "ui/present/trust.py:gpu_trust", "ui/calls.py:gpu_contrast"} <= set(found)
    assert {k: bypasses(fn) for k, fn in found.items() if bypasses(fn)} == {}
    assert sorted(k for k, fn in found.items() if not calls_lm_for(fn)) == []


def direct_reads(path: Path, root: Path = ROOT) -> list[tuple[str, str, int]]:
    """(file, function, line) of every ``….models[…]`` or ``….models.get(…)`` read in ``path``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    owner: dict[int, str] = {}
    for fn in ast.walk(tree):
        if isinstance(fn, ast.FunctionDef):
            for n in ast.walk(fn):
                owner[id(n)] = fn.name  # the innermost wins: ast.walk visits outer functions first
    out = []
    for node in ast.walk(tree):
        indexed = isinstance(node, ast.Subscript) and getattr(node.value, "attr", None) == "models"
        got = isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "get" \
            and getattr(node.func.value, "attr", None) == "models"
        if indexed or got:
            out.append((str(path.relative_to(root)), owner.get(id(node), "<module>"), node.lineno))
    return out


def test_the_app_reads_models_only_through_the_one_lookup():
    """Outside calls.py (which owns the lookup and the loading) no module of the app indexes a registry's
    models, except the listed presenters that read a model's tables."""
    reads = [r for p in [*UI, ROOT / "app.py"] if p.name != "calls.py" or p.parent.name != "ui"
             for r in direct_reads(p)]
    assert sorted({r for r in reads if r[:2] not in TABLE_READS}) == []
    assert {r[:2] for r in reads} <= TABLE_READS


def test_the_checks_catch_a_bypass(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("@calls.model_call(duration=60)\ndef gpu_x(reg_key, name):\n"
                   "    return run(calls.REGISTRIES[reg_key].models[name])\n\n"
                   "@model_call()\ndef gpu_y(reg_key, name):\n    return run(calls.lm_for(reg_key, name))\n\n"
                   "def view(shell, name):\n    return shell.reg.models.get(name)\n", encoding="utf-8")
    x, y = model_calls(bad)
    assert (x.name, y.name) == ("gpu_x", "gpu_y")
    assert sorted(bypasses(x)) == ["line 3: .models", "line 3: REGISTRIES"]
    assert not calls_lm_for(x) and calls_lm_for(y) and bypasses(y) == []
    assert sorted(r[1:] for r in direct_reads(bad, tmp_path)) == [("gpu_x", 3), ("view", 10)]
