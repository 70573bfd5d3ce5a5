"""The shipped trust table: ``python -m model.trust`` reproduces it on a small fixed subset with the
shipped checkpoints, the table is the one its shipped per-item scores give, and each shipped
checkpoint's validation reference belongs to its weights."""
from __future__ import annotations

import json

import pytest

from model.analysis import trust_eval as te
from model.analysis import trust_set as ts
from model.families import load_checkpoint
from model.families.ours import find_checkpoints
from model.analysis.trust_signals import NUMERIC
from model.training.measure_trust import DOCS, ROOT, SCORES, TABLE, main, markdown_table, subset, tables

FIELDS = ("seq_logprob", "alti_source_share", "attn_eos", "attn_ign_src", "entropy_mean", "entropy_max",
          "repetition", "unfamiliar_share", "truncated", "stopped_early", "output_tokens")


@pytest.fixture(scope="module")
def shipped():
    items = ts.load_set()
    return items, te.load_scores(SCORES, items)


def test_the_set_is_whole_and_the_scores_cover_it(shipped):
    items, scored = shipped
    assert {it.direction for it in items} == set(ts.DIRECTIONS)
    for d in ts.DIRECTIONS:
        mine = [it for it in items if it.direction == d]
        cats = {c: sum(it.category == c for it in mine) for c in ("clean", "perturbed", "ood", "script")}
        assert cats == {"clean": ts.TEST_ITEMS, "perturbed": ts.TEST_ITEMS, "ood": 30, "script": 15}, d
    assert [(s.item.direction, s.item.id) for s in scored] == [(it.direction, it.id) for it in items]


def test_command_reproduces_the_shipped_scores_on_a_subset(shipped, tmp_path):
    items, scored = shipped
    assert main(["score", "--limit", "1", "--out", str(tmp_path)]) == 0
    fresh = te.load_scores(tmp_path / "scores.jsonl.gz", items)
    assert len(fresh) == 4 * len(ts.DIRECTIONS)  # one item of each category, every direction
    by_key = {(s.item.direction, s.item.id): s for s in scored}
    for s in fresh:
        old = by_key[s.item.direction, s.item.id]
        assert s.output == old.output and s.failure == old.failure, s.item.id
        assert s.chrf == pytest.approx(old.chrf, abs=1e-3)
        for f in FIELDS:
            assert getattr(s.signals, f) == pytest.approx(getattr(old.signals, f), abs=1e-4), (s.item.id, f)
    assert [s.item for s in fresh] == subset(items, 1)


def test_shipped_table_is_what_the_shipped_scores_give(shipped):
    _, scored = shipped
    table, natural = tables(scored, ts.DIRECTIONS)
    shipped_table = json.loads(TABLE.read_text())
    assert shipped_table["table"] == te.table_json(table)
    assert shipped_table["table_natural"] == te.table_json(natural)
    docs = DOCS.read_text(encoding="utf-8")
    assert markdown_table(table) in docs and markdown_table(natural) in docs


def test_shipped_references_belong_to_the_shipped_weights():
    """A retrained checkpoint needs ``python -m model.trust calibrate`` (and ``score``) again."""
    from model.analysis.trust_signals import load_reference
    paths = find_checkpoints(ROOT / "checkpoints")
    assert sorted(p.name for p in paths) == sorted(ts.DIRECTIONS)
    for path in paths:
        ref, why = load_reference(load_checkpoint(path))
        assert ref is not None, f"{path.name}: {why}"
        assert ref.n == te.VAL_SENTENCES and set(ref.measured) == set(NUMERIC), path.name
