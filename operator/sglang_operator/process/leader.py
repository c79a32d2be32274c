"""Leader election on a ``coordination.k8s.io/v1`` Lease, the client-go / controller-runtime way.

``sglang-operator run --leader-elect`` calls :func:`run_elected`: it takes the Lease before kopf (and with it
the handlers, the observer, the sampler and the load probe, all started by kopf's startup handlers) starts,
renews it while kopf runs, releases it when kopf stops on SIGTERM/SIGINT, and ends the process with exit
status 1 the moment it loses it (controller-runtime's ``leader election lost`` exit; the Deployment
restarts the container, which then waits as a candidate). kopf itself runs ``standalone``: kopf peering
would freeze two replicas of equal priority and does not pause the observer.

The algorithm is client-go's (``k8s.io/client-go/tools/leaderelection/leaderelection.go``,
``tryAcquireOrRenew``): a candidate may take the Lease when it has no holder, or when the record it last saw
has not changed for the record's ``leaseDurationSeconds`` as measured on the candidate's own monotonic
clock (no trust in other hosts' clocks); writes are ``update`` with the ``resourceVersion`` read, so two
candidates never both win. The leader renews every ``retry_period`` and gives up when no renewal succeeded
for ``renew_deadline``. Unlike client-go, a candidate retries every ``retry_period`` without jitter and also
wakes the moment the Lease it watches would expire, so a SIGKILLed leader is replaced within the lease
duration plus one retry period (the time the candidate may take to see the leader's last renewal).
Releasing clears ``holderIdentity`` and sets ``leaseDurationSeconds`` to 1, so a candidate takes over within one
retry period instead of a lease duration.

While it waits, a candidate serves ``/healthz`` on the liveness URL (so the kubelet does not restart a
healthy follower); kopf's own liveness endpoint takes the port over once the candidate leads.
:func:`is_leader` says whether this process leads (True without leader election: the process is alone);
the metrics exporter consults it so that only the leader serves server series.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import os
import signal
import socket
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, model_validator

log = logging.getLogger("sglang_operator.process.leader")

JITTER_FACTOR = 1.2  # client-go's JitterFactor, kept for its timing check (renew deadline > 1.2 × retry period)
LOST_EXIT_CODE = 1
SA_NAMESPACE_FILE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


class LeaderElectionConfig(BaseModel):
    """Where the Lease is and its timings (seconds; defaults are controller-runtime's 15 / 10 / 2).

    Raises ``pydantic.ValidationError`` unless ``lease_duration > renew_deadline > retry_period * 1.2``
    (client-go's ``NewLeaderElector`` checks).
    """

    model_config = ConfigDict(frozen=True)

    name: str = Field("sglang-operator", min_length=1, description="Lease name")
    namespace: str = Field(min_length=1, description="Lease namespace")
    identity: str = Field(min_length=1, description="holderIdentity of this process")
    lease_duration: float = Field(15.0, gt=0, description="seconds a candidate waits on an unchanged Lease")
    renew_deadline: float = Field(10.0, gt=0, description="seconds the leader keeps retrying a renewal")
    retry_period: float = Field(2.0, gt=0, description="seconds between attempts to acquire or renew")

    @model_validator(mode="after")
    def _ordered(self) -> LeaderElectionConfig:
        if not self.lease_duration > self.renew_deadline:
            raise ValueError(f"lease duration ({self.lease_duration} s) must be greater than the renew deadline "
                             f"({self.renew_deadline} s)")
        if not self.renew_deadline > JITTER_FACTOR * self.retry_period:
            raise ValueError(f"renew deadline ({self.renew_deadline} s) must be greater than {JITTER_FACTOR} × "
                             f"the retry period ({self.retry_period} s)")
        return self


def default_identity() -> str:
    """``<pod name or hostname>_<uuid4>``, as controller-runtime builds it: unique per process."""
    return f"{os.environ.get('POD_ID') or socket.gethostname()}_{uuid.uuid4()}"


def default_namespace() -> str:
    """``$POD_NAMESPACE``, else the in-cluster ServiceAccount's namespace, else ``default``."""
    if os.environ.get("POD_NAMESPACE"):
        return os.environ["POD_NAMESPACE"]
    with contextlib.suppress(OSError):
        return SA_NAMESPACE_FILE.read_text().strip() or "default"
    return "default"


class LeaseRecord(BaseModel):
    """The Lease's ``spec`` as leader election reads and writes it."""

    model_config = ConfigDict(frozen=True)

    holder: str = ""  # holderIdentity; empty: released
    lease_duration_seconds: int = 1
    acquire_time: dt.datetime | None = None
    renew_time: dt.datetime | None = None
    transitions: int = 0

    @classmethod
    def from_spec(cls, spec: Any) -> LeaseRecord:
        """From lightkube's ``LeaseSpec`` (or None)."""
        if spec is None:
            return cls()
        return cls(holder=spec.holderIdentity or "", lease_duration_seconds=spec.leaseDurationSeconds or 1,
                   acquire_time=spec.acquireTime, renew_time=spec.renewTime, transitions=spec.leaseTransitions or 0)

    def to_spec(self) -> dict[str, Any]:
        """The Lease ``spec`` dict (MicroTime as RFC 3339 with microseconds)."""
        def micro(t: dt.datetime | None) -> str | None:
            return t.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ") if t else None

        return {"holderIdentity": self.holder or None, "leaseDurationSeconds": self.lease_duration_seconds,
                "acquireTime": micro(self.acquire_time), "renewTime": micro(self.renew_time),
                "leaseTransitions": self.transitions}


def next_record(current: LeaseRecord | None, unchanged_for: float, identity: str, lease_duration: float,
                now: dt.datetime) -> LeaseRecord | None:
    """The record to write to take or renew the Lease, or None when another holder's lease is still valid.

    ``current``: the record read (None: no Lease yet); ``unchanged_for``: seconds since this process first
    saw ``current`` as it is (its own monotonic clock). Pure.
    """
    if current is None:
        return LeaseRecord(holder=identity, lease_duration_seconds=max(1, round(lease_duration)),
                           acquire_time=now, renew_time=now, transitions=0)
    ours = current.holder == identity
    if current.holder and not ours and unchanged_for < current.lease_duration_seconds:
        return None
    return LeaseRecord(
        holder=identity, lease_duration_seconds=max(1, round(lease_duration)),
        acquire_time=current.acquire_time if ours else now, renew_time=now,
        transitions=current.transitions if ours or not current.holder else current.transitions + 1,
    )


class _State:
    enabled = False
    leader = False
    renewed_at: float | None = None
    """Monotonic time at which the last successful acquisition or renewal was sent (the Lease's validity counts
    from there: a candidate cannot have seen it any earlier)."""
    lease_duration = 0.0
    renew_deadline = 0.0
    clock: Callable[[], float] = time.monotonic


_STATE = _State()


def is_leader() -> bool:
    """Whether this process leads: True while it holds the Lease, or always when leader election is off."""
    return _STATE.leader or not _STATE.enabled


def may_write() -> bool:
    """The write fence (:mod:`sglang_operator.io.fence`): True without leader election; with it, while this process
    holds the Lease with at least ``renew_deadline`` of its ``lease_duration`` left since the last renewal was sent.
    A candidate takes over no earlier than ``lease_duration`` after it saw that renewal, so a leader that stopped
    (SIGSTOP, a long pause) stops writing ``renew_deadline`` before anyone else may start."""
    if not _STATE.enabled:
        return True
    if not _STATE.leader or _STATE.renewed_at is None:
        return False
    left = _STATE.renewed_at + _STATE.lease_duration - _STATE.clock()
    return left >= _STATE.renew_deadline


def lease_expired() -> bool:
    """Whether this process led and its Lease ran out by its own clock since (a candidate may hold it now)."""
    return (_STATE.enabled and _STATE.renewed_at is not None
            and _STATE.clock() >= _STATE.renewed_at + _STATE.lease_duration)


def hard_exit() -> None:
    """controller-runtime's reaction to a lost Lease: end the process now (no cleanup handler may write)."""
    log.critical("leader election lost: exiting")
    logging.shutdown()
    sys.stdout.flush()
    os._exit(LOST_EXIT_CODE)


class LeaderElector:
    """Acquires, renews and releases one Lease with lightkube's ``AsyncClient``.

    API errors other than 404 (no Lease yet) and 409 (another writer won) are logged and count as a failed
    attempt, never raised: the loop retries every ``retry_period``.
    """

    def __init__(self, config: LeaderElectionConfig, client: Any = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.config = config
        self._client = client
        self._clock = clock
        self._observed: LeaseRecord | None = None
        self._observed_rv: str | None = None
        self._observed_at = 0.0
        self._last_renew = 0.0
        self.exists = False

    def _api(self) -> Any:
        if self._client is None:
            import httpx2
            from lightkube import AsyncClient

            self._client = AsyncClient(timeout=httpx2.Timeout(self.config.retry_period * 2))
        return self._client

    @property
    def leading(self) -> bool:
        return self._observed is not None and self._observed.holder == self.config.identity

    async def try_acquire_or_renew(self) -> bool:
        """One attempt (client-go's ``tryAcquireOrRenew``): True when this process holds the Lease after it."""
        from lightkube import ApiError
        from lightkube.resources.coordination_v1 import Lease

        cfg = self.config
        try:
            lease: Any = await self._api().get(Lease, cfg.name, namespace=cfg.namespace)
        except ApiError as exc:
            if exc.status.code != 404:
                log.warning("lease %s/%s not readable: %s", cfg.namespace, cfg.name, exc)
                return False
            lease = None
        now_mono = self._clock()
        if lease is None:
            current, rv = None, None
        else:
            current, rv = LeaseRecord.from_spec(lease.spec), lease.metadata.resourceVersion
            if rv != self._observed_rv:
                self._observed, self._observed_rv, self._observed_at = current, rv, now_mono
        wanted = next_record(current, now_mono - self._observed_at, cfg.identity, cfg.lease_duration,
                             dt.datetime.now(dt.UTC))
        if wanted is None:
            return False
        body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": cfg.name, "namespace": cfg.namespace, **({"resourceVersion": rv} if rv else {})},
                "spec": wanted.to_spec()}
        try:
            written: Any = await (self._api().replace(Lease.from_dict(body)) if rv
                                  else self._api().create(Lease.from_dict(body)))
        except ApiError as exc:
            if exc.status.code not in (409, 404):
                log.warning("lease %s/%s not written: %s", cfg.namespace, cfg.name, exc)
            return False
        self._observed, self._observed_rv, self._observed_at = wanted, written.metadata.resourceVersion, now_mono
        if current is None or current.holder != cfg.identity:
            log.info("acquired lease %s/%s as %s", cfg.namespace, cfg.name, cfg.identity)
        return True

    async def acquire(self, stop: asyncio.Event) -> bool:
        """Retry every ``retry_period``, and when the watched Lease expires, until this process leads (True) or
        ``stop`` is set (False)."""
        cfg = self.config
        log.info("waiting for lease %s/%s as %s", cfg.namespace, cfg.name, cfg.identity)
        while not stop.is_set():
            try:
                async with asyncio.timeout(cfg.retry_period * 2):
                    sent = self._clock()
                    if await self.try_acquire_or_renew():
                        self._last_renew = self._clock()
                        self._note_renewed(sent)
                        _STATE.leader = True
                        return True
            except TimeoutError:
                log.warning("lease %s/%s: attempt timed out", cfg.namespace, cfg.name)
            wait = cfg.retry_period
            if self._observed is not None and self._observed.holder:
                expires_in = self._observed.lease_duration_seconds - (self._clock() - self._observed_at)
                wait = min(wait, max(expires_in, 0.0) + 0.01)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), wait)
        return False

    async def renew(self, on_lost: Callable[[], None] = hard_exit) -> None:
        """Renew every ``retry_period`` until cancelled; call ``on_lost`` once no renewal succeeded for
        ``renew_deadline`` seconds (or another holder took the Lease)."""
        cfg = self.config
        while True:
            await asyncio.sleep(cfg.retry_period)
            remaining = self._last_renew + cfg.renew_deadline - self._clock()
            ok = False
            sent = self._clock()
            if remaining > 0:
                try:
                    async with asyncio.timeout(remaining):
                        ok = await self.try_acquire_or_renew()
                except TimeoutError:
                    ok = False
            if ok:
                self._last_renew = self._clock()
                self._note_renewed(sent)
            elif self._clock() - self._last_renew >= cfg.renew_deadline:
                _STATE.leader = False
                log.error("lease %s/%s: no renewal for %.1f s (holder now %r)", cfg.namespace, cfg.name,
                          self._clock() - self._last_renew, self._observed.holder if self._observed else "")
                on_lost()
                return

    def _note_renewed(self, sent: float) -> None:
        """A renewal sent at monotonic ``sent`` succeeded: the write fence (:func:`may_write`) counts from there."""
        _STATE.renewed_at, _STATE.clock = sent, self._clock
        _STATE.lease_duration, _STATE.renew_deadline = self.config.lease_duration, self.config.renew_deadline

    async def release(self) -> None:
        """Clear ``holderIdentity`` (leaseDurationSeconds 1) when this process still holds the Lease."""
        from lightkube import ApiError
        from lightkube.resources.coordination_v1 import Lease

        _STATE.leader, _STATE.renewed_at = False, None
        if not self.leading or self._observed is None:
            return
        cfg, now = self.config, dt.datetime.now(dt.UTC)
        released = LeaseRecord(holder="", lease_duration_seconds=1, acquire_time=now, renew_time=now,
                               transitions=self._observed.transitions)
        body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": cfg.name, "namespace": cfg.namespace, "resourceVersion": self._observed_rv},
                "spec": released.to_spec()}
        try:
            async with asyncio.timeout(cfg.retry_period * 2):
                await self._api().replace(Lease.from_dict(body))
        except (ApiError, TimeoutError) as exc:
            log.warning("lease %s/%s not released: %s", cfg.namespace, cfg.name, exc)
            return
        self._observed = released
        log.info("released lease %s/%s", cfg.namespace, cfg.name)


@contextlib.asynccontextmanager
async def candidate_health(liveness: str | None) -> AsyncIterator[None]:
    """Serve ``GET <path>`` → 200 ``{"leader": false}`` on the liveness URL while waiting for the Lease."""
    if not liveness:
        yield
        return
    from aiohttp import web

    url = urlsplit(liveness)

    async def health(_: web.Request) -> web.Response:
        return web.json_response({"leader": False})

    app = web.Application()
    app.router.add_get(url.path or "/", health)
    runner = web.AppRunner(app, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, url.hostname, url.port or 80, shutdown_timeout=0.5, reuse_address=True)
    await site.start()
    try:
        yield
    finally:
        await runner.cleanup()


async def run_elected(config: LeaderElectionConfig, operator: Callable[[], Awaitable[None]],
                      liveness: str | None = None, on_lost: Callable[[], None] = hard_exit) -> int:
    """Wait for the Lease, then run ``operator()`` (kopf) while renewing it; release it when kopf returns.

    Returns the process exit status: 0 after SIGTERM/SIGINT (as a candidate or as the leader). A lost Lease
    calls ``on_lost`` (default: exit status 1 at once).
    """
    _STATE.enabled, _STATE.leader = True, False
    elector = LeaderElector(config)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with candidate_health(liveness):
        leading = await elector.acquire(stop)
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.remove_signal_handler(sig)
    if not leading or stop.is_set():
        await elector.release()
        log.info("stopped while waiting for the lease")
        return 0
    renewing = asyncio.create_task(elector.renew(on_lost), name="lease renewal")
    try:
        await operator()  # kopf installs its own SIGINT/SIGTERM handlers and returns after a graceful stop
    finally:
        renewing.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await renewing
        await elector.release()
    return 0
