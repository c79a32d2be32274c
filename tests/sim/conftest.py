"""Fixtures for the simulator tests; their helpers (the published case's command lines, :func:`start_sim`),
shared with other folders, are in ``simproc.py``."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from simproc import KNOWN_GOOD, RunningSim, start_sim, to_0523


@pytest.fixture
def sim_0523() -> Iterator[RunningSim]:
    """A 0.5.23 simulator of the published known-good configuration with metrics and an API key."""
    sim = start_sim([*to_0523(KNOWN_GOOD), "--enable-metrics", "--api-key", "sk-test"])
    yield sim
    sim.stop()
