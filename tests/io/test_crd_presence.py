"""``io/crd_presence.py``: an absent optional CRD (KEDA's ScaledObject, the Prometheus Operator's PodMonitor) is read
again once per resync period of the operator (``--resync-seconds``), never more often; a present one is kept; resyncs
off (0) fall back to :data:`RECHECK_SECONDS`; ``sglang-operator run`` hands its resync period to both users (a fake
clock and a scripted probe; no API server)."""

from __future__ import annotations

import logging

import kopf
import pytest
from apiprobe import Probe

from sglang_operator.entry import runner
from sglang_operator.io.crd_presence import RECHECK_SECONDS, CrdPresence
from sglang_operator.io.discovery import POD_MONITORS
from sglang_operator.io.keda import SCALED_OBJECTS, ScaledObjects

RESYNC = 20.0


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def presence(probe: Probe, clock: Clock) -> CrdPresence:
    return CrdPresence("Things", "things.example.com", "v1", "found", "not found", logging.getLogger("test"), probe,
                       clock)


async def test_an_absent_crd_is_read_again_once_per_resync_and_found_within_one() -> None:
    probe, clock = Probe([False, False, True]), Clock()
    crd = presence(probe, clock)
    crd.recheck_every(RESYNC)
    assert await crd.served() is False and probe.calls == 1
    for _ in range(19):  # a server's tick every second: no read before the resync period has passed
        clock.now += 1
        assert await crd.served() is False
    assert probe.calls == 1
    clock.now += 1
    assert await crd.served() is False and probe.calls == 2  # one GET per resync period
    clock.now += RESYNC / 2  # the CRD is installed now (the probe's next answer) ...
    assert await crd.served() is False and probe.calls == 2
    clock.now += RESYNC / 2  # ... and found one resync after the last read, never 300 s later
    assert await crd.served() is True and probe.calls == 3
    clock.now += 100 * RESYNC
    assert [await crd.served() for _ in range(5)] == [True] * 5 and probe.calls == 3  # present: never read again


async def test_resyncs_off_fall_back_to_the_fixed_period() -> None:
    probe, clock = Probe([False, True]), Clock()
    crd = presence(probe, clock)
    crd.recheck_every(0)  # --resync-seconds 0: no resync
    assert crd.recheck_seconds == RECHECK_SECONDS
    assert await crd.served() is False
    clock.now += RECHECK_SECONDS - 1
    assert await crd.served() is False and probe.calls == 1
    clock.now += 1
    assert await crd.served() is True and probe.calls == 2


async def test_keda_installed_after_start_is_found_within_one_resync(caplog: pytest.LogCaptureFixture) -> None:
    probe, clock = Probe([False, True]), Clock()
    keda = ScaledObjects("http://127.0.0.1:9090", probe=probe, clock=clock)
    keda.recheck_every(RESYNC)
    with caplog.at_level(logging.INFO, "sglang_operator.autoscaling"):
        assert await keda.available() is False
        clock.now += RESYNC
        assert await keda.available() is True
    assert "not found" in caplog.text and f"read again every {RESYNC:.0f} s" in caplog.text
    assert "found: spec.autoscaling" in caplog.text


def test_run_hands_its_resync_period_to_both_optional_crds(monkeypatch: pytest.MonkeyPatch) -> None:
    for crd in (POD_MONITORS, SCALED_OBJECTS):
        monkeypatch.setattr(crd, "recheck_seconds", crd.recheck_seconds)  # restored afterwards
    started: list[dict[str, object]] = []
    monkeypatch.setattr(kopf, "run", lambda **kw: started.append(kw))
    monkeypatch.setattr(kopf.on, "startup", lambda *a, **kw: (lambda fn: fn))
    monkeypatch.setattr(logging, "basicConfig", lambda **kw: None)
    monkeypatch.setattr(runner, "quiet_request_logs", lambda verbose: None)
    runner.run(liveness=None, metrics_port=0, resync_seconds=7.0)
    assert started and POD_MONITORS.recheck_seconds == SCALED_OBJECTS.recheck_seconds == 7.0
    runner.run(liveness=None, metrics_port=0, resync_seconds=0.0)
    assert POD_MONITORS.recheck_seconds == SCALED_OBJECTS.recheck_seconds == RECHECK_SECONDS
