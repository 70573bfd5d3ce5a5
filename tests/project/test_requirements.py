"""Every third-party module that the code imports is named by a requirements file, and the app's own imports
resolve from requirements.txt alone (what a Space installs). Read from the source with ``ast``, so a package
that this machine happens to have cannot stand in for one that the project forgot."""
from __future__ import annotations

import ast
import re
import sys
from functools import lru_cache
from importlib import metadata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("app.py", "tests", "bench", "model", "viz", "ui")
# Distributions whose import name is not their own name with "-" read as "_".
IMPORT_NAMES = {"pyyaml": "yaml", "pillow": "PIL", "protobuf": "google", "pytest-timeout": "pytest_timeout"}
# Modules we import that come with a named distribution, which requires them itself: a test below checks that
# against its installed metadata, so a release that drops one fails here rather than in the app.
COMES_WITH = {"gradio": {"gradio-client": "gradio_client", "huggingface-hub": "huggingface_hub",
                         "httpx": "httpx", "pyyaml": "yaml"}}
# Packages a test writes at run time (from the repository's own history), not installed ones.
MADE_BY_TESTS = {"old_engine"}


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_names(path: Path) -> set[str]:
    """The distribution names (normalized) of a requirements file, following ``-r`` includes."""
    names = set()
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if line.startswith(("-r ", "--requirement ")):
            names |= requirement_names(path.parent / line.split(None, 1)[1])
        elif line and not line.startswith("-"):
            names.add(normalize(re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", line).group()))
    return names


def provided_modules(distributions: set[str]) -> set[str]:
    """Top-level import names that installing these distributions provides."""
    mods = {IMPORT_NAMES.get(d, d.replace("-", "_")) for d in distributions}
    for dist, extra in COMES_WITH.items():
        if dist in distributions:
            mods |= set(extra.values())
    return mods


def first_party(root: Path) -> set[str]:
    """Our own top-level names: the repository's packages and modules."""
    return {p.stem for p in root.glob("*.py")} | {p.parent.name for p in root.glob("*/__init__.py")}


@lru_cache(maxsize=None)
def parsed(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), str(path))


@lru_cache(maxsize=None)
def imports_of(path: Path) -> tuple[tuple[str, bool], ...]:
    """(dotted module, optional) of every absolute import in a file, lazy ones inside functions too; optional:
    inside a ``try`` that catches the failure."""
    out = []

    def visit(node: ast.AST, guarded: bool) -> None:
        if isinstance(node, ast.Import):
            out.extend((a.name, guarded) for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.append((node.module, guarded))
            out.extend((f"{node.module}.{a.name}", guarded) for a in node.names)
        for field, value in ast.iter_fields(node):
            inside = guarded or (isinstance(node, ast.Try) and bool(node.handlers) and field == "body")
            for child in value if isinstance(value, list) else [value]:
                if isinstance(child, ast.AST):
                    visit(child, inside)

    visit(parsed(path), False)
    return tuple(out)


def python_files(root: Path, scanned=SCANNED) -> list[Path]:
    files = []
    for name in scanned:
        p = root / name
        files += [p] if p.is_file() else sorted(p.rglob("*.py")) if p.is_dir() else []
    return files


def third_party(root: Path, files) -> dict[str, set[str]]:
    """Top-level third-party module -> the files (relative) that import it."""
    ours, found = first_party(root), {}
    for f in files:
        for mod, _ in imports_of(f):
            top = mod.split(".")[0]
            if top not in ours and top not in sys.stdlib_module_names and top not in MADE_BY_TESTS:
                found.setdefault(top, set()).add(str(f.relative_to(root)))
    return found


def undeclared(root: Path) -> dict[str, set[str]]:
    """Third-party modules imported anywhere scanned that no requirements file provides."""
    declared = provided_modules(requirement_names(root / "requirements-dev.txt")
                                | requirement_names(root / "requirements.txt"))
    return {m: fs for m, fs in third_party(root, python_files(root)).items() if m not in declared}


def module_file(root: Path, dotted: str) -> Path | None:
    base = root.joinpath(*dotted.split("."))
    for p in (base.with_suffix(".py"), base / "__init__.py"):
        if p.is_file():
            return p
    return None


def app_closure(root: Path, start: str = "app.py") -> list[Path]:
    """The files that running the app imports: ``start`` and every first-party module reachable from it
    (each package's ``__init__`` on the way)."""
    ours, seen, todo = first_party(root), set(), [root / start]
    while todo:
        f = todo.pop()
        if f in seen:
            continue
        seen.add(f)
        pkg = ".".join(f.relative_to(root).with_suffix("").parts[:-1])
        for node in ast.walk(parsed(f)):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                parts = pkg.split(".") if pkg else []
                base = ".".join(parts[:len(parts) - node.level + 1] if node.level else [])
                mod = ".".join(x for x in (base, node.module or "") if x)
                names = [mod] + [f"{mod}.{a.name}" for a in node.names]
            for name in names:
                if name.split(".")[0] not in ours:
                    continue
                bits = name.split(".")
                todo += [p for i in range(1, len(bits) + 1) if (p := module_file(root, ".".join(bits[:i])))]
    return sorted(seen)


def app_undeclared(root: Path) -> dict[str, set[str]]:
    """Third-party modules the app imports unconditionally that requirements.txt alone does not provide."""
    declared = provided_modules(requirement_names(root / "requirements.txt"))
    ours, found = first_party(root), {}
    for f in app_closure(root):
        for mod, optional in imports_of(f):
            top = mod.split(".")[0]
            if optional or top in ours or top in sys.stdlib_module_names or top in declared:
                continue  # optional: a guarded import, as app.py's `spaces` (a Space installs its own)
            found.setdefault(top, set()).add(str(f.relative_to(root)))
    return found


# --------------------------------------------------------------------------- the repository itself

def test_every_imported_module_is_declared():
    assert undeclared(ROOT) == {}


def test_the_app_imports_only_what_requirements_txt_installs():
    closure = {str(p.relative_to(ROOT)) for p in app_closure(ROOT)}
    assert {"app.py", "ui/calls.py", "model/engine/transformer.py", "viz/attention.py"} <= closure
    assert not any(p.startswith(("tests/", "bench/")) for p in closure)
    assert app_undeclared(ROOT) == {}


def test_the_made_at_run_time_names_are_still_imported():
    """The allowance above is not stale: it names a module that a test really imports."""
    tops = {m.split(".")[0] for f in python_files(ROOT, ("tests",)) for m, _ in imports_of(f)}
    assert MADE_BY_TESTS <= tops


@pytest.mark.parametrize("dist", sorted(COMES_WITH))
def test_what_comes_with_a_distribution_is_among_its_own_requirements(dist):
    requires = {normalize(re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", r).group())
                for r in metadata.requires(dist) or [] if "extra ==" not in r}
    assert set(COMES_WITH[dist]) <= requires, f"{dist} no longer requires {set(COMES_WITH[dist]) - requires}"
    assert dist in requirement_names(ROOT / "requirements.txt")


# --------------------------------------------------------------------------- the checker, on made-up trees

def _tree(tmp_path: Path, files: dict[str, str], dev: str = "pytest\n", app: str = "numpy\n") -> Path:
    (tmp_path / "requirements.txt").write_text(app)
    (tmp_path / "requirements-dev.txt").write_text("-r requirements.txt\n" + dev)
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    return tmp_path


def test_an_undeclared_test_import_is_caught(tmp_path):
    """A test importing scipy that no requirements file names (as test_dynamics.py once did) is reported; the
    repository's own requirements files do not name it either."""
    root = _tree(tmp_path, {"tests/__init__.py": "", "tests/test_x.py": "import numpy\nimport pytest\n"
                            "from scipy.stats import kendalltau\nfrom tests import helpers\n",
                            "tests/helpers.py": "import json\n"})
    assert undeclared(root) == {"scipy": {"tests/test_x.py"}}
    for path in ROOT.glob("requirements*.txt"):  # the dev file includes the others
        (root / path.name).write_text(path.read_text())
    assert set(undeclared(root)) == {"scipy"}
    with open(root / "requirements-dev.txt", "a") as f:
        f.write("scipy>=1.11  # Kendall's tau\n")
    assert undeclared(root) == {}


def test_the_app_may_not_lean_on_a_dev_requirement(tmp_path):
    """A module the app reaches (through a relative import, lazily inside a function) that only
    requirements-dev.txt names is reported; a guarded import is not; neither is a test's import."""
    root = _tree(tmp_path, {
        "app.py": "import numpy\nfrom model import run\ntry:\n    import fancy_gpu\nexcept ImportError:\n"
                  "    fancy_gpu = None\n",
        "model/__init__.py": "", "model/run.py": "from . import helper\n",
        "model/helper.py": "def f():\n    import hypothesis\n    import yaml\n",
        "tests/__init__.py": "", "tests/test_y.py": "import pytest\nimport hypothesis\n"},
        dev="pytest\nhypothesis\n", app="numpy\ngradio\n")
    assert app_undeclared(root) == {"hypothesis": {"model/helper.py"}}
    assert set(undeclared(root)) == {"fancy_gpu"}  # declared nowhere, guarded or not


def test_distribution_names_map_to_import_names(tmp_path):
    (tmp_path / "r.txt").write_text("PyYAML>=6  # config\nsentencepiece>=0.2\nhuggingface_hub\n"
                                    "gradio==6.31.0\n--extra-index-url https://example.invalid\n\n")
    names = requirement_names(tmp_path / "r.txt")
    assert names == {"pyyaml", "sentencepiece", "huggingface-hub", "gradio"}
    assert {"yaml", "sentencepiece", "huggingface_hub", "gradio", "gradio_client", "httpx"} <= provided_modules(names)
