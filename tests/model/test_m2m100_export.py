"""Real trained weights, a second implementation: one of our shipped (pre-norm) checkpoints exported
into transformers' M2M100 layout, the Hugging Face class with our architecture (pre-norm, a final norm
per stack, ReLU, scaled and tied embeddings, sinusoidal positions). Its position table is replaced with
ours (M2M100 numbers positions from padding_idx + 1, and its frequencies differ). transformers then
reproduces our logits on 20 sentences."""
from pathlib import Path

import pytest
import torch

transformers = pytest.importorskip("transformers")  # a development requirement: the reference

from model.engine.decoding import greedy_batch  # noqa: E402
from model.families import load_checkpoint  # noqa: E402

SHIPPED = Path(__file__).resolve().parents[2] / "checkpoints" / "de-en"
SENTENCES = [
    "Ein Mann mit einem orangefarbenen Hut starrt auf etwas.", "Ein Boston Terrier läuft über saftig-grünes Gras.",
    "Ein Mädchen in einem Karateanzug bricht einen Stock mit einem Tritt.", "Fünf Leute in Winterjacken und mit Helmen.",
    "Leute Reparieren das Dach eines Hauses.", "Ein hell gekleideter Mann fotografiert eine Gruppe von Männern.",
    "Eine Gruppe von Menschen steht vor einem Iglu.", "Ein Junge in einem roten Trikot versucht, die Home Base zu "
    "erreichen.", "Ein Typ arbeitet an einem Gebäude.", "Ein Mann in einer Weste sitzt auf einem Stuhl.",
    "Zwei Hunde spielen im Schnee.", "Eine Frau liest ein Buch im Park.", "Drei Kinder springen in einen See.",
    "Ein Radfahrer fährt eine steile Straße hinunter.", "Ein älterer Mann verkauft Obst auf dem Markt.",
    "Zwei Frauen unterhalten sich an einem Tisch.", "Ein kleines Mädchen malt ein Bild.",
    "Ein Hund fängt einen Frisbee im Flug.", "Männer in orangefarbenen Westen arbeiten an der Straße.",
    "Eine Menschenmenge wartet auf den Zug."]


def to_m2m100(model):
    """Our Transformer as an M2M100ForConditionalGeneration with the same numbers."""
    from transformers import M2M100Config, M2M100ForConditionalGeneration
    cfg = model.cfg
    assert cfg.share_embeddings and cfg.tie_embeddings and cfg.norm_first and cfg.final_norm
    hf = M2M100ForConditionalGeneration(M2M100Config(
        vocab_size=cfg.tgt_vocab_size, d_model=cfg.d_model, encoder_layers=cfg.n_encoder_layers,
        decoder_layers=cfg.n_decoder_layers, encoder_attention_heads=cfg.n_heads, decoder_attention_heads=cfg.n_heads,
        encoder_ffn_dim=cfg.d_ff, decoder_ffn_dim=cfg.d_ff, activation_function=cfg.activation, scale_embedding=True,
        max_position_embeddings=cfg.max_len, pad_token_id=cfg.pad_id, bos_token_id=cfg.decoder_start_id,
        eos_token_id=cfg.eos_id, decoder_start_token_id=cfg.decoder_start_id, dropout=0.0, attention_dropout=0.0,
        activation_dropout=0.0, encoder_layerdrop=0.0, decoder_layerdrop=0.0, tie_word_embeddings=True)).eval()
    ours = model.state_dict()
    sd = {"model.shared.weight": ours["decoder.tok_embed.weight"], "lm_head.weight": ours["decoder.tok_embed.weight"],
          "model.encoder.embed_tokens.weight": ours["decoder.tok_embed.weight"],
          "model.decoder.embed_tokens.weight": ours["decoder.tok_embed.weight"]}
    names = {"norm_1": "self_attn_layer_norm", "ff.w_1": "fc1", "ff.w_2": "fc2", "w_o": "out_proj", "w_q": "q_proj"}
    for stack in ("encoder", "decoder"):
        last = "norm_2" if stack == "encoder" else "norm_3"
        for part in ("weight", "bias"):
            sd[f"model.{stack}.layer_norm.{part}"] = ours[f"{stack}.norm.{part}"]
        for key, t in ours.items():
            if not key.startswith(f"{stack}.layers."):
                continue
            new = key.replace(last, "final_layer_norm").replace("cross_attn", "encoder_attn")
            new = new.replace("norm_2", "encoder_attn_layer_norm")
            for a, b in names.items():
                new = new.replace(a, b)
            if ".w_kv." in new:
                k, v = t.chunk(2, 0)
                sd["model." + new.replace("w_kv", "k_proj")], sd["model." + new.replace("w_kv", "v_proj")] = k, v
            else:
                sd["model." + new] = t
    missing, unexpected = hf.load_state_dict(sd, strict=False)
    assert not unexpected and not [m for m in missing if "embed_positions" not in m], (missing, unexpected)
    # M2M100 numbers a sentence's positions from padding_idx + 1: put our table there
    for stack in (hf.model.encoder, hf.model.decoder):
        table = torch.zeros(cfg.pad_id + 1 + cfg.max_len + 2, cfg.d_model)
        table[cfg.pad_id + 1: cfg.pad_id + 1 + cfg.max_len] = model.encoder.pe
        stack.embed_positions.weights = table
    return hf


def test_transformers_m2m100_reproduces_our_logits_on_real_weights():
    torch.set_num_threads(1)
    lm = load_checkpoint(SHIPPED)
    hf = to_m2m100(lm.model)
    worst = 0.0
    with torch.inference_mode():
        for text in SENTENCES:  # one at a time: M2M100 gives <pad> no position, we do (no padding here)
            ids = [2] + lm.src_vocab.encode(lm.src_vocab.tokens(text, "de")) + [3]
            src = torch.tensor([ids])
            out = greedy_batch(lm.model, src, 40)[0]
            dec_in = torch.tensor([[lm.model.cfg.decoder_start_id] + out[:-1]])
            ours = lm.model(src, dec_in)
            theirs = hf(input_ids=src, decoder_input_ids=dec_in).logits
            torch.testing.assert_close(theirs, ours, atol=1e-5, rtol=1e-5)
            worst = max(worst, float((theirs - ours).abs().max()))
            assert len(out) > 3 and out[-1] == lm.model.cfg.eos_id  # a real translation, not noise
    assert worst < 1e-5
