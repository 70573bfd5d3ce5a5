"""Our SentencePiece model (spm.model) as the JSON that the page's encoder (page/spm.js) reads."""
from __future__ import annotations

from pathlib import Path


def spm_spec(path: Path) -> dict:
    """Every piece with its score and type, and the normaliser's switches, from the model proto."""
    from sentencepiece import sentencepiece_model_pb2 as pb
    proto = pb.ModelProto()
    proto.ParseFromString(Path(path).read_bytes())
    if proto.trainer_spec.model_type != pb.TrainerSpec.BPE:
        raise ValueError(f"{path}: the page encodes BPE models only")
    norm = proto.normalizer_spec
    if norm.name != "identity" or len(norm.precompiled_charsmap):
        raise ValueError(f"{path}: the page reproduces the identity normaliser only, not {norm.name!r}")
    return {"pieces": [[p.piece, p.score, int(p.type)] for p in proto.pieces],
            "add_dummy_prefix": norm.add_dummy_prefix, "remove_extra_whitespaces": norm.remove_extra_whitespaces,
            "escape_whitespaces": norm.escape_whitespaces, "byte_fallback": proto.trainer_spec.byte_fallback}
