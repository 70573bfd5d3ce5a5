"""The names the engine gives its parts: the attention kinds and the hook-name resolver.

The network (transformer.py), the capture (hooks.py) and every readout name attention by a
:class:`Kind`; a value from the UI or the API becomes one through :meth:`Kind.of`, once, where it
enters. Hook names are built only by :func:`hook_name`.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum


class Kind(str, Enum):
    """One attention kind. A ``str`` (its value is the module path's tail), so it compares, hashes and
    serialises as the canonical string: ``Kind.CROSS == "decoder.cross_attn"``."""

    ENC_SELF = "encoder.self_attn"
    DEC_SELF = "decoder.self_attn"
    CROSS = "decoder.cross_attn"

    # the canonical string wherever a kind is printed (Python 3.12 formats a mixed-in Enum by name)
    __str__ = str.__str__
    __format__ = str.__format__

    @property
    def stack(self) -> str:
        """The part it lives in: 'encoder' or 'decoder'."""
        return self.value.split(".")[0]

    @property
    def module(self) -> str:
        """Its module in a layer: 'self_attn' or 'cross_attn'."""
        return self.value.split(".")[1]

    @classmethod
    def of(cls, value: "Kind | str") -> "Kind":
        """The kind named by ``value`` (a Kind, its canonical string or a short alias); ValueError otherwise."""
        if isinstance(value, cls):
            return value
        kind = _ALIASES.get(value, value)
        try:
            return cls(kind)
        except ValueError:
            raise ValueError(f"unknown attention kind {value!r}; expected one of {tuple(k.value for k in cls)}") \
                from None


ENC_SELF, DEC_SELF, CROSS = Kind.ENC_SELF, Kind.DEC_SELF, Kind.CROSS
ATTN_KINDS = (ENC_SELF, DEC_SELF, CROSS)
# the one table of short names (links, head labels like 'cross L1 H2', the API): read, never rewritten
SHORT_NAMES = {ENC_SELF: "enc", DEC_SELF: "dec", CROSS: "cross"}
SHORT_KINDS = {short: kind for kind, short in SHORT_NAMES.items()}
_ALIASES = {"encoder": ENC_SELF, "decoder": DEC_SELF, "self": DEC_SELF, **SHORT_KINDS}


# 'cross L1 H2' (the label), 'cross.1.2' (the key), and forms links and lists wrote before: 'cross:1:2',
# 'enc 0 1', 'decoder.cross_attn L1 H2'
_HEAD_TEXT = re.compile(r"^\s*([a-z_.]+?)\s*[ .:/,-]?\s*l?(\d+)\s*[ .:/,-]?\s*h?(\d+)\s*$", re.I)


@dataclass(frozen=True, order=True)
class HeadRef:
    """One attention head. Its text is written only here: ``str()`` is the label every list, table, figure
    and the browser page show ('cross L1 H2'); ``key`` the same head in a link ('cross.1.2'). ``parse``
    reads either, the older forms, and a (kind, layer, head) triple; it unpacks as that triple."""
    kind: Kind
    layer: int
    head: int

    def __post_init__(self):
        object.__setattr__(self, "kind", Kind.of(self.kind))
        object.__setattr__(self, "layer", int(self.layer))
        object.__setattr__(self, "head", int(self.head))

    def __str__(self) -> str:
        return f"{SHORT_NAMES[self.kind]} L{self.layer} H{self.head}"

    @property
    def label(self) -> str:
        return str(self)

    @property
    def key(self) -> str:
        return f"{SHORT_NAMES[self.kind]}.{self.layer}.{self.head}"

    def __iter__(self):
        return iter((self.kind, self.layer, self.head))

    @classmethod
    def parse(cls, value) -> "HeadRef":
        """The head ``value`` names; ValueError, saying how to write one, otherwise."""
        if isinstance(value, cls):
            return value
        if isinstance(value, (list, tuple)) and len(value) == 3:
            return cls(*value)
        m = _HEAD_TEXT.match(str(value))
        try:
            if m is None:
                raise ValueError
            return cls(m.group(1).lower(), int(m.group(2)), int(m.group(3)))
        except ValueError:
            raise ValueError(f"cannot read head {str(value)[:40]!r}; write it like 'cross L1 H2'") from None


PARTS = ("encoder", "decoder")
FF_POINTS = ("pre", "post")


def hook_name(point: str, where: Kind | str | None = None, layer: int | None = None) -> str:
    """The one resolver from (point, where, layer) to a hook name.

    ``where``: None for model-level points (``logits``), a part (``encoder``/``decoder``) for stack
    points (``embed``, ``pos``, ``norm``; with ``layer``: ``resid_*`` and FFN ``pre``/``post``), or an
    attention kind (a :class:`Kind`, or a name :meth:`Kind.of` knows) with ``layer`` for attention points.
    """
    point = point.removeprefix("hook_")
    if where is None:
        return f"hook_{point}"
    if where in PARTS:
        if layer is None:
            return f"{where}.hook_{point}"
        sub = "ff." if point in FF_POINTS else ""
        return f"{where}.layers.{layer}.{sub}hook_{point}"
    if layer is None:
        raise ValueError("attention points need a layer")
    kind = Kind.of(where)
    return f"{kind.stack}.layers.{layer}.{kind.module}.hook_{point}"
