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


@pytest.mark.parametrize("package,forbidden", [("model", {"gradio", "ui", "viz", "tests"}),
                                               ("viz", {"gradio", "torch", "model", "ui", "..", "tests"}),
                                               ("bench", {"tests"})])
def test_layers_import_only_what_they_may(package, forbidden):
    bad = {str(p.relative_to(ROOT)): sorted(imported(p) & forbidden) for p in (ROOT / package).glob("*.py")}
    assert {k: v for k, v in bad.items() if v} == {}


def test_the_rule_catches_a_violation(tmp_path):
    (tmp_path / "viz").mkdir()
    f = tmp_path / "viz" / "x.py"
    f.write_text("import torch\nfrom gradio import Blocks\n", encoding="utf-8")
    assert {"torch", "gradio"} <= imported(f)


def package_imports(pkg: Path) -> dict[str, set[str]]:
    """Module -> the modules of the same package it imports, anywhere in the file (inside functions
    too, where an import could hide a circle)."""
    own = {p.stem for p in pkg.glob("*.py")}
    graph = {}
    for path in pkg.glob("*.py"):
        deps = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                deps |= {a.name.split(".")[1] for a in node.names if a.name.startswith(pkg.name + ".")}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level == 0 and not (base == pkg.name or base.startswith(pkg.name + ".")):
                    continue
                if node.level > 1:
                    continue
                sub = base.split(".")[1] if node.level == 0 and "." in base else base if node.level else ""
                deps |= {sub.split(".")[0]} if sub else {a.name for a in node.names if a.name in own}
        graph[path.stem] = (deps & own) - {path.stem}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle as a path that returns to its start, or None."""
    state: dict[str, int] = {}  # 1 on the current path, 2 done

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [node, nxt] if nxt in path else [node, nxt]
            if nxt not in state and (found := visit(nxt, path + [node])):
                return found
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (found := visit(start, [])):
            return found
    return None


def test_model_has_no_import_circle():
    graph = package_imports(ROOT / "model")
    assert {"names", "hooks", "transformer", "results", "decoding", "readouts"} <= set(graph)
    assert "decoding" in graph["readouts"] and "analysis" in graph["results"]  # the parser sees package imports
    assert find_cycle(graph) is None, f"import circle: {' -> '.join(find_cycle(graph))}"


def test_the_circle_check_sees_imports_inside_functions(tmp_path):
    pkg = tmp_path / "model"
    pkg.mkdir()
    (pkg / "a.py").write_text("from .b import f\n", encoding="utf-8")
    (pkg / "b.py").write_text("def f():\n    from model import c\n", encoding="utf-8")
    (pkg / "c.py").write_text("def g():\n    import model.a\n", encoding="utf-8")
    graph = package_imports(pkg)
    assert graph == {"a": {"b"}, "b": {"c"}, "c": {"a"}}
    assert find_cycle(graph) in (["a", "b", "c", "a"], ["b", "c", "a", "b"], ["c", "a", "b", "c"])
    (pkg / "c.py").write_text("import numpy\n", encoding="utf-8")
    assert find_cycle(package_imports(pkg)) is None
