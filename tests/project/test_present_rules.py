"""The presenters' rules, read from the source: a presenter takes the selection (or its head) whole, never
kind, layer and head as three parameters; nothing under ui/present/ reaches gradio, inside a function or
through another ui/ module; and a head's text ('cross L1 H2', 'cross.1.2') is written only by HeadRef
(model/engine/names.py) and the page's mirror of it (web/page/app.js). A panel of one kind's grid may be
labelled 'L0 H1' (a text that starts so names no kind: viz/ does, which imports no model code)."""
from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.project.test_boundaries import imported, module_imports, module_name

ROOT = Path(__file__).resolve().parents[2]
SPREAD = {"kind", "layer", "head"}


def spread_heads(path: Path) -> list[str]:
    """Functions (and lambdas) of ``path`` taking parameters named kind, layer and head together."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            a = node.args
            names = {p.arg for p in [*a.posonlyargs, *a.args, *a.kwonlyargs]}
            if SPREAD <= names:
                found.append(f"{getattr(node, 'name', 'lambda')}:{node.lineno}")
    return found


def gradio_paths(root: Path, package: str = "ui/present") -> dict[str, list[str]]:
    """For each module under ``package`` that reaches gradio, the import path that does (imports inside
    functions count, and so do ui/ modules it imports, however deep)."""
    files = {module_name(root, p): p for p in (root / "ui").rglob("*.py")}
    graph = {m: {d for d in module_imports(root, p, "ui") if d in files} for m, p in files.items()}
    for deps in graph.values():  # importing ui.x runs ui/__init__ first
        deps |= {".".join(d.split(".")[:i]) for d in set(deps) for i in range(1, d.count(".") + 1)} & set(files)
    bad = {}
    for start, path in files.items():
        if not str(path.relative_to(root)).startswith(package + "/"):
            continue
        seen, frontier = {start}, [[start]]
        while frontier and start not in bad:
            nxt = []
            for trail in frontier:
                if "gradio" in imported(files[trail[-1]]):
                    bad[start] = trail + ["gradio"]
                    break
                for dep in sorted(graph[trail[-1]] - seen):
                    seen.add(dep)
                    nxt.append(trail + [dep])
            frontier = nxt
    return bad


# '… L{layer} H{head}' after a kind (or any text), or '{kind}.{layer}.{head}' / '${kind}:${l}:${h}', in an
# f-string or a JS template
HEAD_TEXT = re.compile(r"(?<![`'\"])L\$?\{[^}]*\}\s*H\$?\{|\$?\{[^}]*\}[.:]\$?\{[^}]*\}[.:]\$?\{")


def _allowed_lines(path: Path) -> set[int]:
    """The lines of HeadRef itself (Python) or of the page's headLabel and headKey (JS)."""
    if path.suffix == ".js":
        return {i for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
                if re.match(r"\s*const head(Label|Key) =", line)}
    return {i for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
            if isinstance(node, ast.ClassDef) and node.name == "HeadRef"
            for i in range(node.lineno, node.end_lineno + 1)}


def heads_written(path: Path) -> list[int]:
    """Lines of ``path`` that write a head's text themselves."""
    allowed = _allowed_lines(path)
    return [i for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
            if HEAD_TEXT.search(line) and i not in allowed]


def _sources(root: Path) -> list[Path]:
    return [*(root / "ui").rglob("*.py"), *(root / "model").rglob("*.py"), *(root / "viz").rglob("*.py"),
            root / "app.py", *(root / "web" / "page").glob("*.js")]


def test_no_presenter_takes_kind_layer_and_head_apart():
    found = {str(p.relative_to(ROOT)): spread_heads(p) for p in (ROOT / "ui" / "present").rglob("*.py")}
    assert {k: v for k, v in found.items() if v} == {}


def test_no_presenter_reaches_gradio_even_through_another_ui_module():
    assert {m: " -> ".join(p) for m, p in gradio_paths(ROOT).items()} == {}


def test_a_head_is_written_only_by_headref():
    found = {str(p.relative_to(ROOT)): heads_written(p) for p in _sources(ROOT) if p.is_file()}
    assert {k: v for k, v in found.items() if v} == {}


def selection_guards(root: Path) -> list[str]:
    """``isinstance(…, Selection)`` outside ``Selection.held``, and index wrappers named ``clamp``, in ui/ and
    app.py: the selection and an index each have one normaliser (``Selection.held``, ``state.read_index``)."""
    found = []
    for p in [*(root / "ui").rglob("*.py"), root / "app.py"]:
        if not p.is_file():
            continue
        tree = ast.parse(p.read_text(encoding="utf-8"))
        held = {i for node in ast.walk(tree) if isinstance(node, ast.FunctionDef) and node.name == "held"
                for i in range(node.lineno, node.end_lineno + 1)}
        for node in ast.walk(tree):
            guard = (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "isinstance"
                     and len(node.args) == 2 and getattr(node.args[1], "id", None) == "Selection")
            if (guard and node.lineno not in held) or (isinstance(node, ast.FunctionDef) and node.name == "clamp"):
                found.append((str(p.relative_to(root)), node.lineno))
    return [f"{f}:{n}" for f, n in sorted(found)]


def test_one_normaliser_for_the_selection_and_one_for_an_index():
    assert selection_guards(ROOT) == []


def test_headref_reads_every_form_a_link_or_a_list_has_written():
    from model.engine.names import CROSS, DEC_SELF, HeadRef
    ref = HeadRef(CROSS, 1, 2)
    assert (str(ref), ref.key, tuple(ref)) == ("cross L1 H2", "cross.1.2", (CROSS, 1, 2))
    for old in ("cross L1 H2", "cross.1.2", "cross:1:2", "cross 1 2", "decoder.cross_attn L1 H2", ("cross", 1, 2)):
        assert HeadRef.parse(old) == ref
    assert HeadRef.parse(HeadRef(DEC_SELF, 0, 3).key) == HeadRef("dec", 0, 3)
    for bad in ("x", "cross L1", "bogus.1.2"):
        try:
            HeadRef.parse(bad)
        except ValueError as e:
            assert "write it like 'cross L1 H2'" in str(e)
        else:
            raise AssertionError(f"{bad!r} read as a head")


def test_the_rules_catch_each_violation(tmp_path):
    (tmp_path / "ui" / "present").mkdir(parents=True)
    for d in ("ui", "ui/present"):
        (tmp_path / d / "__init__.py").write_text("", encoding="utf-8")
    view = tmp_path / "ui" / "present" / "view.py"
    view.write_text("def fig(run, kind, layer, head):\n    pass\n\n"
                    "def draw(run, sel):\n    from ..widgets import box\n    return f'{sel.kind} L{sel.layer} H{sel.head}'\n",
                    encoding="utf-8")
    (tmp_path / "ui" / "widgets.py").write_text("from .parts import x\n", encoding="utf-8")
    (tmp_path / "ui" / "parts.py").write_text("def x():\n    import gradio as gr\n", encoding="utf-8")
    page = tmp_path / "app.js"
    page.write_text("const headKey = (k, l, h) => `${k}.${l}.${h}`;\nsel.value = `${kind}:${l}:${h}`;\n"
                    "panel.text = `L${l} H${h}`;\ntitle = `decoder self-attention L${l} H${h}`;\n", encoding="utf-8")
    assert spread_heads(view) == ["fig:1"]
    assert gradio_paths(tmp_path) == {"ui.present.view": ["ui.present.view", "ui.widgets", "ui.parts", "gradio"]}
    assert heads_written(view) == [6] and heads_written(page) == [2, 4]  # a kind-less panel label is not a head's
    (tmp_path / "ui" / "parts.py").write_text("def x():\n    pass\n", encoding="utf-8")
    assert gradio_paths(tmp_path) == {}
    (tmp_path / "ui" / "handler.py").write_text("def on(sel):\n    s = sel if isinstance(sel, Selection) else 0\n\n"
                                                "def clamp(v, n):\n    return v\n", encoding="utf-8")
    assert selection_guards(tmp_path) == ["ui/handler.py:2", "ui/handler.py:4"]
