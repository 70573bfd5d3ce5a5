"""The tree a beam search explored: every kept prefix and finished hypothesis as a node with its parent.

Built from the steps and finished hypotheses a beam search records; the branching and the beam view
read it. Laying it out for a plot is the plot's business (viz.beam.tree_layout).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class BeamNode:
    """One hypothesis prefix a beam search explored. Node 0 is the root (<bos>)."""
    id: int
    parent: int | None
    step: int
    token_id: int | None
    score: float                    # cumulative log-probability
    # "chosen" (on the chosen hypothesis's path), "finished" (on another finished one's), "pruned"
    status: str = "pruned"
    final: bool = False             # a finished hypothesis (leaf); the fields below are set for these
    normalized: float | None = None
    length: int | None = None
    ids: list[int] | None = None
    rank_raw: int | None = None
    rank_norm: int | None = None
    token: str = ""                 # with a vocabulary (beam_tree_data)
    tokens: list[str] | None = None
    text: str = ""


@dataclass
class BeamTree:
    nodes: list[BeamNode]
    best: int | None                # node id of the chosen hypothesis
    finished: list[int]             # node ids of finished hypotheses, best first by normalized score
    length_penalty: float = 1.0
    size: int | None = None         # the beam size, when the tree was decoded for the view


def beam_tree(steps, finished) -> BeamTree:
    """Every hypothesis a beam search explored, as nodes with parents.

    ``steps``: per step an object with ``parents``, ``tokens``, ``scores`` (the kept hypotheses;
    parents index the previous step's kept list, or the root at step 0). ``finished``: objects
    with ``ids``, ``score``, ``normalized``, ``step``, ``beam_index``.
    """
    nodes = [BeamNode(0, None, -1, None, 0.0)]
    level = [0]  # node ids of the previous step's kept hypotheses
    kept_ids = []
    for t, st in enumerate(steps):
        here = []
        for p, tok, s in zip(st.parents, st.tokens, st.scores):
            nodes.append(BeamNode(len(nodes), level[p] if t > 0 else 0, t, int(tok), float(s)))
            here.append(nodes[-1].id)
        kept_ids.append(here)
        level = here
    leaves = []
    for h in finished:
        parent = 0 if h.step == 0 else kept_ids[h.step - 1][h.beam_index]
        nodes.append(BeamNode(len(nodes), parent, int(h.step), int(h.ids[-1]) if h.ids else None, float(h.score),
                              final=True, normalized=float(h.normalized), length=len(h.ids),
                              ids=[int(i) for i in h.ids]))
        leaves.append(nodes[-1].id)
    by_norm = sorted(leaves, key=lambda n: -nodes[n].normalized)
    by_raw = sorted(leaves, key=lambda n: -nodes[n].score)
    for n in leaves:
        nodes[n].rank_norm = by_norm.index(n) + 1
        nodes[n].rank_raw = by_raw.index(n) + 1
    best = by_norm[0] if by_norm else None
    for leaf in by_norm[::-1]:  # mark paths; the best last so its path wins
        status = "chosen" if leaf == best else "finished"
        n = leaf
        while n is not None:
            if nodes[n].status != "chosen":
                nodes[n].status = status
            n = nodes[n].parent
    return BeamTree(nodes, best, by_norm)
