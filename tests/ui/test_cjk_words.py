"""Words of text without spaces (Chinese): a word is a SentencePiece piece, and the views say so; long
pieces are cut in labels by display width and named whole on hover; the fonts include CJK ones."""
import io

import numpy as np
import pytest

from model.engine.vocab import UNSPACED_NOTE, has_unspaced, is_unspaced, piece_word_spans
from viz import attention as va
from viz.common import FONT_FAMILY, MAX_LABEL, message_figure, short
from model.engine.names import HeadRef

ZH = ["我今天没有时间，因为我必须工作。", "政府昨天宣布了新的税收。", "两只狗在雪地里玩耍！", "一个女孩跑过马路。",
      "这个人花4.50欧元买了3个苹果。", "孩子们在吃面包，他们很累。", "大房子在河边。", "请打开门好吗？"]


@pytest.fixture(scope="module")
def sp():
    import sentencepiece as spm
    out = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(ZH * 4), model_writer=out, vocab_size=100,
                                   character_coverage=1.0, minloglevel=2, hard_vocab_limit=False, num_threads=1)
    return spm.SentencePieceProcessor(model_proto=out.getvalue())


def test_a_chinese_word_is_a_piece(sp):
    pieces = sp.encode(ZH[0], out_type=str)
    assert sum(p.startswith("▁") for p in pieces) == 1  # one ▁ for the whole clause: ▁ alone cannot tell words
    spans = piece_word_spans(pieces, lambda t: False)
    # every piece its own word, except a bare ▁ that joins the piece after it
    expected = []
    for i, p in enumerate(pieces):
        if i and pieces[i - 1] == "▁":
            expected[-1].append(i)
        else:
            expected.append([i])
    assert spans == expected and len(spans) > 3
    assert [i for s in spans for i in s] == list(range(len(pieces)))


def test_digits_latin_words_and_specials_beside_chinese(sp):
    pieces = ["▁", "这个", "人", "花", "4.50", "欧元", "▁New", "York", "。", "</s>"]
    spans = piece_word_spans(pieces, lambda t: t == "</s>")
    assert spans == [[0, 1], [2], [3], [4], [5], [6, 7], [8], [9]]
    # text with spaces keeps its ▁ rule unchanged
    latin = ["▁Der", "▁Mann", "kauf", "t", "▁3", "▁Äpfel", "."]
    assert piece_word_spans(latin, lambda t: False) == [[0], [1, 2, 3], [4], [5, 6]]
    # Hangul is written with spaces: its words stay ▁-delimited
    assert piece_word_spans(["▁안녕", "하세요"], lambda t: False) == [[0, 1]]
    assert is_unspaced("中") and is_unspaced("。") and is_unspaced("ก") and not is_unspaced("한")
    assert has_unspaced(pieces) and not has_unspaced(latin)


def test_marian_vocab_joins_chinese_pieces_into_piece_words(sp):
    from model.families.marian import MarianVocab
    itos = ["</s>", "<unk>"] + [sp.id_to_piece(i) for i in range(3, sp.get_piece_size())] + ["<pad>"]
    vocab = MarianVocab(itos, sp.serialized_model_proto())
    tokens = vocab.tokens(ZH[1]) + ["</s>"]
    words = vocab.join(tokens)
    assert words[-1] == "</s>" and "".join(words[:-1]) == ZH[1]
    assert len(words) == len(vocab.word_spans(tokens)) > 3


def test_long_pieces_are_cut_by_display_width_and_named_whole_on_hover():
    zh, de = "这是一个非常非常长的中文词语片段", "Donaudampfschifffahrtsgesellschaft"
    assert short(zh).endswith("…") and len(short(zh)) == MAX_LABEL // 2  # a CJK character takes two columns
    assert short(de) == de[:MAX_LABEL - 1] + "…" and short("好的") == "好的"
    fig = va.single_head(np.full((2, 2), 0.5), [zh, "好"], [de, "好"], title="t")
    trace = fig.to_plotly_json()["data"][0]
    assert trace["customdata"][0][0] == [zh, de] and "customdata[0]" in trace["hovertemplate"]
    assert fig.layout.xaxis.ticktext[0].endswith("…")
    plain = va.single_head(np.full((2, 2), 0.5), ["我", "好"], ["我", "好"]).to_plotly_json()["data"][0]
    assert "customdata" not in plain  # nothing was cut: no string per cell


def test_fonts_render_chinese():
    from ui.style import CSS
    for stack in (FONT_FAMILY, CSS):
        assert "Noto Sans CJK SC" in stack and "PingFang SC" in stack and "Microsoft YaHei" in stack
    assert message_figure("你好").layout.font.family == FONT_FAMILY
    assert va.single_head(np.eye(2), ["我", "好"], ["我", "好"]).layout.font.family == FONT_FAMILY


def test_a_chinese_run_says_its_words_are_pieces(tmp_path, monkeypatch):
    pytest.importorskip("transformers")
    import tests.model.test_marian as tm
    from model.families import load_checkpoint
    from model.engine.decoding import DecodeOptions, translate
    from ui import present
    from ui.present import views
    from ui.state import Run
    monkeypatch.setattr(tm, "DE", ZH)  # the source side's SentencePiece model learns Chinese
    lm = load_checkpoint(tm.build_marian(tmp_path / "opus-mt-zh-en", layers=1, heads=2))
    tr = translate(lm, ZH[1], DecodeOptions(beam=1, max_len=8))
    run = Run.of(lm, "zh-en", tr)
    assert run.src_words[:-1] == [lm.src_vocab.sp.decode_pieces([tr.src_tokens[i] for i in s]).strip()
                                  for s in run.src_spans[:-1]]
    assert len(run.src_words) > 3 and "".join(run.src_words[:-1]) == ZH[1]
    assert UNSPACED_NOTE in present.run_notices(tr, [], lm)
    kv = views.kind_view(run, "encoder.self_attn", "words", lm)
    assert "Chinese has no spaces" in kv.caption
    for view in ("grid", "head", "mean"):
        title = views.attention_figure(run, HeadRef("encoder.self_attn", 0, 0), view, "words", lm).layout.title
        assert "words are SentencePiece pieces" in title.subtitle.text and "Chinese" not in title.text
    assert views.kind_view(run, "encoder.self_attn", "pieces", lm).caption == ""
