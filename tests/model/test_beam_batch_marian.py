"""Batched decoding on a converted Marian model: <pad> as the decoder start, no source <bos>, </s> closing
the source. Each request of a batch equals its lone run (tokens, scores, step records, beam trace)."""
import pytest
import torch

pytest.importorskip("transformers")  # builds the stand-in OPUS-MT folder

from model.engine.batching import translate_many  # noqa: E402
from model.engine.decoding import DecodeOptions, translate  # noqa: E402
from model.families import load_checkpoint  # noqa: E402
from tests.model.test_marian import DE, PROBES, build_marian  # noqa: E402
from tests.model.test_serving_batching import assert_same_beam, assert_same_run  # noqa: E402


@pytest.fixture(scope="module")
def marian(tmp_path_factory):
    torch.set_num_threads(1)
    return load_checkpoint(build_marian(tmp_path_factory.mktemp("marian") / "opus-mt-de-en", eos_bias=2.0))


@pytest.mark.parametrize("opts", [DecodeOptions(beam=3, max_len=16), DecodeOptions(max_len=16),
                                  DecodeOptions(beam=4, max_len=16, record=False, trace=False, replace_unk=False)],
                         ids=["beam3-traced", "greedy-traced", "beam4-lean"])
def test_a_marian_batch_equals_each_request_alone(marian, opts):
    texts = [DE[0], PROBES[1], DE[3], PROBES[2]]
    alone = [translate(marian, t, opts) for t in texts]
    assert len({len(t.src_ids) for t in alone}) > 2 and alone[0].start_token == "<pad>"
    for a, b in zip(translate_many(marian, texts, opts), alone):
        assert_same_run(a, b)
        assert_same_beam(a, b)
