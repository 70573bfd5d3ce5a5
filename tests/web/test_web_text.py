"""The page's detokenizer (web/page/text.js) against the engine's (SubwordVocab.to_text, Moses), in node:
every validation sentence of each target language, as the engine's pieces of it, turned back into text."""
from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from model.families.ours import VOCAB, find_checkpoints, load_vocabs
from web.sentencepiece_spec import spm_spec
from web.serve import ROOT, WEB, lines

NODE = shutil.which("node")
# one direction per target language: the page detokenizes a language the same way whatever the source
TARGETS = {}
for _folder in find_checkpoints(ROOT / "checkpoints"):
    TARGETS.setdefault(json.loads((_folder / "config.json").read_text())["tgt_lang"], _folder)

RUN = """import { readFileSync, writeFileSync } from "node:fs";
import { SentencePieceBPE } from "%(page)s/spm.js";
import { toText } from "%(page)s/text.js";
const job = JSON.parse(readFileSync(process.argv[2], "utf8"));
const spm = new SentencePieceBPE(job.spec);
writeFileSync(process.argv[3], JSON.stringify(job.cases.map((p) => toText(p, spm, job.lang))));
"""


def page_texts(spec: dict, lang: str, cases: list[list[str]]) -> list[str]:
    """text.js's toText of every case, run by node on the page's own modules."""
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        (tmp / "run.mjs").write_text(RUN % {"page": (WEB / "page").as_uri()}, encoding="utf-8")
        (tmp / "job.json").write_text(json.dumps({"spec": spec, "lang": lang, "cases": cases}), encoding="utf-8")
        subprocess.run([NODE, str(tmp / "run.mjs"), str(tmp / "job.json"), str(tmp / "out.json")], check=True,
                       timeout=600)
        return json.loads((tmp / "out.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize("lang", sorted(TARGETS))
def test_the_pages_detokenizer_is_the_engines(lang):
    if NODE is None:  # the web build needs node (npm ci) and CI installs it: missing is a failure
        pytest.fail("node is not installed (Debian: apt-get install -y nodejs npm)")
    folder = TARGETS[lang]
    vocab = load_vocabs(folder / VOCAB)[1]
    texts = lines("val", lang)
    cases = [vocab.tokens(t, lang) for t in texts]
    want = [vocab.to_text(p, lang) for p in cases]
    got = page_texts(spm_spec(folder / "spm.model"), lang, cases)
    differ = [(t, g, w) for t, g, w in zip(texts, got, want) if g != w]
    assert not differ, f"{len(differ)} of {len(texts)} differ, first: {differ[:3]}"
