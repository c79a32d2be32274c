"""Run the operator: ``kopf.run`` with settings fit for SGLang servers.

The operator's own ``/metrics`` (:mod:`sglang_operator.process.telemetry`) is served on ``metrics_port`` before kopf
starts; ``sample_interval``, when given, replaces every server's ``spec.rollback.intervalSeconds`` (tests, demos).

Settings: kopf's progress kept in annotations (no ``status.kopf``
clutter in ``kubectl get -o yaml``), kopf posts no event at all (every event comes from one source,
``sglang-operator``: the handlers and the observer post their own Created, Updated, InvalidSpec, ApplyFailed,
CrashLoopBackOff, ...), INFO logs for transitions only (per-request logs of httpx, lightkube, aiohttp and
kopf's own per-event chatter at DEBUG, shown with ``--verbose``), a liveness endpoint
for the Deployment's livenessProbe, and namespace scoping (``--namespace`` repeated) or clusterwide.
Peering is off (``standalone``) unless a peering name is given. With ``leader_election`` (the Helm chart's
default, two replicas) only the process holding the Lease runs kopf at all: :mod:`sglang_operator.process.leader`.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import importlib
import logging
import os
import socket
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, cast
from urllib.parse import urlsplit

import kopf

from sglang_operator.decisions.sampling.limits import ProbeLimits, ScrapeLimits
from sglang_operator.decisions.tuning.hold import MAX_SECONDS as HOLD_MAX_SECONDS
from sglang_operator.decisions.tuning.trialload import TRIAL_REQUEST_RATE
from sglang_operator.decisions.tuning.trials import DURATION_CAP_SECONDS
from sglang_operator.io.trialstreams import TRIAL_STREAMS
from sglang_operator.process.leader import LeaderElectionConfig
from sglang_operator.process.metrics_http import MetricsServerConfig


def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    """kopf startup hook: persistence, posting, watching (the managed children only, server-side:
    :func:`sglang_operator.control.handlers.watch_only_managed`) and queueing settings."""
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="sglang-operator.io")
    settings.persistence.diffbase_storage = LeanDiffBaseStorage(
        prefix="sglang-operator.io", key="last-handled-configuration",
    )
    settings.persistence.finalizer = "sglang-operator.io/finalizer"
    settings.posting.enabled = False  # one event source: sglang-operator (clients.kube.post_event)
    settings.watching.server_timeout = 270
    settings.watching.client_timeout = 300
    # A per-object worker keeps its slot while it idles (idle_timeout) after the object's last event, and every
    # server gets several events within seconds of its creation (kopf's patches, the observer's): with 64 slots and
    # kopf's 5 s idling, creations beyond ~8/s queued without bound (docs/architecture.md, "Under load").
    settings.queueing.worker_limit = WORKER_LIMIT
    settings.queueing.idle_timeout = 1.0  # seconds (kopf: 5)
    settings.execution.max_workers = 16
    from sglang_operator.control.handlers import watch_only_managed

    watch_only_managed(settings)  # pods, Deployments, Services: only the managed ones are listed and watched


_LAG_WATCH: set[asyncio.Task[None]] = set()


async def start_lag_watch(**_: Any) -> None:
    """kopf startup hook: measure the event loop's lag into ``sglang_operator_event_loop_lag_seconds``
    (:func:`sglang_operator.process.telemetry.watch_loop_lag`) until the cleanup hook :func:`stop_lag_watch`."""
    from sglang_operator.process.telemetry import watch_loop_lag

    _LAG_WATCH.add(asyncio.get_running_loop().create_task(watch_loop_lag(), name="event loop lag"))


async def stop_lag_watch(**_: Any) -> None:
    """kopf cleanup hook: stop the lag measurement of :func:`start_lag_watch`."""
    for task in list(_LAG_WATCH):
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    _LAG_WATCH.clear()


class LeanDiffBaseStorage(kopf.AnnotationsDiffBaseStorage):
    """kopf's annotation diff-base storage, building the same essence from less: kopf's ``DiffBaseStorage.build``
    deep-copies the whole body, status (with the revision ledger) and ``metadata.managedFields`` included, then
    drops all but the spec, labels and annotations (``kopf/_cogs/configs/diffbase.py``). It runs on every watch
    event of every SGLangServer (its cost: docs/architecture.md, "Under load"). Here the body is
    cut down to those parts first; with extra fields outside them (none of this operator's handlers has any) the
    whole body is used."""

    def build(self, *, body: kopf.Body, extra_fields: Iterable[Any] | None = None) -> kopf.BodyEssence:
        fields = list(extra_fields or ())
        if any(not _within_essence(f) for f in fields):
            return super().build(body=body, extra_fields=fields)
        meta = body.get("metadata") or {}
        lean = {k: v for k, v in body.items() if k not in ("metadata", "status")}
        lean["metadata"] = {k: meta[k] for k in _ESSENTIAL_METADATA if k in meta}
        return super().build(body=kopf.Body(cast(kopf.RawBody, lean)), extra_fields=fields)


_ESSENTIAL_METADATA = ("labels", "annotations", "ownerReferences")  # kept; kopf's keys depend on the owners


def _within_essence(field: Any) -> bool:
    path = tuple(field.split(".")) if isinstance(field, str) else tuple(field)
    return bool(path) and (path[0] not in ("metadata", "status")
                           or (path[0] == "metadata" and len(path) > 1 and path[1] in ("labels", "annotations")))


WORKER_LIMIT = 1024
"""Per-object kopf workers at once (``settings.queueing.worker_limit``): a bound on memory, not on throughput."""


REQUEST_LOGGERS = ("httpx", "httpx2", "httpcore", "httpcore2", "lightkube", "aiohttp.access",
                   "kopf.activities.probe")
"""Loggers that log per request (httpx logs every scrape at INFO, httpx2 every lightkube call): DEBUG unless
``--verbose``."""
WATCH_HANDLERS = ("track", "child_event", "pod_event")
"""kopf ``on.event`` handlers: called for every watch event, so kopf's "Handler ... succeeded." for them is
per-event chatter, not a transition."""


class _PerEventChatter(logging.Filter):
    """kopf's INFO success line of a watch-event handler, turned into DEBUG (dropped unless ``--verbose``)."""

    def __init__(self, verbose: bool) -> None:
        super().__init__()
        self.verbose = verbose
        self.lines = tuple(f"Handler '{h}' succeeded." for h in WATCH_HANDLERS)

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno == logging.INFO and record.getMessage().startswith(self.lines):
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
            return self.verbose
        return True


def quiet_request_logs(verbose: bool) -> None:
    """Per-request loggers at WARNING and kopf's per-event lines at DEBUG (INFO stays for transitions), or
    everything at DEBUG with ``verbose``."""
    for name in REQUEST_LOGGERS:
        logging.getLogger(name).setLevel(logging.DEBUG if verbose else logging.WARNING)
    objects = logging.getLogger("kopf.objects")
    if not any(isinstance(f, _PerEventChatter) for f in objects.filters):
        objects.addFilter(_PerEventChatter(verbose))


def check_liveness_port(liveness: str | None) -> None:
    """Bind the liveness URL's host and port once, as kopf (or the waiting candidate) will, and release it.

    ``liveness``: ``http://HOST:PORT/PATH`` (port 80 when none), or None/empty (nothing served, nothing checked).
    Raises ``SystemExit`` with one line naming the port when it cannot be bound (another process listens on it,
    EADDRINUSE; a privileged port, EACCES) or the host does not resolve, instead of kopf's traceback at startup.
    """
    if not liveness:
        return
    url = urlsplit(liveness)
    host, port = url.hostname or "0.0.0.0", url.port or 80
    where = f"sglang-operator run: cannot serve the liveness endpoint --liveness {liveness}"
    try:
        addresses = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except OSError as err:
        raise SystemExit(f"{where}: host {host}: {err.strerror or err}") from None
    for family, type_, proto, _, address in addresses:
        with socket.socket(family, type_, proto) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as aiohttp: TIME_WAIT is no conflict
            try:
                sock.bind(address)
            except OSError as err:
                why = "in use by another process" if err.errno == errno.EADDRINUSE else (err.strerror or str(err))
                raise SystemExit(f"{where}: port {port} on {host}: {why}") from None


def run(
    namespaces: Sequence[str] = (),
    liveness: str | None = "http://0.0.0.0:8080/healthz",
    peering: str | None = None,
    verbose: bool = False,
    leader_election: LeaderElectionConfig | None = None,
    pod_monitors: str = "auto",
    pod_monitor_labels: Mapping[str, str] | None = None,
    prometheus_address: str | None = None,
    allowed_prometheus_addresses: Sequence[str] = (),
    allow_query_metric: bool = False,
    metrics_port: int = 9808,
    sample_interval: float | None = None,
    resync_seconds: float = 300.0,
    scrape_limits: ScrapeLimits | None = None,
    probe_limits: ProbeLimits | None = None,
    metrics_server: MetricsServerConfig | None = None,
    readiness_port: int = 0,
    trial_streams: int = TRIAL_STREAMS,
    trial_request_rate: float = TRIAL_REQUEST_RATE,
    max_running_tunings: int = 2,
    in_place_hold_max_seconds: float = HOLD_MAX_SECONDS,
    max_tuning_duration_seconds: float = DURATION_CAP_SECONDS,
) -> None:
    """Block running the operator until SIGINT/SIGTERM.

    ``namespaces`` empty means clusterwide. ``liveness`` is the URL kopf serves its health on (exits with one line
    naming the port when it cannot be bound: :func:`check_liveness_port`).
    ``leader_election``: take that Lease first (:func:`sglang_operator.process.leader.run_elected`); the process then
    exits with status 1 if it loses the Lease.
    ``pod_monitors``: ``auto``/``always``/``never`` (:mod:`sglang_operator.io.discovery`);
    ``pod_monitor_labels``: put on every PodMonitor.
    ``prometheus_address``: the Prometheus a KEDA ScaledObject queries by default (:mod:`sglang_operator.io.keda`);
    ``allowed_prometheus_addresses``: what ``spec.autoscaling.prometheus.address`` may be besides it (``*``: any);
    ``allow_query_metric``: whether ``metric: query`` is allowed
    (:mod:`sglang_operator.builders.autoscaling_tenancy`).
    ``metrics_port``: the operator's ``/metrics`` (0: not served; exits with a message when the port is taken or,
    with ``metrics_server.cert_dir``, a certificate file cannot serve, naming it);
    ``sample_interval``: seconds between two samples of every server, replacing ``spec.rollback.intervalSeconds``
    (None: each server's own); ``resync_seconds``: between two resyncs of the observer (0: never), and between two
    reads of an absent optional CRD, KEDA's or the PodMonitor's (:mod:`sglang_operator.io.crd_presence`). The seconds
    between two observations of a server come from ``SGLANG_OPERATOR_STATUS_INTERVAL`` (default 5).
    ``scrape_limits``, ``probe_limits``: the bounds on what is read from an SGLang pod (defaults: those of
    :mod:`sglang_operator.decisions.sampling.limits`). ``metrics_server``: the metrics port's timeouts, connection cap
    authentication and TLS (default :class:`sglang_operator.process.metrics_http.MetricsServerConfig`).
    ``readiness_port``: ``/readyz`` alone on a port of its own, apart from the metrics port's connection cap
    (:func:`sglang_operator.process.metrics_http.serve_readiness`; 0: not served apart). ``trial_streams``: the cap
    on tuning trials' streamed requests in flight, all trials together (:mod:`sglang_operator.io.trialstreams`);
    ``trial_request_rate``: the requests per second one trial may start at most, all its streams together
    (:class:`sglang_operator.decisions.tuning.trialload.RequestPacer`).
    ``max_running_tunings``: SGLangTunings running at once, at most one per server
    (:mod:`sglang_operator.decisions.tuning.queue`). ``in_place_hold_max_seconds``: how long an InPlace SGLangTuning
    may hold its server (:func:`sglang_operator.decisions.tuning.hold.expired`). ``max_tuning_duration_seconds``: the
    cap on every SGLangTuning's wall time (:func:`sglang_operator.decisions.tuning.trials.next_step`).
    These reach the handlers as kopf's ``memo.config`` (:class:`sglang_operator.control.handlers.Config`).
    """
    from sglang_operator.io.discovery import POD_MONITORS, PodMonitorMode

    POD_MONITORS.configure(PodMonitorMode(pod_monitors), dict(pod_monitor_labels or {}))
    from sglang_operator.io.keda import SCALED_OBJECTS

    SCALED_OBJECTS.configure(prometheus_address, allowed_prometheus_addresses, allow_query_metric)
    for optional in (POD_MONITORS, SCALED_OBJECTS):  # an absent CRD is read again at every resync
        optional.recheck_every(resync_seconds)
    handlers = importlib.import_module("sglang_operator.control.handlers")  # registers the handlers
    memo = kopf.Memo(config=handlers.Config(
        status_interval=float(os.environ.get("SGLANG_OPERATOR_STATUS_INTERVAL", "5")), sample_interval=sample_interval,
        resync_seconds=resync_seconds, namespaces=tuple(namespaces), scrape_limits=scrape_limits or ScrapeLimits(),
        probe_limits=probe_limits or ProbeLimits(), trial_streams=trial_streams,
        trial_request_rate=trial_request_rate,
        max_running_tunings=max_running_tunings, in_place_hold_max_seconds=in_place_hold_max_seconds,
        max_tuning_duration_seconds=max_tuning_duration_seconds))
    handlers.READINESS.namespaces = list(namespaces)  # the startup LIST of /readyz (sglang_operator.process.readiness)
    kopf.on.startup()(configure)
    kopf.on.startup()(start_lag_watch)
    kopf.on.cleanup()(stop_lag_watch)
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")
    quiet_request_logs(verbose)
    check_liveness_port(liveness)
    if metrics_port:
        from sglang_operator.process import metrics_http

        try:
            metrics_http.serve(metrics_port, config=metrics_server)
        except (OSError, ValueError) as err:  # the port taken; a metrics cert dir that cannot serve (CertError)
            raise SystemExit(f"sglang-operator run: cannot serve /metrics on port {metrics_port}: {err}") from None
    if readiness_port:
        from sglang_operator.process import metrics_http

        try:
            metrics_http.serve_readiness(readiness_port, config=metrics_server)
        except OSError as err:
            raise SystemExit(f"sglang-operator run: cannot serve /readyz on port {readiness_port}: {err}") from None
    options: dict[str, Any] = {"clusterwide": not namespaces, "namespaces": list(namespaces),
                               "standalone": peering is None, "peering_name": peering, "liveness_endpoint": liveness,
                               "memo": memo}
    if leader_election is None:
        kopf.run(**options)
        return
    from sglang_operator.io.fence import FENCE
    from sglang_operator.process.leader import hard_exit, lease_expired, may_write, run_elected

    FENCE.install(may_write, lease_expired, hard_exit)  # every write of the operator's own checks the Lease first
    raise SystemExit(asyncio.run(run_elected(leader_election, lambda: kopf.operator(**options), liveness)))
