"""kopf settings of ``sglang_operator.runner.configure`` (issue 10: keeping up at 20 SGLangServers/s)."""

from __future__ import annotations

import warnings

import kopf

from sglang_operator import runner


def test_configure_uses_no_deprecated_kopf_setting() -> None:
    """``settings.batching`` is a deprecated alias and ``batch_window`` does nothing in this kopf: each warns."""
    settings = kopf.OperatorSettings()
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        runner.configure(settings)


def test_worker_slots_outnumber_the_servers_created_within_a_worker_lifetime() -> None:
    """A per-object worker holds its slot until ``idle_timeout`` after the object's last event; a server created
    gets events for about one observer interval (5 s) plus that idling. At 20 creations/s the slots must cover
    them all, or creations queue without bound (bench/operator_apply.py: 64 slots with 5 s idling gave p99 55 s)."""
    settings = kopf.OperatorSettings()
    runner.configure(settings)
    limit = settings.queueing.worker_limit
    busy_seconds = 5.0 + settings.queueing.idle_timeout
    assert limit is None or limit >= 20 * busy_seconds * 4, (limit, settings.queueing.idle_timeout)
