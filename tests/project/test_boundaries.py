"""The layers' import rules: model/, viz/ and the presenters (ui/present/) never import gradio; viz/ never imports torch or model; the app
(app.py, ui/, and the engine, families and analysis wings) never reaches model.training, directly or through
other modules; model/'s wings import only downward (engine <- families <- analysis <- training); no import
circle among model's modules. Imports inside functions count too."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# What each wing of model/ may import besides itself.
WINGS = {"engine": set(), "families": {"engine"}, "analysis": {"engine", "families"},
         "training": {"engine", "families", "analysis"}}
EXCEPTIONS: set[tuple[str, str]] = set()  # (module prefix, import prefix) allowed across the wings: none


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
                                               ("bench", {"tests"}), ("ui/present", {"gradio"})])
def test_layers_import_only_what_they_may(package, forbidden):
    bad = {str(p.relative_to(ROOT)): sorted(imported(p) & forbidden) for p in (ROOT / package).rglob("*.py")}
    assert {k: v for k, v in bad.items() if v} == {}


def test_the_presenters_load_without_gradio():
    """Every module of ui/present/ imports, with everything it pulls in, and gradio is never loaded."""
    import subprocess
    import sys
    code = ("import importlib, pkgutil, sys\nimport ui.present\n"
            "names = [m.name for m in pkgutil.iter_modules(ui.present.__path__, 'ui.present.')]\n"
            "[importlib.import_module(n) for n in names]\n"
            "print(len(names), sorted(k for k in sys.modules if k.split('.')[0] == 'gradio'))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    n, loaded = out.stdout.strip().split(" ", 1)
    assert int(n) >= 13 and loaded == "[]"


def test_the_rule_catches_a_violation(tmp_path):
    (tmp_path / "viz").mkdir()
    f = tmp_path / "viz" / "x.py"
    f.write_text("import torch\nfrom gradio import Blocks\n", encoding="utf-8")
    assert {"torch", "gradio"} <= imported(f)


# --------------------------------------------------------------------------- dotted module graph

def module_name(root: Path, path: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_module(root: Path, dotted: str) -> bool:
    p = root.joinpath(*dotted.split("."))
    return p.with_suffix(".py").is_file() or (p / "__init__.py").is_file()


def module_imports(root: Path, path: Path, top: str) -> set[str]:
    """The modules of package ``top`` that ``path`` imports, as dotted names, anywhere in the file
    (inside functions too, where an import could hide a circle). ``from pkg import mod`` names ``pkg.mod``."""
    here = module_name(root, path)
    package = here if path.name == "__init__.py" else here.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(up + ([node.module] if node.module else []))
            subs = {f"{base}.{a.name}" for a in node.names if is_module(root, f"{base}.{a.name}")}
            found |= subs if len(subs) == len(node.names) else subs | {base}
    return {m for m in found if m == top or m.startswith(top + ".")} - {here}


def graph_of(root: Path, top: str = "model") -> dict[str, set[str]]:
    return {module_name(root, p): module_imports(root, p, top) for p in (root / top).rglob("*.py")}


def wing_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) >= 2 and parts[1] in WINGS else None


def wing_violations(graph: dict[str, set[str]]) -> list[str]:
    bad = []
    for mod, deps in sorted(graph.items()):
        wing = wing_of(mod)
        if wing is None:  # model/__init__ and the thin entry modules may use any wing
            continue
        for dep in sorted(deps):
            other = wing_of(dep)
            allowed = other in (WINGS[wing] | {wing}) or any(
                mod.startswith(a) and dep.startswith(b) for a, b in EXCEPTIONS)
            if not allowed:
                bad.append(f"{mod} -> {dep}")
    return bad


def test_model_wings_import_only_downward():
    graph = graph_of(ROOT)
    assert {"model.engine.decoding", "model.families.ours", "model.analysis.readouts",
            "model.training.train"} <= set(graph)
    assert "model.engine.loaded" in graph["model.engine.decoding"]  # the parser sees package imports
    assert wing_violations(graph) == []


def test_engine_imports_nothing_else_of_model():
    graph = graph_of(ROOT)
    engine = {m: d for m, d in graph.items() if m.startswith("model.engine")}
    assert len(engine) >= 15
    assert {m: sorted(d - set(engine)) for m, d in engine.items() if d - set(engine)} == {}


def test_ui_never_imports_training_and_viz_nothing_of_model():
    for pkg, forbidden in (("ui", "model.training"), ("viz", "model")):
        bad = {}
        for p in [*(ROOT / pkg).rglob("*.py"), *([ROOT / "app.py"] if pkg == "ui" else [])]:
            hits = sorted(m for m in module_imports(ROOT, p, "model") if m.startswith(forbidden))
            if hits:
                bad[str(p.relative_to(ROOT))] = hits
        assert bad == {}, f"{pkg} imports {forbidden}"


def app_graph(root: Path) -> dict[str, set[str]]:
    """Every module of model/ and ui/ and app.py, with the modules of both it imports. Importing a module
    runs its packages' __init__ first, so those count as imported too."""
    files = [*(root / "model").rglob("*.py"), *(root / "ui").rglob("*.py")]
    graph = {module_name(root, p): module_imports(root, p, "model") | module_imports(root, p, "ui") for p in files}
    if (root / "app.py").is_file():
        graph["app"] = module_imports(root, root / "app.py", "model") | module_imports(root, root / "app.py", "ui")
    for deps in graph.values():
        deps |= {".".join(d.split(".")[:i]) for d in set(deps) for i in range(1, d.count(".") + 1)}
    return graph


def path_to(graph: dict[str, set[str]], start: str, goal) -> list[str] | None:
    """The shortest import path from ``start`` to a module for which ``goal`` holds, or None."""
    seen, frontier = {start}, [[start]]
    while frontier:
        nxt = []
        for path in frontier:
            for dep in sorted(graph.get(path[-1], ())):
                if goal(dep):
                    return path + [dep]
                if dep not in seen:
                    seen.add(dep)
                    nxt.append(path + [dep])
        frontier = nxt
    return None


def app_roots(graph: dict[str, set[str]]) -> list[str]:
    return sorted(m for m in graph if m == "app" or m == "ui" or m.startswith("ui.")
                  or wing_of(m) in ("engine", "families", "analysis"))


def test_the_app_never_reaches_training_even_indirectly():
    graph = app_graph(ROOT)
    roots = app_roots(graph)
    assert {"app", "ui.calls", "ui.sections.analysis", "model.analysis.alignment.heads", "model.families"} <= set(roots)
    training = lambda m: m == "model.training" or m.startswith("model.training.")  # noqa: E731
    paths = {r: path_to(graph, r, training) for r in roots}
    assert {r: " -> ".join(p) for r, p in paths.items() if p} == {}


def _packages(tmp_path) -> None:
    """An empty project tree: the model wings and ui/ as packages."""
    for d in ("model/engine", "model/analysis", "model/training", "ui"):
        (tmp_path / d).mkdir(parents=True)
        (tmp_path / d / "__init__.py").write_text("", encoding="utf-8")
    (tmp_path / "model/__init__.py").write_text("", encoding="utf-8")


def test_the_walk_follows_indirect_imports(tmp_path):
    _packages(tmp_path)
    (tmp_path / "app.py").write_text("from ui import view\n", encoding="utf-8")
    (tmp_path / "ui/view.py").write_text("from model.analysis import deep\n", encoding="utf-8")
    (tmp_path / "model/analysis/deep.py").write_text("def f():\n    from model.training import fit\n",
                                                      encoding="utf-8")
    (tmp_path / "model/training/fit.py").write_text("", encoding="utf-8")
    graph = app_graph(tmp_path)
    goal = lambda m: m.startswith("model.training")  # noqa: E731
    assert path_to(graph, "app", goal) == ["app", "ui.view", "model.analysis.deep", "model.training"]
    assert "app" in app_roots(graph) and "model.training.fit" not in app_roots(graph)
    (tmp_path / "model/analysis/deep.py").write_text("", encoding="utf-8")
    assert path_to(app_graph(tmp_path), "app", goal) is None


def test_the_wing_rules_catch_violations_inside_functions(tmp_path):
    _packages(tmp_path)
    (tmp_path / "model/engine/core.py").write_text("def f():\n    from ..analysis import deep\n", encoding="utf-8")
    (tmp_path / "model/analysis/deep.py").write_text("from model.engine import core\n", encoding="utf-8")
    (tmp_path / "model/training/fit.py").write_text("import model.analysis.deep\n", encoding="utf-8")
    (tmp_path / "ui/view.py").write_text("def g():\n    from model.training import fit\n", encoding="utf-8")
    graph = graph_of(tmp_path)
    assert graph["model.engine.core"] == {"model.analysis.deep"}
    assert wing_violations(graph) == ["model.engine.core -> model.analysis.deep"]
    assert module_imports(tmp_path, tmp_path / "ui/view.py", "model") == {"model.training.fit"}
    assert find_cycle(graph) is not None


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
    # a package's __init__ runs before its modules: a module importing its own package's __init__
    # is no circle unless that __init__ imports it back, which the graph below still shows
    graph = graph_of(ROOT)
    assert {"model.engine.names", "model.engine.hooks", "model.engine.transformer", "model.engine.results",
            "model.engine.decoding", "model.analysis.readouts"} <= set(graph)
    assert "model.engine.decoding" in graph["model.analysis.readouts"]
    assert find_cycle(graph) is None, f"import circle: {' -> '.join(find_cycle(graph))}"


def test_the_circle_check_sees_imports_inside_functions(tmp_path):
    pkg = tmp_path / "model"
    pkg.mkdir()
    (pkg / "a.py").write_text("from .b import f\n", encoding="utf-8")
    (pkg / "b.py").write_text("def f():\n    from model import c\n", encoding="utf-8")
    (pkg / "c.py").write_text("def g():\n    import model.a\n", encoding="utf-8")
    graph = graph_of(tmp_path)
    assert graph == {"model.a": {"model.b"}, "model.b": {"model.c"}, "model.c": {"model.a"}}
    assert find_cycle(graph) in (["model.a", "model.b", "model.c", "model.a"],
                                 ["model.b", "model.c", "model.a", "model.b"],
                                 ["model.c", "model.a", "model.b", "model.c"])
    (pkg / "c.py").write_text("import numpy\n", encoding="utf-8")
    assert find_cycle(graph_of(tmp_path)) is None


def string_keyed_parts(path: Path) -> list[int]:
    """Lines where ``path`` reads or writes components through a ``.parts`` dict (``shell.parts["…"]``)."""
    return sorted({node.lineno for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
                   if isinstance(node, ast.Attribute) and node.attr == "parts"
                   and isinstance(node.value, ast.Name) and node.value.id == "shell"})


def test_sections_hand_on_typed_parts_never_a_dict_of_string_keys(tmp_path):
    """Each section's build returns a dataclass of its components: no module keeps them in one dict on the
    Shell, addressed by string keys."""
    shell = next(n for n in ast.parse((ROOT / "ui" / "sections" / "__init__.py").read_text(encoding="utf-8")).body
                 if isinstance(n, ast.ClassDef) and n.name == "Shell")
    assert "sel_state" in {f.target.id for f in shell.body if isinstance(f, ast.AnnAssign)}
    assert "parts" not in {f.target.id for f in shell.body if isinstance(f, ast.AnnAssign)}
    found = {str(p.relative_to(ROOT)): string_keyed_parts(p) for p in [*(ROOT / "ui").rglob("*.py"), ROOT / "app.py"]}
    assert {k: v for k, v in found.items() if v} == {}
    bad = tmp_path / "bad.py"
    bad.write_text('def build(shell):\n    shell.parts["pad_to"] = None\n', encoding="utf-8")
    assert string_keyed_parts(bad) == [2]


def test_one_device_rule_and_one_home_for_the_multi30k_folders(monkeypatch):
    """pick_device is defined once (the engine's), and the folders Multi30k is read from are written once
    (model/engine/corpus.py): the app's list is the shipped folder from there."""
    from model.engine import corpus
    from model.engine.device import pick_device
    from ui import calls
    defs, paths = [], []
    for p in [*(ROOT / "model").rglob("*.py"), *(ROOT / "ui").rglob("*.py"), ROOT / "app.py"]:
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef) and node.name == "pick_device":
                defs.append(str(p.relative_to(ROOT)))
            if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div) and \
                    getattr(node.right, "value", None) == "multi30k":
                paths.append(str(p.relative_to(ROOT)))
    assert defs == ["model/engine/device.py"]
    assert set(paths) == {"model/engine/corpus.py"}
    assert calls.DATA_DIRS == [corpus.SHIPPED_DIR] == [corpus.DATA_DIRS[0]]
    assert pick_device("auto", prefer_cuda=False) == "cpu" and pick_device("cuda:1") == "cuda:1"
    monkeypatch.setenv("ATTN_DEVICE", "cpu")
    assert calls.model_device() == "cpu"
