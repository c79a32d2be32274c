"""The coordinate-ascent search's index of the space (:mod:`.search`, stages 2-4): the valid static points by
(numSteps, eagleTopk), their draft-token values, the fullest tree of a line, and the neighbours of a point with the
move to each (numDraftTokens one value down and up, numSteps ± 1, a tree's diagonal along its ridge, eagleTopk,
``maxRunningRequests`` and ``cudaGraphMaxBs`` one value of their sets). Pure."""

from __future__ import annotations

import math
from collections.abc import Sequence

from sglang_operator.decisions.tuning.space import Point

Extras = tuple[int | None, int | None]
"""(maxRunningRequests, cudaGraphMaxBs) of a point (``None``: the server's own value)."""


def _extras(p: Point) -> Extras:
    return (p.max_running_requests, p.cuda_graph_max_bs)


def _middle(values: Sequence[int | None]) -> int | None:
    """The middle of the sorted values (the lower one of two), ``None`` when the dimension is not searched."""
    known = sorted({v for v in values if v is not None})
    return known[(len(known) - 1) // 2] if known else None


def _rest(p: Point) -> tuple[int, int, int | None, int | None]:
    """A static point's coordinates but numDraftTokens."""
    return (p.num_steps, p.eagle_topk, p.max_running_requests, p.cuda_graph_max_bs)


class SpaceIndex:
    """Index of the valid static points: (numSteps, eagleTopk) → sorted valid draft-token values, at the start
    values of maxRunningRequests / cudaGraphMaxBs (``base``: the middle of each, or the combination nearest it that
    has valid points); every valid static point for the neighbours."""

    def __init__(self, valid: list[Point]) -> None:
        self.points = set(valid)
        combos = sorted({_extras(p) for p in valid}, key=lambda e: tuple(-1 if v is None else v for v in e))
        want = (_middle([e[0] for e in combos]), _middle([e[1] for e in combos]))
        self.base: Extras = min(combos, key=lambda e: sum(0 if a == b else 1 + abs((a or 0) - (b or 0))
                                                          for a, b in zip(e, want, strict=True))) \
            if combos else (None, None)
        at_base = [p for p in valid if _extras(p) == self.base]
        self.steps = sorted({p.num_steps for p in at_base})
        self.topks = sorted({p.eagle_topk for p in at_base})
        self.ndts: dict[tuple[int, int], list[int]] = {}
        for p in at_base:
            self.ndts.setdefault((p.num_steps, p.eagle_topk), []).append(p.num_draft_tokens)
        for v in self.ndts.values():
            v.sort()
        self.by_rest: dict[tuple[int, int, int | None, int | None], list[int]] = {}
        for p in valid:
            self.by_rest.setdefault(_rest(p), []).append(p.num_draft_tokens)
        for v in self.by_rest.values():
            v.sort()
        self.all_steps = sorted({p.num_steps for p in valid})
        self.all_topks = sorted({p.eagle_topk for p in valid})
        self.mrrs = sorted({p.max_running_requests for p in valid if p.max_running_requests is not None})
        self.bss = sorted({p.cuda_graph_max_bs for p in valid if p.cuda_graph_max_bs is not None})

    def steps_of(self, topk: int) -> list[int]:
        return [s for s in self.steps if (s, topk) in self.ndts]

    def full(self, steps: int, topk: int) -> Point:
        """The fullest tree of ``steps``/``topk``: the most draft tokens of the set (at most steps × topk + 1);
        the chain itself for eagleTopk 1."""
        return Point(num_steps=steps, eagle_topk=topk, num_draft_tokens=self.ndts[(steps, topk)][-1],
                     max_running_requests=self.base[0], cuda_graph_max_bs=self.base[1])

    def _nearest(self, p: Point, **change: int | None) -> Point | None:
        """``p`` with ``change``, its numDraftTokens kept when valid there, else the valid value nearest it (in
        ratio; the smaller of two); None when no such point is valid."""
        q = p.model_copy(update=change)
        if q in self.points:
            return q
        ndts = self.by_rest.get(_rest(q))
        if not ndts:
            return None
        n = min(ndts, key=lambda v: (abs(math.log(v / q.num_draft_tokens)), v))
        return q.model_copy(update={"num_draft_tokens": n})

    def neighbours(self, p: Point) -> list[tuple[Move, Point]]:
        """Stage 4's neighbours of ``p`` with the move to each, in the order tried (see the module docstring)."""
        out: list[tuple[Move, Point]] = []
        ndts = self.by_rest[_rest(p)]
        i = ndts.index(p.num_draft_tokens)
        out += [(("num_draft_tokens", d), p.model_copy(update={"num_draft_tokens": ndts[i + d]}))
                for d in (-1, 1) if 0 <= i + d < len(ndts)]
        for field, axis in (("num_steps", self.all_steps), ("eagle_topk", self.all_topks),
                            ("max_running_requests", self.mrrs), ("cuda_graph_max_bs", self.bss)):
            current = getattr(p, field)
            if current not in axis:
                continue
            i = axis.index(current)
            for d in ((1, -1) if field in ("num_steps", "eagle_topk") else (-1, 1)):
                if 0 <= i + d < len(axis) and (q := self._nearest(p, **{field: axis[i + d]})) is not None:
                    out.append(((field, d), q))
            if field == "num_steps" and p.eagle_topk > 1:
                out += self._diagonal(p, axis, i)
        seen: set[Point] = set()
        return [(m, q) for m, q in out if q != p and not (q in seen or seen.add(q))]  # type: ignore[func-returns-value]


    def _diagonal(self, p: Point, steps: list[int], i: int) -> list[tuple[Move, Point]]:
        """Along a tree's ridge (its best draft-token count grows with numSteps × eagleTopk): numSteps one value up
        with numDraftTokens one value of the set up, and one down with one down, where valid."""
        out: list[tuple[Move, Point]] = []
        for d in (1, -1):
            if not 0 <= i + d < len(steps):
                continue
            q = p.model_copy(update={"num_steps": steps[i + d]})
            ndts = [n for n in self.by_rest.get(_rest(q), []) if (n > p.num_draft_tokens if d > 0
                                                                   else n < p.num_draft_tokens)]
            if ndts:
                out.append((("diagonal", d), q.model_copy(update={"num_draft_tokens": ndts[0] if d > 0
                                                                  else ndts[-1]})))
        return out


Move = tuple[str, int]
"""A step of stage 4: (the field, -1 or +1 value of its set)."""
