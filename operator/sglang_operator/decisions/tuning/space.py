"""The search space of a speculative-decoding tuning: which (numSteps, eagleTopk, numDraftTokens) points exist —
with, when the tuning lists them, ``--max-running-requests`` and the CUDA-graph batch size as further dimensions,
and SGLang's adaptive mode as a variant of each point — which are valid, and in what order they are "cheaper".

Validity follows SGLang and its sweep script (``scripts/playground/bench_speculative.py``):

- eagleTopk 1 is a chain: SGLang forces ``speculative_num_draft_tokens = num_steps + 1``
  (``server_args.py``/``speculative_hook.py``, ported in :mod:`sglang_operator.sglang.rules_spec`: "adjusted to
  speculative_num_steps + 1 when speculative_eagle_topk == 1"), so a chain is one point per numSteps and any other
  draft-token value would run that same point again: it is counted as invalid, never proposed;
- a tree (eagleTopk > 1) verifies at most the ``steps × topk`` drafted nodes plus the root: numDraftTokens above
  ``numSteps × eagleTopk + 1`` is invalid (the sweep script drops those points), and below 2 nothing is verified;
- optionally a caller-given :data:`Validator` (e.g. :func:`spec_validator`: the spec the trial runs — the server's
  as a trial's workload, :mod:`.trialspec` — rendered with the point and checked with the API's and its release's
  own rules, so ``specV2`` with eagleTopk > 1 or a trtllm_mha backend is refused as the API server and SGLang would
  refuse it).

Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    ValidationError,
    model_serializer,
    model_validator,
)
from pydantic.alias_generators import to_camel

from sglang_operator.api.server import SpecError
from sglang_operator.api.spec import SGLangServerSpec
from sglang_operator.api.tuning_status import settings_text
from sglang_operator.builders.tuning import shadow_refusal
from sglang_operator.builders.validate import check
from sglang_operator.decisions.tuning.trialspec import trial_server_spec

DEFAULT_NUM_STEPS = (1, 2, 3, 4, 5, 6, 7, 8)
DEFAULT_EAGLE_TOPK = (1, 2, 4, 8)
DEFAULT_NUM_DRAFT_TOKENS = (2, 4, 8, 16, 32, 64)
"""Defaults of :class:`SearchSpace`: the sweep script's values of each (``steps`` 1–8 as SGLang's EAGLE3 examples
use up to 8; ``topk`` 1, 2, 4, 8; draft tokens powers of two up to 64), without its all-zero control point, which
every tuning runs anyway (:data:`CONTROL`)."""


class TuningModel(BaseModel):
    """Base of the tuning models: immutable, camelCase aliases (Katib / SGLang-flag-like names), unknown fields
    refused."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True)


_OPTIONAL_DIMENSIONS = ("max_running_requests", "cuda_graph_max_bs", "adaptive")


class Point(TuningModel):
    """One speculative configuration: ``--speculative-num-steps``, ``--speculative-eagle-topk``,
    ``--speculative-num-draft-tokens``; optionally ``--max-running-requests`` (``max_running_requests``, requests)
    and the CUDA-graph batch size (``cuda_graph_max_bs``, requests; ``spec.memory.cudaGraphMaxBs``), ``None``
    keeping the server's own value; ``adaptive``: SGLang's adaptive mode (``spec.speculative.adaptive``) started
    from these settings."""

    num_steps: Annotated[int, Field(ge=1)]
    eagle_topk: Annotated[int, Field(ge=1)]
    num_draft_tokens: Annotated[int, Field(ge=1)]
    max_running_requests: Annotated[int | None, Field(ge=1)] = None
    cuda_graph_max_bs: Annotated[int | None, Field(ge=1)] = None
    adaptive: bool = False

    @model_serializer(mode="wrap")
    def _without_unsearched(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """A dump leaves out the optional dimensions at their defaults (a point of the three speculative settings
        dumps as it always did)."""
        out: dict[str, Any] = handler(self)
        for name in _OPTIONAL_DIMENSIONS:
            for key in (name, to_camel(name)):
                if key in out and out[key] in (None, False):
                    del out[key]
        return out

    @property
    def label(self) -> str:
        """``steps/topk/draft tokens``, as people write it (``3/1/4``); ``adaptive 3/1/4`` in adaptive mode, and
        ``mrr N`` / ``bs N`` appended when set (``3/1/4 mrr 16 bs 32``: the API's
        :meth:`~sglang_operator.api.tuning_status.TrialSettings.summary`)."""
        return settings_text(self.num_steps, self.eagle_topk, self.num_draft_tokens, adaptive=self.adaptive,
                             max_running_requests=self.max_running_requests, cuda_graph_max_bs=self.cuda_graph_max_bs)

    @property
    def static(self) -> Point:
        """The point without adaptive mode."""
        return self.model_copy(update={"adaptive": False}) if self.adaptive else self

    def cost_key(self) -> tuple[int, ...]:
        """The order of cheapness: fewer draft tokens, then fewer steps, then a narrower tree (less memory per
        request and less work per verify step when measurements cannot tell two points apart), then fewer running
        requests and a smaller CUDA-graph batch size (less memory; unset counts as 0, so the order of points
        without them is unchanged), static before adaptive (the simpler configuration)."""
        return (self.num_draft_tokens, self.num_steps, self.eagle_topk, self.max_running_requests or 0,
                self.cuda_graph_max_bs or 0, int(self.adaptive))


CONTROL_LABEL = "no-speculation"
"""The label of the control trial (``None`` as its point): the server without speculative decoding."""

Validator = Callable[[Point], str | None]
"""A release's verdict on one point: ``None`` when it may run, else the reason (SGLang's / the API's message)."""


class InvalidPoint(TuningModel):
    """A point of the space that is never proposed, and why."""

    point: Point
    reason: str


class SearchSpace(TuningModel):
    """The sets to search (Katib's ``parameters``; a range is given as its values). ``num_draft_tokens`` applies to
    trees only: chains always get ``numSteps + 1``. ``max_running_requests`` / ``cuda_graph_max_bs``: further
    dimensions when not empty (empty: the server's own value, one point less per dimension). ``adaptive``: every
    point also in SGLang's adaptive mode (the search runs one of them: the best static point's). Sorted and
    deduplicated on construction."""

    num_steps: tuple[int, ...] = DEFAULT_NUM_STEPS
    eagle_topk: tuple[int, ...] = DEFAULT_EAGLE_TOPK
    num_draft_tokens: tuple[int, ...] = DEFAULT_NUM_DRAFT_TOKENS
    max_running_requests: tuple[int, ...] = ()
    cuda_graph_max_bs: tuple[int, ...] = ()
    adaptive: bool = False
    derived_draft_tokens: bool = False
    """``num_draft_tokens`` was derived, not asked for (the tuning's ``numDraftTokens`` unset): a chain gets only
    ``numSteps + 1`` and a tree only the values up to its ``numSteps × eagleTopk + 1``, so no point is counted
    invalid for a draft-token count nobody listed."""

    @model_validator(mode="before")
    @classmethod
    def _normalise(cls, data: object) -> object:
        if isinstance(data, dict):
            data = {k: tuple(sorted(set(v))) if isinstance(v, Iterable) and not isinstance(v, str) else v
                    for k, v in data.items()}
        return data

    @model_validator(mode="after")
    def _non_empty(self) -> SearchSpace:
        if not self.num_steps or not self.eagle_topk:
            raise ValueError("numSteps and eagleTopk need at least one value each")
        if any(v < 1 for v in (*self.num_steps, *self.eagle_topk, *self.num_draft_tokens)):
            raise ValueError("numSteps, eagleTopk and numDraftTokens values must be >= 1")
        if any(v < 1 for v in (*self.max_running_requests, *self.cuda_graph_max_bs)):
            raise ValueError("maxRunningRequests and cudaGraphMaxBs values must be >= 1 (requests)")
        if any(k > 1 for k in self.eagle_topk) and not self.num_draft_tokens:
            raise ValueError("numDraftTokens needs at least one value when eagleTopk has values above 1")
        return self

    def candidates(self) -> list[Point]:
        """Every combination the sets name, chains once per numSteps with every listed draft-token value too (so
        that the invalid ones are counted; :attr:`derived_draft_tokens`: a chain's numSteps + 1 and a tree's values
        up to numSteps × eagleTopk + 1 only); each with every maxRunningRequests × cudaGraphMaxBs value (when
        listed), and again in adaptive mode when ``adaptive`` (after all static ones)."""
        out: list[Point] = []
        extras = [(m, b) for m in (self.max_running_requests or (None,)) for b in (self.cuda_graph_max_bs or (None,))]
        for steps in self.num_steps:
            for topk in self.eagle_topk:
                if self.derived_draft_tokens:
                    ndts: Iterable[int] = [steps + 1] if topk == 1 else \
                        [n for n in self.num_draft_tokens if n <= steps * topk + 1]
                else:
                    ndts = sorted({steps + 1, *self.num_draft_tokens}) if topk == 1 else self.num_draft_tokens
                out += [Point(num_steps=steps, eagle_topk=topk, num_draft_tokens=n, max_running_requests=m,
                              cuda_graph_max_bs=b) for n in ndts for m, b in extras]
        if self.adaptive:
            out += [p.model_copy(update={"adaptive": True}) for p in out]
        return out


def shape_reason(p: Point) -> str | None:
    """SGLang's shape rules for one point (see the module docstring); ``None`` when the shape is valid."""
    if p.eagle_topk == 1 and p.num_draft_tokens != p.num_steps + 1:
        return (f"eagleTopk 1 is a chain (SGLang: speculative_num_draft_tokens is adjusted to speculative_num_steps "
                f"+ 1 when speculative_eagle_topk == 1): numDraftTokens {p.num_draft_tokens} would run "
                f"{p.num_steps}/1/{p.num_steps + 1} again")
    if p.num_draft_tokens < 2:
        return "numDraftTokens must be at least 2 (the root and one draft token)"
    if p.num_draft_tokens > p.num_steps * p.eagle_topk + 1:
        return (f"numDraftTokens {p.num_draft_tokens} > numSteps × eagleTopk + 1 = "
                f"{p.num_steps * p.eagle_topk + 1}: the draft tree has fewer nodes than it would verify")
    return None


def enumerate_space(space: SearchSpace, validator: Validator | None = None) -> tuple[list[Point], list[InvalidPoint]]:
    """Valid points (sorted by :meth:`Point.cost_key`) and the invalid ones with their reasons. The adaptive-mode
    variant of a point that is itself invalid is not listed again."""
    valid: list[Point] = []
    invalid: list[InvalidPoint] = []
    refused: set[Point] = set()
    for p in space.candidates():
        if p.adaptive and p.static in refused:
            continue  # adaptive mode of a point that is refused anyway: counted once, as the static point
        reason = shape_reason(p) or (validator(p) if validator is not None else None)
        if reason is not None and not p.adaptive:
            refused.add(p)
        if reason is None:
            valid.append(p)
        else:
            invalid.append(InvalidPoint(point=p, reason=reason))
    valid.sort(key=Point.cost_key)
    return valid, invalid


def spec_validator(spec: SGLangServerSpec, replicas: int = 1, shadow: bool = True) -> Validator:
    """A :data:`Validator` of the spec each trial runs: ``spec`` as a trial's workload on ``replicas`` pods
    (:func:`~.trialspec.trial_server_spec`: what cannot apply to a trial dropped, parsed with the API's own rules),
    with the point's speculative settings, checked with the release's own rules (the CRD's CEL rules,
    :func:`sglang_operator.builders.validate.check`: the flags of the release and SGLang's argument resolution) and,
    ``shadow``, a Shadow trial's (:func:`~sglang_operator.builders.tuning.shadow_refusal`); the errors are the
    reason, as :func:`~.trialspec.trial_refusal` gives them (a refusal of the trial's spec itself refuses every
    point). ``spec`` must have ``speculative`` set (its
    algorithm and draft model are kept)."""
    if spec.speculative is None:
        raise ValueError("spec.speculative is required to tune speculative decoding")
    try:
        trial = trial_server_spec(spec, replicas)
    except SpecError as err:
        refused: str | None = "; ".join(err.messages)
        trial = spec
    else:
        refused = shadow_refusal(trial) if shadow else None
    base = trial.speculative
    assert base is not None  # the trial keeps the server's speculative block

    def verdict(p: Point) -> str | None:
        if refused is not None:
            return refused
        fields: dict[str, object] = {**base.model_dump(), "num_steps": p.num_steps, "eagle_topk": p.eagle_topk,
                                     "num_draft_tokens": p.num_draft_tokens}
        if p.adaptive:
            fields["adaptive"] = {**(base.adaptive.model_dump() if base.adaptive is not None else {}),
                                  "enabled": True}
        elif base.adaptive is not None and base.adaptive.enabled:
            fields["adaptive"] = None  # a static trial of a server in adaptive mode (trial_spec drops the block)
        memory = trial.memory.model_copy(update={k: v for k, v in (("max_running_requests", p.max_running_requests),
                                                                   ("cuda_graph_max_bs", p.cuda_graph_max_bs))
                                                 if v is not None})
        try:
            speculative = type(base).model_validate(fields)
        except ValidationError as exc:
            return "; ".join(str(e["msg"]).removeprefix("Value error, ") for e in exc.errors())
        result = check(trial.model_copy(update={"speculative": speculative, "memory": memory}))
        return "; ".join(result.errors) if result.errors else None

    return verdict
