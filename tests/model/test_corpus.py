"""The corpus command (model/corpus/) on an embedded Ray with 2 CPUs and a tiny model: each analysis over a
small corpus equals the same analysis run in process without Ray; a replica that dies mid-run; a rerun
after an interruption; bad input refused before any work starts. One Ray for the whole module."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import ray

from model.analysis import trust_set as ts
from model.analysis.alignment.heads import rank_heads
from model.analysis.alignment.reference import parse_pharaoh
from model.analysis.decoderlens import decoder_lens
from model.analysis.readouts import average_head_profiles
from model.analysis.trust_eval import GREEDY
from model.analysis.trust_signals import NUMERIC, signals
from model.corpus.__main__ import main
from model.corpus.inputs import CorpusError
from model.corpus.run import ROOT, Interrupted, run_corpus
from model.corpus.shards import MANIFEST, SHARDS, read_shard
from model.engine.decoding import translate
from model.families import load_checkpoint
from tests.app_fixtures import SENTENCES, make_checkpoint

TOL = 1e-6          # a replica runs torch on fewer threads: float32 sums in another order
SHARD = 4           # 15 sentences: 4 shards, the last one short


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, object_store_memory=100 * 1024 ** 2, logging_level="WARNING",
             runtime_env={"env_vars": {"PYTHONPATH": str(ROOT)}})
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    d = tmp_path_factory.mktemp("corpus")
    ck = make_checkpoint(d / "ck", "de", "en")
    src, ref = SENTENCES["de"] * 3, SENTENCES["en"] * 3
    align = [" ".join(f"{i}-{i}" for i in range(3))] * len(src)   # in range for every sentence
    for name, lines in (("src.de", src), ("ref.en", ref), ("ref.align", align)):
        (d / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return {"dir": d, "ck": ck, "lm": load_checkpoint(ck), "src": src, "ref": ref, "align": align,
            "files": {"src": d / "src.de", "ref": d / "ref.en", "align": d / "ref.align"}}


def run(c, analysis, out, **kw):
    f = c["files"]
    return run_corpus(analysis, c["ck"], f["src"], c["dir"] / out, ref=f["ref"],
                      align=f["align"] if analysis == "alignment" else None, shard_size=SHARD, workers=2,
                      write=lambda line: None, **kw)


def close(a: float, b: float, tol: float = TOL) -> bool:
    return (math.isnan(a) and math.isnan(b)) or abs(a - b) <= tol


def test_profiles_equal_the_in_process_average(local_ray, corpus):
    rep = run(corpus, "profiles", "profiles")
    want = average_head_profiles(corpus["lm"], corpus["src"])
    got = {(h["kind"], h["layer"], h["head"]): h for h in rep.summary["heads"]}
    assert rep.summary["analysed"] == 15 and len(got) == len(want) == 24
    for r in want:
        h = got[(r.kind, r.layer, r.head)]
        assert all(close(h[s], r.stat(s)) for s in ("entropy", "mean_distance", "prev_token", "same_token",
                                                     "special_tokens", "max_weight")), r


def test_alignment_ranking_equals_rank_heads(local_ray, corpus):
    rep = run(corpus, "alignment", "alignment")
    want = rank_heads(corpus["lm"], corpus["src"], corpus["ref"], [parse_pharaoh(a) for a in corpus["align"]])
    got = rep.summary["ranking"]
    assert rep.summary["analysed"] == want.sentences and rep.summary["skipped"] == want.skipped
    assert [e["label"] for e in got] == [e.label for e in want.entries]
    for g, w in zip(got, want.entries):  # link counts are integers: the scores are equal exactly
        assert (g["output"]["aer"], g["shift"]["aer"], g["output"]["f1"]) == (w.output.aer, w.shift.aer,
                                                                                w.output.f1)


def test_trust_rows_and_calibration_equal_one_by_one(local_ray, corpus):
    rep = run(corpus, "trust", "trust")
    lm, rows = corpus["lm"], read_rows(corpus["dir"] / "trust")
    failures = []
    for i, (s, r) in enumerate(zip(corpus["src"], corpus["ref"])):
        tr = translate(lm, s, GREEDY)
        sig, c = signals(lm, tr), ts.chrf(tr.text, r)
        assert rows[i]["output"] == tr.text and close(rows[i]["chrf"], c)
        assert all(close(rows[i][n], float(getattr(sig, n))) for n in NUMERIC), i
        failures.append(ts.is_failure(c))
    assert rep.summary["failures"] == sum(failures)
    for cal in rep.summary["calibration"]:
        want = ts.auroc([ts_bad(cal["signal"], rows[i]) for i in range(15)], failures)
        assert close(cal["auroc"], want)


def ts_bad(name, row):
    from model.analysis.trust_signals import badness
    return badness(name, row[name])


def test_lens_curve_equals_decoder_lens_per_sentence(local_ray, corpus):
    rep = run(corpus, "lens", "lens")
    lm, rows = corpus["lm"], read_rows(corpus["dir"] / "lens")
    lens = [decoder_lens(lm, s) for s in corpus["src"]]
    outputs = [[l.translation.text for l in dl.layers] for dl in lens]
    assert [r["outputs"] for r in rows] == outputs
    for layer, point in enumerate(rep.summary["curve"]):
        same = sum(o[layer] == o[-1] for o in outputs) / len(outputs)
        chrf = sum(ts.chrf(o[layer], o[-1]) for o in outputs) / len(outputs)
        assert close(point["same_as_final"], same) and close(point["chrf_final"], chrf)


def test_a_marian_folder_runs_through_the_pool(local_ray, corpus):
    """Any family the app serves: an OPUS-MT (Marian) folder, DecoderLens per encoder layer as in process."""
    from tests.model.test_marian import DE, build_marian
    folder = build_marian(corpus["dir"] / "opus-mt-de-en")
    src = corpus["dir"] / "marian.de"
    src.write_text("\n".join(DE[:4]) + "\n", encoding="utf-8")
    rep = run_corpus("lens", folder, src, corpus["dir"] / "marian-lens", shard_size=2, workers=2,
                     write=lambda line: None)
    lm = load_checkpoint(folder)
    want = [[layer.translation.text for layer in decoder_lens(lm, s).layers] for s in DE[:4]]
    assert [r["outputs"] for r in read_rows(corpus["dir"] / "marian-lens")] == want
    assert rep.summary["analysed"] == 4 and len(rep.summary["curve"]) == lm.model.cfg.n_encoder_layers


def read_rows(out: Path) -> list[dict]:
    rows = [r for p in sorted((out / SHARDS).glob("*.parquet")) for r in read_shard(p)]
    return sorted(rows, key=lambda r: r["index"])


def test_a_replica_killed_mid_run_the_run_finishes_each_sentence_once(local_ray, corpus):
    marker = corpus["dir"] / "died"
    rep = run(corpus, "profiles", "killed", crash_marker=str(marker))
    assert marker.is_file()  # a replica did die (it wrote its pid there first)
    rows = read_rows(corpus["dir"] / "killed")
    assert [r["index"] for r in rows] == list(range(15))
    clean = json.loads((corpus["dir"] / "profiles" / "summary.json").read_text())
    assert rep.summary["heads"] == clean["heads"] and rep.summary["analysed"] == 15


def test_a_rerun_after_an_interruption_skips_finished_shards(local_ray, corpus):
    with pytest.raises(Interrupted):
        run(corpus, "lens", "resumed", interrupt_after=1)
    out = corpus["dir"] / "resumed"
    first = json.loads((out / MANIFEST).read_text())
    assert len(first["shards"]) == 1 and not first["finished"]
    done = out / SHARDS / f"{int(next(iter(first['shards']))):05d}.parquet"
    stamp = done.stat().st_mtime_ns
    rep = run(corpus, "lens", "resumed")
    assert (rep.shards_skipped, rep.shards_computed) == (1, 3)
    assert done.stat().st_mtime_ns == stamp  # the finished shard was not written again
    assert [r["index"] for r in read_rows(out)] == list(range(15))
    whole = json.loads((corpus["dir"] / "lens" / "summary.json").read_text())
    assert json.loads((out / "summary.json").read_text())["curve"] == whole["curve"]
    again = run(corpus, "lens", "resumed")
    assert (again.shards_skipped, again.shards_computed) == (4, 0)


# --------------------------------------------------------------------------- bad input, before any work


def bad(tmp_path, capsys, *args) -> str:
    out = tmp_path / "out"
    assert main([*args, "--out", str(out)]) == 2
    assert not out.exists()  # refused before any work: no folder, no Ray
    return capsys.readouterr().err


def test_an_empty_source_file_is_refused(tmp_path, capsys, corpus):
    (tmp_path / "empty.de").write_text("\n\n", encoding="utf-8")
    err = bad(tmp_path, capsys, "profiles", "--model", str(corpus["ck"]), "--src", str(tmp_path / "empty.de"))
    assert "source file" in err and "is empty" in err and "Traceback" not in err


def test_mismatched_source_and_reference_are_refused(tmp_path, capsys, corpus):
    (tmp_path / "short.en").write_text("one\ntwo\n", encoding="utf-8")
    err = bad(tmp_path, capsys, "trust", "--model", str(corpus["ck"]), "--src", str(corpus["files"]["src"]),
              "--ref", str(tmp_path / "short.en"))
    assert "the source has 15 lines but the reference file" in err and "has 2" in err


def test_a_model_that_cannot_load_is_refused(tmp_path, capsys, corpus):
    (tmp_path / "nomodel").mkdir()
    err = bad(tmp_path, capsys, "lens", "--model", str(tmp_path / "nomodel"), "--src", str(corpus["files"]["src"]))
    assert "the model cannot be loaded" in err and "Traceback" not in err


def test_alignment_without_its_inputs_is_refused(tmp_path, capsys, corpus):
    err = bad(tmp_path, capsys, "alignment", "--model", str(corpus["ck"]), "--src", str(corpus["files"]["src"]))
    assert "alignment needs --ref and --align" in err


def test_another_runs_folder_is_refused(corpus):
    out = corpus["dir"] / "other"
    out.mkdir()
    (out / MANIFEST).write_text(json.dumps({"identity": {"analysis": "trust"}, "shards": {}}), encoding="utf-8")
    with pytest.raises(CorpusError, match="holds the results of another run"):
        run(corpus, "lens", "other")


def test_progress_says_sentences_done_rate_and_time_left(monkeypatch):
    """The rate counts from the first sentence back, so the pool's start is not read as slowness."""
    from model.corpus import run as corpus_run
    times = iter([0.0, 30.0, 40.0])     # made, first sentence back at 30 s, 21 done at 40 s
    monkeypatch.setattr(corpus_run.time, "monotonic", lambda: next(times))
    lines = []
    p = corpus_run.Progress(100, 0, write=lines.append)
    p.add(1)
    p.add(20)
    assert lines == ["1/100 sentences (1.0 %), 0.0 sentences/s, time left not yet known",
                     "21/100 sentences (21.0 %), 2.0 sentences/s, about 40 s left"]
