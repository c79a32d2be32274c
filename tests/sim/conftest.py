"""Fixtures for the simulator tests; the helpers they share with other folders (the published case's command
lines, :func:`start_sim`) are in ``simproc.py`` and imported here for the tests that read them from ``conftest``."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from simproc import (
    GPU,
    KNOWN_GOOD,
    KNOWN_GOOD_TOK_S,
    MODEL,
    REGRESSED,
    REGRESSED_ACCEPT_LEN,
    REGRESSED_TOK_S,
    SPEC_V2_ENV,
    RunningSim,
    free_port,
    start_sim,
    to_0523,
)

__all__ = ["GPU", "KNOWN_GOOD", "KNOWN_GOOD_TOK_S", "MODEL", "REGRESSED", "REGRESSED_ACCEPT_LEN", "REGRESSED_TOK_S",
           "SPEC_V2_ENV", "RunningSim", "free_port", "start_sim", "to_0523"]


@pytest.fixture
def sim_0523() -> Iterator[RunningSim]:
    """A 0.5.23 simulator of the published known-good configuration with metrics and an API key."""
    sim = start_sim([*to_0523(KNOWN_GOOD), "--enable-metrics", "--api-key", "sk-test"])
    yield sim
    sim.stop()
