"""SentencePiece models as the JSON that the page's encoders read: our BPE model (spm.model, page/spm.js)
and the unigram models of OPUS-MT (source.spm, target.spm, page/unigram.js)."""
from __future__ import annotations

from pathlib import Path


def _proto(path: Path):
    from sentencepiece import sentencepiece_model_pb2 as pb
    proto = pb.ModelProto()
    proto.ParseFromString(Path(path).read_bytes())
    return pb, proto


def _switches(proto) -> dict:
    norm = proto.normalizer_spec
    return {"add_dummy_prefix": norm.add_dummy_prefix, "remove_extra_whitespaces": norm.remove_extra_whitespaces,
            "escape_whitespaces": norm.escape_whitespaces, "byte_fallback": proto.trainer_spec.byte_fallback}


def spm_spec(path: Path) -> dict:
    """Every piece with its score and type, and the normaliser's switches, from the model proto."""
    pb, proto = _proto(path)
    if proto.trainer_spec.model_type != pb.TrainerSpec.BPE:
        raise ValueError(f"{path}: the page encodes BPE models only")
    norm = proto.normalizer_spec
    if norm.name != "identity" or len(norm.precompiled_charsmap):
        raise ValueError(f"{path}: the page reproduces the identity normaliser only, not {norm.name!r}")
    return {"pieces": [[p.piece, p.score, int(p.type)] for p in proto.pieces], **_switches(proto)}


def unigram_spec(path: Path) -> tuple[dict, bytes]:
    """(spec, character map) of a unigram model: every piece with its score and type, the normaliser's
    switches and the surface of <unk>; the normaliser's precompiled character map as its bytes (b'' for
    none), which the page reads as sentencepiece does (page/unigram.js CharsMap)."""
    pb, proto = _proto(path)
    if proto.trainer_spec.model_type != pb.TrainerSpec.UNIGRAM:
        raise ValueError(f"{path}: not a unigram SentencePiece model")
    if proto.trainer_spec.treat_whitespace_as_suffix:
        raise ValueError(f"{path}: the page reads models that mark a word's start, not its end")
    if len(proto.denormalizer_spec.precompiled_charsmap):
        raise ValueError(f"{path}: the page has no denormaliser ({proto.denormalizer_spec.name!r})")
    spec = {"pieces": [[p.piece, p.score, int(p.type)] for p in proto.pieces], **_switches(proto),
            "unk_surface": proto.trainer_spec.unk_surface, "normalizer": proto.normalizer_spec.name}
    return spec, bytes(proto.normalizer_spec.precompiled_charsmap)
