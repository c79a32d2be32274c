"""Status keeps the serving revision's figures but writes them only when they move (accept length > 1 %, tok/s > 2 %)
or are 5 minutes old (reconcile.status.figures_patch)."""

from __future__ import annotations

import datetime as dt

from sglang_operator.api.status import SGLangServerStatus
from sglang_operator.decisions.sampling.model import Figures
from sglang_operator.decisions.status import figures_patch

T0 = dt.datetime(2026, 12, 1, 12, 0, tzinfo=dt.UTC)
GOOD = Figures(accept_length=2.7251, accept_rate=0.5751, decode_tokens_per_second=51.64,
               generation_tokens_per_second=400.0)


def S(**fields: object) -> SGLangServerStatus:
    return SGLangServerStatus.model_validate(fields)


def at(seconds: float) -> dt.datetime:
    return T0 + dt.timedelta(seconds=seconds)


def test_first_figures_are_written_rounded_with_their_time() -> None:
    assert figures_patch(S(), GOOD, at(0), at(1)) == {
        "acceptLength": 2.725, "acceptRate": 0.575, "tokensPerSecond": 51.6, "metricsUpdatedAt": "2026-12-01T12:00:00Z"}


def test_small_moves_write_nothing_large_moves_write_all() -> None:
    status = S(**figures_patch(S(), GOOD, at(0), at(0)))
    assert figures_patch(status, Figures(accept_length=2.70, decode_tokens_per_second=50.8), at(30), at(30)) == {}
    moved_len = figures_patch(status, Figures(accept_length=2.69, decode_tokens_per_second=51.6), at(30), at(30))
    assert moved_len["acceptLength"] == 2.69 and moved_len["metricsUpdatedAt"] == "2026-12-01T12:00:30Z"
    moved_tps = figures_patch(status, Figures(accept_length=2.725, decode_tokens_per_second=50.5), at(30), at(30))
    assert moved_tps["tokensPerSecond"] == 50.5


def test_unchanged_figures_are_rewritten_after_five_minutes() -> None:
    status = S(**figures_patch(S(), GOOD, at(0), at(0)))
    assert figures_patch(status, GOOD, at(299), at(299)) == {}
    assert figures_patch(status, GOOD, at(300), at(300))["metricsUpdatedAt"] == "2026-12-01T12:05:00Z"


def test_nothing_measured_writes_nothing() -> None:
    assert figures_patch(S(acceptLength=2.7), None, at(0), at(0)) == {}
    assert figures_patch(S(), Figures(running_requests=3), at(0), at(0)) == {}
