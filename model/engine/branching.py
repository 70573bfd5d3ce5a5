"""Continue from here: decode on from a forced target prefix (a branch of a run).

A branch keeps the first tokens of its output as given, token for token, whatever the model prefers, and
lets the search (greedy or beam) go on from there. Its step records at the forced steps still hold the
model's own top-k, so a view can show what the model would have chosen instead. The decode itself is
``decoding.translate`` with ``DecodeOptions.prefix``: one engine, cached and uncached alike.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from .beams import BeamTree
from .config import NO_INTERVENTION, Interventions
from .decoding import DecodeOptions, Translation, check_prefix, translate
from .loaded import LoadedModel


@dataclass(frozen=True)
class Branch:
    """What makes a run a branch, in words and ids (for the run bar, a link, an export, the API)."""
    prefix_ids: tuple[int, ...]
    prefix_tokens: tuple[str, ...]
    then: str                 # "greedy" or "beam 4": how the model went on after the prefix
    description: str          # "forced prefix up to step 4, then greedy"

    @property
    def last_forced_step(self) -> int:
        return len(self.prefix_ids) - 1


def describe(prefix_len: int, beam: int) -> str:
    then = "greedy" if beam <= 1 else f"beam {beam}"
    return f"forced prefix up to step {prefix_len - 1}, then {then}"


def branch_of(lm: LoadedModel, tr: Translation, beam: int = 1) -> Branch | None:
    """The branch ``tr`` is (None for a run decoded from the start). ``beam``: the search after the prefix."""
    if not tr.prefix_len:
        return None
    ids = tuple(int(i) for i in tr.output_ids[:tr.prefix_len])
    return Branch(ids, tuple(lm.tgt_vocab.decode(ids)), "greedy" if beam <= 1 else f"beam {beam}",
                  describe(tr.prefix_len, beam))


def step_prefix(tr: Translation, step: int, token_id: int) -> tuple[int, ...]:
    """The prefix that continues ``tr`` from ``step`` with ``token_id``: the tokens before the step, then it."""
    step = int(step)
    if not 0 <= step < len(tr.output_ids):
        raise ValueError(f"step {step} is outside this run's steps 0–{len(tr.output_ids) - 1}")
    return tuple(int(i) for i in tr.output_ids[:step]) + (int(token_id),)


def node_prefix(tree: BeamTree, node_id: int) -> tuple[int, ...]:
    """The output ids of a beam-tree node's hypothesis, from the root down to it."""
    node_id = int(node_id)
    if not 0 < node_id < len(tree.nodes):
        raise ValueError(f"the beam tree has no node {node_id} (nodes 1–{len(tree.nodes) - 1} hold a token)")
    ids = []
    while node_id:  # node 0 is the root: the start token, never an output
        node = tree.nodes[node_id]
        ids.append(int(node.token_id))
        node_id = node.parent
    return tuple(reversed(ids))


def parse_prefix(lm: LoadedModel, spec) -> tuple[int, ...]:
    """A prefix given as ids or as tokens (the vocabulary's pieces): a list, or one string of
    comma-separated items. Tokens unknown to the target vocabulary are refused by name."""
    items = [x.strip() for x in spec.split(",")] if isinstance(spec, str) else list(spec or [])
    ids = []
    for item in items:
        if isinstance(item, bool):
            raise ValueError("a prefix token is an id or a piece, not true/false")
        if isinstance(item, int) or (isinstance(item, str) and item.lstrip("-").isdigit()):
            ids.append(int(item))
        elif isinstance(item, str) and item in lm.tgt_vocab.stoi:
            ids.append(lm.tgt_vocab.stoi[item])
        elif item != "":
            raise ValueError(f"the prefix token {str(item)[:30]!r} is not in the target vocabulary")
    if not ids:
        raise ValueError("the forced prefix is empty: give at least one token")
    return check_prefix(lm.model, tuple(ids))


def continue_from(lm: LoadedModel, text: str, prefix, opts: DecodeOptions = DecodeOptions(),
                  iv: Interventions = NO_INTERVENTION) -> Translation:
    """``text`` decoded with its output forced to start with ``prefix`` (ids or tokens), then searched on."""
    return translate(lm, text, replace(opts, prefix=parse_prefix(lm, prefix)), iv)
