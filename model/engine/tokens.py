"""Typed text -> one target token: the single resolver Attribution's foil and the patching bench's target
and foil share, so the two boxes always read the same token for the same text.

The rules, in order (``asked`` stripped; blank asks for nothing):

- a piece typed with its word-start mark (``▁dog``) or a special (``<eos>``, ``</s>``) is taken as it
  is, when the vocabulary has it;
- a word maps to the token that starts it: its word-start piece ``▁dog`` in a subword vocabulary (never
  the mid-word piece ``dog`` a vocabulary may also hold), the word itself in a word vocabulary;
- a word the vocabulary splits into several pieces, a word it does not know, or several words are
  reported with a sentence a person can act on, never guessed.

Works for any vocabulary with ``stoi``, ``tokens(text, lang)`` and ``encode``: ours (word or
SentencePiece) and Marian's (whose pieces outside vocab.json are ``<unk>``).
"""
from __future__ import annotations

from dataclasses import dataclass

WORD_START = "\u2581"
_SPECIALS = ("<unk>", "<pad>", "<bos>", "<eos>", "</s>", "<s>")
_MAX_SHOWN = 40


@dataclass(frozen=True)
class TokenChoice:
    """What typed text resolved to: the token (``id``/``piece``), or None with ``message`` saying why not.
    ``message`` on a resolved token says what the text was read as, where that is not the text itself."""
    asked: str
    id: int | None = None
    piece: str | None = None
    message: str = ""

    @property
    def ok(self) -> bool:
        return self.id is not None


def _unk_id(vocab) -> int | None:
    unk = getattr(vocab, "unk_id", None)
    return unk if unk is not None else vocab.stoi.get("<unk>")


def _is_special(vocab, text: str) -> bool:
    return text in getattr(vocab, "specials", _SPECIALS) or (text in _SPECIALS and text in vocab.stoi)


def _spelled_out(pieces: list[str]) -> bool:
    """A word the vocabulary only spells (byte pieces, or one character a piece): it does not know it."""
    rest = [p.removeprefix(WORD_START) for p in pieces]
    return any(p.startswith("<0x") for p in pieces) or (len(pieces) > 2 and all(len(p) <= 1 for p in rest))


def _failed(asked: str, why: str) -> TokenChoice:
    return TokenChoice(asked, message=f"“{asked[:_MAX_SHOWN]}” {why}")


def resolve_token(vocab, asked, lang: str = "") -> TokenChoice | None:
    """The one target token ``asked`` names (see the module's rules); None for blank text."""
    asked = "" if asked is None else str(asked).strip()
    if not asked:
        return None
    if len(asked.split()) > 1:
        return _failed(asked, "is several words: a target token is one word or one piece")
    if asked.startswith(WORD_START) or _is_special(vocab, asked):
        if asked in vocab.stoi and asked != WORD_START:
            return TokenChoice(asked, vocab.stoi[asked], asked)
        return _failed(asked, "is not a piece of the target vocabulary")
    pieces = [t for t in vocab.tokens(asked, lang) if t]
    ids = vocab.encode(pieces)
    if not pieces or _unk_id(vocab) in ids or _spelled_out(pieces):
        return _failed(asked, "is not a word of the target vocabulary")
    if len(pieces) > 1:
        return _failed(asked, f"is {len(pieces)} pieces here ({' '.join(pieces)}), not one token: type the piece "
                              f"meant, with its ▁ where it starts a word (as in {pieces[0]}), or pick a candidate")
    note = "" if pieces[0] == asked else f"“{asked}” is read as the word-start piece {pieces[0]}"
    return TokenChoice(asked, ids[0], pieces[0], note)


__all__ = ["TokenChoice", "resolve_token", "WORD_START"]
