"""The corpus's files read and checked before any work starts: every problem a clear message."""
from __future__ import annotations

import gzip
import hashlib
from dataclasses import dataclass
from pathlib import Path

from model.analysis.alignment.reference import parse_pharaoh

from .analyses import ANALYSES, Sentence, needs


class CorpusError(ValueError):
    """Bad input to the corpus command; its message says what to fix."""


@dataclass(frozen=True)
class Corpus:
    sentences: tuple[Sentence, ...]
    files: dict            # "src"/"ref"/"align" -> {"path", "sha256", "lines"}


def read_lines(path, what: str) -> tuple[list[str], str]:
    """The lines of a text file (``.gz`` read as gzip) and its sha256."""
    p = Path(path)
    if not p.is_file():
        raise CorpusError(f"{what} file {p} does not exist")
    data = p.read_bytes()
    try:
        text = (gzip.decompress(data) if p.suffix == ".gz" else data).decode("utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise CorpusError(f"{what} file {p} cannot be read as UTF-8 text: {e}") from None
    lines = text.splitlines()
    if not any(line.strip() for line in lines):
        raise CorpusError(f"{what} file {p} is empty: there is nothing to analyse")
    return lines, hashlib.sha256(data).hexdigest()


def read_corpus(analysis: str, src, ref=None, align=None) -> Corpus:
    """The corpus of ``analysis``: ``src`` lines with their ``ref`` and ``align`` lines where given, each
    file checked (it exists, it is not empty, it has as many lines as the source)."""
    if analysis not in ANALYSES:
        raise CorpusError(f"unknown analysis {analysis!r}; choose one of {', '.join(ANALYSES)}")
    given = {"src": src, "ref": ref, "align": align}
    missing = [k for k in needs(analysis) if given[k] is None]
    if missing:
        raise CorpusError(f"{analysis} needs {' and '.join('--' + k for k in missing)}")
    lines, files = {}, {}
    for key, path in given.items():
        if path is None:
            continue
        lines[key], sha = read_lines(path, {"src": "source", "ref": "reference", "align": "alignment"}[key])
        files[key] = {"path": str(path), "sha256": sha, "lines": len(lines[key])}
    n = len(lines["src"])
    for key in ("ref", "align"):
        if key in lines and len(lines[key]) != n:
            raise CorpusError(f"the source has {n} lines but the {'reference' if key == 'ref' else 'alignment'} "
                              f"file {given[key]} has {len(lines[key])}: they must be line for line")
    if "align" in lines:
        for i, line in enumerate(lines["align"]):
            try:
                parse_pharaoh(line)
            except ValueError as e:
                raise CorpusError(f"alignment file {align}, line {i + 1}: {e}") from None
    sents = tuple(Sentence(i, s, lines["ref"][i] if "ref" in lines else None,
                           lines["align"][i] if "align" in lines else None) for i, s in enumerate(lines["src"]))
    return Corpus(sents, files)
