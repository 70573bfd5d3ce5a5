"""The README and docs/: every relative link and #anchor resolves, every file and module they name in code
exists (so a move that leaves a page behind fails here), the README stays short, and the Python examples of
the engine page run on the shipped checkpoints."""
from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^(`{3,}|~{3,}).*?^\1[ \t]*$", re.M | re.S)
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\)")
README_WORDS = 1200  # "fits on a few screens": the rest belongs in docs/


def _prose(text: str) -> str:
    """The text without fenced code blocks or inline code, where a link is not a link."""
    return re.sub(r"`[^`\n]*`", "", FENCE.sub("", text))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lowercased, punctuation and symbols dropped, spaces to hyphens."""
    text = re.sub(r"[*_`]|\[([^\]]*)\]\([^)]*\)", lambda m: m.group(1) or "", heading.strip())
    return re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for line in FENCE.sub("", path.read_text(encoding="utf-8")).splitlines():
        m = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            base = slug(m.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            out.add(base if n == 0 else f"{base}-{n}")
    return out


def links(path: Path) -> list[str]:
    return [m.group(1) for m in LINK.finditer(_prose(path.read_text(encoding="utf-8")))]


def test_the_slugs_follow_githubs_rules():
    assert slug("Activation patching (Analysis → Two sentences)") == "activation-patching-analysis--two-sentences"
    assert slug("The real `spaces` package, rehearsed") == "the-real-spaces-package-rehearsed"
    assert slug("Post-norm models (OPUS-MT): what each view shows") == "post-norm-models-opus-mt-what-each-view-shows"


def test_the_readme_and_every_docs_page_are_there():
    names = {p.name for p in PAGES}
    assert {"README.md", "views.md", "analyses.md", "models.md", "hosting.md", "engine.md",
            "benchmarks.md"} <= names
    readme = links(ROOT / "README.md")
    for page in PAGES[1:]:
        assert f"docs/{page.name}" in readme, f"README does not link {page.name}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_relative_link_and_anchor_resolves(page):
    found = links(page)
    assert found or page.name != "README.md"
    bad = []
    for target in found:
        if re.match(r"[a-z][a-z0-9+.-]*:", target):   # http(s), mailto: not ours to check
            continue
        file, _, anchor = target.partition("#")
        dest = (page.parent / file).resolve() if file else page
        if not dest.is_relative_to(ROOT) or not dest.exists():
            bad.append(f"{target}: no such file")
        elif anchor and (dest.suffix != ".md" or anchor not in anchors(dest)):
            bad.append(f"{target}: no heading #{anchor} in {dest.name}")
    assert not bad, f"{page.name}: " + "; ".join(bad)


CODE_PATH = re.compile(r"(?:app\.py|(?:model|ui|viz|bench|tests|checkpoints|docs)/[\w./-]*)")
MODULE = re.compile(r"(?:model|bench)(?:\.[a-z_]+)+")
NOT_MODULES = {"model.safetensors", "model.bin"}  # file names


def _module_exists(dotted: str) -> bool:
    try:
        return importlib.util.find_spec(dotted) is not None
    except ModuleNotFoundError:
        return False


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_file_and_module_named_in_code_exists(page):
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    named = re.findall(r"`([^`\n]+)`", text)
    missing = [n for n in named if CODE_PATH.fullmatch(n) and not (ROOT / n).exists()]
    missing += [n for n in named if MODULE.fullmatch(n) and n not in NOT_MODULES and not _module_exists(n)]
    assert not missing, f"{page.name} names what the repository does not have: {missing}"


def test_the_readme_fits_on_a_few_screens():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert text.startswith("---\ntitle: Attention Explorer\n")   # the Space's front matter stays first
    assert len(_prose(text).split()) <= README_WORDS


def test_the_engine_pages_python_examples_run():
    text = (ROOT / "docs" / "engine.md").read_text(encoding="utf-8")
    blocks = re.findall(r"^```python\n(.*?)^```", text, re.M | re.S)
    assert len(blocks) >= 4
    # the blocks build on each other (the first loads the model), as a reader runs them
    script = "\n\n".join(blocks)
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "A dog runs in the snow." in done.stdout
