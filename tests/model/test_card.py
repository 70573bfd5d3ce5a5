"""The model-card writer on the tiny copy-task model: metrics, length penalty on val, card text."""
import json
import shutil

from model.families import load_checkpoint
from model.training.card import main as card_main


def test_card_writes_metrics_and_markdown(trained_copy, tmp_path):
    ckpt = tmp_path / "de-en"
    shutil.copytree(trained_copy["ckpt"], ckpt)
    assert card_main(["--checkpoint", str(ckpt), "--data", str(trained_copy["data"]), "--limit", "8",
                      "--workers", "1", "--beam", "3", "--lp-grid", "0.3,1.0"]) == 0
    m = json.loads((ckpt / "metrics.json").read_text())
    assert set(m["length_penalty_val_bleu"]) == {"0.3", "1.0"}
    assert m["length_penalty"] in (0.3, 1.0)
    test = m["bleu"]["test_2016_flickr"]
    assert set(test) == {"greedy", "greedy_no_unk_replacement", "beam3", "beam3_no_unk_replacement"}
    assert test["beam3"]["cased"]["bleu"] > 50  # the copy model copies
    assert "case:lc" in test["beam3"]["lowercased"]["signature"]
    lm = load_checkpoint(ckpt)
    assert lm.meta["length_penalty"] == m["length_penalty"]  # the CLIs and the app pick it up
    assert m["parameters"] == lm.model.num_parameters()
    card = (ckpt / "MODEL_CARD.md").read_text()
    assert "python -m model.train --src de --tgt en" in card and "never tuned on test" in card
    assert f"{test['beam3']['lowercased']['bleu']:.2f}" in card
